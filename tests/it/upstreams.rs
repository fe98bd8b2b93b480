//! Upstream sources (issue 17) with real components: an OpenMetrics-only
//! server built on the Rust `prometheus-client` crate (what vLLM's Rust
//! frontend runs: it answers OpenMetrics 1.0.0 whatever the `Accept`
//! header says), Python's `prometheus_client.start_http_server`, and the
//! exporter's own demo, merged with a `.db` directory and scraped by a real
//! Prometheus as the text format; and upstreams that hang, reset the
//! connection, answer 500, garbage or too much, or refuse connections,
//! which leave the scrape at 200 with everything else intact and the right
//! self-metrics, logged once per change of state; and `https://` upstreams
//! verified against their `ca_file`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use multiproc_exporter::expose::parse::{parse, ExpositionFormat};

use crate::support::monitoring::{eventually, free_port, Prometheus};
use crate::support::{
    exporter_bin, get, get_within, key, python, sample_value, tool, wait_for, write_db, Exporter,
};

/// What a test HTTP server does with each connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Behaviour {
    /// Answers 200 with the body of the `prometheus-client` registry, as
    /// OpenMetrics, whatever the request asked for.
    OpenMetricsOnly,
    /// Reads the request and never answers (the connection stays open).
    Hang,
    /// Closes the connection without reading the request: the kernel sends
    /// a TCP reset.
    Reset,
    /// Answers 500.
    Error500,
    /// Answers 200 with a body that is no exposition.
    Garbage,
}

/// A test HTTP server on 127.0.0.1 (a thread; stops with the test binary).
struct TestServer {
    url: String,
    requests: Arc<AtomicUsize>,
}

/// The registry of the OpenMetrics-only server: vLLM-like families.
fn rust_registry() -> Registry {
    let mut registry = Registry::default();
    let prompt_tokens = Family::<Vec<(String, String)>, Counter>::default();
    registry.register(
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        prompt_tokens.clone(),
    );
    prompt_tokens
        .get_or_create(&vec![("model_name".into(), "rust-frontend".into())])
        .inc_by(1234);
    let running: Gauge<f64, AtomicU64> = Gauge::default();
    registry.register(
        "vllm_rs:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        running.clone(),
    );
    running.set(0.1 + 0.2);
    let latency = Histogram::new([0.3, 0.5, 1.0]);
    registry.register(
        "vllm_rs:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        latency.clone(),
    );
    latency.observe(0.4);
    latency.observe(2.5);
    registry
}

impl TestServer {
    fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let count = requests.clone();
        let registry = Arc::new(Mutex::new(rust_registry()));
        // Hanging connections are kept here, never answered.
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                if behaviour == Behaviour::Reset {
                    // Unread data in the receive buffer at close: RST.
                    std::thread::sleep(Duration::from_millis(50));
                    drop(stream);
                    continue;
                }
                read_request(&mut stream);
                let (status, content_type, body) = match behaviour {
                    Behaviour::Hang => {
                        held.lock().unwrap().push(stream);
                        continue;
                    }
                    Behaviour::OpenMetricsOnly => {
                        let mut body = String::new();
                        encode(&mut body, &registry.lock().unwrap()).unwrap();
                        (
                            "200 OK",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            body,
                        )
                    }
                    Behaviour::Error500 => (
                        "500 Internal Server Error",
                        "text/plain",
                        "boom\n".to_owned(),
                    ),
                    Behaviour::Garbage | Behaviour::Reset => (
                        "200 OK",
                        "text/plain; version=0.0.4",
                        "<html><body>Not metrics {{{ 1 2 3</body></html>\n".to_owned(),
                    ),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { url, requests }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Reads a request's head (up to the blank line).
fn read_request(stream: &mut TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        if line == "\r\n" || line == "\n" {
            break;
        }
        line.clear();
    }
}

/// A metrics directory with one counter, `dir_requests_total 7.0`.
fn directory(work: &std::path::Path) -> std::path::PathBuf {
    let dir = work.join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_db(
        &dir.join("counter_1.db"),
        &[(
            key("dir_requests", "dir_requests_total", &[], "Requests."),
            7.0,
        )],
    );
    dir
}

fn write_config(work: &std::path::Path, upstreams: &[(&str, &str, &str)]) -> String {
    let mut config = String::from("upstreams:\n");
    for (name, url, timeout) in upstreams {
        config.push_str(&format!(
            "  - {{name: {name}, url: \"{url}\", timeout: {timeout}}}\n"
        ));
    }
    let path = work.join("config.yaml");
    std::fs::write(&path, config).unwrap();
    path.to_str().unwrap().to_owned()
}

const TEXT: &str = "text/plain;version=0.0.4";

#[test]
fn misbehaving_upstreams_leave_the_scrape_intact() {
    let work = tempfile::tempdir().unwrap();
    let dir = directory(work.path());
    let good = TestServer::start(Behaviour::OpenMetricsOnly);
    let hang = TestServer::start(Behaviour::Hang);
    let reset = TestServer::start(Behaviour::Reset);
    let error = TestServer::start(Behaviour::Error500);
    let garbage = TestServer::start(Behaviour::Garbage);
    let large = TestServer::start(Behaviour::OpenMetricsOnly);
    let refused = format!("http://127.0.0.1:{}/metrics", free_port());
    let config = write_config(
        work.path(),
        &[
            ("good", &good.url, "5s"),
            ("hang", &hang.url, "30s"),
            ("reset", &reset.url, "5s"),
            ("error", &error.url, "5s"),
            ("garbage", &garbage.url, "5s"),
            ("refused", &refused, "5s"),
            ("too-large", &large.url, "5s, max_body_bytes: 100"),
        ],
    );
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap(), "--config", &config]);
    let url = format!("{}/metrics", exporter.base);
    // Prometheus's scrape timeout caps the hanging upstream's 30 s.
    let headers = [
        ("Accept", TEXT),
        ("X-Prometheus-Scrape-Timeout-Seconds", "1.5"),
    ];
    for round in 0..2 {
        let start = Instant::now();
        let reply = get_within(&url, &headers, Duration::from_secs(10));
        let took = start.elapsed();
        assert_eq!(reply.status, 200);
        // The hanging upstream's deadline is 1.5 s minus a tenth, not its
        // 30 s timeout (with slack for a loaded machine).
        assert!(took < Duration::from_secs(5), "round {round}: {took:?}");
        assert!(
            took >= Duration::from_millis(1300),
            "round {round}: {took:?}"
        );
        assert_eq!(
            reply.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let body = reply.text();
        // The directory and the good upstream, exact, as text.
        assert_eq!(sample_value(&body, "dir_requests_total"), Some(7.0));
        assert!(body.contains("# TYPE vllm:prompt_tokens_total counter\n"));
        assert_eq!(
            sample_value(
                &body,
                "vllm:prompt_tokens_total{model_name=\"rust-frontend\"}"
            ),
            Some(1234.0)
        );
        assert_eq!(
            sample_value(&body, "vllm_rs:kv_cache_usage_perc"),
            Some(0.1 + 0.2)
        );
        assert!(body.contains("vllm_rs:kv_cache_usage_perc 0.30000000000000004\n"));
        assert_eq!(
            sample_value(
                &body,
                "vllm_rs:e2e_request_latency_seconds_bucket{le=\"0.5\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample_value(&body, "vllm_rs:e2e_request_latency_seconds_sum"),
            Some(2.9)
        );
        assert!(!body.contains("# EOF"), "text has no # EOF");
        // The self-metrics.
        let up = |name: &str| {
            sample_value(
                &body,
                &format!("multiproc_exporter_upstream_up{{upstream=\"{name}\"}}"),
            )
        };
        let last_error = |name: &str, reason: &str| {
            sample_value(
                &body,
                &format!(
                    "multiproc_exporter_upstream_last_error{{reason=\"{reason}\",upstream=\"{name}\"}}"
                ),
            )
        };
        assert_eq!(up("good"), Some(1.0));
        for (name, reason) in [
            ("hang", "timeout"),
            ("reset", "read"),
            ("error", "http_status"),
            ("garbage", "parse"),
            ("refused", "connect"),
            ("too-large", "body"),
        ] {
            assert_eq!(up(name), Some(0.0), "{name}");
            assert_eq!(last_error(name, reason), Some(1.0), "{name}\n{body}");
            assert_eq!(
                sample_value(
                    &body,
                    &format!(
                        "multiproc_exporter_upstream_failures_total{{reason=\"{reason}\",upstream=\"{name}\"}}"
                    )
                ),
                Some(f64::from(round + 1)),
                "{name}"
            );
        }
        assert_eq!(last_error("good", "timeout"), Some(0.0));
        assert_eq!(
            sample_value(
                &body,
                "multiproc_exporter_upstream_samples{upstream=\"good\"}"
            ),
            Some(8.0)
        );
    }
    // One log line per state change: each upstream was logged once.
    exporter.sync_logs();
    assert_eq!(
        exporter
            .logs_with("Upstream is up: its families are merged.")
            .len(),
        1
    );
    let down = exporter.logs_with("Upstream left out of the scrape until it answers again.");
    let mut reasons: Vec<(String, String)> = down
        .iter()
        .map(|l| {
            (
                l["upstream"].as_str().unwrap().to_owned(),
                l["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("error", "http_status"),
            ("garbage", "parse"),
            ("hang", "timeout"),
            ("refused", "connect"),
            ("reset", "read"),
            ("too-large", "body")
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );

    // Concurrent scrapes share one fetch of each upstream.
    let before = good.requests();
    let scrapes: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || get_within(&url, &headers, Duration::from_secs(10)).status)
        })
        .collect();
    for scrape in scrapes {
        assert_eq!(scrape.join().unwrap(), 200);
    }
    let fetches = good.requests() - before;
    assert!(
        (1..=2).contains(&fetches),
        "4 concurrent scrapes fetched the upstream {fetches} times"
    );
}

/// A series as `name{a="x",b="y"}` with its labels sorted.
fn series_key<'a>(name: &str, labels: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut labels: Vec<(&str, &str)> = labels.collect();
    labels.sort();
    let labels: Vec<String> = labels.iter().map(|(n, v)| format!("{n}={v:?}")).collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// A process serving metrics (killed on drop): Python's
/// `prometheus_client.start_http_server`, or the demo.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const PYTHON_SERVER: &str = r#"
import sys, time
from prometheus_client import Counter, Gauge, Histogram, start_http_server
hits = Counter("lmcache:num_hit_tokens", "Number of hit tokens.", ["model_name"])
hits.labels("m").inc(1e21)
usage = Gauge("lmcache:local_cache_usage", "Local cache usage in bytes.", ["model_name"])
usage.labels("m").set(-0.000123)
ttft = Histogram("lmcache:retrieve_speed", "Retrieve speed.", buckets=[1, 10])
ttft.observe(3)
start_http_server(int(sys.argv[1]), addr="127.0.0.1")
print("ready", flush=True)
sys.stdin.read()
"#;

#[test]
fn prometheus_gets_every_upstream_as_text_with_exact_values() {
    let Some(prometheus_bin) = tool("prometheus") else {
        return;
    };
    let Some(python) = python() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let dir = directory(work.path());

    // Python's prometheus_client, on its own port.
    let python_port = free_port();
    let mut child = Command::new(&python)
        .arg("-c")
        .arg(PYTHON_SERVER)
        .arg(python_port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let _python = Served(child);

    // The exporter's own demo: a first run writes values, a second one
    // serves them without changing them (its next tick is minutes away).
    let demo_port = free_port();
    let demo_dir = work.path().join("demo");
    let demo = |args: &[&str]| {
        Command::new(exporter_bin())
            .arg("demo")
            .args(args)
            .arg("--demo.dir")
            .arg(&demo_dir)
            .args(["--web.listen-address", &format!("127.0.0.1:{demo_port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the demo")
    };
    let demo_url = format!("http://127.0.0.1:{demo_port}/metrics");
    let demo_body = || {
        let reply =
            crate::support::try_get_within(&demo_url, &[("Accept", TEXT)], Duration::from_secs(5))
                .ok()?;
        String::from_utf8(reply.body).ok()
    };
    let first = Served(demo(&["--demo.tick-ms", "100"]));
    wait_for("the demo to count prompt tokens", || {
        let body = demo_body()?;
        let families = parse(body.as_bytes(), ExpositionFormat::Text).ok()?;
        let tokens = families.iter().find(|f| &*f.name == "vllm:prompt_tokens")?;
        tokens.samples.iter().any(|s| s.value > 0.0).then_some(())
    });
    drop(first);
    let _demo = Served(demo(&["--demo.continue", "--demo.tick-ms", "600000"]));
    // Once it has settled (its writers' files looked at), its vLLM
    // families stay as they are: two reads half a second apart agree.
    let vllm_families = || {
        let families = parse(demo_body()?.as_bytes(), ExpositionFormat::Text).ok()?;
        let vllm: Vec<_> = families
            .into_iter()
            .filter(|f| f.name.starts_with("vllm:"))
            .collect();
        (!vllm.is_empty()).then_some(vllm)
    };
    let demo_families = wait_for("the demo's values to settle", || {
        let before = format!("{:?}", vllm_families()?);
        std::thread::sleep(Duration::from_millis(500));
        let after = vllm_families()?;
        (format!("{after:?}") == before).then_some(after)
    });

    let rust = TestServer::start(Behaviour::OpenMetricsOnly);
    let config = write_config(
        work.path(),
        &[
            ("rust-frontend", &rust.url, "5s"),
            (
                "lmcache",
                &format!("http://127.0.0.1:{python_port}/metrics"),
                "5s",
            ),
            ("demo", &demo_url, "5s"),
        ],
    );
    // Debian's Prometheus 2.42 predates `scrape_protocols` (2.49) and asks
    // for OpenMetrics first, so the text-only scrape is the exporter's side:
    // --web.disable-openmetrics answers every scrape as text.
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--config",
        &config,
        "--web.disable-openmetrics",
    ]);
    let reply = get(
        &format!("{}/metrics", exporter.base),
        &[("Accept", "application/openmetrics-text;version=1.0.0")],
    );
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );

    let prometheus = Prometheus::start(
        &prometheus_bin,
        work.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: pod\n    static_configs:\n      - targets: ['{}']\n",
            exporter.base.trim_start_matches("http://")
        ),
    );
    let mut expected: Vec<(String, f64)> = [
        ("dir_requests_total", &[][..], 7.0),
        (
            "vllm:prompt_tokens_total",
            &[("model_name", "rust-frontend")][..],
            1234.0,
        ),
        ("vllm_rs:kv_cache_usage_perc", &[], 0.1 + 0.2),
        (
            "vllm_rs:e2e_request_latency_seconds_bucket",
            &[("le", "+Inf")],
            2.0,
        ),
        ("lmcache:num_hit_tokens_total", &[("model_name", "m")], 1e21),
        (
            "lmcache:local_cache_usage",
            &[("model_name", "m")],
            -0.000123,
        ),
        ("lmcache:retrieve_speed_bucket", &[("le", "10.0")], 1.0),
        ("lmcache:retrieve_speed_sum", &[], 3.0),
    ]
    .iter()
    .map(|(name, labels, value)| (series_key(name, labels.iter().copied()), *value))
    .collect();
    // Every vllm: series of the demo, as the demo serves it.
    let demo_vllm: Vec<(String, f64)> = demo_families
        .iter()
        .flat_map(|f| &f.samples)
        .map(|s| {
            let labels = s.labels.iter().map(|(n, v)| (&**n, &**v));
            (series_key(&s.name, labels), s.value)
        })
        .collect();
    assert!(demo_vllm.len() > 100, "{}", demo_vllm.len());
    assert!(demo_vllm.iter().any(|(_, v)| *v > 0.0));
    expected.extend(demo_vllm);
    eventually(
        "every upstream's series in Prometheus",
        Duration::from_secs(60),
        || {
            let stored: std::collections::HashMap<String, f64> = prometheus
                .query(r#"{__name__=~"(vllm|vllm_rs|lmcache|dir)[:_].*"}"#)
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|(labels, value)| {
                    let map = labels.as_object().unwrap();
                    let name = map["__name__"].as_str().unwrap();
                    let rest = map
                        .iter()
                        .filter(|(k, _)| !["__name__", "job", "instance"].contains(&k.as_str()))
                        .map(|(k, v)| (k.as_str(), v.as_str().unwrap()));
                    (series_key(name, rest), value)
                })
                .collect();
            for (series, want) in &expected {
                match stored.get(series) {
                    Some(got) if got.to_bits() == want.to_bits() => {}
                    other => return Err(format!("{series}: {other:?}, want {want}")),
                }
            }
            Ok(())
        },
    );
    // Every upstream up, and the demo's self-metrics left out (this
    // exporter's own are served).
    for name in ["rust-frontend", "lmcache", "demo"] {
        assert_eq!(
            prometheus.query_one(&format!(
                "multiproc_exporter_upstream_up{{upstream=\"{name}\"}}"
            )),
            Some(1.0),
            "{name}"
        );
    }
    assert_eq!(
        prometheus.query_ok("multiproc_exporter_build_info").len(),
        1
    );
    assert!(prometheus
        .query_one("multiproc_exporter_upstream_conflicts{upstream=\"demo\",reason=\"name_clash\"}")
        .is_some_and(|n| n > 0.0));
}

#[test]
fn https_upstreams_are_verified_against_their_ca_file() {
    let Some(_) = tool("openssl") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let pki = crate::support::web::Pki::new(&work.path().join("pki"));
    // The upstream: an exporter serving a directory over TLS.
    let dir = directory(work.path());
    let web = pki.path("web.yml");
    std::fs::write(
        &web,
        "tls_server_config: {cert_file: server.pem, key_file: server.key}\n",
    )
    .unwrap();
    let upstream = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--web.config.file",
        web.to_str().unwrap(),
    ]);
    let url = format!("{}/metrics", upstream.base.replace("http://", "https://"));
    let config = work.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "upstreams:\n  - {{name: trusted, url: \"{url}\", ca_file: \"{}\"}}\n  - {{name: other-ca, url: \"{url}\", ca_file: \"{}\"}}\n  - {{name: public-roots, url: \"{url}\"}}\n",
            pki.arg("ca.pem"),
            pki.arg("other-ca.pem")
        ),
    )
    .unwrap();
    let empty = work.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        empty.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let body = get(&format!("{}/metrics", exporter.base), &[("Accept", TEXT)]).text();
    assert_eq!(
        sample_value(&body, "dir_requests_total"),
        Some(7.0),
        "{body}"
    );
    let up = |name: &str| {
        sample_value(
            &body,
            &format!("multiproc_exporter_upstream_up{{upstream=\"{name}\"}}"),
        )
    };
    assert_eq!(up("trusted"), Some(1.0));
    // The same series from a second upstream would be a duplicate, but
    // these two never get that far: the certificate is not trusted.
    for name in ["other-ca", "public-roots"] {
        assert_eq!(up(name), Some(0.0), "{name}");
        assert_eq!(
            sample_value(
                &body,
                &format!(
                    "multiproc_exporter_upstream_last_error{{reason=\"connect\",upstream=\"{name}\"}}"
                )
            ),
            Some(1.0),
            "{name}"
        );
    }
    exporter.sync_logs();
    let down = exporter.logs_with("Upstream left out of the scrape until it answers again.");
    assert!(
        down.iter()
            .all(|l| l["error"].as_str().unwrap().contains("certificate")),
        "{down:#?}"
    );
}
