//! No client of a view or of `?name[]=` can hurt another (issue 40): the
//! memory budget comes back, an encoded name cannot change another
//! request's answer, rotating name sets neither starve `/metrics` nor read
//! the whole directory at every poll, and `/-/healthy` answers beside a
//! stalled collection. Through the router, with files written as
//! prometheus_client writes them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use super::*;
use crate::format::file_name::GaugeMode;
use crate::format::writer::ProcessWriter;
use crate::pipeline::views::MAX_KEPT_QUERIES;

fn state(dir: &Path, budget: Option<Arc<MemoryBudget>>, config_path: Option<PathBuf>) -> AppState {
    AppState::new(Settings {
        dirs: vec![dir.to_path_buf()],
        subdirectories_label: None,
        link_policy: LinkPolicy::default(),
        memory_budget: budget,
        writer_policy: WriterPolicy::default(),
        dead_files_warning: 1000,
        telemetry_path: "/metrics".into(),
        exporter_metrics: false,
        openmetrics: true,
        negotiation: Negotiation::PrometheusClient,
        directory_warn_interval: Duration::from_secs(60),
        config_path,
        config: Config::default(),
        discovery: None,
    })
}

async fn get(app: Router, uri: &str) -> (StatusCode, String) {
    let response = app
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// `writers` files of `families` counters each (`family_<i>_total`).
fn write_counters(dir: &Path, writers: u32, families: usize) {
    for pid in 1..=writers {
        let mut writer = ProcessWriter::new(dir, pid);
        for i in 0..families {
            let counter = writer
                .counter(
                    &format!("family_{i}"),
                    "Help.",
                    &[("worker", &pid.to_string())],
                )
                .unwrap();
            counter.inc(&mut writer, f64::from(pid)).unwrap();
        }
    }
}

#[tokio::test]
async fn a_stream_of_distinct_name_queries_and_reloads_leaks_no_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    write_counters(dir.path(), 16, 120);
    let config_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config_file.path(), "{}\n").unwrap();
    let budget = Arc::new(MemoryBudget::new(1 << 30));
    let state = state(
        dir.path(),
        Some(budget.clone()),
        Some(config_file.path().to_path_buf()),
    );
    let app = app(state.clone());
    // The main reader's charge settles at its second collection (its
    // tables sized for an unchanged directory).
    let (status, whole) = get(app.clone(), "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    get(app.clone(), "/metrics").await;
    let before = budget.held();
    assert!(before > 0);
    for i in 0..100 {
        let (status, body) = get(app.clone(), &format!("/metrics?name[]=family_{i}_total")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains(&format!("family_{i}_total{{worker=\"16\"}} 16.0")),
            "{body}"
        );
    }
    assert!(
        budget.held() > before,
        "the kept sources hold their families"
    );
    for _ in 0..2 {
        let shared = state.0.clone();
        tokio::task::spawn_blocking(move || shared.reload_config(ReloadTrigger::Signal))
            .await
            .unwrap();
    }
    let (_, again) = get(app, "/metrics").await;
    assert_eq!(again, whole);
    assert_eq!(budget.held(), before);
}

#[tokio::test]
async fn an_encoded_name_cannot_change_another_requests_answer() {
    let dir = tempfile::tempdir().unwrap();
    write_counters(dir.path(), 2, 3);
    let app = app(state(dir.path(), None, None));
    // One name, `family_0_total&name[]=family_1_total`: no sample has it.
    let (status, encoded) = get(
        app.clone(),
        "/metrics?name[]=family_0_total%26name%5B%5D%3Dfamily_1_total",
    )
    .await;
    assert_eq!((status, encoded.as_str()), (StatusCode::OK, ""));
    // Two names (what EPP v1.0.2 sends), the same joined string.
    let (_, two) = get(
        app.clone(),
        "/metrics?name[]=family_0_total&name[]=family_1_total",
    )
    .await;
    for family in ["family_0_total", "family_1_total"] {
        for worker in ["1", "2"] {
            assert!(
                two.contains(&format!("{family}{{worker=\"{worker}\"}}")),
                "{two}"
            );
        }
    }
    assert!(!two.contains("family_2"), "{two}");
    // The same names in another order, or twice: the same answer.
    let (_, reordered) = get(
        app,
        "/metrics?name[]=family_1_total&name[]=family_0_total&name[]=family_1_total",
    )
    .await;
    assert_eq!(reordered, two);
}

/// Bytes this process has read with `read`-like system calls (the reader's
/// first read of a file is one; values are loaded through maps after).
fn bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn directory_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_clients_rotating_eight_name_sets_never_starve_metrics_nor_reread_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    write_counters(dir.path(), 8, 2_000);
    let state = state(dir.path(), None, None);
    let app = app(state.clone());
    let (_, whole) = get(app.clone(), "/metrics").await;
    let read_before = bytes_read();
    let sets: Vec<String> = (0..8)
        .map(|s| {
            format!(
                "/metrics?name[]=family_{s}_total&name[]=family_{}_total",
                s + 8
            )
        })
        .collect();
    for round in 0..10 {
        let mut polls = tokio::task::JoinSet::new();
        for client in 0..8 {
            let (app, uri) = (app.clone(), sets[(client + round) % 8].clone());
            polls.spawn(async move { (uri.clone(), get(app, &uri).await) });
        }
        let (status, metrics) = get(app.clone(), "/metrics").await;
        assert_eq!(
            (status, &metrics),
            (StatusCode::OK, &whole),
            "round {round}"
        );
        while let Some(done) = polls.join_next().await {
            let (uri, (status, body)) = done.unwrap();
            assert_eq!(status, StatusCode::OK);
            let first = uri.split('=').nth(1).unwrap().split('&').next().unwrap();
            assert_eq!(
                body.lines().filter(|l| l.starts_with(first)).count(),
                8,
                "{uri}: {body}"
            );
        }
    }
    // Each view source's first collection reads every file: no more than
    // the sets kept, not one per poll (80 polls).
    let made = state.0.views.sources_made();
    assert!(made as usize <= MAX_KEPT_QUERIES, "{made} sources made");
    // Counted by the kernel too (with room for whatever else this process
    // reads meanwhile): far fewer bytes than 80 reads of the directory.
    let read = bytes_read() - read_before;
    let directory = directory_bytes(dir.path());
    assert!(
        read < 16 * directory,
        "{read} bytes read for 80 polls of a {directory}-byte directory"
    );
}

/// One HTTP/1.1 GET over a fresh connection; the status line and how long
/// the answer took.
fn timed_get(address: std::net::SocketAddr, path: &str) -> (String, Duration) {
    let start = Instant::now();
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    let status = text.lines().next().unwrap_or_default().to_owned();
    (status, start.elapsed())
}

/// `/-/healthy` never waits for a collection, even with one async worker.
/// Judged by a ratio, not a time (a loaded 2-core machine once took over
/// 100 ms to answer at all): an answer that waited for the collection would
/// take about as long as the collection (the longest poll); each takes a
/// fraction of it.
#[test]
fn healthy_does_not_wait_for_a_stalled_view_collection_on_one_worker() {
    let dir = tempfile::tempdir().unwrap();
    // One large file: the view's first collection takes a while (seconds
    // in a debug build), which is the stall.
    let mut writer = ProcessWriter::new(dir.path(), 1);
    for i in 0..60_000 {
        let gauge = writer
            .gauge(
                "vllm:num_requests_waiting",
                "Waiting.",
                &[("model_name", &format!("model-{i}"))],
                GaugeMode::MostRecent,
            )
            .unwrap();
        gauge.set(&mut writer, 1.0).unwrap();
    }
    drop(writer);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let address = listener.local_addr().unwrap();
    let app = app(state(dir.path(), None, None));
    runtime.spawn(async move { axum::serve(listener, app).await });
    let (status, _) = timed_get(address, "/-/healthy");
    assert!(status.contains("200"), "{status}");
    // Polls of the view while its first collection runs (the first runs
    // it, the others find it in flight), and scrapes of `/metrics` while
    // its own runs.
    let paths = [
        "/metrics/endpoint-picker",
        "/metrics",
        "/metrics/endpoint-picker",
        "/metrics",
        "/metrics/endpoint-picker",
    ];
    let polls: Vec<_> = paths
        .into_iter()
        .enumerate()
        .map(|(i, path)| {
            std::thread::sleep(Duration::from_millis(if i == 0 { 0 } else { 50 }));
            std::thread::spawn(move || timed_get(address, path))
        })
        .collect();
    let mut worst = Duration::ZERO;
    let mut during = 0;
    while polls.iter().any(|p| !p.is_finished()) {
        let (status, took) = timed_get(address, "/-/healthy");
        assert!(status.contains("200"), "{status}");
        worst = worst.max(took);
        during += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut collection = Duration::ZERO;
    for poll in polls {
        let (status, took) = poll.join().unwrap();
        assert!(status.contains("200"), "{status}");
        collection = collection.max(took);
    }
    assert!(
        worst * 3 < collection,
        "/-/healthy took {worst:?} at worst, beside polls of up to {collection:?} \
         ({during} answers during the collection)"
    );
}
