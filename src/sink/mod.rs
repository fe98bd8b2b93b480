//! Sinks: where collections go besides the answer to a scrape. The one sink
//! is [`push`], with Prometheus remote write (`--push.remote-write-url`)
//! and/or OTLP/HTTP (`--push.otlp-url`), with its HTTP side (`client.rs`,
//! over the outgoing connector of [`crate::http_client`]) and its
//! self-metrics per destination (`metrics.rs`).
//!
//! A sink is fed by the pipeline's collections through a `Feed`, which the
//! server implements with its scraper: a pushed collection is exactly what
//! `/metrics` serves, and joins a scrape in flight as another scrape would.
//! A new sink goes here, beside `push`, fed the same way.

mod client;
pub(crate) mod metrics;
mod protocol;
pub mod push;

pub use client::{parse_retry_after, Authorization};

use std::ops::Deref;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::MetricFamily;
use metrics::PushMetrics;

/// What feeds a sink: collections on demand, and where its self-metrics are
/// kept.
pub(crate) trait Feed: Send + Sync + 'static {
    /// A collection run now (blocking; joined with one in flight): the
    /// families `/metrics` serves.
    fn collect_now(&self) -> impl Deref<Target = [MetricFamily]> + Send + 'static;

    /// The self-metrics of pushing.
    fn push_metrics(&self) -> &PushMetrics;
}

/// Seconds since the Unix epoch (0 before it).
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
