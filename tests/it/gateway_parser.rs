//! The Gateway API Inference Extension's endpoint picker (EPP) reads what the
//! exporter serves: a Go program written for this test
//! (`tests/go/expfmt-check`), built offline against Debian's
//! `golang-github-prometheus-common-dev`, fetches `/metrics` with Go's HTTP
//! client and parses it with `expfmt.TextParser{}.TextToMetricFamilies`, as
//! EPP does, under the `Accept` header of each scraper that polls a vLLM pod
//! (EPP sends none; Prometheus 2.x and 3.x send their own). It checks the
//! Model Server Protocol's four metrics (`vllm:num_requests_waiting`,
//! `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`,
//! `vllm:lora_requests_info`): each a gauge with vLLM's label names, on the
//! `demo` command and on a directory written by two real prometheus_client
//! processes with vLLM's multiprocess modes. An OpenMetrics answer (what
//! Prometheus 3.x gets) is not for a text parser, and expfmt 0.39 has no
//! OpenMetrics parser: its Content-Type and its `# TYPE` lines are checked
//! instead. The view `/metrics/endpoint-picker` (issue 34) is fetched with
//! the URL built both ways EPP's releases build it (a string, and
//! `url.URL{Path: …}`), and the `?name[]=` path is shown to fail when built
//! the second way. docs/gateway-api-inference-extension.md is the guide.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use crate::support::{get, python, repo_root, tool, wait_for, Exporter, Launch};

/// The Model Server Protocol's metrics as vLLM names them, with the label
/// names vLLM gives them (sorted).
const ENGINE_LABELS: &[&str] = &["engine", "model_name"];
const LORA_LABELS: &[&str] = &["max_lora", "running_lora_adapters", "waiting_lora_adapters"];
const MSP_METRICS: &[(&str, &[&str])] = &[
    ("vllm:num_requests_waiting", ENGINE_LABELS),
    ("vllm:num_requests_running", ENGINE_LABELS),
    ("vllm:kv_cache_usage_perc", ENGINE_LABELS),
    ("vllm:lora_requests_info", LORA_LABELS),
];

/// Prometheus 2.x's default `Accept` (the same string as in
/// src/expose/negotiate.rs's tests).
const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
/// Prometheus 3.x's default `Accept` (UTF-8 names: `escaping=allow-utf-8`).
const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
/// Prometheus 3.x with `metric_name_validation_scheme: legacy`: its
/// `acceptHeader` puts the `underscores` escaping on the 1.0.0 formats.
const PROMETHEUS_3_LEGACY: &str = "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=underscores;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

/// One scraper: its `Accept` header (`None`: no header, as EPP sends) and
/// the Content-Type the exporter answers it with (default negotiation).
struct Scraper {
    who: &'static str,
    accept: Option<&'static str>,
    content_type: &'static str,
}

const SCRAPERS: &[Scraper] = &[
    Scraper {
        who: "EPP (Go's http.Client, no Accept)",
        accept: None,
        content_type: "text/plain; version=1.0.0; charset=utf-8",
    },
    Scraper {
        who: "Prometheus 2.x",
        accept: Some(PROMETHEUS_2),
        content_type: "text/plain; version=0.0.4; charset=utf-8",
    },
    Scraper {
        who: "Prometheus 3.x",
        accept: Some(PROMETHEUS_3),
        content_type:
            "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8",
    },
    Scraper {
        who: "Prometheus 3.x, legacy name validation",
        accept: Some(PROMETHEUS_3_LEGACY),
        content_type: "text/plain; version=1.0.0; charset=utf-8; escaping=underscores",
    },
];

/// The Go program, built once per test run into `target/go-expfmt-check/`
/// (offline: `GO111MODULE=off`, Debian's `/usr/share/gocode` on `GOPATH`).
/// `None` (with a notice) when `go` is missing outside CI; under `CI=true`
/// a missing `go` fails ([`tool`]), and so does a failed build anywhere.
pub(crate) fn expfmt_check() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let go = tool("go")?;
            let work = repo_root().join("target").join("go-expfmt-check");
            let binary = work.join("expfmt-check");
            let output = Command::new(&go)
                .current_dir(repo_root())
                .args(["build", "-o"])
                .arg(&binary)
                .arg("./tests/go/expfmt-check")
                .env("GO111MODULE", "off")
                .env(
                    "GOPATH",
                    format!("{}:/usr/share/gocode", work.join("gopath").display()),
                )
                .env("GOCACHE", work.join("cache"))
                .env("GOPROXY", "off")
                .env("GOFLAGS", "")
                .env("CGO_ENABLED", "0")
                .output()
                .expect("run go build");
            assert!(
                output.status.success(),
                "building tests/go/expfmt-check failed (it needs Debian's golang-go and \
                 golang-github-prometheus-common-dev, which scripts/test installs):\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            Some(binary)
        })
        .clone()
        .or_else(|| {
            eprintln!(
                "skipping: the Go parser test needs `go` (Debian's golang-go; run scripts/test)"
            );
            None
        })
}

/// Runs the Go program against `url` (with `accept`, or no Accept header)
/// and returns its JSON report; panics with its stderr when it fails.
fn parse_with_go(checker: &Path, url: &str, accept: Option<&str>, metrics: &[&str]) -> Value {
    let mut command = Command::new(checker);
    command.args(["-url", url, "-metrics", &metrics.join(",")]);
    if let Some(accept) = accept {
        command.arg(format!("-accept={accept}"));
    }
    let output = command.output().expect("run expfmt-check");
    assert!(
        output.status.success(),
        "expfmt-check {url} (Accept {accept:?}) failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("expfmt-check prints JSON")
}

/// Checks what every scraper of [`SCRAPERS`] gets from `base`: the
/// Content-Type; for a text answer, each of `expected` parsed by expfmt's
/// TextParser as a gauge with exactly those label names; for an OpenMetrics
/// answer, a `# TYPE NAME gauge` line for each and the closing `# EOF`.
/// Returns the text answers' reports, by scraper.
fn check_every_scraper(
    checker: &Path,
    base: &str,
    expected: &[(&str, &[&str])],
) -> Vec<(&'static str, Value)> {
    let url = format!("{base}/metrics");
    let names: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
    let mut reports = Vec::new();
    for scraper in SCRAPERS {
        let report = parse_with_go(checker, &url, scraper.accept, &names);
        let who = scraper.who;
        assert_eq!(report["content_type"], scraper.content_type, "{who}");
        // Go's transport asks for gzip (EPP's client too) and the exporter
        // compresses; the transport decompresses before the parser reads.
        assert_eq!(
            report["content_encoding_received"], "gzip (decompressed by Go's transport)",
            "{who}"
        );
        if scraper
            .content_type
            .starts_with("application/openmetrics-text")
        {
            assert_eq!(report["parsed"], false, "{who}: {report:#}");
            let accept: Vec<(&str, &str)> =
                scraper.accept.map(|a| ("Accept", a)).into_iter().collect();
            let reply = get(&url, &accept);
            assert_eq!(reply.header("content-type"), Some(scraper.content_type));
            let body = reply.text();
            for name in &names {
                assert!(
                    body.lines().any(|l| l == format!("# TYPE {name} gauge")),
                    "{who}: no `# TYPE {name} gauge` in the OpenMetrics answer:\n{body}"
                );
            }
            assert!(body.ends_with("# EOF\n"), "{who}: {body}");
            continue;
        }
        assert_eq!(report["parsed"], true, "{who}: {report:#}");
        assert_eq!(
            report["missing"],
            serde_json::json!([]),
            "{who}: {report:#}"
        );
        for (name, labels) in expected {
            let family = &report["metrics"][*name];
            assert_eq!(family["type"], "GAUGE", "{who}: {name}: {report:#}");
            assert_eq!(
                family["label_names"],
                serde_json::json!(labels),
                "{who}: {name}: {report:#}"
            );
            assert!(
                family["samples"].as_u64() >= Some(1),
                "{who}: {name}: {report:#}"
            );
        }
        reports.push((who, report));
    }
    reports
}

/// `multiproc-exporter demo` on an ephemeral port (killed on drop).
struct DemoServer {
    child: Child,
    base: String,
}

impl DemoServer {
    fn start(dir: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_multiproc-exporter"))
            .args(["demo", "--demo.tick-ms", "100", "--demo.dir"])
            .arg(dir)
            .args([
                "--web.listen-address",
                "127.0.0.1:0",
                "--log.format",
                "json",
            ])
            .env_remove("MULTIPROC_EXPORTER_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the demo");
        let stderr = child.stderr.take().expect("stderr");
        let address: Arc<Mutex<Option<String>>> = Arc::default();
        let found = address.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let Ok(log) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if log["message"] == "Listening." {
                    *found.lock().unwrap() = log["address"].as_str().map(str::to_owned);
                }
            }
        });
        let address = wait_for("the demo to listen", || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the demo exited with {status} before listening");
            }
            address.lock().unwrap().clone()
        });
        DemoServer {
            child,
            base: format!("http://{address}"),
        }
    }
}

impl Drop for DemoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn go_expfmt_reads_the_demo_under_every_scrapers_accept_header() {
    let Some(checker) = expfmt_check() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = DemoServer::start(&dir.path().join("metrics"));
    // vLLM writes its LoRA gauge once it served traffic: the demo's first step.
    wait_for("the demo to write vllm:lora_requests_info", || {
        let body = get(&format!("{}/metrics", demo.base), &[]).text();
        body.contains("\nvllm:lora_requests_info{").then_some(())
    });
    let reports = check_every_scraper(&checker, &demo.base, MSP_METRICS);
    assert_eq!(reports.len(), 3, "three of the four scrapers get text");
    for (who, report) in &reports {
        // The demo's two data-parallel engines: one series each.
        for name in [
            "vllm:num_requests_waiting",
            "vllm:num_requests_running",
            "vllm:kv_cache_usage_perc",
        ] {
            assert_eq!(report["metrics"][name]["samples"], 2, "{who}: {name}");
        }
        assert!(
            report["families_parsed"].as_u64() > Some(100),
            "{who}: the whole body parses: {report:#}"
        );
    }
}

/// Two vLLM API servers' worth of the Model Server Protocol's gauges, written
/// with the real prometheus_client and the multiprocess modes vLLM 0.33.0
/// gives them (`vllm/v1/metrics/loggers.py`: `mostrecent` for the scheduler
/// gauges, `sum` for `vllm:lora_requests_info`, whose value is
/// `set_to_current_time()`). `first` runs before `second`, so `second`'s
/// `set()` calls are the newest. Prints `ready`, then waits for stdin to
/// close (a live writer while the exporter serves its files).
const VLLM_WRITER: &str = r#"
import sys
from prometheus_client import Gauge

role = sys.argv[1]
labels = ["model_name", "engine"]
waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                labels, multiprocess_mode="mostrecent")
running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                labels, multiprocess_mode="mostrecent")
kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
           labels, multiprocess_mode="mostrecent")
lora = Gauge("vllm:lora_requests_info", "Running stats on lora requests.",
             ["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
             multiprocess_mode="sum")
cache = Gauge("vllm:cache_config_info", "Information of the LLMCache",
              ["block_size", "num_gpu_blocks"], multiprocess_mode="mostrecent")
cache.labels(block_size="16", num_gpu_blocks="2048").set(1)
values = {"first": (2, 5, 0.25), "second": (3, 7, 0.5)}[role]
for gauge, value in zip((waiting, running, kv), values):
    gauge.labels("m", "0").set(value)
# Both processes write this label set: its merged value is the sum of two timestamps.
lora.labels(max_lora="4", waiting_lora_adapters="", running_lora_adapters="sql-lora").set_to_current_time()
if role == "second":
    lora.labels(max_lora="4", waiting_lora_adapters="chat-lora",
                running_lora_adapters="sql-lora").set_to_current_time()
print("ready", flush=True)
sys.stdin.read()
"#;

/// A running prometheus_client process (stopped on drop).
struct Writer {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Writer {
    fn start(python: &Path, dir: &Path, role: &str) -> Self {
        let mut child = Command::new(python)
            .args(["-c", VLLM_WRITER, role])
            .env("PROMETHEUS_MULTIPROC_DIR", dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read python's stdout");
        assert_eq!(line.trim(), "ready", "the {role} writer did not start");
        let stdin = child.stdin.take();
        Writer { child, stdin }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.stdin.take()); // EOF: the script exits
        let _ = self.child.wait();
    }
}

#[test]
fn go_expfmt_reads_real_prometheus_client_files_under_every_scrapers_accept_header() {
    let Some(checker) = expfmt_check() else {
        return;
    };
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let metrics = work.path().join("metrics");
    std::fs::create_dir(&metrics).unwrap();
    let _first = Writer::start(&python, &metrics, "first");
    let _second = Writer::start(&python, &metrics, "second");
    let dir = metrics.to_str().unwrap();
    // The sidecar's negotiation (the default), not prometheus_client's.
    let launch = Launch {
        exact_negotiation: false,
        ..Launch::default()
    };

    let exporter = Exporter::launch(&["--dir", dir], &launch);
    for (who, report) in check_every_scraper(&checker, &exporter.base, MSP_METRICS) {
        let first_value = |name: &str| report["metrics"][name]["first_value"].as_f64();
        // mostrecent: one series per label set, the newest set() across the
        // writers (the second process's): what EPP reads.
        assert_eq!(first_value("vllm:num_requests_waiting"), Some(3.0), "{who}");
        assert_eq!(first_value("vllm:num_requests_running"), Some(7.0), "{who}");
        assert_eq!(first_value("vllm:kv_cache_usage_perc"), Some(0.5), "{who}");
        let lora = &report["metrics"]["vllm:lora_requests_info"];
        assert_eq!(
            lora["samples"], 2,
            "{who}: one series per label set, no pid"
        );
        // sum: the label set both processes wrote sums two timestamps, so
        // EPP's "largest value" rule prefers it to the newest label set, as
        // it would reading vLLM's own /metrics (prometheus_client merges
        // alike). docs/gateway-api-inference-extension.md explains.
        assert_eq!(
            lora["latest_lora_labels"],
            serde_json::json!({"max_lora": "4", "running_lora_adapters": "sql-lora", "waiting_lora_adapters": ""}),
            "{who}: {report:#}"
        );
    }

    // EPP appends --model-server-metrics-path to host:port as a string: a
    // `name[]` query restricts the answer to the four families it reads.
    let names: Vec<&str> = MSP_METRICS.iter().map(|(name, _)| *name).collect();
    let query: Vec<String> = names.iter().map(|n| format!("name[]={n}")).collect();
    let restricted = format!("{}/metrics?{}", exporter.base, query.join("&"));
    let report = parse_with_go(&checker, &restricted, None, &names);
    assert_eq!(report["families_parsed"], 4, "{report:#}");
    assert_eq!(report["missing"], serde_json::json!([]), "{report:#}");
    for (name, labels) in MSP_METRICS {
        assert_eq!(report["metrics"][*name]["type"], "GAUGE", "{report:#}");
        assert_eq!(
            report["metrics"][*name]["label_names"],
            serde_json::json!(labels),
            "{report:#}"
        );
    }

    // EPP v1.0.x reads KV-cache usage as vllm:gpu_cache_usage_perc by
    // default: `vllm_aliases` serves it, and Dynamo's filter keeps vllm:.
    let config = work.path().join("aliases.yaml");
    std::fs::write(
        &config,
        "vllm_aliases: true\nfilter: {include_prefixes: [\"vllm:\", \"lmcache:\"]}\n",
    )
    .unwrap();
    let aliased = Exporter::launch(
        &["--dir", dir, "--config", config.to_str().unwrap()],
        &launch,
    );
    let mut with_alias = MSP_METRICS.to_vec();
    with_alias.push(("vllm:gpu_cache_usage_perc", ENGINE_LABELS));
    for (who, report) in check_every_scraper(&checker, &aliased.base, &with_alias) {
        assert_eq!(
            report["metrics"]["vllm:gpu_cache_usage_perc"]["first_value"].as_f64(),
            Some(0.5),
            "{who}"
        );
    }

    // Ray's naming renames every family: EPP's default names find nothing,
    // and the renamed ones are what its metric flags must name instead.
    let config = work.path().join("ray.yaml");
    std::fs::write(&config, "naming: ray\n").unwrap();
    let ray = Exporter::launch(
        &["--dir", dir, "--config", config.to_str().unwrap()],
        &launch,
    );
    let url = format!("{}/metrics", ray.base);
    let report = parse_with_go(&checker, &url, None, &names);
    assert_eq!(report["missing"], serde_json::json!(names), "{report:#}");
    let ray_names: Vec<String> = names
        .iter()
        .map(|n| format!("ray_{}", n.replace(':', "_")))
        .collect();
    let ray_expected: Vec<(&str, &[&str])> = ray_names
        .iter()
        .zip(MSP_METRICS)
        .map(|(name, (_, labels))| (name.as_str(), *labels))
        .collect();
    check_every_scraper(&checker, &ray.base, &ray_expected);
}

/// Runs the Go program with the URL built from `base`'s host and `path` the
/// way `build` says (`join`: EPP's legacy client; `url`: its data layer's
/// `url.URL{Path: path}`), Go's default client, no Accept header.
fn poll_as_epp(checker: &Path, base: &str, path: &str, build: &str, metrics: &[&str]) -> Output {
    let host = base.strip_prefix("http://").expect("an http:// base");
    Command::new(checker)
        .args(["-host", host, "-path", path, "-build", build])
        .args(["-metrics", &metrics.join(",")])
        .output()
        .expect("run expfmt-check")
}

/// What EPP v1.1 to v1.5.0 reads, with the label names vLLM gives them.
const CACHE_CONFIG: (&str, &[&str]) = ("vllm:cache_config_info", &["block_size", "num_gpu_blocks"]);

#[test]
fn epp_reads_the_endpoint_picker_view_whichever_way_it_builds_the_url() {
    let Some(checker) = expfmt_check() else {
        return;
    };
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let metrics = work.path().join("metrics");
    std::fs::create_dir(&metrics).unwrap();
    let _first = Writer::start(&python, &metrics, "first");
    let _second = Writer::start(&python, &metrics, "second");
    let exporter = Exporter::launch(
        &["--dir", metrics.to_str().unwrap()],
        &Launch {
            exact_negotiation: false,
            ..Launch::default()
        },
    );
    let mut expected = MSP_METRICS.to_vec();
    expected.push(CACHE_CONFIG);
    let names: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
    // The view folds vLLM's `engine` away (issue 42; tests/it/data_parallel.rs).
    for (_, labels) in expected.iter_mut() {
        if *labels == ENGINE_LABELS {
            *labels = &["model_name"];
        }
    }
    for build in ["join", "url"] {
        let output = poll_as_epp(
            &checker,
            &exporter.base,
            "/metrics/endpoint-picker",
            build,
            &names,
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{build}: {stderr}");
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        assert_eq!(
            report["source"],
            format!("{}/metrics/endpoint-picker", exporter.base),
            "{build}"
        );
        assert_eq!(report["status"], 200, "{build}: {report:#}");
        assert_eq!(
            report["missing"],
            serde_json::json!([]),
            "{build}: {report:#}"
        );
        // Exactly the view's families that the directory has (no
        // vllm:gpu_cache_usage_perc here, no own metrics).
        assert_eq!(report["families_parsed"], 5, "{build}: {report:#}");
        for (name, labels) in &expected {
            let family = &report["metrics"][*name];
            assert_eq!(family["type"], "GAUGE", "{build}: {name}: {report:#}");
            assert_eq!(
                family["label_names"],
                serde_json::json!(labels),
                "{build}: {name}"
            );
        }
        assert_eq!(
            report["metrics"]["vllm:num_requests_waiting"]["first_value"],
            3.0
        );
    }
    // The `?name[]=` path only survives EPP's string join: built as v1.5.0's
    // data layer builds it, its `?` is escaped into the path, which the
    // exporter does not serve (404), and EPP gets nothing.
    let query: Vec<String> = names.iter().map(|n| format!("name[]={n}")).collect();
    let path = format!("/metrics?{}", query.join("&"));
    let joined = poll_as_epp(&checker, &exporter.base, &path, "join", &names);
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    let escaped = poll_as_epp(&checker, &exporter.base, &path, "url", &names);
    let stderr = String::from_utf8_lossy(&escaped.stderr);
    assert!(!escaped.status.success(), "the escaped path was served");
    assert!(
        stderr.contains("/metrics%3Fname") && stderr.contains("status 404"),
        "{stderr}"
    );
}

#[test]
fn the_go_checker_fails_on_a_body_its_parser_rejects() {
    let Some(checker) = expfmt_check() else {
        return;
    };
    let run = |body: &str| {
        let mut child = Command::new(&checker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run expfmt-check");
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        child.wait_with_output().expect("wait")
    };
    let good = run("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1.0\n");
    assert!(good.status.success(), "{good:?}");
    let report: Value = serde_json::from_slice(&good.stdout).unwrap();
    assert_eq!(
        report["metrics"]["vllm:num_requests_waiting"]["type"],
        "GAUGE"
    );
    // A second TYPE line for a family is an error in the text format.
    let bad =
        run("# TYPE vllm:num_requests_waiting gauge\n# TYPE vllm:num_requests_waiting counter\n");
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("expfmt.TextParser"),
        "{bad:?}"
    );
}
