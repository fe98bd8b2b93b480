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
//! waits the larger of an exponential backoff with jitter (`Backoff`, as the
//! OpenTelemetry Collector's exporter helper jitters: from
//! `--push.min-backoff` (30 ms) doubling up to `--push.max-backoff` (5 s),
//! Prometheus's remote-write queue's defaults) and the receiver's
//! `Retry-After` (seconds or an HTTP date), which is a floor up to
//! `--push.max-retry-after` (10 m), as the Collector's exporter helper waits
//! and as Prometheus waits the whole `Retry-After`. `503` with
//! `Retry-After: 0` waits the backoff, so it cannot make a loop of
//! requests. While the receiver asks to wait (a `Retry-After` above 0, until
//! it accepts a request), a new collection replaces the waiting ones
//! (counted, `reason="superseded"`): the queue does not grow, and the
//! request after the wait carries the newest values. An OTLP receiver's
//! partial success (points it rejected in an accepted request) is counted
//! and logged. When a queue is full the oldest collection makes room for
//! the newest and is counted as dropped. One log line per change of state
//! (sending ↔ failing with another reason or status, the queue starting to
//! overflow, a new partial-success message), not one per attempt.
//!
//! With `--push.otlp-temporality=delta` the OTLP queue holds collections
//! with cumulative values, and the sender converts each when it sends it,
//! against the values the receiver last accepted (`otlp::Deltas`, owned by
//! the sender and changed only by an accepted request; a partial success
//! is an acceptance): the change of a collection dropped or failed is
//! carried into the next request accepted.
//!
//! At shutdown one last collection is queued and the senders get
//! `--push.flush-deadline` to send what is queued: after a failure, a
//! sender makes one more attempt when the wait in force (backoff or
//! `Retry-After`) ends before the deadline, and none otherwise. What is left
//! is logged once and counted as dropped (`shutdown`).

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
    /// The longest receiver's `Retry-After` honoured
    /// (`--push.max-retry-after`).
    pub max_retry_after: Duration,
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
    payload: Payload,
    /// Its samples (for a delta collection, its points before conversion).
    samples: usize,
}

/// What a batch sends.
#[derive(Debug, Clone)]
enum Payload {
    /// The request body, as it is sent.
    Encoded(Bytes),
    /// An OTLP delta collection, converted when it is sent against what the
    /// receiver accepted (`otlp::Deltas`, owned by the sender).
    Delta(Arc<otlp::Collected>),
}

/// The bounded queue between the collector and one destination's sender.
#[derive(Debug)]
struct Queue {
    items: Mutex<Items>,
    capacity: usize,
    /// A batch was queued.
    queued: Notify,
}

#[derive(Debug, Default)]
struct Items {
    batches: VecDeque<Batch>,
    /// Whether collections were dropped since the last success (logged once).
    overflowing: bool,
    /// The receiver asked to wait (`Retry-After`) and has not accepted a
    /// request since: a new collection replaces the waiting ones.
    asked_to_wait: bool,
    /// The batch being sent (never replaced).
    in_flight: Option<u64>,
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
    /// The series' start times (and runs, with delta temporality).
    Otlp(otlp::StartTimes, otlp::Temporality),
}

impl Encoder {
    fn new(protocol: Protocol, started_nanos: u64, temporality: otlp::Temporality) -> Self {
        match protocol {
            Protocol::RemoteWrite => Self::RemoteWrite { last_timestamp: 0 },
            Protocol::Otlp => Self::Otlp(
                otlp::StartTimes::new(started_nanos, temporality),
                temporality,
            ),
        }
    }

    /// The payload for `families` collected at `now` (Unix seconds), and
    /// its number of samples (data points for OTLP).
    fn encode(
        &mut self,
        families: &[crate::model::MetricFamily],
        now: f64,
        labels: &[(String, String)],
    ) -> (Payload, usize) {
        match self {
            Self::RemoteWrite { last_timestamp } => {
                // Milliseconds, strictly increasing (a clock stepping back
                // would make Prometheus reject the request).
                let timestamp = ((now * 1000.0) as i64).max(*last_timestamp + 1);
                *last_timestamp = timestamp;
                let request = remote_write::write_request(families, timestamp, labels);
                let samples = request.timeseries.len();
                (
                    Payload::Encoded(Bytes::from(remote_write::encode(&request))),
                    samples,
                )
            }
            Self::Otlp(starts, temporality) => {
                let collected = otlp::collect(families, nanos(now), labels, starts);
                let samples = otlp::data_points(collected.request());
                match temporality {
                    otlp::Temporality::Cumulative => (
                        Payload::Encoded(Bytes::from(otlp::encode(collected.request()))),
                        samples,
                    ),
                    otlp::Temporality::Delta => (Payload::Delta(Arc::new(collected)), samples),
                }
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
    // The flush's deadline, once shutting down.
    let (flush, flushing) = watch::channel(None::<Instant>);
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
        });
        let sender = tokio::spawn(send(
            feed.clone(),
            protocol,
            queue.clone(),
            client,
            Backoff::new(
                settings.min_backoff,
                settings.max_backoff,
                settings.max_retry_after,
            ),
            flushing.clone(),
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
    // The final flush: the newest values, then whatever is still queued,
    // each sender making at most one more attempt after a failure, when
    // the wait in force ends before the deadline.
    let deadline = Instant::now() + settings.flush_deadline;
    collector.collect_into(&destinations).await;
    flush.send_replace(Some(deadline));
    for d in destinations {
        let mut sender = d.sender;
        if tokio::time::timeout_at(deadline.into(), &mut sender)
            .await
            .is_err()
        {
            sender.abort();
            let _ = sender.await;
        }
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
                "Shutting down with collections not pushed (the receiver did not take them within --push.flush-deadline)."
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
    /// destination and queues it, dropping the oldest when a queue is full,
    /// and the waiting ones while the receiver asked to wait.
    async fn collect_into(&mut self, destinations: &[Destination]) {
        let feed = self.feed.clone();
        let labels = self.labels.clone();
        let mut encoders = std::mem::take(&mut self.encoders);
        let made = tokio::task::spawn_blocking(move || {
            let served = feed.collect_now();
            let now = unix_now();
            let payloads: Vec<(Payload, usize)> = encoders
                .iter_mut()
                .map(|e| e.encode(&served, now, &labels))
                .collect();
            (encoders, payloads)
        })
        .await;
        let (encoders, payloads) = match made {
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
        for (destination, (payload, samples)) in destinations.iter().zip(payloads) {
            let metrics = self.feed.push_metrics().of(destination.protocol);
            let queue = &destination.queue;
            let mut items = queue.lock();
            if items.asked_to_wait {
                // No queue growth while the receiver asked to wait: the
                // newest collection replaces the waiting ones (a delta
                // collection's change is carried: it is taken from what
                // the receiver accepted).
                let in_flight = items.in_flight;
                let mut kept = VecDeque::new();
                for batch in items.batches.drain(..) {
                    if Some(batch.seq) == in_flight {
                        kept.push_back(batch);
                    } else {
                        metrics.dropped(DropReason::Superseded, batch.samples);
                    }
                }
                items.batches = kept;
            }
            items.batches.push_back(Batch {
                seq: self.seq,
                payload,
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

/// The waits between retries: exponential, with jitter, within bounds, and
/// never shorter than the receiver's `Retry-After` (up to its own cap).
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

    /// The wait before the next retry: the larger of the backoff (with a
    /// jitter of ±50 %, `jitter` in `[0, 1)`, as the OpenTelemetry
    /// Collector's exporter helper randomizes it, within `[min, max]`) and
    /// the receiver's `retry_after` (at most `max_retry_after`), as the
    /// Collector's exporter helper waits; the backoff then doubles.
    pub(crate) fn after(&mut self, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let backoff = self
            .next
            .mul_f64(0.5 + jitter.clamp(0.0, 1.0))
            .clamp(self.min, self.max);
        self.next = (backoff * 2).clamp(self.min, self.max);
        backoff.max(retry_after.unwrap_or_default().min(self.max_retry_after))
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

/// A batch's request body, its samples, and (delta) what the receiver will
/// have accepted if it accepts it.
type Prepared = (Bytes, usize, Option<otlp::Converted>);

/// The body of `batch`: as queued, or converted against `deltas` (on the
/// blocking pool: a conversion and gzip of a large collection).
async fn prepare(batch: &Batch, deltas: &mut otlp::Deltas) -> Option<Prepared> {
    let collected = match &batch.payload {
        Payload::Encoded(body) => return Some((body.clone(), batch.samples, None)),
        Payload::Delta(collected) => collected.clone(),
    };
    let owned = std::mem::take(deltas);
    let made = tokio::task::spawn_blocking(move || {
        let converted = owned.convert(&collected);
        let body = Bytes::from(otlp::encode(converted.request()));
        (owned, body, converted)
    })
    .await;
    match made {
        Ok((owned, body, converted)) => {
            *deltas = owned;
            let samples = otlp::data_points(converted.request());
            Some((body, samples, Some(converted)))
        }
        Err(e) => {
            // The accepted values are lost with the task: the next deltas
            // start again from the series' runs.
            tracing::error!(error = %e, "The delta conversion failed (a bug); dropping the collection.");
            None
        }
    }
}

/// Sends the queue's batches oldest first until the flush ends (or is
/// aborted at its deadline).
async fn send<F: Feed>(
    feed: Arc<F>,
    protocol: Protocol,
    queue: Arc<Queue>,
    client: client::Client,
    mut backoff: Backoff,
    mut flushing: watch::Receiver<Option<Instant>>,
) {
    let metrics: &DestinationMetrics = feed.push_metrics().of(protocol);
    let mut failing: Option<(FailureReason, Option<u16>)> = None;
    let mut partial: Option<String> = None;
    let mut deltas = otlp::Deltas::default();
    // Shutting down, the one attempt after a failure was made.
    let mut last_attempt = false;
    loop {
        let front = {
            let mut items = queue.lock();
            let front = items.batches.front().cloned();
            items.in_flight = front.as_ref().map(|b| b.seq);
            front
        };
        let Some(batch) = front else {
            if flushing.borrow().is_some() {
                return;
            }
            tokio::select! {
                _ = queue.queued.notified() => {}
                changed = flushing.changed() => if changed.is_err() { return },
            }
            continue;
        };
        let remove = |queue: &Queue| {
            let mut items = queue.lock();
            items.in_flight = None;
            if items.batches.front().is_some_and(|b| b.seq == batch.seq) {
                items.batches.pop_front();
            }
            metrics.set_queue_length(items.batches.len());
        };
        let Some((body, samples, converted)) = prepare(&batch, &mut deltas).await else {
            metrics.dropped(DropReason::Rejected, batch.samples);
            remove(&queue);
            continue;
        };
        let start = Instant::now();
        let result = client.send(body.clone()).await;
        let seconds = start.elapsed().as_secs_f64();
        match result {
            Ok(answer) => {
                metrics.sent(samples, body.len(), unix_now(), seconds);
                if let Some(converted) = converted {
                    deltas.accept(converted);
                }
                remove(&queue);
                {
                    let mut items = queue.lock();
                    items.overflowing = false;
                    items.asked_to_wait = false;
                }
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
                        retry_after_seconds = failed.retry_after.map(|d| d.as_secs_f64()),
                        "Pushing fails: {} did not accept a request.",
                        protocol.receiver()
                    );
                    failing = Some((reason, failed.status));
                }
                if !failed.retried {
                    // Dropped at once: the next collection is not held up
                    // (a delta collection's change is carried into it).
                    metrics.dropped(DropReason::Rejected, samples);
                    remove(&queue);
                    queue.lock().asked_to_wait = false;
                    continue;
                }
                {
                    let mut items = queue.lock();
                    items.in_flight = None;
                    items.asked_to_wait = failed.retry_after.is_some_and(|d| !d.is_zero());
                }
                let until = Instant::now() + backoff.after(failed.retry_after, jitter());
                // The wait in force, even shutting down: then one more
                // attempt if the wait ends before the flush's deadline.
                loop {
                    let deadline = *flushing.borrow_and_update();
                    if let Some(deadline) = deadline {
                        if last_attempt || until > deadline {
                            return;
                        }
                        last_attempt = true;
                        tokio::time::sleep_until(until.into()).await;
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep_until(until.into()) => break,
                        changed = flushing.changed() => if changed.is_err() { return },
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "push_tests.rs"]
mod tests;
