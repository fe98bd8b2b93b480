//! Pushing the served metrics with Prometheus remote write 1.0
//! (`--push.remote-write-url`), for clusters where Prometheus cannot reach
//! the pod to scrape it.
//!
//! Every `--push.interval` a collection runs (joined with a scrape in
//! flight, as a scrape would be) and its families, exactly what `/metrics`
//! serves (self-metrics included unless `--web.disable-exporter-metrics`),
//! become one request ([`crate::expose::remote_write`]) stamped with the
//! collection's time, compressed, and put in a bounded queue of
//! `--push.queue-capacity` collections. A sender sends the queue oldest
//! first, one collection per request, so each series gets its samples in
//! timestamp order (Prometheus rejects a whole request with an out-of-order
//! sample). Connection errors, timeouts, 429 and 5xx are retried with
//! exponential backoff (doubling from 100 ms up to `--push.max-backoff`);
//! any other 4xx drops the collection (sending it again would fail again).
//! When the queue is full the oldest collection makes room for the newest
//! and is counted as dropped. One log line per change of state (sending ↔
//! failing, and the queue starting to overflow), not one per attempt.
//!
//! At shutdown one last collection is queued and the sender gets
//! `--push.flush-deadline` to empty the queue (retrying at once rather than
//! after its backoff); what is left is counted as dropped (`shutdown`).

mod client;

pub use client::Authorization;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::Uri;
use tokio::sync::{watch, Notify};

use crate::expose::remote_write;
use crate::server::api::unix_now;
use crate::server::telemetry::push_metrics::{DropReason, FailureReason};
use crate::server::Shared;

/// The first backoff after a failure; it doubles up to the maximum.
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// Settings of `--push.*`, validated.
#[derive(Debug, Clone)]
pub struct PushSettings {
    /// The receiver's URL (`http://` or `https://`).
    pub url: Uri,
    /// Time between collections pushed.
    pub interval: Duration,
    /// Time allowed for one request.
    pub timeout: Duration,
    /// Collections kept while the receiver cannot take them (at least 1).
    pub queue_capacity: usize,
    /// The longest wait between retries.
    pub max_backoff: Duration,
    /// Time the last collections get to be sent at shutdown.
    pub flush_deadline: Duration,
    /// Labels added to every series that lacks them (`--push.label`).
    pub labels: Vec<(String, String)>,
    /// Credentials, if any.
    pub authorization: Option<Authorization>,
    /// Certificates trusted besides the usual roots (`--push.tls.ca-file`).
    pub ca_file: Option<PathBuf>,
}

/// One collection, encoded, waiting to be sent.
#[derive(Debug, Clone)]
struct Batch {
    /// Order of the collection (tells a batch apart after the queue moved).
    seq: u64,
    body: Bytes,
    samples: usize,
}

/// The bounded queue between the collector and the sender.
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

/// Checks the settings that need I/O (the CA file) and returns the task that
/// pushes until `shutdown` turns true, then flushes.
pub(crate) fn start(
    shared: Arc<Shared>,
    settings: PushSettings,
    shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let client = client::Client::new(
        settings.url.clone(),
        settings.authorization.clone(),
        settings.ca_file.as_deref(),
        settings.timeout,
    )?;
    Ok(tokio::spawn(run(shared, settings, client, shutdown)))
}

async fn run(
    shared: Arc<Shared>,
    settings: PushSettings,
    client: client::Client,
    mut shutdown: watch::Receiver<bool>,
) {
    let metrics = &shared.self_metrics.push;
    metrics.enable(settings.queue_capacity);
    tracing::info!(
        url = %settings.url,
        interval = ?settings.interval,
        queue_capacity = settings.queue_capacity,
        "Pushing with remote write."
    );
    let queue = Arc::new(Queue {
        items: Mutex::new(Items::default()),
        capacity: settings.queue_capacity.max(1),
        queued: Notify::new(),
        hurry: Notify::new(),
    });
    let sender = tokio::spawn(send(
        shared.clone(),
        queue.clone(),
        client,
        settings.max_backoff,
    ));
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut collector = Collector {
        shared: shared.clone(),
        labels: Arc::new(settings.labels.clone()),
        seq: 0,
        last_timestamp: 0,
    };
    loop {
        tokio::select! {
            _ = ticker.tick() => collector.collect_into(&queue).await,
            _ = shutdown.changed() => break,
        }
    }
    // The final flush: the newest values, then whatever is still queued.
    collector.collect_into(&queue).await;
    let deadline = Instant::now() + settings.flush_deadline;
    while !queue.lock().batches.is_empty() && Instant::now() < deadline {
        queue.hurry.notify_one();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sender.abort();
    let _ = sender.await;
    let left: Vec<Batch> = queue.lock().batches.drain(..).collect();
    metrics.set_queue_length(0);
    if left.is_empty() {
        tracing::info!("Pushed the last collection.");
    } else {
        for batch in &left {
            metrics.dropped(DropReason::Shutdown, batch.samples);
        }
        tracing::warn!(
            collections = left.len(),
            "Shutting down with collections not pushed (--push.flush-deadline passed)."
        );
    }
}

/// Makes the batches.
struct Collector {
    shared: Arc<Shared>,
    labels: Arc<Vec<(String, String)>>,
    seq: u64,
    last_timestamp: i64,
}

impl Collector {
    /// Collects now (on the blocking pool) and queues the encoded request,
    /// dropping the oldest when the queue is full.
    async fn collect_into(&mut self, queue: &Queue) {
        let shared = self.shared.clone();
        let labels = self.labels.clone();
        let last = self.last_timestamp;
        let made = tokio::task::spawn_blocking(move || {
            let families = shared.collect_now();
            // Milliseconds, strictly increasing (a clock stepping back
            // would make Prometheus reject the request).
            let timestamp = ((unix_now() * 1000.0) as i64).max(last + 1);
            let request = remote_write::write_request(&families, timestamp, &labels);
            let samples = request.timeseries.len();
            (timestamp, samples, remote_write::encode(&request))
        })
        .await;
        let (timestamp, samples, body) = match made {
            Ok(made) => made,
            Err(e) => {
                tracing::error!(error = %e, "The push collection failed (a bug); skipping it.");
                return;
            }
        };
        self.last_timestamp = timestamp;
        self.seq += 1;
        let metrics = &self.shared.self_metrics.push;
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

/// Sends the queue's batches oldest first, forever (aborted at shutdown).
async fn send(
    shared: Arc<Shared>,
    queue: Arc<Queue>,
    client: client::Client,
    max_backoff: Duration,
) {
    let metrics = &shared.self_metrics.push;
    let mut backoff = MIN_BACKOFF;
    let mut failing: Option<FailureReason> = None;
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
            Ok(()) => {
                metrics.sent(batch.samples, batch.body.len(), unix_now(), seconds);
                remove(&queue);
                queue.lock().overflowing = false;
                backoff = MIN_BACKOFF;
                if failing.take().is_some() {
                    tracing::info!("Pushing again: the remote-write receiver accepted a request.");
                }
            }
            Err((reason, detail)) => {
                metrics.failed(reason, seconds);
                if failing != Some(reason) {
                    tracing::warn!(
                        reason = reason.label(),
                        error = %detail,
                        retried = reason.retried(),
                        "Pushing fails: the remote-write receiver did not accept a request."
                    );
                    failing = Some(reason);
                }
                if reason.retried() {
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = queue.hurry.notified() => {}
                    }
                    backoff = (backoff * 2).min(max_backoff.max(MIN_BACKOFF));
                } else {
                    metrics.dropped(DropReason::Rejected, batch.samples);
                    remove(&queue);
                }
            }
        }
    }
}
