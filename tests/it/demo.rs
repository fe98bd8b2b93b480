//! The `demo` simulation: prometheus_client's own collector reads the files it
//! writes to exactly the exporter's output, and `multiproc-exporter demo`
//! serves them over HTTP.

use crate::support::{dump, get, python, run_python, start_demo, start_demo_serving, wait_for};
use multiproc_exporter::demo::{Demo, DemoConfig};

const PYTHON_MERGE: &str = r#"
import sys
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.openmetrics import exposition as om
registry = CollectorRegistry()
MultiProcessCollector(registry, path=sys.argv[1])
encode = om.generate_latest if sys.argv[2] == 'openmetrics' else generate_latest
sys.stdout.write(encode(registry, escaping=sys.argv[3]).decode('utf-8'))
"#;

#[test]
fn python_reads_the_demo_files_to_the_exporters_bytes() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = DemoConfig::new(dir.path());
    config.worker_restart_ticks = 7; // exercise restarts: live gauge files vanish, new pids appear
    let mut demo = Demo::new(config).expect("demo");
    for _ in 0..25 {
        demo.step().expect("step");
    }
    let path = dir.path().to_str().expect("utf-8");
    for format in ["text", "openmetrics"] {
        for escaping in ["underscores", "allow-utf-8"] {
            let ours = String::from_utf8(dump(&["--format", format, "--escaping", escaping, path]))
                .expect("utf-8");
            let theirs = run_python(&python, PYTHON_MERGE, &[path, format, escaping], &[]);
            assert!(
                ours.contains("vllm:") && ours.contains("lmcache:"),
                "{ours}"
            );
            assert_eq!(ours, theirs, "{format} {escaping}");
        }
    }
}

#[test]
fn demo_command_serves_a_live_directory() {
    let (mut demo, first) = start_demo(&[]);
    let url = format!("{}/metrics", demo.base);
    let counter = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("vllm:generation_tokens_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let later = wait_for("the demo's counters to move", || {
        let text = String::from_utf8(get(&url, &[]).body).ok()?;
        (counter(&text) > counter(&first)).then_some(text)
    });
    assert!(later.contains("# TYPE vllm:time_to_first_token_seconds histogram"));
    // The endpoint picker's view: exactly the built-in view's families that
    // the demo writes, in /metrics's order. Families appear as the demo's
    // processes write them: wait until the view and the /metrics read after
    // it agree and hold the families asserted (a view that never does fails).
    let declared = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| Some(l.strip_prefix("# TYPE ")?.split(' ').next()?.to_owned()))
            .collect()
    };
    let required = [
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:cache_config_info",
        "vllm:lora_requests_info",
    ];
    wait_for(
        "the view to hold /metrics's endpoint-picker families",
        || {
            let view = String::from_utf8(get(&format!("{url}/endpoint-picker"), &[]).body).ok()?;
            let whole = String::from_utf8(get(&url, &[]).body).ok()?;
            let typed = declared(&view);
            let expected: Vec<String> = declared(&whole)
                .into_iter()
                .filter(|name| {
                    multiproc_exporter::transform::views::ENDPOINT_PICKER_FAMILIES
                        .contains(&name.as_str())
                })
                .collect();
            (typed == expected && required.iter().all(|f| typed.iter().any(|t| t == f)))
                .then_some(())
        },
    );
    demo.signal("TERM");
    let status = demo.wait_exit();
    assert!(status.success(), "demo exits cleanly on SIGTERM: {status}");
}

/// The demo's families as prometheus_client reads them: name -> type, help,
/// label names (without `le`), histogram bounds (without `+Inf`) and the
/// number of samples.
const PYTHON_FAMILIES: &str = r#"
import json, sys
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
registry = CollectorRegistry()
MultiProcessCollector(registry, path=sys.argv[1])
out = {}
for f in registry.collect():
    labels, bounds = set(), set()
    for s in f.samples:
        labels |= {k for k in s.labels if k != "le"}
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf":
            bounds.add(float(s.labels["le"]))
    out[f.name] = {"type": f.type, "help": f.documentation, "labels": sorted(labels),
                   "buckets": sorted(bounds), "samples": len(f.samples)}
json.dump(out, sys.stdout)
"#;

/// Compares the demo's families with a reference extracted from the real
/// library (`scripts/vllm-catalogue.py`): type, help, label names and
/// histogram bounds of every family both have, and that every family the
/// library writes by the moment `complete` names (`written` at start-up,
/// `after_traffic` once it served) is written by the demo. Returns the
/// reference's family names.
fn compare_with(
    reference_file: &str,
    written: &serde_json::Map<String, serde_json::Value>,
    complete: &str,
    problems: &mut Vec<String>,
) -> Vec<String> {
    let reference: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(
            crate::support::repo_root()
                .join("src/demo/catalogue")
                .join(reference_file),
        )
        .expect("the reference"),
    )
    .expect("JSON");
    let mut names = Vec::new();
    for family in &reference {
        let name = family["name"].as_str().expect("name");
        names.push(name.to_owned());
        let Some(ours) = written.get(name) else {
            if family[complete] == true {
                problems.push(format!(
                    "{name}: {complete} in the library, not in the demo"
                ));
            }
            continue;
        };
        // A `mostrecent` gauge never set has no sample yet (in vLLM too).
        let sampled = ours["samples"] != 0;
        for field in ["type", "help"] {
            if ours[field] != family[field] {
                problems.push(format!(
                    "{name}: {field} {} vs {}",
                    ours[field], family[field]
                ));
            }
        }
        let mut labels: Vec<&str> = family["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .filter_map(|l| l.as_str())
            .collect();
        if family["mode"] == "all" || family["mode"] == "liveall" {
            labels.push("pid");
        }
        labels.sort_unstable();
        let ours_labels: Vec<&str> = ours["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .filter_map(|l| l.as_str())
            .collect();
        if sampled && ours_labels != labels {
            problems.push(format!("{name}: labels {ours_labels:?} vs {labels:?}"));
        }
        if sampled && family["type"] == "histogram" && ours["buckets"] != family["buckets"] {
            problems.push(format!(
                "{name}: buckets {} vs {}",
                ours["buckets"], family["buckets"]
            ));
        }
    }
    names
}

/// The demo's directory as prometheus_client reads it, checked against both
/// references at the moment `complete` names; also that the demo writes no
/// family either library lacks.
fn check_demo(python: &std::path::Path, dir: &std::path::Path, complete: &str) -> Vec<String> {
    let written: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&run_python(
        python,
        PYTHON_FAMILIES,
        &[dir.to_str().expect("utf-8")],
        &[],
    ))
    .expect("JSON");
    let mut problems = Vec::new();
    let mut known = compare_with(
        "vllm-0.33.0-stat-logger.json",
        &written,
        complete,
        &mut problems,
    );
    known.extend(compare_with(
        "lmcache-0.5.6-prometheus-logger.json",
        &written,
        complete,
        &mut problems,
    ));
    for name in written.keys() {
        if !known.contains(name) {
            problems.push(format!(
                "{name}: written by the demo, defined by neither library"
            ));
        }
    }
    problems
}

/// Regression: the demo wrote 15 of vLLM's help texts differently from vLLM
/// 0.33.0 (for example "Bandwidth" where vLLM says "Flops"), an old 16-label
/// `vllm:cache_config_info`, and left out families every vLLM writes at
/// start-up (`vllm:mm_cache_queries`, `vllm:mm_cache_hits`, 42 of LMCache's
/// gauges, ...) or once it serves (the 14 flat `kv_offload_*` families, LoRA,
/// sleep mode, weight updates, LMCache's remote and P2P statistics). The
/// references are extracted from vLLM 0.33.0's and LMCache 0.5.6's own code
/// by `scripts/vllm-catalogue.py`.
#[test]
fn the_demo_writes_vllm_0_33_0s_own_definitions() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut demo = Demo::new(DemoConfig::new(dir.path())).expect("demo");
    let mut problems = check_demo(&python, dir.path(), "written");
    for _ in 0..5 {
        demo.step().expect("step");
    }
    problems.extend(check_demo(&python, dir.path(), "after_traffic"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_sglang_demo_writes_sglang_0_5_23s_own_definitions_as_prometheus_client_reads_them() {
    use multiproc_exporter::demo::sglang::{catalogue, SglangDemo};
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut demo = SglangDemo::new(dir.path(), 2, 0).expect("demo");
    for _ in 0..10 {
        demo.step().expect("step");
    }
    let path = dir.path().to_str().expect("utf-8");
    // prometheus_client's collector reads the files to the exporter's bytes.
    for format in ["text", "openmetrics"] {
        for escaping in ["underscores", "allow-utf-8"] {
            let ours = String::from_utf8(dump(&["--format", format, "--escaping", escaping, path]))
                .expect("utf-8");
            let theirs = run_python(&python, PYTHON_MERGE, &[path, format, escaping], &[]);
            assert_eq!(ours, theirs, "{format} {escaping}");
        }
    }
    // Every family SGLang's scheduler and tokenizer define, with its type;
    // each scheduler gauge once per rank.
    let text = run_python(&python, PYTHON_MERGE, &[path, "text", "allow-utf-8"], &[]);
    let types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect();
    let written: Vec<_> = catalogue().iter().filter(|f| f.written()).collect();
    assert_eq!(types.len(), written.len(), "{types:?}");
    for family in written {
        let (name, kind) = match family.kind {
            multiproc_exporter::demo::FamilyType::Counter => {
                (format!("{}_total", family.name), "counter")
            }
            multiproc_exporter::demo::FamilyType::Gauge => (family.name.clone(), "gauge"),
            multiproc_exporter::demo::FamilyType::Histogram => (family.name.clone(), "histogram"),
            multiproc_exporter::demo::FamilyType::Summary => (family.name.clone(), "summary"),
        };
        assert!(
            types.contains(&format!("{name} {kind}").as_str()),
            "{name} {kind}: {types:?}"
        );
    }
    for rank in ["0", "1"] {
        let series = format!("sglang:num_running_reqs{{engine_type=\"unified\",model_name=\"Qwen/Qwen3-0.6B\",moe_ep_rank=\"0\",pp_rank=\"0\",tp_rank=\"{rank}\"}} ");
        assert!(text.contains(&series), "{series}\n{text}");
    }
}

#[test]
fn demo_command_serves_sglang_with_its_endpoint_picker_families() {
    let (demo, metrics) =
        start_demo_serving(&["--demo.engine", "sglang"], "sglang:prompt_tokens_total");
    assert!(!metrics.contains("vllm:"), "{metrics}");
    // The view's gauges are written by the scheduler processes, which may
    // start after the first counter is served: wait for what is asserted
    // (each family typed and with a sample), not for a fixed time.
    let url = format!("{}/metrics/endpoint-picker", demo.base);
    let families = [
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        "sglang:token_usage",
    ];
    wait_for("the view to serve the schedulers' gauges", || {
        let view = String::from_utf8(get(&url, &[]).body).ok()?;
        families
            .iter()
            .all(|family| {
                view.contains(&format!("# TYPE {family} gauge\n"))
                    && view.lines().any(|l| has_sample_of(l, family))
            })
            .then_some(())
    });
}

/// Whether `line` is a sample of `family` (its name, then labels or a space).
fn has_sample_of(line: &str, family: &str) -> bool {
    line.strip_prefix(family)
        .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
}
