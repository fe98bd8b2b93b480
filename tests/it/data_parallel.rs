//! Issue 42: data-parallel vLLM behind the endpoint picker. The built-in
//! view `/metrics/endpoint-picker` folds vLLM's `engine` label away
//! (`src/transform/fold.rs`, `endpoint_picker_rules` in
//! `src/transform/view.rs`), so that EPP, which keeps one series per family
//! (the newest timestamp, else the first; for LoRA the largest value), reads
//! the pod's values instead of one engine's.
//!
//! Real prometheus_client processes write vLLM 0.33.0's five families as its
//! `PrometheusStatLogger` does (`vllm/v1/metrics/loggers.py`: one child per
//! engine made at start, `mostrecent` scheduler gauges set from the engine
//! whose stats arrived, `vllm:cache_config_info` set to 1 for every engine
//! with the frontend's CacheConfig, whose `num_gpu_blocks` is the sum over
//! the engines, `vllm:lora_requests_info` in `sum` mode set to the current
//! time), two API servers and four engines. A Python script computes the
//! documented formulas from prometheus_client's own merge of the directory;
//! the view must serve exactly those values. Go's expfmt (as EPP parses)
//! reads the view and `/metrics` with EPP's selection rule.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::support::exposition::Exposition;
use crate::support::{dump, python, repo_root, run_python, Exporter, Launch};

/// One vLLM API-server process's stat logger: the children of every engine,
/// the CacheConfig info, then each recorded step `[engine, running,
/// waiting, kv, running_adapters, waiting_adapters]` as `record()` sets
/// them (a step's scheduler stats reach one API server only).
const API_SERVER: &str = r#"
import json, sys, time
from prometheus_client import Gauge

spec = json.loads(sys.argv[1])
catalogue = {m["name"]: m for m in json.load(open(sys.argv[2]))}
engines, model = spec["engines"], spec["model"]
labelnames = ["model_name", "engine"]

def per_engine(name):
    m = catalogue[name]
    gauge = Gauge(name, m["help"], labelnames=labelnames, multiprocess_mode=m["mode"])
    return [gauge.labels(model, str(e)) for e in range(engines)]

running = per_engine("vllm:num_requests_running")
waiting = per_engine("vllm:num_requests_waiting")
kv = per_engine("vllm:kv_cache_usage_perc")
m = catalogue["vllm:lora_requests_info"]
lora = Gauge(m["name"], m["help"], multiprocess_mode=m["mode"],
             labelnames=["max_lora", "waiting_lora_adapters", "running_lora_adapters"])
# log_engine_initialized(): the frontend's CacheConfig for every engine; its
# num_gpu_blocks is the sum of the engines' (vllm/v1/engine/utils.py).
m = catalogue["vllm:cache_config_info"]
info = {label: m["label_values"][label][0] for label in m["labels"] if label != "engine"}
info["num_gpu_blocks"] = str(spec["num_gpu_blocks"])
info_gauge = Gauge(m["name"], m["help"], multiprocess_mode=m["mode"],
                   labelnames=list(info.keys()) + ["engine"])
for e in range(engines):
    info_gauge.labels(**info, engine=str(e)).set(1)
for e, r, w, k, running_adapters, waiting_adapters in spec["steps"]:
    running[e].set(r)
    waiting[e].set(w)
    kv[e].set(k)
    if spec["lora"]:
        lora.labels(max_lora="4", waiting_lora_adapters=waiting_adapters,
                    running_lora_adapters=running_adapters).set_to_current_time()
    time.sleep(0.002)
"#;

/// The formulas of `docs/gateway-api-inference-extension.md` ("Data
/// parallelism") computed from prometheus_client's own merge of the
/// directory: the series the folded view must serve, as JSON
/// `[name, labels, value]`, and the merge's series of the same families.
const FORMULAS: &str = r#"
import json, sys
from prometheus_client import CollectorRegistry, multiprocess

registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry, path=sys.argv[1])
families = {f.name: f for f in registry.collect()}
out, merged = [], []

def without_engine(labels):
    return {k: v for k, v in labels.items() if k != "engine"}

def groups(family, merged_labels=()):
    order, members = [], {}
    for s in family.samples:
        merged.append([s.name, s.labels, s.value])
        key = json.dumps({k: v for k, v in sorted(without_engine(s.labels).items())
                          if k not in merged_labels})
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(s)
    return [members[k] for k in order]

info = families.get("vllm:cache_config_info")
for name in ["vllm:num_requests_waiting", "vllm:num_requests_running"]:
    for g in groups(families[name]):
        out.append([name, without_engine(g[0].labels), sum(s.value for s in g)])
weights = {s.labels["engine"]: float(s.labels["num_gpu_blocks"]) for s in reversed(info.samples)}
for g in groups(families["vllm:kv_cache_usage_perc"]):
    if len(g) == 1:
        value = g[0].value
    else:
        w = [weights[s.labels["engine"]] for s in g]
        value = sum(wi * s.value for wi, s in zip(w, g)) / sum(w)
    out.append(["vllm:kv_cache_usage_perc", without_engine(g[0].labels), value])
for g in groups(info):
    out.append(["vllm:cache_config_info", without_engine(g[0].labels), max(s.value for s in g)])
lora = families.get("vllm:lora_requests_info")
if lora is not None:
    adapters = ("running_lora_adapters", "waiting_lora_adapters")
    ranks = len({s.labels["engine"] for s in info.samples}) or 1
    for g in groups(lora, adapters):
        with_items = sorted((s for s in g if any(s.labels[a] for a in adapters)),
                            key=lambda s: -s.value)
        if not with_items:
            newest = sorted(g, key=lambda s: -s.value)[0]
            out.append([newest.name, newest.labels, newest.value])
            continue
        bound = with_items[min(ranks, len(with_items)) - 1].value
        chosen = [s for s in with_items if s.value >= bound]
        labels = dict(chosen[0].labels)
        for a in adapters:
            items = []
            for s in chosen:
                for item in s.labels[a].split(","):
                    if item and item not in items:
                        items.append(item)
            labels[a] = ",".join(items)
        out.append([lora.name, labels, chosen[0].value])
print(json.dumps({"folded": out, "merged": merged}))
"#;

/// vLLM's model name in the catalogue.
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// The five families of the built-in view the directory has.
const FAMILIES: [&str; 5] = [
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:lora_requests_info",
    "vllm:cache_config_info",
];

/// Runs one API server's [`API_SERVER`] to its end (its files stay, as a
/// live process's do).
fn api_server(python: &Path, dir: &Path, spec: &Value) {
    let catalogue = repo_root().join("src/demo/catalogue/vllm-0.33.0-stat-logger.json");
    run_python(
        python,
        API_SERVER,
        &[&spec.to_string(), catalogue.to_str().unwrap()],
        &[("PROMETHEUS_MULTIPROC_DIR", dir.to_str().unwrap())],
    );
}

/// The series of the families of [`FAMILIES`] in `text`, as `[name,
/// labels, value]`.
fn series(text: &str) -> Vec<Value> {
    Exposition::parse(text)
        .samples
        .into_iter()
        .filter(|s| FAMILIES.contains(&s.name.as_str()))
        .map(|s| json!([s.name, s.labels, s.value]))
        .collect()
}

/// Sorted by name and labels (the formulas list the families in their own
/// order; the view lists them in `/metrics`'s).
fn sorted(mut list: Vec<Value>) -> Vec<Value> {
    list.sort_by_key(|v| v.to_string());
    list
}

/// The Go program of `gateway_parser.rs` on `path`, EPP's way (no Accept,
/// `url.URL{Path}`), its report.
fn epp_reads(base: &str, path: &str) -> Option<Value> {
    let checker = super::gateway_parser::expfmt_check()?;
    let output = Command::new(checker)
        .args([
            "-host",
            base.strip_prefix("http://").unwrap(),
            "-path",
            path,
        ])
        .args(["-build", "url", "-metrics", &FAMILIES.join(",")])
        .output()
        .expect("run expfmt-check");
    assert!(
        output.status.success(),
        "{path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).expect("JSON"))
}

/// Two API servers, four engines: the second API server received the
/// newest stats of engines 1 and 3. Engine 0's first LoRA combination is
/// stale.
fn write_data_parallel_pod(python: &Path, dir: &Path) {
    let step = |e: u32, r: u32, w: u32, kv: f64, running: &str, waiting: &str| {
        json!([e, r, w, kv, running, waiting])
    };
    let first = json!({
        "engines": 4, "model": MODEL, "num_gpu_blocks": 4 * 27000, "lora": true,
        "steps": [
            step(0, 1, 0, 0.05, "old-lora", ""),
            step(0, 3, 1, 0.3, "sql-lora", ""),
            step(1, 2, 4, 0.2, "chat-lora", "sql-lora"),
            step(2, 0, 0, 0.0, "", ""),
            step(3, 5, 2, 0.7, "code-lora", ""),
        ],
    });
    let second = json!({
        "engines": 4, "model": MODEL, "num_gpu_blocks": 4 * 27000, "lora": true,
        "steps": [
            step(1, 6, 7, 0.45, "chat-lora", ""),
            step(3, 4, 9, 0.9, "code-lora", ""),
        ],
    });
    api_server(python, dir, &first);
    api_server(python, dir, &second);
}

#[test]
fn the_endpoint_picker_view_serves_the_pods_values_computed_from_prometheus_clients_merge() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_data_parallel_pod(&python, &dir);
    let expected: Value = serde_json::from_str(&run_python(
        &python,
        FORMULAS,
        &[dir.to_str().unwrap()],
        &[],
    ))
    .unwrap();
    let exporter = Exporter::launch(
        &["--dir", dir.to_str().unwrap()],
        &Launch {
            exact_negotiation: false,
            ..Launch::default()
        },
    );
    let view = exporter.get("/metrics/endpoint-picker").text();
    let whole = exporter.get("/metrics").text();
    // `/metrics` is never folded: prometheus_client's merge, every engine.
    assert_eq!(
        sorted(series(&whole)),
        sorted(expected["merged"].as_array().unwrap().clone()),
        "{whole}"
    );
    assert!(whole.contains("engine=\"3\""));
    // The view: one series per family and model, the formulas' values.
    let folded = expected["folded"].as_array().unwrap().clone();
    assert_eq!(sorted(series(&view)), sorted(folded.clone()), "{view}");
    assert_eq!(folded.len(), 5, "{folded:?}");
    assert!(!view.contains("engine="), "{view}");
    // `dump --view` prints what the view's path serves.
    let dumped = dump(&["--view", "endpoint-picker", dir.to_str().unwrap()]);
    assert_eq!(series(&String::from_utf8(dumped).unwrap()), series(&view));
    // The values the formulas give here, spelled out: 1 + 7 + 0 + 9 waiting
    // (engines 1 and 3 from the second API server), 3 + 6 + 0 + 4 running.
    let value = |name: &str| {
        Exposition::parse(&view)
            .named(name)
            .map(|s| s.value)
            .collect::<Vec<_>>()
    };
    assert_eq!(value("vllm:num_requests_waiting"), [1.0 + 7.0 + 0.0 + 9.0]);
    assert_eq!(value("vllm:num_requests_running"), [3.0 + 6.0 + 0.0 + 4.0]);
    let kv = value("vllm:kv_cache_usage_perc")[0];
    assert!((kv - (0.3 + 0.45 + 0.0 + 0.9) / 4.0).abs() < 1e-12, "{kv}");
    let cache = Exposition::parse(&view);
    let cache: Vec<_> = cache.named("vllm:cache_config_info").collect();
    assert_eq!(cache.len(), 1);
    assert_eq!(cache[0].labels["num_gpu_blocks"], "108000");

    // EPP's selection rule through Go's expfmt: the pod from the view, one
    // engine from /metrics.
    let Some(from_view) = epp_reads(&exporter.base, "/metrics/endpoint-picker") else {
        return;
    };
    let from_metrics = epp_reads(&exporter.base, "/metrics").unwrap();
    let epp = |report: &Value, name: &str| report["metrics"][name]["epp_value"].as_f64().unwrap();
    let merged = Exposition::parse(&whole);
    for (name, pod) in [
        ("vllm:num_requests_waiting", 17.0),
        ("vllm:num_requests_running", 13.0),
        ("vllm:kv_cache_usage_perc", kv),
    ] {
        assert_eq!(epp(&from_view, name), pod, "{name}");
        // From /metrics, the first series: one engine's value.
        let first = merged.named(name).next().unwrap();
        assert_eq!(epp(&from_metrics, name), first.value, "{name}");
        assert_eq!(
            from_metrics["metrics"][name]["epp_labels"]["engine"],
            first.labels["engine"].as_str()
        );
        assert_ne!(epp(&from_metrics, name), pod, "{name}");
    }
    assert_eq!(
        from_view["metrics"]["vllm:num_requests_waiting"]["label_names"],
        json!(["model_name"])
    );
    // LoRA: every rank's newest adapters, the stale one left out.
    let lora = &from_view["metrics"]["vllm:lora_requests_info"];
    assert_eq!(lora["samples"], 1);
    assert_eq!(
        lora["latest_lora_labels"],
        json!({"max_lora": "4", "running_lora_adapters": "code-lora,chat-lora,sql-lora", "waiting_lora_adapters": "sql-lora"}),
        "{from_view:#}"
    );
    let one_rank = &from_metrics["metrics"]["vllm:lora_requests_info"]["latest_lora_labels"];
    assert_eq!(
        one_rank["running_lora_adapters"], "code-lora",
        "{from_metrics:#}"
    );
    assert_eq!(
        from_view["metrics"]["vllm:cache_config_info"]["epp_labels"]["num_gpu_blocks"],
        "108000"
    );
}

#[test]
fn with_one_engine_the_view_gives_epp_the_values_of_metrics() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    let spec = json!({
        "engines": 1, "model": MODEL, "num_gpu_blocks": 27000, "lora": true,
        "steps": [[0, 2, 1, 0.1, "a", ""], [0, 4, 3, 0.3, "a,b", "c"], [0, 1, 0, 0.7, "", ""]],
    });
    api_server(&python, &dir, &spec);
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    let Some(from_view) = epp_reads(&exporter.base, "/metrics/endpoint-picker") else {
        return;
    };
    let from_metrics = epp_reads(&exporter.base, "/metrics").unwrap();
    // EPP reads LoRA by its own rule (the largest value), the rest by
    // getLatestMetric's.
    for name in FAMILIES {
        let fields: &[&str] = match name {
            "vllm:lora_requests_info" => &["latest_lora_labels", "latest_lora_value"],
            _ => &["epp_value"],
        };
        for field in fields {
            assert_eq!(
                from_view["metrics"][name][*field], from_metrics["metrics"][name][*field],
                "{name} {field}: {from_view:#} {from_metrics:#}"
            );
        }
    }
    assert_eq!(
        from_view["metrics"]["vllm:kv_cache_usage_perc"]["epp_value"],
        0.7
    );
    let blocks = |report: &Value| {
        report["metrics"]["vllm:cache_config_info"]["epp_labels"]["num_gpu_blocks"].clone()
    };
    assert_eq!(blocks(&from_view), "27000");
    assert_eq!(blocks(&from_view), blocks(&from_metrics));
}

#[test]
fn the_switch_restores_the_per_engine_slice_byte_for_byte() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_data_parallel_pod(&python, &dir);
    let config = tmp.path().join("config.yaml");
    std::fs::write(&config, "endpoint_picker: {fold: false}\n").unwrap();
    let exact = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let folded = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    let query: Vec<String> = FAMILIES.iter().map(|n| format!("name[]={n}")).collect();
    let slice_path = format!("/metrics?{}", query.join("&"));
    for headers in [
        &[][..],
        &[("Accept", crate::support::ACCEPT_OPENMETRICS)][..],
    ] {
        let view = exact.get_with("/metrics/endpoint-picker", headers).text();
        let slice = exact.get_with(&slice_path, headers).text();
        assert_eq!(view, slice, "{headers:?}");
        assert!(view.contains("engine=\"3\""), "{view}");
        // The same bytes /metrics has for those families, however folded
        // the default view is.
        assert_eq!(folded.get_with(&slice_path, headers).text(), slice);
        assert_ne!(
            folded.get_with("/metrics/endpoint-picker", headers).text(),
            view
        );
    }
}
