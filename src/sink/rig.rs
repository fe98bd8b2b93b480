//! A push destination without I/O and without a clock, for the tests: the
//! collector's encoder and queue and the sender's state, driven with
//! collections, times and answers chosen by the test.

use std::time::Duration;

use axum::body::Bytes;

use super::client::Failed;
use super::metrics::{DestinationMetrics, FailureReason};
use super::protocol::Protocol;
use super::push::Encoder;
use super::queue::{Batch, Queue};
use super::sender::{Backoff, Sender, Step};
use crate::expose::otlp;
use crate::model::{Labels, MetricFamily, MetricType, Sample};

/// One destination: what the collector and the sender hold.
pub(super) struct Rig {
    pub(super) protocol: Protocol,
    pub(super) encoder: Encoder,
    pub(super) queue: Queue,
    pub(super) sender: Sender,
    pub(super) metrics: DestinationMetrics,
    seq: u64,
}

impl Rig {
    /// A destination speaking `protocol` (with `temporality` for OTLP),
    /// pushing since `started` (Unix seconds), with its queue's bounds.
    pub(super) fn new(
        protocol: Protocol,
        temporality: otlp::Temporality,
        started: f64,
        capacity: usize,
        max_bytes: usize,
        max_retry_after: Duration,
    ) -> Self {
        let metrics = DestinationMetrics::default();
        metrics.enable(capacity, max_bytes);
        Self {
            protocol,
            encoder: Encoder::new(protocol, (started * 1e9) as u64, temporality),
            queue: Queue::new(protocol, capacity, max_bytes),
            sender: Sender::new(
                protocol,
                Backoff::new(
                    Duration::from_millis(30),
                    Duration::from_secs(5),
                    max_retry_after,
                ),
            ),
            metrics,
            seq: 0,
        }
    }

    /// A collection of `families` at `now` (Unix seconds), queued.
    pub(super) fn collect(&mut self, families: &[MetricFamily], now: f64, complete: bool) {
        let (payload, samples) = self.encoder.encode(families, now, &[], complete);
        self.seq += 1;
        self.queue.push(
            Batch {
                seq: self.seq,
                payload,
                samples,
            },
            &self.metrics,
        );
    }

    /// The request the sender sends next (made now if it is not kept), if
    /// any is queued.
    pub(super) fn request(&mut self) -> Option<Bytes> {
        loop {
            let batch = self.queue.take_front()?;
            if self.sender.prepare_now(&batch, &self.queue, &self.metrics) {
                return self.sender.prepared.as_ref().map(|p| p.made.body.clone());
            }
        }
    }

    /// The receiver's answer to the request sent, at `now`.
    pub(super) fn answer(&mut self, answer: Result<Bytes, Failed>, now: f64) -> Step {
        self.sender
            .answered(answer, &self.queue, &self.metrics, now, 0.01, 0.5)
    }

    /// The memory the queue holds now.
    pub(super) fn queue_bytes(&self) -> usize {
        self.queue.lock().bytes()
    }
}

/// An answer with HTTP `status` (not 2xx) and its `Retry-After`, as the
/// client sorts it for `protocol`.
pub(super) fn status(protocol: Protocol, status: u16, retry_after: Option<Duration>) -> Failed {
    let retried = protocol.retries_status(status);
    Failed {
        reason: match status {
            429 => FailureReason::TooManyRequests,
            500..=599 => FailureReason::ServerError,
            _ => FailureReason::Rejected,
        },
        detail: format!("HTTP {status}"),
        retry_after: retry_after.filter(|_| retried),
        status: Some(status),
        retried,
    }
}

/// No answer within the timeout (the receiver may have stored it).
pub(super) fn timeout() -> Failed {
    Failed::from((FailureReason::Timeout, "no answer".to_owned()))
}

/// Connection refused.
pub(super) fn refused() -> Failed {
    Failed::from((FailureReason::Connection, "connection refused".to_owned()))
}

pub(super) fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        name: name.into(),
        labels: Labels::new(
            labels
                .iter()
                .map(|&(n, v)| (std::sync::Arc::from(n), std::sync::Arc::from(v))),
        ),
        value,
    }
}

/// A counter `c` with one series per `(route, value)`.
pub(super) fn counter(values: &[(&str, f64)]) -> MetricFamily {
    MetricFamily {
        name: "c".into(),
        help: "C.".into(),
        metric_type: MetricType::Counter,
        samples: values
            .iter()
            .map(|&(route, v)| sample("c_total", &[("route", route)], v))
            .collect(),
    }
}

/// A histogram `h` with one bucket (`le="1.0"`) per `(route, below 1, count, sum)`.
pub(super) fn histogram(values: &[(&str, f64, f64, f64)]) -> MetricFamily {
    let mut samples = Vec::new();
    for &(route, below, count, sum) in values {
        samples.push(sample(
            "h_bucket",
            &[("route", route), ("le", "1.0")],
            below,
        ));
        samples.push(sample(
            "h_bucket",
            &[("route", route), ("le", "+Inf")],
            count,
        ));
        samples.push(sample("h_count", &[("route", route)], count));
        samples.push(sample("h_sum", &[("route", route)], sum));
    }
    MetricFamily {
        name: "h".into(),
        help: "H.".into(),
        metric_type: MetricType::Histogram,
        samples,
    }
}

/// A data point of a monotonic sum or a histogram in an OTLP request.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Point {
    /// Its metric's name and attributes.
    pub(super) series: String,
    pub(super) start: u64,
    pub(super) time: u64,
    /// A sum's value, a histogram's count.
    pub(super) value: f64,
    /// A histogram's sum (0 for a sum).
    pub(super) sum: f64,
    /// Whether the stream is delta.
    pub(super) delta: bool,
    /// Flagged `NO_RECORDED_VALUE`.
    pub(super) flagged: bool,
}

/// The points of the monotonic sums and histograms of an OTLP request
/// body, decoded with the official schema (`opentelemetry-proto`).
pub(super) fn points(body: &[u8]) -> Vec<Point> {
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    const DELTA: i32 = 1;
    let request = otlp::decode(body).expect("an ExportMetricsServiceRequest");
    let mut points = Vec::new();
    let name_of = |name: &str, attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
        let mut s = name.to_owned();
        for kv in attributes {
            s.push_str(&format!(" {}={:?}", kv.key, kv.value));
        }
        s
    };
    for metric in request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
    {
        match &metric.data {
            Some(Data::Sum(sum)) if sum.is_monotonic => {
                for p in &sum.data_points {
                    points.push(Point {
                        series: name_of(&metric.name, &p.attributes),
                        start: p.start_time_unix_nano,
                        time: p.time_unix_nano,
                        value: match p.value {
                            Some(Value::AsDouble(v)) => v,
                            Some(Value::AsInt(v)) => v as f64,
                            None => 0.0,
                        },
                        sum: 0.0,
                        delta: sum.aggregation_temporality == DELTA,
                        flagged: p.flags & 1 != 0,
                    });
                }
            }
            Some(Data::Histogram(h)) => {
                for p in &h.data_points {
                    points.push(Point {
                        series: name_of(&metric.name, &p.attributes),
                        start: p.start_time_unix_nano,
                        time: p.time_unix_nano,
                        value: p.count as f64,
                        sum: p.sum.unwrap_or(0.0),
                        delta: h.aggregation_temporality == DELTA,
                        flagged: p.flags & 1 != 0,
                    });
                }
            }
            _ => {}
        }
    }
    points
}
