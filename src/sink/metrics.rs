//! The exporter's own metrics about pushing (`--push.remote-write-url`,
//! `--push.otlp-url`), per destination (label `protocol`): samples and bytes
//! sent, samples an OTLP receiver rejected, failed requests by reason,
//! collections and samples dropped by reason, the queue, and the last
//! success. Part of the
//! self-metrics ([`crate::server::telemetry::self_metrics`]), present only
//! when pushing is on; documented in `docs/metrics.md`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::protocol::Protocol;
use crate::model::family_list::FamilyList;
use crate::model::{Labels, MetricFamily, MetricType, Sample};

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
    /// Replaced by a newer collection while the receiver asked to wait
    /// (`Retry-After`): the queue does not grow then.
    Superseded,
    /// The queue reached `--push.queue-max-bytes`: the oldest made room.
    MemoryLimit,
}

impl DropReason {
    const ALL: [Self; 5] = [
        Self::QueueFull,
        Self::Rejected,
        Self::Shutdown,
        Self::Superseded,
        Self::MemoryLimit,
    ];

    fn index(self) -> usize {
        match self {
            Self::QueueFull => 0,
            Self::Rejected => 1,
            Self::Shutdown => 2,
            Self::Superseded => 3,
            Self::MemoryLimit => 4,
        }
    }

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::Rejected => "rejected",
            Self::Shutdown => "shutdown",
            Self::Superseded => "superseded",
            Self::MemoryLimit => "memory_limit",
        }
    }
}

/// A family's values for one destination: (the `reason`, if any; value).
type Values<'a> = dyn Fn(&DestinationMetrics) -> Vec<(Option<&'static str>, f64)> + 'a;

/// The push metrics of every destination (`protocol` label).
#[derive(Debug, Default)]
pub(crate) struct PushMetrics {
    destinations: [DestinationMetrics; 2],
}

/// The push counters and gauges of one destination (all zero, and absent,
/// until pushing there starts).
#[derive(Debug, Default)]
pub(crate) struct DestinationMetrics {
    enabled: AtomicBool,
    samples_sent: AtomicU64,
    bytes_sent: AtomicU64,
    requests_sent: AtomicU64,
    samples_rejected: AtomicU64,
    failures: [AtomicU64; 5],
    collections_dropped: [AtomicU64; 5],
    samples_dropped: [AtomicU64; 5],
    queue_length: AtomicU64,
    queue_capacity: AtomicU64,
    queue_bytes: AtomicU64,
    queue_max_bytes: AtomicU64,
    /// f64 bits.
    last_success: AtomicU64,
    /// f64 bits.
    last_duration: AtomicU64,
}

impl PushMetrics {
    /// The metrics of the destination speaking `protocol`.
    pub(crate) fn of(&self, protocol: Protocol) -> &DestinationMetrics {
        &self.destinations[protocol.index()]
    }

    /// Adds the families (`p` is the self-metrics' prefix), each with one
    /// series per destination pushed to (label `protocol`).
    pub(crate) fn add_families(&self, p: &str, out: &mut FamilyList) {
        let on: Vec<(&'static str, &DestinationMetrics)> = Protocol::ALL
            .iter()
            .map(|&protocol| (protocol.label(), self.of(protocol)))
            .filter(|(_, m)| m.enabled.load(Ordering::Relaxed))
            .collect();
        if on.is_empty() {
            return;
        }
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let bits = |a: &AtomicU64| f64::from_bits(a.load(Ordering::Relaxed));
        let mut families = Vec::new();
        let mut family = |name: &str,
                          help: &str,
                          metric_type: MetricType,
                          value: &Values<'_>,
                          reason_label: &str| {
            let sample_name: Arc<str> = match metric_type {
                MetricType::Counter => format!("{p}{name}_total").into(),
                _ => format!("{p}{name}").into(),
            };
            let mut samples = Vec::new();
            for (protocol, m) in &on {
                let mut values = value(m);
                values.sort_by(|a, b| a.0.cmp(&b.0));
                for (reason, v) in values {
                    let mut labels: Vec<(Arc<str>, Arc<str>)> =
                        vec![(Arc::from("protocol"), Arc::from(*protocol))];
                    if let Some(reason) = reason {
                        labels.push((Arc::from(reason_label), Arc::from(reason)));
                    }
                    samples.push(Sample {
                        name: sample_name.clone(),
                        labels: Labels::new(labels),
                        value: v,
                    });
                }
            }
            families.push(MetricFamily {
                name: format!("{p}{name}").into(),
                help: help.into(),
                metric_type,
                samples,
            });
        };
        use MetricType::{Counter, Gauge};
        family(
            "push_samples_sent",
            "Samples the receiver accepted (remote write: one per series per collection; OTLP: one per data point, a histogram's or summary's series counting once).",
            Counter,
            &|m| vec![(None, get(&m.samples_sent))],
            "",
        );
        family(
            "push_bytes_sent",
            "Bytes of accepted requests (protobuf compressed with snappy for remote write, gzip for OTLP).",
            Counter,
            &|m| vec![(None, get(&m.bytes_sent))],
            "",
        );
        family(
            "push_requests_sent",
            "Requests the receiver accepted (one per collection).",
            Counter,
            &|m| vec![(None, get(&m.requests_sent))],
            "",
        );
        family(
            "push_samples_rejected",
            "Data points an OTLP receiver rejected in an accepted request (its partial success); never for remote write.",
            Counter,
            &|m| vec![(None, get(&m.samples_rejected))],
            "",
        );
        family(
            "push_failures",
            "Requests that failed, by reason (connection, timeout and http_429 are retried with backoff; http_5xx too for remote write, and for OTLP only 502, 503 and 504; the rest is dropped).",
            Counter,
            &|m| {
                FailureReason::ALL
                    .iter()
                    .zip(&m.failures)
                    .map(|(r, n)| (Some(r.label()), get(n)))
                    .collect()
            },
            "reason",
        );
        family(
            "push_collections_dropped",
            "Collections dropped without being sent, by reason (queue_full: the oldest made room in a full queue; memory_limit: the oldest made room when the queue reached --push.queue-max-bytes; rejected: the receiver answered a status the protocol does not retry; shutdown: still queued when the final flush's deadline passed; superseded: replaced by a newer one while the receiver asked to wait).",
            Counter,
            &|m| {
                DropReason::ALL
                    .iter()
                    .zip(&m.collections_dropped)
                    .map(|(r, n)| (Some(r.label()), get(n)))
                    .collect()
            },
            "reason",
        );
        family(
            "push_samples_dropped",
            "Samples of the collections dropped without being sent, by reason.",
            Counter,
            &|m| {
                DropReason::ALL
                    .iter()
                    .zip(&m.samples_dropped)
                    .map(|(r, n)| (Some(r.label()), get(n)))
                    .collect()
            },
            "reason",
        );
        family(
            "push_queue_length",
            "Collections waiting to be sent.",
            Gauge,
            &|m| vec![(None, get(&m.queue_length))],
            "",
        );
        family(
            "push_queue_capacity",
            "Collections the queue holds before dropping the oldest (--push.queue-capacity).",
            Gauge,
            &|m| vec![(None, get(&m.queue_capacity))],
            "",
        );
        family(
            "push_queue_bytes",
            "Memory of the collections waiting to be sent, in bytes (their compressed requests; with delta temporality, with the state their deltas start from).",
            Gauge,
            &|m| vec![(None, get(&m.queue_bytes))],
            "",
        );
        family(
            "push_queue_max_bytes",
            "The most memory the waiting collections may take before the oldest are dropped (--push.queue-max-bytes).",
            Gauge,
            &|m| vec![(None, get(&m.queue_max_bytes))],
            "",
        );
        family(
            "push_last_success_timestamp_seconds",
            "Time the receiver last accepted a request, in seconds since the Unix epoch (0: never).",
            Gauge,
            &|m| vec![(None, bits(&m.last_success))],
            "",
        );
        family(
            "push_last_request_duration_seconds",
            "Time the last request took, in seconds.",
            Gauge,
            &|m| vec![(None, bits(&m.last_duration))],
            "",
        );
        out.extend(families);
    }
}

impl DestinationMetrics {
    /// Turns the metrics on, with the queue's bounds.
    pub(crate) fn enable(&self, queue_capacity: usize, queue_max_bytes: usize) {
        self.enabled.store(true, Ordering::Relaxed);
        self.queue_capacity
            .store(queue_capacity as u64, Ordering::Relaxed);
        self.queue_max_bytes
            .store(queue_max_bytes as u64, Ordering::Relaxed);
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

    /// Records data points the receiver rejected in an accepted request.
    pub(crate) fn rejected(&self, points: u64) {
        self.samples_rejected.fetch_add(points, Ordering::Relaxed);
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

    /// Records the memory of the collections waiting.
    pub(crate) fn set_queue_bytes(&self, bytes: usize) {
        self.queue_bytes.store(bytes as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_until_enabled_then_every_reason_is_present_per_destination() {
        let m = PushMetrics::default();
        let mut out = FamilyList::default();
        m.add_families("p_", &mut out);
        assert!(out.into_families().is_empty());
        let rw = m.of(Protocol::RemoteWrite);
        rw.enable(3, 1000);
        rw.sent(10, 100, 5.0, 0.25);
        rw.failed(FailureReason::ServerError, 0.5);
        rw.dropped(DropReason::QueueFull, 7);
        rw.set_queue_length(2);
        let text = |m: &PushMetrics| {
            let mut out = FamilyList::default();
            m.add_families("p_", &mut out);
            String::from_utf8(crate::expose::encode::encode(
                &out.into_families(),
                crate::expose::encode::Format::Text,
                crate::expose::encode::Escaping::Underscores,
            ))
            .unwrap()
        };
        let only_rw = text(&m);
        assert!(!only_rw.contains("otlp"), "{only_rw}");
        let otlp = m.of(Protocol::Otlp);
        otlp.enable(5, 1000);
        otlp.sent(4, 40, 6.0, 0.1);
        otlp.rejected(3);
        let both = text(&m);
        for line in [
            "p_push_samples_sent_total{protocol=\"remote_write\"} 10.0\n",
            "p_push_samples_sent_total{protocol=\"otlp\"} 4.0\n",
            "p_push_bytes_sent_total{protocol=\"remote_write\"} 100.0\n",
            "p_push_samples_rejected_total{protocol=\"otlp\"} 3.0\n",
            "p_push_samples_rejected_total{protocol=\"remote_write\"} 0.0\n",
            "p_push_failures_total{protocol=\"remote_write\",reason=\"http_5xx\"} 1.0\n",
            "p_push_failures_total{protocol=\"otlp\",reason=\"connection\"} 0.0\n",
            "p_push_collections_dropped_total{protocol=\"remote_write\",reason=\"queue_full\"} 1.0\n",
            "p_push_samples_dropped_total{protocol=\"remote_write\",reason=\"queue_full\"} 7.0\n",
            "p_push_samples_dropped_total{protocol=\"otlp\",reason=\"shutdown\"} 0.0\n",
            "p_push_queue_length{protocol=\"remote_write\"} 2.0\n",
            "p_push_queue_capacity{protocol=\"otlp\"} 5.0\n",
            "p_push_last_success_timestamp_seconds{protocol=\"remote_write\"} 5.0\n",
            "p_push_last_request_duration_seconds{protocol=\"remote_write\"} 0.5\n",
        ] {
            assert!(both.contains(line), "{line} in\n{both}");
        }
    }
}
