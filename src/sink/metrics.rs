//! The exporter's own metrics about pushing (`--push.remote-write-url`):
//! samples and bytes sent, failed requests by reason, collections and
//! samples dropped by reason, the queue, and the last success. Part of the
//! self-metrics ([`crate::server::telemetry::self_metrics`]), present only
//! when pushing is on; documented in `docs/metrics.md`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::model::family_list::FamilyList;
use crate::model::MetricType;

/// Why a request failed (the `reason` label of
/// `multiproc_exporter_push_failures_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureReason {
    /// No connection, reset, TLS or other transport error (retried).
    Connection,
    /// No answer within `--push.timeout` (retried).
    Timeout,
    /// 429 Too Many Requests (retried).
    TooManyRequests,
    /// A 5xx answer (retried).
    ServerError,
    /// Any other answer that is not 2xx: the request is dropped, since
    /// sending it again would fail again (reason `rejected`).
    Rejected,
}

impl FailureReason {
    const ALL: [Self; 5] = [
        Self::Connection,
        Self::Timeout,
        Self::TooManyRequests,
        Self::ServerError,
        Self::Rejected,
    ];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Connection => "connection",
            Self::Timeout => "timeout",
            Self::TooManyRequests => "http_429",
            Self::ServerError => "http_5xx",
            Self::Rejected => "http_4xx",
        }
    }

    /// Whether the same request is sent again.
    pub(crate) fn retried(self) -> bool {
        self != Self::Rejected
    }
}

/// Why collections were dropped before they were sent (the `reason` label
/// of the `..._dropped_total` counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// The queue was full: the oldest collection made room for the newest.
    QueueFull,
    /// The receiver answered 4xx (other than 429).
    Rejected,
    /// Still queued when the final flush's deadline passed at shutdown.
    Shutdown,
}

impl DropReason {
    const ALL: [Self; 3] = [Self::QueueFull, Self::Rejected, Self::Shutdown];

    fn index(self) -> usize {
        match self {
            Self::QueueFull => 0,
            Self::Rejected => 1,
            Self::Shutdown => 2,
        }
    }

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::Rejected => "rejected",
            Self::Shutdown => "shutdown",
        }
    }
}

/// The push counters and gauges (all zero until pushing starts).
#[derive(Debug, Default)]
pub(crate) struct PushMetrics {
    enabled: AtomicBool,
    samples_sent: AtomicU64,
    bytes_sent: AtomicU64,
    requests_sent: AtomicU64,
    failures: [AtomicU64; 5],
    collections_dropped: [AtomicU64; 3],
    samples_dropped: [AtomicU64; 3],
    queue_length: AtomicU64,
    queue_capacity: AtomicU64,
    /// f64 bits.
    last_success: AtomicU64,
    /// f64 bits.
    last_duration: AtomicU64,
}

impl PushMetrics {
    /// Turns the push metrics on, with the queue's capacity.
    pub(crate) fn enable(&self, queue_capacity: usize) {
        self.enabled.store(true, Ordering::Relaxed);
        self.queue_capacity
            .store(queue_capacity as u64, Ordering::Relaxed);
    }

    /// Records a request the receiver accepted.
    pub(crate) fn sent(&self, samples: usize, bytes: usize, unix_seconds: f64, seconds: f64) {
        self.samples_sent
            .fetch_add(samples as u64, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        self.requests_sent.fetch_add(1, Ordering::Relaxed);
        self.last_success
            .store(unix_seconds.to_bits(), Ordering::Relaxed);
        self.last_duration
            .store(seconds.to_bits(), Ordering::Relaxed);
    }

    /// Records a failed request.
    pub(crate) fn failed(&self, reason: FailureReason, seconds: f64) {
        let i = FailureReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.failures[i].fetch_add(1, Ordering::Relaxed);
        self.last_duration
            .store(seconds.to_bits(), Ordering::Relaxed);
    }

    /// Records a collection of `samples` samples dropped unsent.
    pub(crate) fn dropped(&self, reason: DropReason, samples: usize) {
        self.collections_dropped[reason.index()].fetch_add(1, Ordering::Relaxed);
        self.samples_dropped[reason.index()].fetch_add(samples as u64, Ordering::Relaxed);
    }

    /// Records the number of collections waiting.
    pub(crate) fn set_queue_length(&self, length: usize) {
        self.queue_length.store(length as u64, Ordering::Relaxed);
    }

    /// Adds the families (`p` is the self-metrics' prefix), when pushing is on.
    pub(crate) fn add_families(&self, p: &str, out: &mut FamilyList) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let bits = |a: &AtomicU64| f64::from_bits(a.load(Ordering::Relaxed));
        out.counter(
            &format!("{p}push_samples_sent"),
            "Samples the remote-write receiver accepted.",
            get(&self.samples_sent),
        );
        out.counter(
            &format!("{p}push_bytes_sent"),
            "Bytes of accepted remote-write requests (protobuf compressed with snappy).",
            get(&self.bytes_sent),
        );
        out.counter(
            &format!("{p}push_requests_sent"),
            "Remote-write requests the receiver accepted (one per collection).",
            get(&self.requests_sent),
        );
        out.by_label(
            &format!("{p}push_failures"),
            "Remote-write requests that failed, by reason (connection, timeout, http_429 and http_5xx are retried with backoff; http_4xx is dropped).",
            MetricType::Counter,
            "reason",
            FailureReason::ALL
                .iter()
                .zip(&self.failures)
                .map(|(r, n)| (r.label(), get(n))),
        );
        out.by_label(
            &format!("{p}push_collections_dropped"),
            "Collections dropped without being sent, by reason (queue_full: the oldest made room in a full queue; rejected: the receiver answered 4xx; shutdown: still queued when the final flush's deadline passed).",
            MetricType::Counter,
            "reason",
            DropReason::ALL
                .iter()
                .zip(&self.collections_dropped)
                .map(|(r, n)| (r.label(), get(n))),
        );
        out.by_label(
            &format!("{p}push_samples_dropped"),
            "Samples of the collections dropped without being sent, by reason.",
            MetricType::Counter,
            "reason",
            DropReason::ALL
                .iter()
                .zip(&self.samples_dropped)
                .map(|(r, n)| (r.label(), get(n))),
        );
        out.gauge(
            &format!("{p}push_queue_length"),
            "Collections waiting to be sent.",
            get(&self.queue_length),
        );
        out.gauge(
            &format!("{p}push_queue_capacity"),
            "Collections the queue holds before dropping the oldest (--push.queue-capacity).",
            get(&self.queue_capacity),
        );
        out.gauge(
            &format!("{p}push_last_success_timestamp_seconds"),
            "Time the receiver last accepted a request, in seconds since the Unix epoch (0: never).",
            bits(&self.last_success),
        );
        out.gauge(
            &format!("{p}push_last_request_duration_seconds"),
            "Time the last remote-write request took, in seconds.",
            bits(&self.last_duration),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_until_enabled_then_every_reason_is_present() {
        let m = PushMetrics::default();
        let mut out = FamilyList::default();
        m.add_families("p_", &mut out);
        assert!(out.into_families().is_empty());
        m.enable(3);
        m.sent(10, 100, 5.0, 0.25);
        m.failed(FailureReason::ServerError, 0.5);
        m.dropped(DropReason::QueueFull, 7);
        m.set_queue_length(2);
        let mut out = FamilyList::default();
        m.add_families("p_", &mut out);
        let text = String::from_utf8(crate::expose::encode::encode(
            &out.into_families(),
            crate::expose::encode::Format::Text,
            crate::expose::encode::Escaping::Underscores,
        ))
        .unwrap();
        for line in [
            "p_push_samples_sent_total 10.0\n",
            "p_push_bytes_sent_total 100.0\n",
            "p_push_failures_total{reason=\"http_5xx\"} 1.0\n",
            "p_push_failures_total{reason=\"connection\"} 0.0\n",
            "p_push_collections_dropped_total{reason=\"queue_full\"} 1.0\n",
            "p_push_samples_dropped_total{reason=\"queue_full\"} 7.0\n",
            "p_push_samples_dropped_total{reason=\"shutdown\"} 0.0\n",
            "p_push_queue_length 2.0\n",
            "p_push_queue_capacity 3.0\n",
            "p_push_last_success_timestamp_seconds 5.0\n",
            "p_push_last_request_duration_seconds 0.5\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
