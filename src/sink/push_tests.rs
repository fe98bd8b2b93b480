//! Tests of pushing in its own layer: the collections come from a small
//! fake of [`Feed`], the receivers are axum routes on 127.0.0.1.

use super::*;
use crate::model::{Labels, MetricFamily, MetricType, Sample};
use crate::sink::metrics::PushMetrics;
use axum::http::HeaderMap;
use axum::routing::post;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Collections of a counter that counts the collections, and a gauge.
#[derive(Default)]
struct FakeFeed {
    collections: AtomicU64,
    metrics: PushMetrics,
}

fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        name: name.into(),
        labels: Labels::new(labels.iter().map(|&(n, v)| (Arc::from(n), Arc::from(v)))),
        value,
    }
}

/// A collection of the fakes: its families, and whether it is complete.
pub(super) struct Families(pub(super) Vec<MetricFamily>, pub(super) bool);

impl std::ops::Deref for Families {
    type Target = [MetricFamily];

    fn deref(&self) -> &[MetricFamily] {
        &self.0
    }
}

impl crate::sink::Collection for Families {
    fn complete(&self) -> bool {
        self.1
    }
}

impl Feed for FakeFeed {
    fn collect_now(&self) -> impl crate::sink::Collection {
        let n = self.collections.fetch_add(1, Ordering::SeqCst) + 1;
        let families = vec![
            MetricFamily {
                name: "vllm:requests".into(),
                help: "Requests.".into(),
                metric_type: MetricType::Counter,
                samples: vec![sample(
                    "vllm:requests_total",
                    &[("model_name", "m")],
                    n as f64,
                )],
            },
            MetricFamily {
                name: "running".into(),
                help: "Running.".into(),
                metric_type: MetricType::Gauge,
                samples: vec![sample("running", &[], 2.0)],
            },
        ];
        Families(families, true)
    }

    fn push_metrics(&self) -> &PushMetrics {
        &self.metrics
    }
}

fn self_metrics_text(feed: &FakeFeed) -> String {
    let mut out = crate::model::family_list::FamilyList::default();
    feed.metrics.add_families("multiproc_exporter_", &mut out);
    String::from_utf8(crate::expose::encode::encode(
        &out.into_families(),
        crate::expose::encode::Format::Text,
        crate::expose::encode::Escaping::Underscores,
    ))
    .unwrap()
}

type Received = Arc<Mutex<Vec<(Instant, HeaderMap, Bytes)>>>;

/// An answer: status, extra headers, body.
type Answer = (u16, Vec<(&'static str, &'static str)>, Vec<u8>);

/// A receiver at `path` answering with `answers` in turn, then 200/204.
async fn receiver(path: &str, answers: Vec<Answer>) -> (String, Received) {
    let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
    let received: Received = Arc::default();
    let seen = received.clone();
    let app = axum::Router::new().route(
        path,
        post(move |headers: HeaderMap, body: Bytes| {
            let (status, extra, answer) =
                answers
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or((200, Vec::new(), Vec::new()));
            seen.lock().unwrap().push((Instant::now(), headers, body));
            async move {
                let mut response = axum::response::Response::new(axum::body::Body::from(answer));
                *response.status_mut() = axum::http::StatusCode::from_u16(status).unwrap();
                for (name, value) in extra {
                    response.headers_mut().insert(name, value.parse().unwrap());
                }
                response
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}{path}"), received)
}

fn settings() -> PushSettings {
    PushSettings {
        remote_write_url: None,
        otlp_url: None,
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(5),
        queue_capacity: 100,
        queue_max_bytes: 4 << 20,
        min_backoff: Duration::from_millis(30),
        max_backoff: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(600),
        otlp_temporality: otlp::Temporality::Cumulative,
        flush_deadline: Duration::from_secs(2),
        labels: Vec::new(),
        headers: Vec::new(),
        authorization: None,
        ca_file: None,
    }
}

async fn push_until(feed: &Arc<FakeFeed>, settings: PushSettings, done: impl Fn() -> bool) {
    let (stop, stopped) = watch::channel(false);
    let pusher = start(feed.clone(), settings, stopped).unwrap();
    for _ in 0..400 {
        if done() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop.send(true).unwrap();
    pusher.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_429_and_5xx_drops_other_4xx_and_sends_in_order() {
    let answers = [503, 429, 204, 400]
        .into_iter()
        .map(|s| (s, Vec::new(), Vec::new()))
        .collect();
    let (url, received) = receiver("/api/v1/write", answers).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let feed = Arc::new(FakeFeed::default());
    let settings = PushSettings {
        remote_write_url: Some(url.parse().unwrap()),
        labels: vec![("pod".into(), "p-1".into())],
        headers: vec![("X-Scope-OrgID".into(), "tenant-1".into())],
        authorization: Some(Authorization::BearerTokenFile(token)),
        ..settings()
    };
    push_until(&feed, settings, || received.lock().unwrap().len() >= 6).await;

    let received = received.lock().unwrap().clone();
    assert!(received.len() >= 6, "{}", received.len());
    // The first collection was sent three times (503, 429, then accepted).
    assert_eq!(received[0].2, received[1].2);
    assert_eq!(received[1].2, received[2].2);
    assert_ne!(received[2].2, received[3].2);
    let mut last = 0;
    for (_, headers, body) in &received {
        assert_eq!(headers["content-encoding"], "snappy");
        assert_eq!(headers["content-type"], "application/x-protobuf");
        assert_eq!(headers["x-prometheus-remote-write-version"], "0.1.0");
        assert_eq!(headers["authorization"], "Bearer s3cret");
        assert_eq!(headers["x-scope-orgid"], "tenant-1");
        let request = remote_write::decode(body).unwrap();
        assert_eq!(request.timeseries.len(), 2);
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
    let text = self_metrics_text(&feed);
    for line in [
        "multiproc_exporter_push_failures_total{protocol=\"remote_write\",reason=\"http_5xx\"} 1.0\n",
        "multiproc_exporter_push_failures_total{protocol=\"remote_write\",reason=\"http_429\"} 1.0\n",
        "multiproc_exporter_push_failures_total{protocol=\"remote_write\",reason=\"http_4xx\"} 1.0\n",
        "multiproc_exporter_push_collections_dropped_total{protocol=\"remote_write\",reason=\"rejected\"} 1.0\n",
        "multiproc_exporter_push_collections_dropped_total{protocol=\"remote_write\",reason=\"shutdown\"} 0.0\n",
        "multiproc_exporter_push_queue_length{protocol=\"remote_write\"} 0.0\n",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    assert!(!text.contains("otlp"));
    let accepted = received.len() as f64 - 3.0;
    assert!(text.contains(&format!(
        "multiproc_exporter_push_requests_sent_total{{protocol=\"remote_write\"}} {accepted:?}\n"
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
    let feed = Arc::new(FakeFeed::default());
    let settings = PushSettings {
        otlp_url: Some(
            format!("http://127.0.0.1:{port}/v1/metrics")
                .parse()
                .unwrap(),
        ),
        interval: Duration::from_millis(20),
        timeout: Duration::from_secs(1),
        queue_capacity: 3,
        max_backoff: Duration::from_millis(20),
        flush_deadline: Duration::from_millis(100),
        ..settings()
    };
    let (stop, stopped) = watch::channel(false);
    let pusher = start(feed.clone(), settings, stopped).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.send(true).unwrap();
    pusher.await.unwrap();
    let text = self_metrics_text(&feed);
    for line in [
        // The queue's three, and the one being sent again (the receiver
        // may have stored it: never dropped before it is answered).
        "multiproc_exporter_push_collections_dropped_total{protocol=\"otlp\",reason=\"shutdown\"} 4.0\n",
        "multiproc_exporter_push_queue_length{protocol=\"otlp\"} 0.0\n",
        "multiproc_exporter_push_requests_sent_total{protocol=\"otlp\"} 0.0\n",
        "multiproc_exporter_push_last_success_timestamp_seconds{protocol=\"otlp\"} 0.0\n",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    assert!(!text.contains(
        "multiproc_exporter_push_collections_dropped_total{protocol=\"otlp\",reason=\"queue_full\"} 0.0\n"
    ));
    assert!(!text.contains(
        "multiproc_exporter_push_failures_total{protocol=\"otlp\",reason=\"connection\"} 0.0\n"
    ));
    assert!(!text.contains("remote_write"));
}

/// An `ExportMetricsServiceResponse` with a partial success.
fn partial_success(rejected: i64, message: &str) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
    };
    prost::Message::encode_to_vec(&ExportMetricsServiceResponse {
        partial_success: Some(ExportMetricsPartialSuccess {
            rejected_data_points: rejected,
            error_message: message.into(),
        }),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_honours_retry_after_counts_partial_success_and_gets_the_same_collections() {
    let (otlp_url, otlp_received) = receiver(
        "/v1/metrics",
        vec![
            (503, vec![("retry-after", "1")], Vec::new()),
            (200, Vec::new(), partial_success(1, "one point too many")),
            (200, Vec::new(), partial_success(1, "one point too many")),
        ],
    )
    .await;
    let (rw_url, rw_received) = receiver("/api/v1/write", Vec::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "pw").unwrap();
    let feed = Arc::new(FakeFeed::default());
    let settings = PushSettings {
        remote_write_url: Some(rw_url.parse().unwrap()),
        otlp_url: Some(otlp_url.parse().unwrap()),
        labels: vec![("job".into(), "vllm".into()), ("pod".into(), "p-1".into())],
        headers: vec![("X-Tenant".into(), "t".into())],
        authorization: Some(Authorization::Basic {
            username: "u".into(),
            password_file: password,
        }),
        // Retry-After is honoured up to the maximum backoff.
        max_backoff: Duration::from_secs(5),
        ..settings()
    };
    push_until(&feed, settings, || otlp_received.lock().unwrap().len() >= 5).await;

    let otlp_received = otlp_received.lock().unwrap().clone();
    // The 503's Retry-After (1 s) was waited for, not the 30 ms backoff,
    // and the newest collection replaced the waiting one.
    assert!(otlp_received[1].0 - otlp_received[0].0 >= Duration::from_secs(1));
    let mut otlp_values = Vec::new();
    for (_, headers, body) in &otlp_received {
        assert_eq!(headers["content-encoding"], "gzip");
        assert_eq!(headers["content-type"], "application/x-protobuf");
        assert!(headers.get("x-prometheus-remote-write-version").is_none());
        assert_eq!(headers["authorization"], "Basic dTpwdw==");
        assert_eq!(headers["x-tenant"], "t");
        let request = otlp::decode(body).unwrap();
        let resource = request.resource_metrics[0].resource.as_ref().unwrap();
        let keys: Vec<&str> = resource.attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["service.name", "pod"]);
        let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
        assert_eq!(metrics[0].name, "vllm:requests_total");
        let Some(Data::Sum(sum)) = &metrics[0].data else {
            panic!("{metrics:?}")
        };
        assert!(sum.is_monotonic);
        let point = &sum.data_points[0];
        assert!(
            point.start_time_unix_nano > 0 && point.start_time_unix_nano <= point.time_unix_nano
        );
        let Some(number_data_point::Value::AsDouble(v)) = point.value else {
            panic!()
        };
        otlp_values.push(v);
    }
    let rw_values: Vec<f64> = rw_received
        .lock()
        .unwrap()
        .iter()
        .map(|(_, _, body)| {
            let request = remote_write::decode(body).unwrap();
            request
                .timeseries
                .iter()
                .find(|s| s.labels.iter().any(|l| l.value == "vllm:requests_total"))
                .unwrap()
                .samples[0]
                .value
        })
        .collect();
    // Both destinations got the same collections (one collection each
    // time), OTLP without those superseded during the Retry-After.
    assert_eq!(otlp_values[0], 1.0);
    assert!(otlp_values[1] > 2.0, "{otlp_values:?}");
    assert!(
        otlp_values.windows(2).all(|w| w[0] < w[1]),
        "{otlp_values:?}"
    );
    assert!(otlp_values.iter().all(|v| rw_values.contains(v)));
    let text = self_metrics_text(&feed);
    for line in [
        "multiproc_exporter_push_samples_rejected_total{protocol=\"otlp\"} 2.0\n",
        "multiproc_exporter_push_samples_rejected_total{protocol=\"remote_write\"} 0.0\n",
        "multiproc_exporter_push_failures_total{protocol=\"otlp\",reason=\"http_5xx\"} 1.0\n",
        "multiproc_exporter_push_failures_total{protocol=\"remote_write\",reason=\"http_5xx\"} 0.0\n",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

use opentelemetry_proto::tonic::metrics::v1::number_data_point;

#[test]
fn retry_after_is_seconds_or_an_http_date() {
    use axum::http::HeaderValue;
    let parse = |v: &str| super::client::retry_after(Some(&HeaderValue::from_str(v).unwrap()));
    assert_eq!(parse("7"), Some(Duration::from_secs(7)));
    // Bounded by the sender's backoff (`Backoff::after`), not here.
    assert_eq!(parse("86400"), Some(Duration::from_secs(86400)));
    assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
    assert_eq!(parse("soon"), None);
    let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
    let wait = parse(&later).unwrap();
    assert!(
        wait > Duration::from_secs(100) && wait <= Duration::from_secs(120),
        "{wait:?}"
    );
}

/// Issue 41: `503` with `Retry-After: 0` made a tight loop (750 requests a
/// second); `Retry-After: 0` now waits the backoff, which doubles with
/// jitter. Issue 48: a longer `Retry-After` was cut to `--push.max-backoff`
/// (a receiver asking for 60 s got a request every 5 s); it is now a floor
/// up to `--push.max-retry-after`.
#[test]
fn the_backoff_doubles_with_jitter_and_retry_after_is_a_floor() {
    let (min, max) = (Duration::from_millis(30), Duration::from_secs(5));
    let cap = Duration::from_secs(600);
    let mut backoff = Backoff::new(min, max, cap);
    // Retry-After: 0 waits the backoff, doubling from 30 ms up to 5 s.
    let waits: Vec<Duration> = (0..12)
        .map(|_| backoff.after(Some(Duration::ZERO), 0.5))
        .collect();
    assert_eq!(waits[0], min);
    assert_eq!(waits[1], min * 2);
    assert_eq!(*waits.last().unwrap(), max);
    let total: Duration = waits[..9].iter().sum();
    assert!(total >= Duration::from_secs(7), "{waits:?}");
    // Jitter: ±50 %, never past the bounds.
    let mut backoff = Backoff::new(min, max, cap);
    backoff.after(None, 0.5);
    let low = backoff.after(None, 0.0);
    let mut other = Backoff::new(min, max, cap);
    other.after(None, 0.5);
    let high = other.after(None, 0.999);
    assert!(low < high && low >= min && high <= max, "{low:?} {high:?}");
    // Retry-After is a floor beyond the maximum backoff, up to its cap; the
    // backoff keeps doubling from its own waits.
    let mut backoff = Backoff::new(min, max, cap);
    let sixty = Duration::from_secs(60);
    assert_eq!(backoff.after(Some(sixty), 0.5), sixty);
    assert_eq!(backoff.after(Some(sixty), 0.5), sixty);
    assert_eq!(backoff.after(None, 0.5), min * 4);
    assert_eq!(backoff.after(Some(Duration::from_secs(3600)), 0.5), cap);
    assert_eq!(
        Backoff::new(min, max, Duration::ZERO).after(Some(sixty), 0.5),
        min,
        "--push.max-retry-after=0 ignores Retry-After"
    );
    let mut backoff = Backoff::new(min, max, cap);
    assert_eq!(
        backoff.after(Some(Duration::from_secs(1)), 0.5),
        Duration::from_secs(1)
    );
    // A success starts again from the minimum.
    backoff.reset();
    assert_eq!(backoff.after(None, 0.5), min);
}

/// `multiproc_exporter_push_collections_dropped_total` of `protocol` for
/// `reason` in the self-metrics' `text`.
fn dropped(text: &str, protocol: &str, reason: &str) -> f64 {
    let series = format!(
        "multiproc_exporter_push_collections_dropped_total{{protocol=\"{protocol}\",reason=\"{reason}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// The value of `vllm:requests_total` in a delta request (None: no point).
fn delta_value(body: &[u8]) -> Option<f64> {
    let request = otlp::decode(body).unwrap();
    let metric = request.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == "vllm:requests_total")?;
    let Some(Data::Sum(sum)) = &metric.data else {
        panic!("{metric:?}")
    };
    assert_eq!(sum.aggregation_temporality, 2 - 1, "delta");
    let Some(number_data_point::Value::AsDouble(v)) = sum.data_points[0].value else {
        panic!()
    };
    Some(v)
}

/// Issue 48: while the receiver asked to wait (`429` with `Retry-After`),
/// the next request waited only `--push.max-backoff`, and the queue grew
/// by a collection every interval. Now the wait is the `Retry-After`, the
/// newest collection replaces the waiting one (counted `superseded`), and
/// with delta temporality the change of every collection in between is in
/// the request after the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_waited_and_the_newest_collection_replaces_the_waiting_one() {
    let (url, received) = receiver(
        "/v1/metrics",
        vec![(429, vec![("retry-after", "2")], Vec::new())],
    )
    .await;
    let feed = Arc::new(FakeFeed::default());
    let settings = PushSettings {
        otlp_url: Some(url.parse().unwrap()),
        otlp_temporality: otlp::Temporality::Delta,
        ..settings()
    };
    push_until(&feed, settings, || received.lock().unwrap().len() >= 3).await;
    let received = received.lock().unwrap().clone();
    // The first collection (its base) was refused; the second request came
    // after the 2 s asked for (not after the 50 ms maximum backoff), with
    // the newest collection: its delta is everything since the first one.
    assert!(
        received[1].0 - received[0].0 >= Duration::from_secs(2),
        "{:?}",
        received[1].0 - received[0].0
    );
    assert_eq!(delta_value(&received[0].2), None);
    // The request after the wait carries collection k (the fake's counter
    // is the collection's number): its delta is k − 1, the change since the
    // first (the base), and collections 2 … k − 1 were superseded.
    let second = delta_value(&received[1].2).expect("a delta");
    let k = second + 1.0;
    let text = self_metrics_text(&feed);
    let superseded = dropped(&text, "otlp", "superseded");
    assert!(k >= 3.0 && superseded >= k - 2.0, "k = {k}\n{text}");
    // All deltas add up: the collections counted 1, 2, …; the first is
    // the base.
    let total: f64 = received.iter().filter_map(|r| delta_value(&r.2)).sum();
    let collections = feed.collections.load(Ordering::SeqCst) as f64;
    assert!(total <= collections - 1.0 && total >= second, "{total}");
}

/// Issue 48: after SIGTERM the sender retried every 20 ms until the flush
/// deadline (38 requests in 0.8 s to a receiver answering `429`). Now it
/// makes one last attempt when the wait in force ends before the deadline,
/// and none when it does not; what is left is counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_makes_one_last_attempt_that_respects_the_wait() {
    for (retry_after, most) in [("1", 2), ("30", 1)] {
        let answers = (0..1000)
            .map(|_| (429, vec![("retry-after", retry_after)], Vec::new()))
            .collect();
        let (url, received) = receiver("/api/v1/write", answers).await;
        let feed = Arc::new(FakeFeed::default());
        let settings = PushSettings {
            remote_write_url: Some(url.parse().unwrap()),
            flush_deadline: Duration::from_secs(3),
            ..settings()
        };
        let (stop, stopped) = watch::channel(false);
        let pusher = start(feed.clone(), settings, stopped).unwrap();
        for _ in 0..400 {
            if !received.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let before = received.lock().unwrap().len();
        stop.send(true).unwrap();
        pusher.await.unwrap();
        let after = received.lock().unwrap().len() - before;
        assert!(
            after <= most,
            "Retry-After {retry_after}: {after} requests after the signal"
        );
        // What was left is counted (the newest collection, and the one in
        // flight at the signal if any).
        let text = self_metrics_text(&feed);
        let left = dropped(&text, "remote_write", "shutdown");
        assert!(
            (1.0..=2.0).contains(&left),
            "Retry-After {retry_after}: {text}"
        );
    }
}

/// A feed whose collections after the first wait until it is opened (an
/// upstream that takes long to answer).
#[derive(Default)]
struct SlowFeed {
    collections: AtomicU64,
    open: (Mutex<bool>, std::sync::Condvar),
    metrics: PushMetrics,
}

impl SlowFeed {
    fn open(&self) {
        *self.open.0.lock().unwrap() = true;
        self.open.1.notify_all();
    }
}

impl Feed for SlowFeed {
    fn collect_now(&self) -> impl crate::sink::Collection {
        let n = self.collections.fetch_add(1, Ordering::SeqCst) + 1;
        if n > 1 {
            let open = self.open.0.lock().unwrap();
            let _open = self
                .open
                .1
                .wait_timeout_while(open, Duration::from_secs(60), |open| !*open)
                .unwrap();
        }
        Families(
            vec![MetricFamily {
                name: "c".into(),
                help: "C.".into(),
                metric_type: MetricType::Counter,
                samples: vec![sample("c_total", &[], n as f64)],
            }],
            true,
        )
    }

    fn push_metrics(&self) -> &PushMetrics {
        &self.metrics
    }
}

/// Issue 54: with an upstream taking 12 s to answer and
/// `--push.flush-deadline 5s`, the exporter exited 22 s after SIGTERM: it
/// finished the collection in progress, then collected once more after
/// the deadline. The collection is now raced against the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_overran_the_flush_deadline_behind_a_slow_collection() {
    let (url, received) = receiver("/v1/metrics", Vec::new()).await;
    let feed = Arc::new(SlowFeed::default());
    let settings = PushSettings {
        otlp_url: Some(url.parse().unwrap()),
        flush_deadline: Duration::from_millis(500),
        ..settings()
    };
    let (stop, stopped) = watch::channel(false);
    let pusher = start(feed.clone(), settings, stopped).unwrap();
    // The first collection is pushed; the second hangs.
    for _ in 0..400 {
        if feed.collections.load(Ordering::SeqCst) >= 2 && !received.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let signal = Instant::now();
    stop.send(true).unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(30), pusher).await;
    let took = signal.elapsed();
    feed.open();
    assert!(waited.is_ok(), "the pusher did not stop");
    // 0.5 s and a margin; before the fix, until the feed was opened.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(received.lock().unwrap().len(), 1);
}

/// Issue 54: a receiver refusing connections, a short interval: the push
/// queue's memory stays within `--push.queue-max-bytes` (the newest
/// collection aside), for both temporalities, and what is dropped for it
/// is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_memory_stays_within_its_bound_while_the_receiver_refuses_connections() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for temporality in [otlp::Temporality::Delta, otlp::Temporality::Cumulative] {
        let feed = Arc::new(FakeFeed::default());
        let max_bytes = 4 << 10;
        let settings = PushSettings {
            otlp_url: Some(
                format!("http://127.0.0.1:{port}/v1/metrics")
                    .parse()
                    .unwrap(),
            ),
            otlp_temporality: temporality,
            interval: Duration::from_millis(5),
            queue_capacity: 1_000_000,
            queue_max_bytes: max_bytes,
            flush_deadline: Duration::from_millis(10),
            ..settings()
        };
        let (stop, stopped) = watch::channel(false);
        let pusher = start(feed.clone(), settings, stopped).unwrap();
        let gauge = "multiproc_exporter_push_queue_bytes{protocol=\"otlp\"} ";
        let mut most = 0.0_f64;
        for _ in 0..2_000 {
            let text = self_metrics_text(&feed);
            let bytes: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(gauge)?.parse().ok())
                .unwrap_or(0.0);
            most = most.max(bytes);
            if text.contains("reason=\"memory_limit\"")
                && dropped(&text, "otlp", "memory_limit") >= 20.0
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.send(true).unwrap();
        pusher.await.unwrap();
        let text = self_metrics_text(&feed);
        assert!(
            dropped(&text, "otlp", "memory_limit") >= 20.0,
            "{temporality:?}: {text}"
        );
        // A collection of the fake is a few hundred bytes compressed.
        assert!(
            most <= (max_bytes + 2_048) as f64,
            "{temporality:?}: {most}"
        );
    }
}
