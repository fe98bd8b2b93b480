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

use super::client::{self, Authorization};

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::Uri;
use tokio::sync::{watch, Notify};

use super::metrics::{DropReason, FailureReason};
use super::{unix_now, Feed};
use crate::expose::remote_write;

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
pub(crate) fn start<F: Feed>(
    feed: Arc<F>,
    settings: PushSettings,
    shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let client = client::Client::new(
        settings.url.clone(),
        settings.authorization.clone(),
        settings.ca_file.as_deref(),
        settings.timeout,
    )?;
    Ok(tokio::spawn(run(feed, settings, client, shutdown)))
}

async fn run<F: Feed>(
    feed: Arc<F>,
    settings: PushSettings,
    client: client::Client,
    mut shutdown: watch::Receiver<bool>,
) {
    let metrics = feed.push_metrics();
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
        feed.clone(),
        queue.clone(),
        client,
        settings.max_backoff,
    ));
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut collector = Collector {
        feed: feed.clone(),
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
struct Collector<F> {
    feed: Arc<F>,
    labels: Arc<Vec<(String, String)>>,
    seq: u64,
    last_timestamp: i64,
}

impl<F: Feed> Collector<F> {
    /// Collects now (on the blocking pool) and queues the encoded request,
    /// dropping the oldest when the queue is full.
    async fn collect_into(&mut self, queue: &Queue) {
        let feed = self.feed.clone();
        let labels = self.labels.clone();
        let last = self.last_timestamp;
        let made = tokio::task::spawn_blocking(move || {
            let served = feed.collect_now();
            // Milliseconds, strictly increasing (a clock stepping back
            // would make Prometheus reject the request).
            let timestamp = ((unix_now() * 1000.0) as i64).max(last + 1);
            let request = remote_write::write_request(&served, timestamp, &labels);
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
        let metrics = self.feed.push_metrics();
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
async fn send<F: Feed>(
    feed: Arc<F>,
    queue: Arc<Queue>,
    client: client::Client,
    max_backoff: Duration,
) {
    let metrics = feed.push_metrics();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expose::negotiate::Negotiation;
    use crate::server::{AppState, Settings, Shared};
    use crate::source::link_policy::LinkPolicy;
    use crate::source::writers::WriterPolicy;
    use crate::transform::config::Config;
    use axum::http::HeaderMap;
    use axum::routing::post;

    type Received = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

    /// A receiver answering with `statuses` in turn, then 204.
    async fn receiver(statuses: Vec<u16>) -> (String, Received) {
        let statuses = Arc::new(Mutex::new(VecDeque::from(statuses)));
        let received: Received = Arc::default();
        let seen = received.clone();
        let app = axum::Router::new().route(
            "/api/v1/write",
            post(move |headers: HeaderMap, body: Bytes| {
                let status = statuses.lock().unwrap().pop_front().unwrap_or(204);
                seen.lock().unwrap().push((headers, body));
                async move { axum::http::StatusCode::from_u16(status).unwrap() }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{address}/api/v1/write"), received)
    }

    fn shared(dir: &std::path::Path) -> Arc<Shared> {
        AppState::new(Settings {
            dirs: vec![dir.to_path_buf()],
            subdirectories_label: None,
            link_policy: LinkPolicy::default(),
            memory_budget: None,
            writer_policy: WriterPolicy::default(),
            dead_files_warning: 1000,
            telemetry_path: "/metrics".into(),
            exporter_metrics: true,
            openmetrics: true,
            negotiation: Negotiation::Safe,
            directory_warn_interval: Duration::from_secs(60),
            config_path: None,
            config: Config::default(),
            discovery: None,
        })
        .0
    }

    fn self_metrics_text(shared: &Shared) -> String {
        String::from_utf8(crate::expose::encode::encode(
            &shared.self_metrics.families(),
            crate::expose::encode::Format::Text,
            crate::expose::encode::Escaping::Underscores,
        ))
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retries_429_and_5xx_drops_other_4xx_and_sends_in_order() {
        let (url, received) = receiver(vec![503, 429, 204, 400]).await;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let shared = shared(dir.path());
        let settings = PushSettings {
            url: url.parse().unwrap(),
            interval: Duration::from_millis(50),
            timeout: Duration::from_secs(5),
            queue_capacity: 100,
            max_backoff: Duration::from_millis(50),
            flush_deadline: Duration::from_secs(2),
            labels: vec![("pod".into(), "p-1".into())],
            authorization: Some(Authorization::BearerTokenFile(token)),
            ca_file: None,
        };
        let (stop, stopped) = watch::channel(false);
        let pusher = start(shared.clone(), settings, stopped).unwrap();
        for _ in 0..200 {
            if received.lock().unwrap().len() >= 6 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        stop.send(true).unwrap();
        pusher.await.unwrap();

        let received = received.lock().unwrap().clone();
        assert!(received.len() >= 6, "{}", received.len());
        // The first collection was sent three times (503, 429, then accepted).
        assert_eq!(received[0].1, received[1].1);
        assert_eq!(received[1].1, received[2].1);
        assert_ne!(received[2].1, received[3].1);
        let mut last = 0;
        for (headers, body) in &received {
            assert_eq!(headers["content-encoding"], "snappy");
            assert_eq!(headers["content-type"], "application/x-protobuf");
            assert_eq!(headers["x-prometheus-remote-write-version"], "0.1.0");
            assert_eq!(headers["authorization"], "Bearer s3cret");
            let request = remote_write::decode(body).unwrap();
            assert!(!request.timeseries.is_empty());
            let timestamp = request.timeseries[0].samples[0].timestamp;
            assert!(timestamp >= last, "out of order");
            last = timestamp;
            for series in &request.timeseries {
                assert!(series
                    .labels
                    .iter()
                    .any(|l| l.name == "pod" && l.value == "p-1"));
            }
        }
        let text = self_metrics_text(&shared);
        for line in [
            "multiproc_exporter_push_failures_total{reason=\"http_5xx\"} 1.0\n",
            "multiproc_exporter_push_failures_total{reason=\"http_429\"} 1.0\n",
            "multiproc_exporter_push_failures_total{reason=\"http_4xx\"} 1.0\n",
            "multiproc_exporter_push_collections_dropped_total{reason=\"rejected\"} 1.0\n",
            "multiproc_exporter_push_collections_dropped_total{reason=\"shutdown\"} 0.0\n",
            "multiproc_exporter_push_queue_length 0.0\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        let accepted = received.len() as f64 - 3.0;
        assert!(text.contains(&format!(
            "multiproc_exporter_push_requests_sent_total {accepted:?}\n"
        )));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_the_flush_deadline_leaves_is_counted_at_shutdown() {
        // Nothing listens: every attempt fails to connect.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path());
        let settings = PushSettings {
            url: format!("http://127.0.0.1:{port}/api/v1/write")
                .parse()
                .unwrap(),
            interval: Duration::from_millis(20),
            timeout: Duration::from_secs(1),
            queue_capacity: 3,
            max_backoff: Duration::from_millis(20),
            flush_deadline: Duration::from_millis(100),
            labels: Vec::new(),
            authorization: None,
            ca_file: None,
        };
        let (stop, stopped) = watch::channel(false);
        let pusher = start(shared.clone(), settings, stopped).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.send(true).unwrap();
        pusher.await.unwrap();
        let text = self_metrics_text(&shared);
        for line in [
            "multiproc_exporter_push_collections_dropped_total{reason=\"shutdown\"} 3.0\n",
            "multiproc_exporter_push_queue_length 0.0\n",
            "multiproc_exporter_push_requests_sent_total 0.0\n",
            "multiproc_exporter_push_last_success_timestamp_seconds 0.0\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains(
            "multiproc_exporter_push_collections_dropped_total{reason=\"queue_full\"} 0.0\n"
        ));
        assert!(
            !text.contains("multiproc_exporter_push_failures_total{reason=\"connection\"} 0.0\n")
        );
    }
}
