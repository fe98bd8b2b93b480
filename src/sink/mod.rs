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
#[cfg(test)]
mod push_model_tests;
mod queue;
#[cfg(test)]
mod rig;
mod sender;
#[cfg(test)]
mod sender_tests;

pub use client::{parse_retry_after, Authorization};

use std::ops::Deref;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::MetricFamily;
use metrics::PushMetrics;

/// A collection as a sink gets it: the families `/metrics` serves, and
/// whether every source answered in full.
pub(crate) trait Collection: Deref<Target = [MetricFamily]> + Send + 'static {
    /// Whether every source answered in full: no upstream failed or timed
    /// out, no file failed to read, no part was late, capped or cut by the
    /// budget. A series absent from an incomplete collection is missing,
    /// not gone (`otlp::collect_partial`).
    fn complete(&self) -> bool;
}

/// What feeds a sink: collections on demand, and where its self-metrics are
/// kept.
pub(crate) trait Feed: Send + Sync + 'static {
    /// A collection run now (blocking; joined with one in flight).
    fn collect_now(&self) -> impl Collection;

    /// The self-metrics of pushing.
    fn push_metrics(&self) -> &PushMetrics;
}

/// Seconds since the Unix epoch (0 before it).
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
