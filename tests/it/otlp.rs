//! Pushing over OTLP (`--push.otlp-url`) to a receiver built on the official
//! schemas: `tests/python/otlp_receiver.py` decodes every request with PyPI's
//! `opentelemetry-proto` and writes it down as JSON. Against real
//! prometheus_client writers, every family `/metrics` serves arrives with
//! the type, attributes and values the OpenTelemetry Collector's Prometheus
//! receiver would make of that scrape; cumulative values never go down
//! across pushes; an outage of the receiver loses no collection within the
//! queue's capacity; a 4xx other than 429 is not retried and is logged once.
//! `multiproc-exporter demo --push.otlp-url` delivers the demo's families.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::exposition::Exposition;
use crate::support::monitoring::free_port;
use crate::support::{eventually, merged_part, python, repo_root, run_python, run_vllm_load};
use crate::support::{sample_value, set_value, start_demo, wait_for, write_counter, Exporter};

/// A metrics directory holding one counter file of 1 (`write_counter`)
/// and a receiver started with `args`: the setup most tests here share.
fn counter_and_receiver(python: &Path, args: &[&str]) -> (tempfile::TempDir, PathBuf, Receiver) {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("multiproc");
    std::fs::create_dir(&dir).expect("mkdir");
    write_counter(&dir, "100", 1.0);
    let receiver = Receiver::start_with(python, &work.path().join("otlp.jsonl"), 0, args);
    (work, dir, receiver)
}

/// The test receiver (killed on drop).
pub(crate) struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    /// Starts the receiver on `port` (0: any), appending to `out`,
    /// answering every request with `status`.
    fn start(python: &Path, out: &Path, port: u16, status: u16) -> Receiver {
        Self::start_with(python, out, port, &["--status", &status.to_string()])
    }

    /// Starts the receiver with `args` (`--status CODE`, `--reject N`).
    pub(crate) fn start_with(python: &Path, out: &Path, port: u16, args: &[&str]) -> Receiver {
        let mut child = Command::new(python)
            .arg(repo_root().join("tests/python/otlp_receiver.py"))
            .arg(out)
            .arg(port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the OTLP receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the receiver's port");
        let port = line.trim().parse().unwrap_or_else(|_| {
            panic!("the OTLP receiver did not start: {line:?} (is opentelemetry-proto installed? scripts/setup-python-venv)")
        });
        Receiver {
            child,
            port,
            out: out.to_owned(),
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/metrics", self.port)
    }

    /// Every request received so far, decoded.
    pub(crate) fn requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        // Only whole lines: the receiver may be writing the last one.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A float as the receiver writes it (Python's repr).
pub(crate) fn float(v: &Value) -> f64 {
    v.as_str()
        .expect("a float string")
        .parse()
        .expect("a float")
}

pub(crate) fn metrics(request: &Value) -> &Vec<Value> {
    request["resources"][0]["scopes"][0]["metrics"]
        .as_array()
        .expect("metrics")
}

pub(crate) fn attributes(point: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(point["attributes"].clone()).expect("attributes")
}

/// A metric as compared: (OTLP type, monotonic, `prometheus.type`,
/// description) and each point's attributes → its values.
type Mapped = BTreeMap<
    String,
    (
        (String, bool, String, String),
        BTreeMap<BTreeMap<String, String>, String>,
    ),
>;

/// What the Collector's Prometheus receiver makes of a text-format scrape:
/// counters → monotonic sums named as the sample (`_total` kept), gauges
/// and untyped → gauges, histograms → per-bucket counts with bounds without
/// `+Inf`, summaries → count, sum and quantiles.
fn as_the_receiver_maps(served: &Exposition) -> Mapped {
    let mut out = Mapped::new();
    for (name, kind) in &served.types {
        let help = served.helps.get(name).cloned().unwrap_or_default();
        let (otlp, monotonic, prometheus) = match kind.as_str() {
            "counter" => ("sum", true, "counter"),
            "gauge" => ("gauge", false, "gauge"),
            "untyped" => ("gauge", false, "unknown"),
            "histogram" => ("histogram", false, "histogram"),
            "summary" => ("summary", false, "summary"),
            other => panic!("{name}: type {other}"),
        };
        let mut points = BTreeMap::new();
        match kind.as_str() {
            "histogram" => {
                let mut groups: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> =
                    BTreeMap::new();
                for s in served.named(&format!("{name}_bucket")) {
                    let le: f64 = s.labels["le"].parse().expect("le");
                    groups
                        .entry(s.labels_without("le"))
                        .or_default()
                        .push((le, s.value));
                }
                for (labels, mut buckets) in groups {
                    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let value = |suffix: &str| {
                        served
                            .named(&format!("{name}{suffix}"))
                            .find(|s| s.labels == labels)
                            .map(|s| s.value)
                            .expect("count and sum")
                    };
                    let count = value("_count");
                    let finite: Vec<(f64, f64)> =
                        buckets.into_iter().filter(|b| b.0.is_finite()).collect();
                    let mut counts = Vec::new();
                    let mut previous = 0.0;
                    for &(_, v) in &finite {
                        counts.push((v - previous) as u64);
                        previous = v;
                    }
                    counts.push((count - previous) as u64);
                    let bounds: Vec<f64> = finite.iter().map(|b| b.0).collect();
                    let text =
                        format!("{bounds:?} {counts:?} {} {:?}", count as u64, value("_sum"));
                    points.insert(labels, text);
                }
            }
            "summary" => {
                for s in served.named(&format!("{name}_count")) {
                    let sum = served
                        .named(&format!("{name}_sum"))
                        .find(|x| x.labels == s.labels)
                        .expect("sum")
                        .value;
                    let quantiles: Vec<(f64, f64)> = served
                        .named(name)
                        .filter(|q| q.labels_without("quantile") == s.labels)
                        .map(|q| (q.labels["quantile"].parse().expect("quantile"), q.value))
                        .collect();
                    points.insert(
                        s.labels.clone(),
                        format!("{} {sum:?} {quantiles:?}", s.value as u64),
                    );
                }
            }
            _ => {
                for s in served.named(name) {
                    let labels = s
                        .labels
                        .clone()
                        .into_iter()
                        .filter(|(_, v)| !v.is_empty())
                        .collect();
                    points.insert(labels, format!("{:?}", s.value));
                }
            }
        }
        out.insert(
            name.clone(),
            ((otlp.into(), monotonic, prometheus.into(), help), points),
        );
    }
    out
}

/// A received request's metrics in the same form, without the exporter's
/// own (`multiproc_exporter_*`).
fn received(request: &Value) -> Mapped {
    let mut out = Mapped::new();
    for m in metrics(request) {
        let name = m["name"].as_str().expect("name").to_owned();
        if name.starts_with("multiproc_exporter_") {
            continue;
        }
        let kind = m["type"].as_str().expect("type").to_owned();
        let prometheus = m["metadata"]["prometheus.type"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let mut points = BTreeMap::new();
        for p in m["points"].as_array().expect("points") {
            assert_eq!(p["flags"], 0, "{name}: {p}");
            let value = match kind.as_str() {
                "histogram" => {
                    let bounds: Vec<f64> =
                        p["bounds"].as_array().unwrap().iter().map(float).collect();
                    let counts: Vec<u64> = p["counts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c.as_u64().expect("count"))
                        .collect();
                    format!(
                        "{bounds:?} {counts:?} {} {:?}",
                        p["count"],
                        float(&p["sum"])
                    )
                }
                "summary" => {
                    let quantiles: Vec<(f64, f64)> = p["quantiles"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|q| (float(&q[0]), float(&q[1])))
                        .collect();
                    format!("{} {:?} {quantiles:?}", p["count"], float(&p["sum"]))
                }
                _ => format!("{:?}", float(&p["value"])),
            };
            points.insert(attributes(p), value);
        }
        let monotonic = m["monotonic"].as_bool().unwrap_or(false);
        let description = m["description"].as_str().unwrap_or("").to_owned();
        out.insert(name, ((kind, monotonic, prometheus, description), points));
    }
    out
}

/// Every cumulative point's value (a sum's, a histogram's or summary's
/// count) never goes down from one request to the next while its start
/// time stays, and starts no later than its time.
fn assert_cumulative_never_goes_down(requests: &[Value]) {
    let mut last: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    let mut checked = 0;
    for request in requests {
        for m in metrics(request) {
            let cumulative = match m["type"].as_str() {
                Some("sum") => m["monotonic"] == true,
                Some("histogram" | "summary") => true,
                _ => false,
            };
            if !cumulative {
                continue;
            }
            for p in m["points"].as_array().expect("points") {
                let key = format!("{} {:?}", m["name"], attributes(p));
                let start = p["start"].as_u64().expect("start");
                let time = p["time"].as_u64().expect("time");
                assert!(
                    start > 0 && start <= time,
                    "{key}: start {start}, time {time}"
                );
                let value = match p.get("count") {
                    Some(count) => count.as_f64().expect("count"),
                    None => float(&p["value"]),
                };
                if let Some(&(last_start, last_value)) = last.get(&key) {
                    if last_start == start {
                        assert!(
                            value >= last_value,
                            "{key} went down: {last_value} → {value}"
                        );
                        checked += 1;
                    }
                }
                last.insert(key, (start, value));
            }
        }
    }
    assert!(checked > 0, "no cumulative series seen twice");
}

/// Real writers: vLLM's counter, histogram and gauge (tests/python/vllm_load.py)
/// and a summary.
fn write_with_prometheus_client(python: &Path, dir: &Path) {
    run_vllm_load(python, dir);
    run_python(
        python,
        "from prometheus_client import Summary\n\
         s = Summary('vllm:request_latency_seconds', 'Latency.', ['model_name'])\n\
         s.labels('test-model').observe(0.25)\n\
         s.labels('test-model').observe(1.5)\n",
        &[],
        &[("PROMETHEUS_MULTIPROC_DIR", dir.to_str().expect("utf-8"))],
    );
}

pub(crate) fn pushing_exporter(dir: &Path, url: &str, extra: &[&str]) -> Exporter {
    let mut args = vec![
        "--dir",
        dir.to_str().expect("utf-8"),
        "--writers.liveness",
        "off",
        "--push.otlp-url",
        url,
        "--push.interval",
        "500ms",
        "--push.max-backoff",
        "200ms",
    ];
    args.extend(extra);
    Exporter::start(&args)
}

#[test]
fn real_writers_arrive_as_the_prometheus_receiver_would_see_them() {
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("multiproc");
    std::fs::create_dir(&dir).expect("mkdir");
    write_with_prometheus_client(&python, &dir);
    // A counter the test moves while pushing.
    let (counter, offset) = write_counter(&dir, "100", 0.0);
    let receiver = Receiver::start(&python, &work.path().join("otlp.jsonl"), 0, 200);
    let exporter = pushing_exporter(
        &dir,
        &receiver.url(),
        &["--push.label", "job=vllm", "--push.label", "pod=p-1"],
    );

    let served = Exposition::parse(merged_part(&exporter.metrics()));
    let want = as_the_receiver_maps(&served);
    assert_eq!(want.len(), 5, "{want:#?}");
    // The files do not change: the next collection is what was served.
    let seen = receiver.requests().len();
    let request = wait_for("a collection pushed after the scrape", || {
        receiver.requests().into_iter().nth(seen)
    });
    assert_eq!(received(&request), want);
    assert_eq!(request["headers"]["content-encoding"], "gzip");
    assert_eq!(request["headers"]["content-type"], "application/x-protobuf");
    let resource: BTreeMap<String, String> =
        serde_json::from_value(request["resources"][0]["attributes"].clone()).expect("resource");
    assert_eq!(
        resource,
        BTreeMap::from([
            ("service.name".to_owned(), "vllm".to_owned()),
            ("pod".to_owned(), "p-1".to_owned()),
        ])
    );
    assert_eq!(
        request["resources"][0]["scopes"][0]["scope"],
        "multiproc-exporter"
    );
    // The exporter's own metrics are pushed too.
    assert!(metrics(&request)
        .iter()
        .any(|m| m["name"] == "multiproc_exporter_push_queue_capacity"));

    // The counter moves: every push has it, never lower than before.
    for value in 1..=3 {
        set_value(&counter, offset, f64::from(value) * 10.0);
        let seen = receiver.requests().len();
        wait_for("a push of the new value", || {
            (receiver.requests().len() > seen + 1).then_some(())
        });
    }
    let requests = receiver.requests();
    assert_cumulative_never_goes_down(&requests);
    let last = received(requests.last().expect("requests"));
    assert_eq!(
        last["vllm:prompt_tokens_total"].1
            [&BTreeMap::from([("model_name".to_owned(), "m".to_owned())])],
        "30.0"
    );
}

#[test]
fn an_outage_loses_no_collection_and_a_refusal_is_not_retried() {
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("multiproc");
    std::fs::create_dir(&dir).expect("mkdir");
    let (counter, offset) = write_counter(&dir, "100", 0.0);
    let out = work.path().join("otlp.jsonl");
    let port = free_port();
    let receiver = Receiver::start(&python, &out, port, 200);
    let exporter = pushing_exporter(&dir, &receiver.url(), &["--push.queue-capacity", "100"]);
    let refused_receiver = Receiver::start(&python, &work.path().join("refused.jsonl"), 0, 400);
    let refused = pushing_exporter(&dir, &refused_receiver.url(), &[]);
    wait_for("pushes", || (receiver.requests().len() >= 2).then_some(()));

    // The receiver goes away for about five seconds while the counter
    // changes every 1.2 s (about ten collections at 500ms), then comes back
    // on the same port.
    drop(receiver);
    for value in 1..=4 {
        set_value(&counter, offset, f64::from(value));
        std::thread::sleep(Duration::from_millis(1200));
    }
    let receiver = Receiver::start(&python, &out, port, 200);
    let queued = "multiproc_exporter_push_queue_length{protocol=\"otlp\"}";
    eventually("the queue to empty", Duration::from_secs(30), || {
        let length = sample_value(&exporter.metrics(), queued).unwrap_or(-1.0);
        let newest = receiver.requests().last().map(value_of_counter);
        match newest {
            Some(Some(4.0)) if length == 0.0 => Ok(()),
            other => Err(format!("queue {length}, newest {other:?}")),
        }
    });
    // Every collection arrived, in order: a point every interval through the
    // outage, with every value the counter had.
    let points: Vec<(u64, f64)> = receiver
        .requests()
        .iter()
        .filter_map(|r| Some((counter_point(r)?["time"].as_u64()?, value_of_counter(r)?)))
        .collect();
    for pair in points.windows(2) {
        let gap = pair[1].0.saturating_sub(pair[0].0);
        assert!(
            pair[1].0 > pair[0].0 && gap < 2_500_000_000,
            "a gap of {gap} ns in {points:?}"
        );
    }
    for value in 1..=4 {
        assert!(
            points.iter().any(|&(_, v)| v == f64::from(value)),
            "value {value}, pushed during the outage, is missing: {points:?}"
        );
    }
    assert_cumulative_never_goes_down(&receiver.requests());
    let body = exporter.metrics();
    for (series, want) in [
        ("multiproc_exporter_push_collections_dropped_total{protocol=\"otlp\",reason=\"queue_full\"}", 0.0),
        ("multiproc_exporter_push_collections_dropped_total{protocol=\"otlp\",reason=\"rejected\"}", 0.0),
    ] {
        assert_eq!(sample_value(&body, series), Some(want), "{series}");
    }
    assert!(
        sample_value(
            &body,
            "multiproc_exporter_push_failures_total{protocol=\"otlp\",reason=\"connection\"}"
        )
        .unwrap_or_default()
            >= 1.0
    );

    // 400: each collection was sent once, dropped and counted; logged once.
    let dropped =
        "multiproc_exporter_push_collections_dropped_total{protocol=\"otlp\",reason=\"rejected\"}";
    let refusals = sample_value(&refused.metrics(), dropped).unwrap_or_default();
    assert!(refusals >= 3.0, "{refusals}");
    let times: Vec<u64> = refused_receiver
        .requests()
        .iter()
        .filter_map(|r| counter_point(r)?["time"].as_u64())
        .collect();
    let distinct: BTreeSet<u64> = times.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        times.len(),
        "a refused collection was sent again: {times:?}"
    );
    let failing = "Pushing fails: the OTLP receiver did not accept a request.";
    let logged = refused.logs_with(failing);
    assert_eq!(logged.len(), 1, "{:#?}", refused.logs());
    assert_eq!(logged[0]["reason"], "http_4xx");
    assert_eq!(logged[0]["retried"], false);
    assert!(
        logged[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("400"),
        "{logged:?}"
    );
}

#[test]
fn a_partial_success_is_counted_and_logged_once() {
    let Some(python) = python() else { return };
    let (_work, dir, receiver) = counter_and_receiver(&python, &["--reject", "2"]);
    let exporter = pushing_exporter(&dir, &receiver.url(), &[]);
    let rejected = "multiproc_exporter_push_samples_rejected_total{protocol=\"otlp\"}";
    let sent = "multiproc_exporter_push_requests_sent_total{protocol=\"otlp\"}";
    let (requests, points) = wait_for("three partial successes", || {
        let body = exporter.metrics();
        let requests = sample_value(&body, sent)?;
        (requests >= 3.0).then_some((requests, sample_value(&body, rejected)?))
    });
    // Accepted (not retried, not dropped), the rejected points counted.
    assert!(points >= 2.0 * requests - 2.0, "{points} for {requests}");
    assert!(receiver.requests().len() as f64 >= requests);
    let logged =
        exporter.logs_with("The OTLP receiver accepted a request only in part (partial success).");
    assert_eq!(logged.len(), 1, "{:#?}", exporter.logs());
    assert_eq!(logged[0]["rejected_data_points"], 2);
    assert_eq!(logged[0]["error"], "rejected by the test");
}

/// The point of `vllm:prompt_tokens_total{model_name="m"}` in a request.
fn counter_point(request: &Value) -> Option<&Value> {
    metrics(request)
        .iter()
        .find(|m| m["name"] == "vllm:prompt_tokens_total")?["points"]
        .as_array()?
        .iter()
        .find(|p| p["attributes"]["model_name"] == "m")
}

fn value_of_counter(request: &Value) -> Option<f64> {
    Some(float(&counter_point(request)?["value"]))
}

#[test]
fn the_demo_delivers_its_families_over_otlp() {
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start(&python, &work.path().join("otlp.jsonl"), 0, 200);
    let url = receiver.url();
    let (mut demo, served) = start_demo(&["--push.otlp-url", &url, "--push.interval", "500ms"]);
    let served = Exposition::parse(merged_part(&served));
    let seen = receiver.requests().len();
    wait_for("three collections pushed after the scrape", || {
        (receiver.requests().len() >= seen + 3).then_some(())
    });
    demo.signal("TERM");
    assert!(demo.wait_exit().success());

    let requests = receiver.requests();
    let want = as_the_receiver_maps(&served);
    let got = received(&requests[seen + 2]);
    assert!(want.len() > 20, "{want:#?}");
    // Every served family arrives with its type and every served series
    // (the values have moved on since the scrape, and the demo's traffic
    // adds families and series as it goes).
    for (name, (kind, points)) in &want {
        let Some((got_kind, got_points)) = got.get(name) else {
            panic!(
                "{name} was not pushed: {:?}",
                got.keys().collect::<Vec<_>>()
            )
        };
        assert_eq!(got_kind, kind, "{name}");
        for labels in points.keys() {
            assert!(
                got_points.contains_key(labels),
                "{name}{labels:?} was not pushed"
            );
        }
    }
    assert_cumulative_never_goes_down(&requests);
    // Every histogram's per-bucket counts add up to its count.
    for m in metrics(&requests[seen + 2])
        .iter()
        .filter(|m| m["type"] == "histogram")
    {
        for p in m["points"].as_array().expect("points") {
            let counts: u64 = p["counts"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_u64)
                .sum();
            assert_eq!(Some(counts), p["count"].as_u64(), "{}: {p}", m["name"]);
        }
    }
}

/// Issue 41: `503` with `Retry-After: 0` made 7,530 requests in 10 s (a
/// tight loop against a receiver that said it is overloaded). Now the
/// backoff (30 ms doubling to 5 s, jittered) is the least wait.
#[test]
fn a_503_with_retry_after_0_for_10_s_gives_a_few_tens_of_requests() {
    let Some(python) = python() else { return };
    let (_work, dir, receiver) =
        counter_and_receiver(&python, &["--status", "503", "--retry-after", "0"]);
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().expect("utf-8"),
        "--push.otlp-url",
        &receiver.url(),
        "--push.interval",
        "1s",
    ]);
    wait_for("a first request", || {
        (!receiver.requests().is_empty()).then_some(())
    });
    std::thread::sleep(Duration::from_secs(10));
    let requests = receiver.requests().len();
    assert!(
        (3..=40).contains(&requests),
        "{requests} requests in about 10 s"
    );
    assert_eq!(exporter.get("/-/healthy").status, 200);
}

/// Issue 41: after a `500` OTLP/HTTP allows no retry (only 429, 502, 503
/// and 504), yet it was retried with backoff while the batch held back
/// every newer collection. Now it is dropped at once, counted as
/// `rejected`, logged once, and the next collection goes out on time.
#[test]
fn a_500_is_not_retried_for_otlp_and_the_next_collection_is_not_held_up() {
    let Some(python) = python() else { return };
    let (_work, dir, receiver) = counter_and_receiver(&python, &["--status", "500"]);
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().expect("utf-8"),
        "--push.otlp-url",
        &receiver.url(),
        "--push.interval",
        "1s",
    ]);
    let requests = wait_for("four collections", || {
        let requests = receiver.requests();
        (requests.len() >= 4).then_some(requests)
    });
    // Each request a new collection (no retry of the same one).
    let times: Vec<u64> = requests
        .iter()
        .map(|r| {
            counter_point(r)
                .and_then(|p| p["time"].as_u64())
                .expect("a counter point")
        })
        .collect();
    for pair in times.windows(2) {
        assert!(
            pair[1] > pair[0] && pair[1] - pair[0] < 2_500_000_000,
            "{times:?}"
        );
    }
    let body = exporter.metrics();
    let dropped: f64 = body
        .lines()
        .filter(|l| {
            l.starts_with("multiproc_exporter_push_collections_dropped_total{")
                && l.contains("protocol=\"otlp\"")
                && l.contains("reason=\"rejected\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(dropped >= 3.0, "{body}");
    let logged = exporter.logs_with("Pushing fails: the OTLP receiver did not accept a request.");
    assert_eq!(logged.len(), 1, "{:#?}", exporter.logs());
    assert_eq!(logged[0]["status"], 500);
    assert_eq!(logged[0]["retried"], false);
}

/// Issue 41: a counter without `_created` got the time pushing started as
/// its start, so every restart of the exporter claimed the counter's whole
/// lifetime count for its first interval. Its first point now starts at its
/// own time (OTLP's unknown start) and later points keep that start.
#[test]
fn a_restart_of_the_exporter_does_not_claim_a_counters_whole_value_in_one_interval() {
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("multiproc");
    std::fs::create_dir(&dir).expect("mkdir");
    write_counter(&dir, "100", 1000.0);
    for run in 0..2 {
        let receiver = Receiver::start(
            &python,
            &work.path().join(format!("otlp-{run}.jsonl")),
            0,
            200,
        );
        let exporter = pushing_exporter(&dir, &receiver.url(), &[]);
        let requests = wait_for("two pushes", || {
            let requests = receiver.requests();
            (requests.len() >= 2).then_some(requests)
        });
        let first = counter_point(&requests[0]).expect("a counter point");
        assert_eq!(first["start"], first["time"], "run {run}: {first}");
        let second = counter_point(&requests[1]).expect("a counter point");
        assert_eq!(second["start"], first["time"], "run {run}: {second}");
        drop(exporter);
    }
}

/// A histogram's count and sum, and a counter's value, by series, over a
/// request's points (delta or cumulative).
fn counters_and_histograms(request: &Value) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for metric in metrics(request) {
        let name = metric["name"].as_str().unwrap_or_default();
        if name.starts_with("multiproc_exporter") {
            continue;
        }
        for point in metric["points"].as_array().into_iter().flatten() {
            let series = format!("{name}{:?}", attributes(point));
            match metric["type"].as_str() {
                Some("sum") if metric["monotonic"] == true => {
                    out.insert(series, float(&point["value"]));
                }
                Some("histogram") => {
                    out.insert(
                        format!("{series}_count"),
                        point["count"].as_f64().unwrap_or(0.0),
                    );
                    out.insert(format!("{series}_sum"), float(&point["sum"]));
                }
                _ => {}
            }
        }
    }
    out
}

/// Issue 41: `--push.otlp-temporality=delta`. Real prometheus_client
/// writers' counters and histograms, pushed as deltas (temporality 1),
/// add up over the pushes to the change of prometheus_client's cumulative
/// values since the first push (whose points, for series that started
/// before pushing did, only set the base, as `cumulativetodelta` does).
#[test]
fn delta_pushes_of_real_writers_add_up_to_the_cumulative_values() {
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("multiproc");
    std::fs::create_dir(&dir).expect("mkdir");
    write_with_prometheus_client(&python, &dir);
    let cumulative_out = work.path().join("cumulative.jsonl");
    let delta_out = work.path().join("delta.jsonl");
    let cumulative = Receiver::start(&python, &cumulative_out, 0, 200);
    let delta = Receiver::start(&python, &delta_out, 0, 200);
    let _cumulative_exporter = pushing_exporter(&dir, &cumulative.url(), &[]);
    let _delta_exporter =
        pushing_exporter(&dir, &delta.url(), &["--push.otlp-temporality", "delta"]);
    // The base: each exporter's first push, before the writers write more.
    wait_for("first pushes", || {
        (!cumulative.requests().is_empty() && !delta.requests().is_empty()).then_some(())
    });
    let base_requests = cumulative.requests();
    let base = counters_and_histograms(&base_requests[0]);
    assert!(!base.is_empty(), "{:?}", base_requests[0]);
    write_with_prometheus_client(&python, &dir);
    // Then until both have pushed the new values twice.
    let (final_values, deltas) =
        eventually("the new values pushed", Duration::from_secs(30), || {
            let cumulative = cumulative.requests();
            let last = counters_and_histograms(cumulative.last().expect("requests"));
            let delta = delta.requests();
            let mut sums: BTreeMap<String, f64> = BTreeMap::new();
            for request in &delta {
                for m in metrics(request) {
                    if m["type"] == "sum" && m["monotonic"] == true || m["type"] == "histogram" {
                        assert_eq!(m["temporality"], 1, "delta: {m}");
                    }
                }
                for (series, value) in counters_and_histograms(request) {
                    *sums.entry(series).or_default() += value;
                }
            }
            let expected: BTreeMap<String, f64> = last
                .iter()
                .map(|(k, v)| (k.clone(), v - base.get(k).copied().unwrap_or(0.0)))
                .collect();
            let close = expected
                .iter()
                .all(|(k, v)| (sums.get(k).copied().unwrap_or(0.0) - v).abs() < 1e-6);
            if close && last != base {
                Ok((last, sums))
            } else {
                Err(format!("expected {expected:?}, deltas {sums:?}"))
            }
        });
    // The cumulative values are prometheus_client's own merge.
    let python_total = prometheus_client_merge(&python, &dir)
        .named("vllm:prompt_tokens_total")
        .map(|s| s.value)
        .sum::<f64>();
    let pushed_total: f64 = final_values
        .iter()
        .filter(|(k, _)| k.starts_with("vllm:prompt_tokens_total"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(pushed_total, python_total);
    assert!(deltas.values().any(|v| *v > 0.0), "{deltas:?}");
}

/// prometheus_client's own merge of the directory `dir` (its
/// `MultiProcessCollector`), parsed.
pub(crate) fn prometheus_client_merge(python: &Path, dir: &Path) -> Exposition {
    let text = run_python(
        python,
        "import sys\n\
         from prometheus_client import CollectorRegistry, generate_latest\n\
         from prometheus_client.multiprocess import MultiProcessCollector\n\
         r = CollectorRegistry()\n\
         MultiProcessCollector(r, path=sys.argv[1])\n\
         sys.stdout.write(generate_latest(r).decode())\n",
        &[dir.to_str().expect("utf-8")],
        &[],
    );
    Exposition::parse(&text)
}
