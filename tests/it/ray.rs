//! The Ray profile (`naming: ray`, `per_writer`, `ray.replica_id`): each
//! writer's series apart, labelled `WorkerId` as Ray's metrics agent labels
//! them, adding up to the merged series; SkyRL's curated keys the same from
//! both views. Every directory is written by real processes with the real
//! prometheus_client 0.26.0 (`tests/python/ray_replicas.py`: every `vllm:`
//! family of vLLM 0.33.0, one process per replica).
//!
//! Ray itself is in [`crate::ray_dashboard`] (its Serve-LLM dashboard's
//! queries against a real Prometheus) and [`crate::ray_agent`] (a real Ray
//! head's metrics agent beside the exporter).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use serde_json::Value as Json;
use tempfile::TempDir;

use crate::support::exposition::{Exposition, Sample};
use crate::support::{dump, python, repo_root, run_exporter, wait_for, Exporter};

pub(crate) const MERGED: &str = "naming: ray\nray: {replica_id: \"\"}\n";
pub(crate) const PER_WRITER: &str = "naming: ray\nper_writer: {}\nray: {replica_id: \"\"}\n";

/// `tests/python/ray_replicas.py` writing `dir`: with `hold`, its processes
/// stay alive (without writing) after their ticks until this is dropped.
pub(crate) struct Replicas {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The writers, as their files name them.
    pub(crate) writers: Vec<String>,
}

impl Replicas {
    pub(crate) fn run(python: &Path, dir: &Path, args: &[&str], hold: bool) -> Replicas {
        let mut command = Command::new(python);
        command
            .arg(repo_root().join("tests/python/ray_replicas.py"))
            .arg(dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if hold {
            command.arg("--stop-on-eof");
        }
        let mut child = command.spawn().expect("start ray_replicas.py");
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the writers line");
        let json: Json = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("ray_replicas.py did not start ({e}): {line:?}"));
        let writers = json["writers"]
            .as_array()
            .expect("writers")
            .iter()
            .map(|w| w.as_str().expect("writer").to_owned())
            .collect();
        let mut replicas = Replicas {
            child,
            stdin,
            writers,
        };
        if !hold {
            replicas.stop();
        }
        replicas
    }

    /// Stops the writers and waits for them.
    pub(crate) fn stop(&mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for ray_replicas.py");
        assert!(status.success(), "ray_replicas.py failed: {status}");
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A temporary directory with a `metrics` directory that
/// `ray_replicas.py ARGS` wrote (see [`Replicas::run`]).
pub(crate) fn written(python: &Path, args: &[&str], hold: bool) -> (TempDir, PathBuf, Replicas) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    let replicas = Replicas::run(python, &dir, args, hold);
    (tmp, dir, replicas)
}

/// `dump` of `dir` with the configuration `yaml`, parsed.
pub(crate) fn dump_with(dir: &Path, yaml: &str) -> Exposition {
    let config = dir.with_extension("yml");
    std::fs::write(&config, yaml).unwrap();
    let body = dump(&["--config", config.to_str().unwrap(), dir.to_str().unwrap()]);
    Exposition::parse(&String::from_utf8(body).expect("UTF-8"))
}

/// vLLM's gauge modes by Ray name (`ray_vllm_num_requests_running` ->
/// `mostrecent`), from the catalogue.
fn gauge_modes() -> HashMap<String, String> {
    let text = std::fs::read_to_string(
        repo_root().join("src/demo/catalogue/vllm-0.33.0-stat-logger.json"),
    )
    .unwrap();
    let catalogue: Json = serde_json::from_str(&text).unwrap();
    catalogue
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "gauge")
        .map(|m| {
            let name = m["name"].as_str().unwrap();
            (
                format!("ray_{}", name.replace(':', "_")),
                m["mode"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

type SeriesKey = (String, BTreeMap<String, String>);

/// The per-writer samples by series (name and labels without `WorkerId`),
/// each with its writer, in the order served.
fn by_series(split: &Exposition) -> BTreeMap<SeriesKey, Vec<(String, f64)>> {
    let mut out: BTreeMap<SeriesKey, Vec<(String, f64)>> = BTreeMap::new();
    for sample in &split.samples {
        let worker = sample
            .labels
            .get("WorkerId")
            .unwrap_or_else(|| panic!("{sample:?} has no WorkerId"))
            .clone();
        out.entry((sample.name.clone(), sample.labels_without("WorkerId")))
            .or_default()
            .push((worker, sample.value));
    }
    out
}

/// How a merged gauge sample follows from the writers' values.
fn expected_gauge(mode: &str, values: &[f64]) -> Option<f64> {
    match mode {
        "sum" | "livesum" => Some(values.iter().fold(0.0, |a, b| a + b)),
        "max" | "livemax" => values.iter().copied().reduce(f64::max),
        "min" | "livemin" => values.iter().copied().reduce(f64::min),
        _ => None, // mostrecent: one of them
    }
}

/// The writers of `dir`'s files of each kind (`counter`, `histogram`,
/// `gauge_mostrecent`, ...), in listing (`readdir`) order: the order in which
/// the merge adds their values.
fn listing_order(dir: &Path) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".db") else {
            continue;
        };
        let (kind, writer) = stem.rsplit_once('_').unwrap();
        out.entry(kind.to_owned())
            .or_default()
            .push(writer.to_owned());
    }
    out
}

/// The kind of file (see [`listing_order`]) a merged sample comes from.
fn file_kind(merged: &Exposition, name: &str, modes: &HashMap<String, String>) -> String {
    if let Some(mode) = modes.get(name) {
        return format!("gauge_{mode}");
    }
    if merged.types.get(name).map(String::as_str) == Some("counter") {
        return "counter".to_owned();
    }
    let base = ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name);
    assert_eq!(
        merged.types.get(base).map(String::as_str),
        Some("histogram"),
        "{name}"
    );
    "histogram".to_owned()
}

/// Checks that the writers' samples of `dir` add up to the merged ones
/// (counters, histograms, `sum` gauges bit for bit, added in listing order as
/// the merge adds them; `max`, `min` as such; `mostrecent` one of the
/// writers'). With `gauges: false`, gauges are left out (dead writers'
/// gauges are not served per writer).
fn assert_adds_up(dir: &Path, merged: &Exposition, split: &Exposition, gauges: bool) -> usize {
    let modes = gauge_modes();
    let series = by_series(split);
    let order = listing_order(dir);
    let mut checked = 0;
    for sample in &merged.samples {
        let Sample {
            name,
            labels,
            value,
        } = sample;
        let gauge_mode = modes.get(name.as_str());
        if (gauge_mode.is_some() && !gauges) || name.starts_with("ray_process_") {
            // The live writers' `process_*` series: `pid` merged, the
            // writer label per writer (checked by the caller).
            continue;
        }
        let writers = series
            .get(&(name.clone(), labels.clone()))
            .unwrap_or_else(|| panic!("no per-writer series for {name} {labels:?}"));
        let kind = file_kind(merged, name, &modes);
        let position = |writer: &str| order[&kind].iter().position(|w| w == writer);
        let mut in_order = writers.clone();
        in_order.sort_by_key(|(writer, _)| position(writer));
        let values: Vec<f64> = in_order.iter().map(|(_, v)| *v).collect();
        match gauge_mode {
            None => {
                let sum = values.iter().fold(0.0, |a, b| a + b);
                assert_eq!(
                    sum.to_bits(),
                    value.to_bits(),
                    "{name} {labels:?}: writers {writers:?} add up to {sum}, merged {value}"
                );
            }
            Some(mode) => match expected_gauge(mode, &values) {
                Some(expected) => assert_eq!(
                    expected.to_bits(),
                    value.to_bits(),
                    "{name} ({mode}) {labels:?}: writers {writers:?}, merged {value}"
                ),
                None => assert!(
                    values.contains(value),
                    "{name} ({mode}) {labels:?}: merged {value} is none of {writers:?}"
                ),
            },
        }
        checked += 1;
    }
    // And nothing per writer that the merged view does not have.
    for (name, labels) in series.keys() {
        if (gauges || !modes.contains_key(name.as_str())) && !name.starts_with("ray_process_") {
            assert!(
                merged
                    .samples
                    .iter()
                    .any(|s| &s.name == name && &s.labels == labels),
                "per-writer series {name} {labels:?} is not served merged"
            );
        }
    }
    checked
}

fn workers_of(split: &Exposition, name: &str) -> BTreeSet<String> {
    split
        .named(name)
        .map(|s| s.labels["WorkerId"].clone())
        .collect()
}

fn set(items: &[String]) -> BTreeSet<String> {
    items.iter().cloned().collect()
}

#[test]
fn per_writer_series_add_up_to_the_merged_series() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();

    // Three live replicas, all on engine 0 (each its own, as under Ray
    // Serve): every series is written by all three.
    let live = Replicas::run(&python, &dir, &["--model", "m", "--ticks", "3"], true);
    let merged = dump_with(&dir, MERGED);
    let split = dump_with(&dir, PER_WRITER);
    let checked = assert_adds_up(&dir, &merged, &split, true);
    assert!(checked > 500, "only {checked} merged samples checked");
    for family in [
        "ray_vllm_prompt_tokens_total",
        "ray_vllm_num_requests_running",
        "ray_vllm_iteration_tokens_total_count",
    ] {
        assert_eq!(workers_of(&split, family), set(&live.writers), "{family}");
    }
    // The writers' process metrics name them the same way.
    assert_eq!(
        workers_of(&split, "ray_process_cpu_seconds_total"),
        set(&live.writers)
    );
    // vLLM's labels plus ReplicaId and WorkerId, nothing else.
    assert_eq!(
        split.label_names("ray_vllm_time_to_first_token_seconds"),
        ["ReplicaId", "WorkerId", "engine", "model_name"]
            .map(String::from)
            .into()
    );

    // Two more replicas that exit: their totals stay, their gauges go.
    let dead = Replicas::run(
        &python,
        &dir,
        &["--model", "m", "--ticks", "2", "--replicas", "2"],
        false,
    );
    let merged = dump_with(&dir, MERGED);
    let split = dump_with(&dir, PER_WRITER);
    assert_adds_up(&dir, &merged, &split, false);
    let all: BTreeSet<String> = live.writers.iter().chain(&dead.writers).cloned().collect();
    assert_eq!(workers_of(&split, "ray_vllm_prompt_tokens_total"), all);
    assert_eq!(
        workers_of(&split, "ray_vllm_kv_cache_usage_perc"),
        set(&live.writers),
        "a dead writer's gauges are not served per writer"
    );
}

#[test]
fn per_writer_cannot_be_combined_with_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("ray.yml");
    std::fs::write(&config, PER_WRITER).unwrap();
    let (code, _, stderr) = run_exporter(&[
        "serve",
        "--dir",
        tmp.path().to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--dir.compact-dead-writers",
        "--web.listen-address",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("`per_writer` cannot be combined with --dir.compact-dead-writers"),
        "{stderr}"
    );
}

/// SkyRL's `VLLMMetricsScraper` (`skyrl/train/utils/vllm_metrics_scraper.py`
/// at a9564572): sums over every label set, the KV-cache mean, and the keys
/// it derives from two scrapes `window` seconds apart (a negative delta, a
/// counter reset, leaves its keys out).
fn skyrl_keys(prev: &Exposition, cur: &Exposition, window: f64) -> BTreeMap<String, f64> {
    fn total(e: &Exposition, name: &str) -> Option<f64> {
        let values: Vec<f64> = e.named(name).map(|s| s.value).collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }
    let delta = |name: &str| -> Option<f64> {
        let d = total(cur, name)? - total(prev, name)?;
        (d >= 0.0).then_some(d)
    };
    let mut out = BTreeMap::new();
    for (key, name) in [
        ("num_requests_running", "ray_vllm_num_requests_running"),
        ("num_requests_waiting", "ray_vllm_num_requests_waiting"),
    ] {
        if let Some(v) = total(cur, name) {
            out.insert(key.to_owned(), v);
        }
    }
    let kv: Vec<f64> = cur
        .named("ray_vllm_kv_cache_usage_perc")
        .map(|s| s.value)
        .collect();
    if !kv.is_empty() {
        out.insert(
            "kv_cache_usage_perc".to_owned(),
            kv.iter().sum::<f64>() / kv.len() as f64,
        );
    }
    if window > 0.0 {
        for (key, name) in [
            (
                "generation_throughput_tok_s",
                "ray_vllm_generation_tokens_total",
            ),
            ("prompt_throughput_tok_s", "ray_vllm_prompt_tokens_total"),
        ] {
            if let Some(d) = delta(name) {
                out.insert(key.to_owned(), d / window);
            }
        }
    }
    let mut ratio = |key: &str, num: &str, den: &str| {
        if let (Some(n), Some(d)) = (delta(num), delta(den)) {
            if d > 0.0 {
                out.insert(key.to_owned(), n / d);
            }
        }
    };
    ratio(
        "prefix_cache_hit_rate",
        "ray_vllm_prefix_cache_hits_total",
        "ray_vllm_prefix_cache_queries_total",
    );
    ratio(
        "ttft_seconds_avg",
        "ray_vllm_time_to_first_token_seconds_sum",
        "ray_vllm_time_to_first_token_seconds_count",
    );
    ratio(
        "tpot_seconds_avg",
        "ray_vllm_inter_token_latency_seconds_sum",
        "ray_vllm_inter_token_latency_seconds_count",
    );
    ratio(
        "draft_acceptance_rate",
        "ray_vllm_spec_decode_num_accepted_tokens_total",
        "ray_vllm_spec_decode_num_draft_tokens_total",
    );
    if let (Some(accepted), Some(drafts)) = (
        delta("ray_vllm_spec_decode_num_accepted_tokens_total"),
        delta("ray_vllm_spec_decode_num_drafts_total"),
    ) {
        if drafts > 0.0 {
            out.insert(
                "draft_mean_acceptance_length".to_owned(),
                1.0 + accepted / drafts,
            );
        }
    }
    out
}

fn assert_same_keys(merged: &BTreeMap<String, f64>, split: &BTreeMap<String, f64>, what: &str) {
    assert_eq!(
        merged.keys().collect::<Vec<_>>(),
        split.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (key, m) in merged {
        let s = split[key];
        assert!(
            (m - s).abs() <= 1e-12 * m.abs().max(1.0),
            "{what}: {key} is {m} merged, {s} per writer"
        );
    }
}

#[test]
fn skyrl_keys_are_the_same_per_writer_and_merged() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    // One pod's three data-parallel engines, one process each.
    let args = ["--model", "m", "--distinct-engines", "--ticks"];
    let snapshot = || (dump_with(&dir, MERGED), dump_with(&dir, PER_WRITER));

    let first = Replicas::run(&python, &dir, &[&args[..], &["2"]].concat(), true);
    let a = snapshot();
    drop(first);
    // The engines restart (new processes, the old files stay) and go on.
    let second = Replicas::run(&python, &dir, &[&args[..], &["5"]].concat(), true);
    let b = snapshot();
    let merged_ab = skyrl_keys(&a.0, &b.0, 10.0);
    let split_ab = skyrl_keys(&a.1, &b.1, 10.0);
    assert_same_keys(&merged_ab, &split_ab, "a -> b");
    for key in [
        "num_requests_running",
        "kv_cache_usage_perc",
        "prompt_throughput_tok_s",
        "prefix_cache_hit_rate",
        "ttft_seconds_avg",
        "tpot_seconds_avg",
        "draft_mean_acceptance_length",
    ] {
        assert!(merged_ab.contains_key(key), "{key} missing: {merged_ab:?}");
    }
    drop(second);

    // The pod restarts with an empty directory: every counter went back,
    // and both views skip the rates.
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let _third = Replicas::run(&python, &dir, &[&args[..], &["1"]].concat(), true);
    let c = snapshot();
    let merged_bc = skyrl_keys(&b.0, &c.0, 10.0);
    let split_bc = skyrl_keys(&b.1, &c.1, 10.0);
    assert_same_keys(&merged_bc, &split_bc, "b -> c");
    assert!(
        !merged_bc.contains_key("prompt_throughput_tok_s"),
        "{merged_bc:?}"
    );
    assert!(
        merged_bc.contains_key("num_requests_running"),
        "{merged_bc:?}"
    );
}

#[test]
fn a_missing_ray_log_directory_keeps_the_pids_and_says_so() {
    let Some(python) = python() else { return };
    let (tmp, dir, replicas) = written(
        &python,
        &["--model", "m", "--ticks", "1", "--replicas", "2"],
        false,
    );
    let config = tmp.path().join("ray.yml");
    let missing = tmp.path().join("no-ray-here");
    std::fs::write(
        &config,
        format!(
            "naming: ray\nper_writer: {{ray_logs: {}}}\n",
            missing.display()
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = run_exporter(&[
        "dump",
        "--config",
        config.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot read Ray's log directory {}",
            missing.display()
        )),
        "{stderr}"
    );
    let split = Exposition::parse(&String::from_utf8(stdout).unwrap());
    assert_eq!(
        workers_of(&split, "ray_vllm_prompt_tokens_total"),
        set(&replicas.writers)
    );
}

/// The served body's `WorkerId` values of `family`, per scrape.
fn served_workers(exporter: &Exporter, family: &str) -> BTreeSet<String> {
    let body = exporter.metrics();
    let parsed = Exposition::parse(crate::support::merged_part(&body));
    parsed
        .named(family)
        .filter_map(|s| s.labels.get("WorkerId").cloned())
        .collect()
}

#[test]
fn per_writer_follows_a_reload_and_is_refused_beside_compaction() {
    let Some(python) = python() else { return };
    let (tmp, dir, replicas) = written(
        &python,
        &["--model", "m", "--ticks", "2", "--replicas", "2"],
        true,
    );
    let config = tmp.path().join("ray.yml");
    let write = |text: &str| {
        let new = config.with_extension("new");
        std::fs::write(&new, text).unwrap();
        std::fs::rename(&new, &config).unwrap();
    };
    write(MERGED);
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let exporter = Exporter::start(&["--dir", &path(&dir), "--config", &path(&config)]);
    assert!(served_workers(&exporter, "ray_vllm_prompt_tokens_total").is_empty());
    write(PER_WRITER);
    wait_for("the per-writer view", || {
        (served_workers(&exporter, "ray_vllm_prompt_tokens_total") == set(&replicas.writers))
            .then_some(())
    });
    write(MERGED);
    wait_for("the merged view again", || {
        served_workers(&exporter, "ray_vllm_prompt_tokens_total")
            .is_empty()
            .then_some(())
    });

    // With compaction, a reload to per_writer fails and the merged view stays.
    let compacting = Exporter::start(&[
        "--dir",
        &path(&dir),
        "--config",
        &path(&config),
        "--dir.compact-dead-writers",
    ]);
    write(PER_WRITER);
    compacting.signal("HUP");
    let failed = wait_for("the refused reload", || {
        compacting.sync_logs();
        compacting.find_log("Configuration reload failed; keeping the previous configuration.")
    });
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("`per_writer` cannot be combined with --dir.compact-dead-writers"),
        "{failed}"
    );
    assert!(served_workers(&compacting, "ray_vllm_prompt_tokens_total").is_empty());
}
