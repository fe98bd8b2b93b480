//! Pushing the served metrics, for clusters where nothing can scrape the
//! pod: with Prometheus remote write 1.0 (`--push.remote-write-url`), with
//! OTLP/HTTP (`--push.otlp-url`), or both.
//!
//! Every `--push.interval` one collection runs (joined with a scrape in
//! flight, as a scrape would be) and its families, exactly what `/metrics`
//! serves (self-metrics included unless `--web.disable-exporter-metrics`),
//! become one request per destination ([`crate::expose::remote_write`],
//! [`crate::expose::otlp`]) stamped with the collection's time, compressed,
//! and put in that destination's queue, bounded in collections
//! (`--push.queue-capacity`) and in bytes (`--push.queue-max-bytes`;
//! `queue.rs`). The collection knows whether every source answered in full
//! (`Collection::complete`): a series missing from an incomplete
//! one is not gone (`otlp::collect_partial`). Each destination's sender sends its queue oldest first, one
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
//! overflow, a new partial-success message), not one per attempt. The
//! sender's decisions are made without I/O and without a clock
//! (`sender.rs`), which the tests drive (`rig.rs`, the push model).
//!
//! A request, once made, is immutable: it is sent again byte for byte until
//! it is answered, and never dropped while the receiver may have stored it
//! (at least once; a duplicate is identical, so a store keyed by series and
//! timestamp keeps one copy).
//!
//! With `--push.otlp-temporality=delta` the OTLP queue holds collections
//! with cumulative values (gzipped: `otlp::Stored`), and the sender converts each when it sends it,
//! against the values the receiver last accepted (`otlp::Deltas`, owned by
//! the sender and changed only by an accepted request; a partial success
//! is an acceptance): the change of a collection dropped or failed is
//! carried into the next request accepted.
//!
//! At shutdown one last collection is queued (the one running, else a new
//! one, raced against the deadline: a slow source cannot hold the exit up)
//! and the senders get `--push.flush-deadline` to send what is queued: after a failure, a
//! sender makes one more attempt when the wait in force (backoff or
//! `Retry-After`) ends before the deadline, and none otherwise. What is left
//! is logged once and counted as dropped (`shutdown`).

use super::client::{self, Authorization};

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::Uri;
use std::path::PathBuf;
use tokio::sync::watch;

use super::metrics::{DestinationMetrics, DropReason};
pub use super::protocol::Protocol;
use super::queue::{Batch, Payload, Queue};
pub(crate) use super::sender::Backoff;
use super::sender::{jitter, later, Sender, Step};
use super::{unix_now, Collection, Feed};
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
    /// The most memory the collections kept take, per destination
    /// (`--push.queue-max-bytes`; the newest collection is always kept).
    pub queue_max_bytes: usize,
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

/// How one destination encodes a collection, with what it carries from one
/// collection to the next.
#[derive(Debug)]
pub(super) enum Encoder {
    /// The last timestamp sent (milliseconds; strictly increasing).
    RemoteWrite { last_timestamp: i64 },
    /// The series' start times (and runs, with delta temporality).
    Otlp(otlp::StartTimes, otlp::Temporality),
}

impl Encoder {
    pub(super) fn new(
        protocol: Protocol,
        started_nanos: u64,
        temporality: otlp::Temporality,
    ) -> Self {
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
    /// `complete`: every source answered in full (`otlp::collect_partial`).
    pub(super) fn encode(
        &mut self,
        families: &[crate::model::MetricFamily],
        now: f64,
        labels: &[(String, String)],
        complete: bool,
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
                let collected =
                    otlp::collect_partial(families, nanos(now), labels, starts, complete);
                let samples = otlp::data_points(collected.request());
                match temporality {
                    otlp::Temporality::Cumulative => (
                        Payload::Encoded(Bytes::from(otlp::encode(collected.request()))),
                        samples,
                    ),
                    otlp::Temporality::Delta => (Payload::Delta(collected.store()), samples),
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
            .enable(settings.queue_capacity, settings.queue_max_bytes);
        tracing::info!(
            url = %url,
            protocol = protocol.label(),
            interval = ?settings.interval,
            queue_capacity = settings.queue_capacity,
            queue_max_bytes = settings.queue_max_bytes,
            "Pushing to {}.",
            protocol.receiver()
        );
        let queue = Arc::new(Queue::new(
            protocol,
            settings.queue_capacity,
            settings.queue_max_bytes,
        ));
        let sender = tokio::spawn(send(
            feed.clone(),
            queue.clone(),
            client,
            Sender::new(
                protocol,
                Backoff::new(
                    settings.min_backoff,
                    settings.max_backoff,
                    settings.max_retry_after,
                ),
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
    // The collection running (on the blocking pool), raced against the
    // signal: a slow source cannot hold the shutdown up.
    let mut running: Option<Running> = None;
    let deadline = loop {
        tokio::select! {
            _ = ticker.tick(), if running.is_none() => running = Some(collector.start()),
            made = async { running.as_mut().expect("guarded").await }, if running.is_some() => {
                running = None;
                collector.finish(made, &destinations);
            }
            _ = shutdown.changed() => break later(Instant::now(), settings.flush_deadline),
        }
    };
    // The final flush, all within the deadline: the newest values (the
    // collection running at the signal, else a new one), then whatever is
    // still queued, each sender making at most one more attempt after a
    // failure, when the wait in force ends before the deadline.
    let last = running.take().unwrap_or_else(|| collector.start());
    match tokio::time::timeout_at(deadline.into(), last).await {
        Ok(made) => collector.finish(made, &destinations),
        Err(_) => tracing::warn!(
            "The last collection did not finish within --push.flush-deadline; pushing what is queued."
        ),
    }
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
        let left = d.queue.drain(metrics);
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

/// A collection made: the encoders back, with one payload per destination.
type Made = (Vec<Encoder>, Vec<(Payload, usize)>);

/// A collection running on the blocking pool.
type Running = tokio::task::JoinHandle<Made>;

/// Makes the batches.
struct Collector<F> {
    feed: Arc<F>,
    labels: Arc<Vec<(String, String)>>,
    /// One per destination, in the same order (with a collection running,
    /// it has them).
    encoders: Vec<Encoder>,
    temporality: otlp::Temporality,
    seq: u64,
}

impl<F: Feed> Collector<F> {
    /// Starts a collection (on the blocking pool) that encodes it for each
    /// destination.
    fn start(&mut self) -> Running {
        let feed = self.feed.clone();
        let labels = self.labels.clone();
        let mut encoders = std::mem::take(&mut self.encoders);
        tokio::task::spawn_blocking(move || {
            let served = feed.collect_now();
            let complete = served.complete();
            let now = unix_now();
            let payloads: Vec<(Payload, usize)> = encoders
                .iter_mut()
                .map(|e| e.encode(&served, now, &labels, complete))
                .collect();
            (encoders, payloads)
        })
    }

    /// Queues a finished collection's batches.
    fn finish(&mut self, made: Result<Made, tokio::task::JoinError>, destinations: &[Destination]) {
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
            destination.queue.push(
                Batch {
                    seq: self.seq,
                    payload,
                    samples,
                },
                metrics,
            );
        }
    }
}

/// Sends the queue's batches oldest first until the flush ends (or is
/// aborted at its deadline).
async fn send<F: Feed>(
    feed: Arc<F>,
    queue: Arc<Queue>,
    client: client::Client,
    mut sender: Sender,
    mut flushing: watch::Receiver<Option<Instant>>,
) {
    let metrics: &DestinationMetrics = feed.push_metrics().of(sender.protocol);
    // Shutting down, the one attempt after a failure was made.
    let mut last_attempt = false;
    loop {
        let Some(batch) = queue.take_front() else {
            if flushing.borrow().is_some() {
                return;
            }
            tokio::select! {
                _ = queue.queued.notified() => {}
                changed = flushing.changed() => if changed.is_err() { return },
            }
            continue;
        };
        if !sender.kept(&batch) {
            // On the blocking pool (a conversion and gzip of a large
            // collection); a panic there (a bug) loses nothing accepted:
            // the task has a copy of the accepted values' handle.
            let convert = sender.convert;
            let deltas = sender.deltas.clone();
            let made = match &batch.payload {
                Payload::Encoded(_) => convert(&deltas, &batch),
                Payload::Delta(_) => {
                    let taken = batch.clone();
                    tokio::task::spawn_blocking(move || convert(&deltas, &taken))
                        .await
                        .unwrap_or_else(|e| Err(format!("the conversion failed: {e}")))
                }
            };
            if !sender.made(&batch, made, &queue, metrics) {
                continue;
            }
        }
        let body = match &sender.prepared {
            Some(prepared) => prepared.made.body.clone(),
            None => continue,
        };
        let start = Instant::now();
        let result = client.send(body).await;
        let seconds = start.elapsed().as_secs_f64();
        let step = sender.answered(result, &queue, metrics, unix_now(), seconds, jitter());
        let Step::Wait(wait) = step else {
            continue;
        };
        let until = later(Instant::now(), wait);
        // The wait in force, even shutting down: then one more attempt if
        // the wait ends before the flush's deadline.
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

#[cfg(test)]
#[path = "push_tests.rs"]
mod tests;
