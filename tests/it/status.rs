//! vLLM at a glance without Grafana: `/api/v1/snapshot` (the families as
//! typed JSON, and `dump --format json`), `/api/v1/summary` (the curated
//! numbers, reset-safe), `/api/v1/status`, and aliases of renamed vLLM
//! metrics. The status page itself is in [`crate::status_page`].

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::Value as Json;

use crate::ray::written;
use crate::support::exposition::{Exposition, Sample};
use crate::support::{
    dump, key, python, set_value, tool, wait_for, write_counter, write_db, Exporter,
    ACCEPT_OPENMETRICS,
};

/// A JSON value as a sample value (`"NaN"`, `"+Inf"`, `"-Inf"` or a number).
fn value(v: &Json) -> f64 {
    match v {
        Json::String(s) if s == "NaN" => f64::NAN,
        Json::String(s) if s == "+Inf" => f64::INFINITY,
        Json::String(s) if s == "-Inf" => f64::NEG_INFINITY,
        v => v.as_f64().unwrap_or_else(|| panic!("not a value: {v}")),
    }
}

/// The samples a snapshot describes, named as the text format names them.
fn samples_of_snapshot(snapshot: &Json) -> Vec<Sample> {
    let mut out = Vec::new();
    for family in snapshot["families"].as_array().expect("families") {
        let name = family["name"].as_str().unwrap();
        for series in family["series"].as_array().unwrap() {
            let labels: BTreeMap<String, String> = series["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            let mut push = |suffix: &str, extra: Option<(&str, &str)>, v: &Json| {
                let mut labels = labels.clone();
                if let Some((k, v)) = extra {
                    labels.insert(k.to_owned(), v.to_owned());
                }
                out.push(Sample {
                    name: format!("{name}{suffix}"),
                    labels,
                    value: value(v),
                });
            };
            let gauge_histogram = family["type"] == "gaugehistogram";
            for (field, v) in series.as_object().unwrap() {
                match field.as_str() {
                    "labels" => {}
                    "value" => match family["type"].as_str().unwrap() {
                        "counter" => push("_total", None, v),
                        "info" => push("_info", None, v),
                        _ => push("", None, v),
                    },
                    "count" => push(if gauge_histogram { "_gcount" } else { "_count" }, None, v),
                    "sum" => push(if gauge_histogram { "_gsum" } else { "_sum" }, None, v),
                    "created" => push("_created", None, v),
                    "buckets" => {
                        for b in v.as_array().unwrap() {
                            push(
                                "_bucket",
                                Some(("le", b["le"].as_str().unwrap())),
                                &b["count"],
                            );
                        }
                    }
                    "quantiles" => {
                        for q in v.as_array().unwrap() {
                            push(
                                "",
                                Some(("quantile", q["quantile"].as_str().unwrap())),
                                &q["value"],
                            );
                        }
                    }
                    "other" => {
                        for o in v.as_array().unwrap() {
                            // `{name}{suffix}` with the suffix that makes the sample's name.
                            let full = o["name"].as_str().unwrap();
                            let suffix =
                                full.strip_prefix(name).expect("other sample of the family");
                            push(suffix, None, &o["value"]);
                        }
                    }
                    other => panic!("unknown series field {other}"),
                }
            }
        }
    }
    out
}

/// Samples by (name, labels), without the exporter's own (they change
/// between two requests).
fn keyed(samples: Vec<Sample>) -> BTreeMap<(String, BTreeMap<String, String>), u64> {
    samples
        .into_iter()
        .filter(|s| !s.name.starts_with("multiproc_exporter_"))
        .map(|s| ((s.name, s.labels), s.value.to_bits()))
        .collect()
}

#[test]
fn the_snapshot_is_the_exposition_as_json() {
    let Some(python) = python() else { return };
    let (_tmp, dir, _replicas) = written(&python, &["--model", "m", "--ticks", "2"], false);
    let d = dir.to_str().unwrap();
    let exporter = Exporter::start(&["--dir", d]);
    let text = Exposition::parse(&exporter.metrics());
    let reply = exporter.get("/api/v1/snapshot");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let snapshot: Json = serde_json::from_slice(&reply.body).unwrap();
    assert!(snapshot["at"].as_f64().is_some());
    let from_json = keyed(samples_of_snapshot(&snapshot));
    let from_text = keyed(text.samples);
    assert!(from_text.len() > 500, "{} samples", from_text.len());
    let differ: Vec<_> = from_json
        .iter()
        .filter(|(k, v)| from_text.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .chain(from_text.keys().filter(|k| !from_json.contains_key(*k)))
        .take(5)
        .collect();
    assert!(differ.is_empty(), "JSON and text differ at {differ:?}");

    // name[] restricts as /metrics does; dump --format json is the same JSON.
    let reply = exporter.get("/api/v1/snapshot?name[]=vllm:prompt_tokens_total");
    let restricted: Json = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(restricted["families"].as_array().unwrap().len(), 1);
    assert_eq!(restricted["families"][0]["name"], "vllm:prompt_tokens");
    let dumped: Json = serde_json::from_slice(&dump(&["--format", "json", d])).unwrap();
    assert_eq!(
        keyed(samples_of_snapshot(&dumped)),
        keyed(samples_of_snapshot(&snapshot))
    );
}

/// `/api/v1/summary`, parsed.
fn summary(exporter: &Exporter) -> Json {
    serde_json::from_slice(&exporter.get("/api/v1/summary").body).unwrap()
}

#[test]
fn the_summary_is_reset_safe_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, offset) = write_counter(tmp.path(), "1", 100.0);
    let gauge = tmp.path().join("gauge_livesum_1.db");
    write_db(
        &gauge,
        &[(
            key(
                "vllm:num_requests_running",
                "vllm:num_requests_running",
                &[("engine", "0"), ("model_name", "m")],
                "Running.",
            ),
            3.0,
        )],
    );
    let exporter = Exporter::start(&["--dir", tmp.path().to_str().unwrap()]);
    summary(&exporter);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    set_value(&path, offset, 300.0);
    let second = summary(&exporter);
    // 200 tokens over the time the history covers (every point before this
    // one saw 100).
    let history = second["history"].as_array().unwrap();
    let span =
        history[history.len() - 1]["at"].as_f64().unwrap() - history[0]["at"].as_f64().unwrap();
    let expected = 200.0 / span;
    let m = &second["models"]["m"];
    assert_eq!(m["prompt_tokens_per_second"].as_f64(), Some(expected));
    assert_eq!(m["requests_running"].as_f64(), Some(3.0));
    assert!(m["ttft_seconds"].is_null());

    // The engine restarts: 300 -> 50. That interval is skipped, never negative.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    set_value(&path, offset, 50.0);
    let third = summary(&exporter);
    let history = third["history"].as_array().unwrap();
    assert!(history[history.len() - 1]["models"]["m"]["prompt_tokens_per_second"].is_null());
    assert_eq!(
        third["models"]["m"]["prompt_tokens_per_second"].as_f64(),
        Some(expected),
        "the window's rate leaves the reset out"
    );
    let status: Json = serde_json::from_slice(&exporter.get("/api/v1/status").body).unwrap();
    assert_eq!(status["last"]["files_merged"], 2);
    assert_eq!(status["last"]["files_skipped"], 0);
}

/// Runs `promtool check metrics` on `body`; its output.
fn promtool_check(promtool: &std::path::Path, body: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn an_alias_is_served_under_both_names_and_passes_promtool() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_db(
        &dir.join("gauge_livesum_1.db"),
        &[(
            key(
                "vllm:kv_cache_usage_perc",
                "vllm:kv_cache_usage_perc",
                &[("engine", "0"), ("model_name", "m")],
                "KV-cache usage. 1 means 100 percent usage.",
            ),
            0.25,
        )],
    );
    write_db(
        &dir.join("counter_1.db"),
        &[(
            key(
                "vllm:prefix_cache_queries",
                "vllm:prefix_cache_queries_total",
                &[("engine", "0"), ("model_name", "m")],
                "Prefix cache queries, in terms of number of queried tokens.",
            ),
            40.0,
        )],
    );
    let config = tmp.path().join("aliases.yml");
    std::fs::write(
        &config,
        "vllm_aliases: true\naliases: {\"old:queries\": \"vllm:prefix_cache_queries\"}\n",
    )
    .unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--web.disable-exporter-metrics",
    ]);
    let text = exporter.metrics();
    for line in [
        "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n",
        "# HELP vllm:gpu_cache_usage_perc Alias of vllm:kv_cache_usage_perc (its former name): KV-cache usage. 1 means 100 percent usage.\n",
        "# TYPE vllm:gpu_cache_usage_perc gauge\n",
        "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n",
        "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 40.0\n",
        "vllm:gpu_prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 40.0\n",
        "old:queries_total{engine=\"0\",model_name=\"m\"} 40.0\n",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    // promtool's only complaint is about vLLM's own names: `:` is for
    // recording rules. With Ray's names there is none.
    let (_, output) = promtool_check(&promtool, &text);
    for line in output.lines() {
        assert!(
            line.ends_with("metric names should not contain ':'"),
            "promtool: {line}"
        );
    }

    let openmetrics = exporter
        .get_with(
            "/metrics",
            &[(
                "Accept",
                &format!("{ACCEPT_OPENMETRICS};escaping=allow-utf-8"),
            )],
        )
        .text();
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    for line in [
        "# TYPE vllm:gpu_cache_usage_perc gauge\n",
        "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n",
        "# TYPE vllm:gpu_prefix_cache_queries counter\n",
        "vllm:gpu_prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 40.0\n",
    ] {
        assert!(openmetrics.contains(line), "{line} not in\n{openmetrics}");
    }

    // An alias follows the configuration's naming too.
    std::fs::write(&config, "vllm_aliases: true\nnaming: ray\n").unwrap();
    wait_for("the Ray names", || {
        exporter
            .metrics()
            .contains("ray_vllm_gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n")
            .then_some(())
    });
    let (ok, output) = promtool_check(&promtool, &exporter.metrics());
    assert!(
        ok && output.trim().is_empty(),
        "promtool check metrics: {output}"
    );
}
