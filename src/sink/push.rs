//! Pushing the served metrics, for clusters where nothing can scrape the
//! pod: with Prometheus remote write 1.0 (`--push.remote-write-url`), with
//! OTLP/HTTP (`--push.otlp-url`), or both.
//!
//! Every `--push.interval` one collection runs (joined with a scrape in
//! flight, as a scrape would be) and its families, exactly what `/metrics`
//! serves (self-metrics included unless `--web.disable-exporter-metrics`),
//! become one request per destination ([`crate::expose::remote_write`],
//! [`crate::expose::otlp`]) stamped with the collection's time, compressed,
//! and put in that destination's bounded queue of `--push.queue-capacity`
//! collections. Each destination's sender sends its queue oldest first, one
//! collection per request, so each series gets its samples in timestamp
//! order (Prometheus rejects a whole request with an out-of-order sample).
//! Never more than one request is in flight per destination.
//!
//! What is retried follows each protocol's rules
//! (`Protocol::retries_status`): remote write retries connection errors,
//! timeouts, 429 and every 5xx, as Prometheus does; OTLP/HTTP retries
//! connection errors, timeouts, 429, 502, 503 and 504 only, as the OTLP
//! specification says. Any other answer drops the collection at once
//! (sending it again would fail again), counted (`reason="rejected"`) and
//! logged once per status; the next collection is sent right after. A retry
//! waits with exponential backoff and jitter (`Backoff`, as the
//! OpenTelemetry Collector's exporter helper jitters): from
//! `--push.min-backoff` (30 ms) doubling up to `--push.max-backoff` (5 s),
//! Prometheus's remote-write queue's defaults. A receiver's `Retry-After`
//! (seconds or an HTTP date) is honoured as the least wait, never below
//! the backoff nor above `--push.max-backoff`, so `503` with
//! `Retry-After: 0` cannot make a loop of requests. An OTLP receiver's
//! partial success (points it rejected in an accepted request) is counted
//! and logged. When a queue is full the oldest collection makes room for
//! the newest and is counted as dropped. One log line per change of state
//! (sending ↔ failing with another reason or status, the queue starting to
//! overflow, a new partial-success message), not one per attempt.
//!
//! At shutdown one last collection is queued and the senders get
//! `--push.flush-deadline` to empty the queues (retrying at once rather than
//! after their backoff); what is left is counted as dropped (`shutdown`).

use super::client::{self, Authorization};

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::Uri;
use tokio::sync::{watch, Notify};

use super::metrics::{DestinationMetrics, DropReason, FailureReason};
pub use super::protocol::Protocol;
use super::{unix_now, Feed};
use crate::expose::{otlp, remote_write};

/// Settings of `--push.*`, validated.
#[derive(Debug, Clone)]
pub struct PushSettings {
    /// The remote-write receiver's URL (`http://` or `https://`), if any.
    pub remote_write_url: Option<Uri>,
    /// The OTLP/HTTP receiver's URL (`.../v1/metrics`), if any.
    pub otlp_url: Option<Uri>,
    /// Time between collections pushed.
    pub interval: Duration,
    /// Time allowed for one request.
    pub timeout: Duration,
    /// Collections kept while the receiver cannot take them (at least 1).
    pub queue_capacity: usize,
    /// The first wait before a retry; it doubles up to `max_backoff`.
    pub min_backoff: Duration,
    /// The longest wait between retries.
    pub max_backoff: Duration,
    /// How OTLP sends monotonic sums and histograms
    /// (`--push.otlp-temporality`).
    pub otlp_temporality: otlp::Temporality,
    /// Time the last collections get to be sent at shutdown.
    pub flush_deadline: Duration,
    /// Labels added to every series that lacks them (remote write), or the
    /// resource's attributes (OTLP) (`--push.label`).
    pub labels: Vec<(String, String)>,
    /// Headers sent with every request (`--push.header`).
    pub headers: Vec<(String, String)>,
    /// Credentials, if any.
    pub authorization: Option<Authorization>,
    /// Certificates trusted besides the usual roots (`--push.tls.ca-file`).
    pub ca_file: Option<PathBuf>,
}

impl PushSettings {
    /// The destinations, remote write first.
    fn destinations(&self) -> Vec<(Protocol, Uri)> {
        [
            (Protocol::RemoteWrite, &self.remote_write_url),
            (Protocol::Otlp, &self.otlp_url),
        ]
        .into_iter()
        .filter_map(|(p, url)| url.clone().map(|url| (p, url)))
        .collect()
    }
}

/// One collection, encoded, waiting to be sent.
#[derive(Debug, Clone)]
struct Batch {
    /// Order of the collection (tells a batch apart after the queue moved).
    seq: u64,
    body: Bytes,
    samples: usize,
}

/// The bounded queue between the collector and one destination's sender.
#[derive(Debug)]
struct Queue {
    items: Mutex<Items>,
    capacity: usize,
    /// A batch was queued.
    queued: Notify,
    /// Shutting down: retry now instead of after the backoff.
    hurry: Notify,
}

#[derive(Debug, Default)]
struct Items {
    batches: VecDeque<Batch>,
    /// Whether collections were dropped since the last success (logged once).
    overflowing: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Items> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How one destination encodes a collection, with what it carries from one
/// collection to the next.
#[derive(Debug)]
enum Encoder {
    /// The last timestamp sent (milliseconds; strictly increasing).
    RemoteWrite { last_timestamp: i64 },
    /// The cumulative series' start times.
    Otlp(otlp::StartTimes),
}

impl Encoder {
    fn new(protocol: Protocol, started_nanos: u64, temporality: otlp::Temporality) -> Self {
        match protocol {
            Protocol::RemoteWrite => Self::RemoteWrite { last_timestamp: 0 },
            Protocol::Otlp => Self::Otlp(otlp::StartTimes::new(started_nanos, temporality)),
        }
    }

    /// The request body for `families` collected at `now` (Unix seconds),
    /// and its number of samples (data points for OTLP).
    fn encode(
        &mut self,
        families: &[crate::model::MetricFamily],
        now: f64,
        labels: &[(String, String)],
    ) -> (Vec<u8>, usize) {
        match self {
            Self::RemoteWrite { last_timestamp } => {
                // Milliseconds, strictly increasing (a clock stepping back
                // would make Prometheus reject the request).
                let timestamp = ((now * 1000.0) as i64).max(*last_timestamp + 1);
                *last_timestamp = timestamp;
                let request = remote_write::write_request(families, timestamp, labels);
                let samples = request.timeseries.len();
                (remote_write::encode(&request), samples)
            }
            Self::Otlp(starts) => {
                let request = otlp::export_request(families, nanos(now), labels, starts);
                (otlp::encode(&request), otlp::data_points(&request))
            }
        }
    }
}

/// Unix seconds → nanoseconds.
fn nanos(seconds: f64) -> u64 {
    (seconds.max(0.0) * 1e9) as u64
}

/// Checks the settings that need I/O (the CA file) and returns the task that
/// pushes until `shutdown` turns true, then flushes.
pub(crate) fn start<F: Feed>(
    feed: Arc<F>,
    settings: PushSettings,
    shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let mut destinations = Vec::new();
    for (protocol, url) in settings.destinations() {
        let client = client::Client::new(
            url.clone(),
            protocol,
            settings.authorization.clone(),
            &settings.headers,
            settings.ca_file.as_deref(),
            settings.timeout,
        )?;
        destinations.push((protocol, url, client));
    }
    Ok(tokio::spawn(run(feed, settings, destinations, shutdown)))
}

/// One destination as the collector sees it.
struct Destination {
    protocol: Protocol,
    queue: Arc<Queue>,
    sender: tokio::task::JoinHandle<()>,
}

async fn run<F: Feed>(
    feed: Arc<F>,
    settings: PushSettings,
    clients: Vec<(Protocol, Uri, client::Client)>,
    mut shutdown: watch::Receiver<bool>,
) {
    let started = nanos(unix_now());
    let mut destinations = Vec::new();
    let mut encoders = Vec::new();
    for (protocol, url, client) in clients {
        feed.push_metrics()
            .of(protocol)
            .enable(settings.queue_capacity);
        tracing::info!(
            url = %url,
            protocol = protocol.label(),
            interval = ?settings.interval,
            queue_capacity = settings.queue_capacity,
            "Pushing to {}.",
            protocol.receiver()
        );
        let queue = Arc::new(Queue {
            items: Mutex::new(Items::default()),
            capacity: settings.queue_capacity.max(1),
            queued: Notify::new(),
            hurry: Notify::new(),
        });
        let sender = tokio::spawn(send(
            feed.clone(),
            protocol,
            queue.clone(),
            client,
            Backoff::new(settings.min_backoff, settings.max_backoff),
        ));
        destinations.push(Destination {
            protocol,
            queue,
            sender,
        });
        encoders.push(Encoder::new(protocol, started, settings.otlp_temporality));
    }
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut collector = Collector {
        feed: feed.clone(),
        labels: Arc::new(settings.labels.clone()),
        encoders,
        temporality: settings.otlp_temporality,
        seq: 0,
    };
    loop {
        tokio::select! {
            _ = ticker.tick() => collector.collect_into(&destinations).await,
            _ = shutdown.changed() => break,
        }
    }
    // The final flush: the newest values, then whatever is still queued.
    collector.collect_into(&destinations).await;
    let deadline = Instant::now() + settings.flush_deadline;
    while destinations
        .iter()
        .any(|d| !d.queue.lock().batches.is_empty())
        && Instant::now() < deadline
    {
        for d in &destinations {
            d.queue.hurry.notify_one();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for d in destinations {
        d.sender.abort();
        let _ = d.sender.await;
        let metrics = feed.push_metrics().of(d.protocol);
        let left: Vec<Batch> = d.queue.lock().batches.drain(..).collect();
        metrics.set_queue_length(0);
        if left.is_empty() {
            tracing::info!(protocol = d.protocol.label(), "Pushed the last collection.");
        } else {
            for batch in &left {
                metrics.dropped(DropReason::Shutdown, batch.samples);
            }
            tracing::warn!(
                protocol = d.protocol.label(),
                collections = left.len(),
                "Shutting down with collections not pushed (--push.flush-deadline passed)."
            );
        }
    }
}

/// Makes the batches.
struct Collector<F> {
    feed: Arc<F>,
    labels: Arc<Vec<(String, String)>>,
    /// One per destination, in the same order.
    encoders: Vec<Encoder>,
    temporality: otlp::Temporality,
    seq: u64,
}

impl<F: Feed> Collector<F> {
    /// Collects now (on the blocking pool), encodes the collection for each
    /// destination and queues it, dropping the oldest when a queue is full.
    async fn collect_into(&mut self, destinations: &[Destination]) {
        let feed = self.feed.clone();
        let labels = self.labels.clone();
        let mut encoders = std::mem::take(&mut self.encoders);
        let made = tokio::task::spawn_blocking(move || {
            let served = feed.collect_now();
            let now = unix_now();
            let bodies: Vec<(Vec<u8>, usize)> = encoders
                .iter_mut()
                .map(|e| e.encode(&served, now, &labels))
                .collect();
            (encoders, bodies)
        })
        .await;
        let (encoders, bodies) = match made {
            Ok(made) => made,
            Err(e) => {
                tracing::error!(error = %e, "The push collection failed (a bug); skipping it.");
                let now = nanos(unix_now());
                self.encoders = destinations
                    .iter()
                    .map(|d| Encoder::new(d.protocol, now, self.temporality))
                    .collect();
                return;
            }
        };
        self.encoders = encoders;
        self.seq += 1;
        for (destination, (body, samples)) in destinations.iter().zip(bodies) {
            let metrics = self.feed.push_metrics().of(destination.protocol);
            let queue = &destination.queue;
            let mut items = queue.lock();
            items.batches.push_back(Batch {
                seq: self.seq,
                body: Bytes::from(body),
                samples,
            });
            while items.batches.len() > queue.capacity {
                if let Some(oldest) = items.batches.pop_front() {
                    metrics.dropped(DropReason::QueueFull, oldest.samples);
                    if !items.overflowing {
                        items.overflowing = true;
                        tracing::warn!(
                            protocol = destination.protocol.label(),
                            queue_capacity = queue.capacity,
                            "The push queue is full: dropping the oldest collections until the receiver takes them again."
                        );
                    }
                }
            }
            metrics.set_queue_length(items.batches.len());
            drop(items);
            queue.queued.notify_one();
        }
    }
}

/// The waits between retries: exponential, with jitter, within bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    /// The next wait before jitter.
    next: Duration,
}

impl Backoff {
    /// From `min` doubling up to `max` (at least `min`).
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        let min = min.max(Duration::from_millis(1));
        let max = max.max(min);
        Self {
            min,
            max,
            next: min,
        }
    }

    /// The wait before the next retry, at least `retry_after` (the
    /// receiver's `Retry-After`), within `[min, max]`: the backoff with a
    /// jitter of ±50 % (`jitter` in `[0, 1)`), as the OpenTelemetry
    /// Collector's exporter helper randomizes it; the backoff then doubles
    /// from that wait.
    pub(crate) fn after(&mut self, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let jittered = self.next.mul_f64(0.5 + jitter.clamp(0.0, 1.0));
        let wait = jittered
            .max(retry_after.unwrap_or_default())
            .clamp(self.min, self.max);
        self.next = (wait * 2).clamp(self.min, self.max);
        wait
    }

    /// A request went through: the next failure starts from the minimum.
    pub(crate) fn reset(&mut self) {
        self.next = self.min;
    }
}

/// A number in `[0, 1)` for the jitter, from the standard library's
/// randomly keyed hasher (no generator of our own; a new key each call).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Sends the queue's batches oldest first, forever (aborted at shutdown).
async fn send<F: Feed>(
    feed: Arc<F>,
    protocol: Protocol,
    queue: Arc<Queue>,
    client: client::Client,
    mut backoff: Backoff,
) {
    let metrics: &DestinationMetrics = feed.push_metrics().of(protocol);
    let mut failing: Option<(FailureReason, Option<u16>)> = None;
    let mut partial: Option<String> = None;
    loop {
        let front = queue.lock().batches.front().cloned();
        let Some(batch) = front else {
            queue.queued.notified().await;
            continue;
        };
        let start = Instant::now();
        let result = client.send(batch.body.clone()).await;
        let seconds = start.elapsed().as_secs_f64();
        let remove = |queue: &Queue| {
            let mut items = queue.lock();
            if items.batches.front().is_some_and(|b| b.seq == batch.seq) {
                items.batches.pop_front();
            }
            metrics.set_queue_length(items.batches.len());
        };
        match result {
            Ok(answer) => {
                metrics.sent(batch.samples, batch.body.len(), unix_now(), seconds);
                remove(&queue);
                queue.lock().overflowing = false;
                backoff.reset();
                if failing.take().is_some() {
                    tracing::info!(
                        protocol = protocol.label(),
                        "Pushing again: {} accepted a request.",
                        protocol.receiver()
                    );
                }
                if protocol == Protocol::Otlp {
                    let Some((rejected, message)) = otlp::partial_success(&answer) else {
                        partial = None;
                        continue;
                    };
                    metrics.rejected(rejected.max(0) as u64);
                    if partial.as_deref() != Some(message.as_str()) {
                        tracing::warn!(
                            protocol = protocol.label(),
                            rejected_data_points = rejected,
                            error = %message,
                            "The OTLP receiver accepted a request only in part (partial success)."
                        );
                        partial = Some(message);
                    }
                }
            }
            Err(failed) => {
                let reason = failed.reason;
                metrics.failed(reason, seconds);
                if failing != Some((reason, failed.status)) {
                    tracing::warn!(
                        protocol = protocol.label(),
                        reason = reason.label(),
                        status = failed.status,
                        error = %failed.detail,
                        retried = failed.retried,
                        "Pushing fails: {} did not accept a request.",
                        protocol.receiver()
                    );
                    failing = Some((reason, failed.status));
                }
                if failed.retried {
                    let wait = backoff.after(failed.retry_after, jitter());
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = queue.hurry.notified() => {}
                    }
                } else {
                    // Dropped at once: the next collection is not held up.
                    metrics.dropped(DropReason::Rejected, batch.samples);
                    remove(&queue);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "push_tests.rs"]
mod tests;
