//! One destination's sender, without I/O and without a clock: what to send
//! next, and what an answer changes. The async loop of `push.rs` sends its
//! requests and waits its waits; the tests drive it with answers and times
//! of their own (`push_model_tests.rs`).
//!
//! A request, once formed, is immutable: the body made for a batch is kept
//! and sent again, byte for byte, until the batch is answered (a receiver
//! that stored it but answered after `--push.timeout` gets the identical
//! request: a store keyed by series and timestamp drops the duplicate).
//! With delta temporality the accepted values (`otlp::Deltas`) change only
//! when the receiver accepts a request (a partial success is an
//! acceptance), or when a request it may have stored (sent again after a
//! timeout) is refused (most likely as a duplicate of what it stored).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;

use super::client::Failed;
use super::metrics::{DestinationMetrics, DropReason, FailureReason};
use super::protocol::Protocol;
use super::queue::{Batch, Payload, Queue};
use crate::expose::otlp;

/// A batch's request: its body, its samples, and (delta) what the receiver
/// will have accepted if it accepts it.
#[derive(Debug)]
pub(super) struct Made {
    pub(super) body: Bytes,
    pub(super) samples: usize,
    pub(super) converted: Option<otlp::Converted>,
}

/// How a batch's request is made (a seam for the tests).
pub(super) type Convert = fn(&otlp::Deltas, &Batch) -> Result<Made, String>;

/// The request of `batch`: as queued, or converted against `deltas`.
pub(super) fn convert(deltas: &otlp::Deltas, batch: &Batch) -> Result<Made, String> {
    match &batch.payload {
        Payload::Encoded(body) => Ok(Made {
            body: body.clone(),
            samples: batch.samples,
            converted: None,
        }),
        Payload::Delta(stored) => {
            let collected = stored.load()?;
            let converted = deltas.convert(&collected);
            Ok(Made {
                body: Bytes::from(otlp::encode(converted.request())),
                samples: otlp::data_points(converted.request()),
                converted: Some(converted),
            })
        }
    }
}

/// The request of the batch being sent, kept until it is answered.
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) seq: u64,
    pub(super) made: Made,
    /// The receiver may have stored it (no answer within the timeout).
    maybe_stored: bool,
}

/// What the sender does after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Sends the next batch now.
    Next,
    /// Waits this long, then sends the front batch again.
    Wait(Duration),
}

/// One destination's sending state.
#[derive(Debug)]
pub(super) struct Sender {
    pub(super) protocol: Protocol,
    pub(super) backoff: Backoff,
    /// What the receiver accepted of the delta series (shared with a
    /// conversion running, so that a panic in it loses nothing).
    pub(super) deltas: Arc<otlp::Deltas>,
    pub(super) prepared: Option<Prepared>,
    pub(super) convert: Convert,
    failing: Option<(FailureReason, Option<u16>)>,
    partial: Option<String>,
}

impl Sender {
    pub(super) fn new(protocol: Protocol, backoff: Backoff) -> Self {
        Self {
            protocol,
            backoff,
            deltas: Arc::default(),
            prepared: None,
            convert,
            failing: None,
            partial: None,
        }
    }

    /// The request kept for `batch`, if it was made already.
    pub(super) fn kept(&self, batch: &Batch) -> bool {
        self.prepared.as_ref().is_some_and(|p| p.seq == batch.seq)
    }

    /// Keeps the request made for `batch`, or drops `batch` when it could
    /// not be made (a bug: logged, counted; the accepted values stay);
    /// whether there is a request to send.
    pub(super) fn made(
        &mut self,
        batch: &Batch,
        made: Result<Made, String>,
        queue: &Queue,
        metrics: &DestinationMetrics,
    ) -> bool {
        match made {
            Ok(made) => {
                self.prepared = Some(Prepared {
                    seq: batch.seq,
                    made,
                    maybe_stored: false,
                });
                true
            }
            Err(e) => {
                tracing::error!(
                    protocol = self.protocol.label(),
                    error = %e,
                    "Cannot make the push request (a bug); dropping the collection (its change is carried into the next one)."
                );
                metrics.dropped(DropReason::Rejected, batch.samples);
                queue.remove(batch.seq, false, metrics);
                false
            }
        }
    }

    /// Makes the request of `batch` here and now (the tests; the async
    /// loop makes it on the blocking pool).
    #[cfg(test)]
    pub(super) fn prepare_now(
        &mut self,
        batch: &Batch,
        queue: &Queue,
        metrics: &DestinationMetrics,
    ) -> bool {
        if self.kept(batch) {
            return true;
        }
        let convert = self.convert;
        let deltas = self.deltas.clone();
        let made =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| convert(&deltas, batch)))
                .unwrap_or_else(|_| Err("the conversion panicked".to_owned()));
        self.made(batch, made, queue, metrics)
    }

    /// The receiver's answer to the prepared request (`seconds`: how long it
    /// took; `now`: Unix seconds; `jitter` in `[0, 1)`): what to do next.
    pub(super) fn answered(
        &mut self,
        result: Result<Bytes, Failed>,
        queue: &Queue,
        metrics: &DestinationMetrics,
        now: f64,
        seconds: f64,
        jitter: f64,
    ) -> Step {
        let Some(mut prepared) = self.prepared.take() else {
            return Step::Next;
        };
        let protocol = self.protocol;
        match result {
            Ok(answer) => {
                metrics.sent(
                    prepared.made.samples,
                    prepared.made.body.len(),
                    now,
                    seconds,
                );
                if let Some(converted) = prepared.made.converted.take() {
                    self.deltas = Arc::new(otlp::Deltas::accepted(converted));
                }
                queue.remove(prepared.seq, true, metrics);
                self.backoff.reset();
                if self.failing.take().is_some() {
                    tracing::info!(
                        protocol = protocol.label(),
                        "Pushing again: {} accepted a request.",
                        protocol.receiver()
                    );
                }
                if protocol == Protocol::Otlp {
                    match otlp::partial_success(&answer) {
                        None => self.partial = None,
                        Some((rejected, message)) => {
                            metrics.rejected(rejected.max(0) as u64);
                            if self.partial.as_deref() != Some(message.as_str()) {
                                tracing::warn!(
                                    protocol = protocol.label(),
                                    rejected_data_points = rejected,
                                    error = %message,
                                    "The OTLP receiver accepted a request only in part (partial success)."
                                );
                                self.partial = Some(message);
                            }
                        }
                    }
                }
                Step::Next
            }
            Err(failed) => {
                let reason = failed.reason;
                metrics.failed(reason, seconds);
                if self.failing != Some((reason, failed.status)) {
                    tracing::warn!(
                        protocol = protocol.label(),
                        reason = reason.label(),
                        status = failed.status,
                        error = %failed.detail,
                        retried = failed.retried,
                        retry_after_seconds = failed.retry_after.map(|d| d.as_secs_f64()),
                        "Pushing fails: {} did not accept a request.",
                        protocol.receiver()
                    );
                    self.failing = Some((reason, failed.status));
                }
                // No answer: the receiver may have stored it.
                let stored = failed.status.is_none() && reason != FailureReason::Rejected;
                prepared.maybe_stored |= reason == FailureReason::Timeout;
                if !failed.retried {
                    // Dropped at once: the next collection is not held up
                    // (a delta collection's change is carried into it). A
                    // request sent again after a timeout and now refused
                    // was most likely stored the first time (a duplicate
                    // refused): its values count as accepted.
                    if prepared.maybe_stored {
                        if let Some(converted) = prepared.made.converted.take() {
                            self.deltas = Arc::new(otlp::Deltas::accepted(converted));
                        }
                    }
                    metrics.dropped(DropReason::Rejected, prepared.made.samples);
                    queue.remove(prepared.seq, false, metrics);
                    return Step::Next;
                }
                let wait = self.backoff.after(failed.retry_after, jitter);
                let asked = self
                    .backoff
                    .retry_after(failed.retry_after)
                    .is_some_and(|d| !d.is_zero());
                queue.wait(stored || prepared.maybe_stored, asked);
                self.prepared = Some(prepared);
                Step::Wait(wait)
            }
        }
    }
}

/// The waits between retries: exponential, with jitter, within bounds, and
/// never shorter than the receiver's `Retry-After` (up to its own cap).
/// Every duration is saturating: no setting or header can overflow it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    /// The longest `Retry-After` honoured.
    max_retry_after: Duration,
    /// The next wait before jitter.
    next: Duration,
}

impl Backoff {
    /// From `min` doubling up to `max` (at least `min`), honouring a
    /// `Retry-After` up to `max_retry_after`.
    pub(crate) fn new(min: Duration, max: Duration, max_retry_after: Duration) -> Self {
        let min = min.max(Duration::from_millis(1));
        let max = max.max(min);
        Self {
            min,
            max,
            max_retry_after,
            next: min,
        }
    }

    /// The receiver's `Retry-After` as honoured (at most
    /// `--push.max-retry-after`).
    pub(crate) fn retry_after(&self, retry_after: Option<Duration>) -> Option<Duration> {
        retry_after.map(|d| d.min(self.max_retry_after))
    }

    /// The wait before the next retry: the larger of the backoff (with a
    /// jitter of ±50 %, `jitter` in `[0, 1)`, as the OpenTelemetry
    /// Collector's exporter helper randomizes it, within `[min, max]`) and
    /// the receiver's `retry_after` (at most `max_retry_after`), as the
    /// Collector's exporter helper waits; the backoff then doubles.
    pub(crate) fn after(&mut self, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let factor = 0.5 + jitter.clamp(0.0, 1.0);
        let backoff = Duration::try_from_secs_f64(self.next.as_secs_f64() * factor)
            .unwrap_or(Duration::MAX)
            .clamp(self.min, self.max);
        self.next = backoff.saturating_mul(2).clamp(self.min, self.max);
        backoff.max(self.retry_after(retry_after).unwrap_or_default())
    }

    /// A request went through: the next failure starts from the minimum.
    pub(crate) fn reset(&mut self) {
        self.next = self.min;
    }
}

/// `now + wait`, saturating (a wait too long for the clock ends in about
/// 30 years, as tokio's far future).
pub(super) fn later(now: std::time::Instant, wait: Duration) -> std::time::Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
    now.checked_add(wait.min(FAR))
        .or_else(|| now.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(now)
}

/// A number in `[0, 1)` for the jitter, from the standard library's
/// randomly keyed hasher (no generator of our own; a new key each call).
pub(super) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}
