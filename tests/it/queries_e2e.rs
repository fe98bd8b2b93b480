//! Every query of the monitoring files runs against a real Prometheus and
//! returns data, under every naming, and the test alerts really fire.
//!
//! Two vLLM "pods" are simulated by real Python processes writing with
//! prometheus_client 0.26.0 in multiprocess mode (`tests/python/vllm_full_load.py`):
//! a healthy Llama and an overloaded Qwen (KV cache above 95 %, a long queue,
//! failing NIXL transfers), whose directory also holds a corrupt file. Each
//! directory is served by three exporters, one per way the names can read in
//! Prometheus:
//!
//! * job `vllm`: `naming: prometheus`, text format (`--web.disable-openmetrics`),
//!   so Prometheus stores `vllm:*`, as it does when it scrapes vLLM itself;
//! * job `vllm-openmetrics`: `naming: prometheus`, OpenMetrics, which
//!   Prometheus 2.x asks for with `escaping=underscores`: `vllm_*`;
//! * job `vllm-ray`: `naming: ray`: `ray_vllm_*`.
//!
//! A fourth job has an exporter whose directory does not exist and whose
//! configuration reload fails, and an exporter that is stopped after its
//! first scrapes. A fifth (`sglang`) serves an overloaded SGLang-like server
//! writing SGLang's families in a temporary subdirectory
//! (`tests/python/temporary_dir_server.py`). Prometheus (Debian's `prometheus` 2.42) scrapes everything
//! every second and evaluates every rule file of `deploy/prometheus/` every
//! second, with their `for` durations shortened to 1 s.
//!
//! Checked:
//! * every expression of every Grafana panel returns data, with the Grafana
//!   variables set as Grafana would (`$__rate_interval` = 1m, "All" = `.*`),
//!   for each naming; every template variable query finds the expected values;
//! * every rule expression returns data from the right job, every recorded
//!   series exists for both models under every naming with plausible values,
//!   and every rule evaluates without error;
//! * exactly the expected alerts fire: the four vLLM alerts for each Qwen
//!   engine (never for Llama) under every naming, the three SGLang alerts for
//!   the SGLang server, skipped files for the Qwen
//!   exporters, and the missing directory, failed reload and down exporter.

use crate::support;
use crate::support::monitoring;

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::monitoring::{
    dashboards, eventually, panel_queries, read_rules, rule_files, substitute, variables,
    Prometheus,
};
use crate::support::{python, repo_root, Exporter};
use serde_json::Value as Json;

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const QWEN: &str = "Qwen/Qwen2.5-7B-Instruct";
/// What Grafana makes of `$__rate_interval` for a 15 s scrape interval.
const RATE_INTERVAL: &str = "1m";

/// The names of a dashboard's template variables.
fn variable_names(dashboard: &Json) -> BTreeSet<String> {
    variables(dashboard)
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `tests/python/vllm_full_load.py` writing one pod's directory until dropped.
struct Writer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The ranges the writer's profile draws from.
    profile: Json,
}

impl Writer {
    fn start(python: &Path, dir: &Path, model: &str, profile: &str) -> Writer {
        let mut child = Command::new(python)
            .arg(repo_root().join("tests/python/vllm_full_load.py"))
            .arg(dir)
            .args(["--model", model, "--profile", profile, "--interval", "0.25"])
            .arg("--stop-on-eof")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the writers");
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the writers' ready line");
        let ready: Json = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("writers did not start ({e}): {line:?}"));
        Writer {
            child,
            stdin,
            profile: ready["profile"].clone(),
        }
    }

    /// `(low, high)` of a profile value.
    fn range(&self, key: &str) -> (f64, f64) {
        let r = &self.profile[key];
        (r[0].as_f64().expect("low"), r[1].as_f64().expect("high"))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.stdin.take()); // end of input: the writers stop
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One naming scheme as scraped in this test.
struct Scheme {
    naming: &'static str,
    job: &'static str,
    vllm_prefix: String,
    lmcache_prefix: String,
    rule_file: String,
    /// `(llama exporter, qwen exporter)` instances (`host:port`).
    instances: (String, String),
}

fn instance(exporter: &Exporter) -> String {
    exporter.base.trim_start_matches("http://").to_owned()
}

/// The rule files with every `for:` shortened to 1 s, written into `dir`.
fn rule_files_for_test(dir: &Path) -> Vec<PathBuf> {
    std::fs::create_dir(dir).expect("mkdir rules");
    let mut out = Vec::new();
    for file in rule_files() {
        let text = std::fs::read_to_string(&file).expect("read rules");
        let fast: String = text
            .lines()
            .map(|line| {
                let trimmed = line.trim_start();
                if trimmed.starts_with("for: ") {
                    format!("{}for: 1s\n", &line[..line.len() - trimmed.len()])
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        let copy = dir.join(file.file_name().expect("name"));
        std::fs::write(&copy, fast).expect("write rules");
        out.push(copy);
    }
    out
}

fn prometheus_config(rules: &[PathBuf], jobs: &[(&str, Vec<String>)]) -> String {
    let mut config = String::from(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\nrule_files:\n",
    );
    for rule in rules {
        config.push_str(&format!("  - {}\n", rule.display()));
    }
    config.push_str("scrape_configs:\n");
    for (job, targets) in jobs {
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        config.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ));
    }
    config
}

/// A query to run, and where it comes from.
struct Query {
    origin: String,
    promql: String,
    /// Every series that has a `job` label must have this one.
    job: Option<String>,
}

/// Runs every query until each returns data; panics at once on a query
/// error, and after the timeout with the queries that still return nothing.
fn assert_all_return_data(prometheus: &Prometheus, queries: &[Query]) {
    eventually(
        "every query to return data",
        Duration::from_secs(60),
        || {
            let mut empty = Vec::new();
            for q in queries {
                let result = prometheus
                    .query(&q.promql)
                    .unwrap_or_else(|e| panic!("{}: query failed: {e}\n{}", q.origin, q.promql));
                if result.is_empty() {
                    empty.push(format!(
                        "{}:\n  {}",
                        q.origin,
                        q.promql.replace('\n', "\n  ")
                    ));
                }
                if let Some(job) = &q.job {
                    for (labels, _) in &result {
                        if let Some(found) = labels["job"].as_str() {
                            assert_eq!(found, job, "{}: {}", q.origin, q.promql);
                        }
                    }
                }
            }
            if empty.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} queries return no data:\n{}",
                    empty.len(),
                    empty.join("\n")
                ))
            }
        },
    );
}

/// `alertname key=value ...` of an alert, with the labels that identify it.
fn alert_key(labels: &Json) -> String {
    let mut key = labels["alertname"].as_str().unwrap_or("?").to_owned();
    for name in ["job", "instance", "model_name", "engine", "reason"] {
        if let Some(v) = labels[name].as_str() {
            key.push_str(&format!(" {name}={v}"));
        }
    }
    key
}

#[test]
fn every_dashboard_and_rule_query_returns_data_and_the_test_alerts_fire() {
    let Some(python) = python() else { return };
    let Some(prometheus_bin) = support::tool("prometheus") else {
        return;
    };
    let started = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let llama_dir = work.path().join("pod-llama");
    let qwen_dir = work.path().join("pod-qwen");
    let empty_dir = work.path().join("empty");
    let missing_dir = work.path().join("missing");
    for dir in [&llama_dir, &qwen_dir, &empty_dir] {
        std::fs::create_dir(dir).expect("mkdir");
    }
    // Shorter than a file header: skipped with reason short_file.
    std::fs::write(qwen_dir.join("counter_999999.db"), b"bad").expect("write bad file");
    let ray_config = work.path().join("ray.yml");
    std::fs::write(&ray_config, "naming: ray\n").expect("write config");
    let reloaded_config = work.path().join("reloaded.yml");
    std::fs::write(&reloaded_config, "naming: prometheus\n").expect("write config");

    let llama = Writer::start(&python, &llama_dir, LLAMA, "healthy");
    let qwen = Writer::start(&python, &qwen_dir, QWEN, "overloaded");

    let path = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
    let (llama_dir, qwen_dir, ray_config) = (path(&llama_dir), path(&qwen_dir), path(&ray_config));
    let namings: [(&str, &str, &[&str]); 3] = [
        ("prometheus", "vllm", &["--web.disable-openmetrics"]),
        ("underscores", "vllm-openmetrics", &[]),
        ("ray", "vllm-ray", &["--config", &ray_config]),
    ];
    let mut pod_exporters = Vec::new();
    let mut schemes = Vec::new();
    for (naming, job, args) in namings {
        let start = |dir: &str| {
            let mut all = vec!["--dir", dir];
            all.extend_from_slice(args);
            Exporter::start(&all)
        };
        let (llama_exporter, qwen_exporter) = (start(&llama_dir), start(&qwen_dir));
        let (prefix, rule_file) = match naming {
            "prometheus" => ("", "vllm.rules.yml".to_owned()),
            "ray" => ("ray_", format!("vllm-{naming}.rules.yml")),
            _ => ("", format!("vllm-{naming}.rules.yml")),
        };
        let separator = if naming == "prometheus" { ":" } else { "_" };
        schemes.push(Scheme {
            naming,
            job,
            vllm_prefix: format!("{prefix}vllm{separator}"),
            lmcache_prefix: format!("{prefix}lmcache{separator}"),
            rule_file,
            instances: (instance(&llama_exporter), instance(&qwen_exporter)),
        });
        pod_exporters.push((llama_exporter, qwen_exporter));
    }
    let misconfigured = Exporter::start(&[
        "--dir",
        &path(&missing_dir),
        "--config",
        &path(&reloaded_config),
    ]);
    let doomed = Exporter::start(&["--dir", &path(&empty_dir)]);
    // A dead writer's file and a corrupt compaction journal: every
    // compaction round fails.
    let stuck_dir = work.path().join("stuck");
    std::fs::create_dir(&stuck_dir).expect("mkdir");
    let gone = {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep");
        child.kill().expect("kill");
        child.wait().expect("wait");
        child.id()
    };
    support::write_db(
        &stuck_dir.join(format!("counter_{gone}.db")),
        &[(
            support::key("app_requests", "app_requests_total", &[], "Requests."),
            1.0,
        )],
    );
    std::fs::write(
        stuck_dir.join(".multiproc-exporter-compaction"),
        "garbage\n",
    )
    .expect("write journal");
    let stuck = Exporter::start(&[
        "--dir",
        &path(&stuck_dir),
        "--writers.liveness=proc",
        "--dir.compact-dead-writers",
    ]);
    let stuck_instance = instance(&stuck);
    let (misconfigured_instance, doomed_instance) = (instance(&misconfigured), instance(&doomed));

    // An overloaded SGLang server writing in a temporary subdirectory, and
    // its sidecar (job `sglang`).
    let sglang_dir = work.path().join("pod-sglang");
    std::fs::create_dir(&sglang_dir).expect("mkdir");
    let _sglang = crate::temporary_runs::Server::start_overloaded(&python, &sglang_dir);
    // The text format: Prometheus stores `sglang:*` as SGLang's own /metrics
    // gives them (sglang.rules.yml's names).
    let sglang_exporter =
        Exporter::start(&["--dir", &path(&sglang_dir), "--web.disable-openmetrics"]);
    let sglang_instance = instance(&sglang_exporter);

    let rules = rule_files_for_test(&work.path().join("rules"));
    let mut jobs: Vec<(&str, Vec<String>)> = schemes
        .iter()
        .map(|s| (s.job, vec![s.instances.0.clone(), s.instances.1.clone()]))
        .collect();
    jobs.push(("sglang", vec![sglang_instance.clone()]));
    jobs.push((
        "misconfigured",
        vec![
            misconfigured_instance.clone(),
            doomed_instance.clone(),
            stuck_instance.clone(),
        ],
    ));
    let prometheus = Prometheus::start(
        &prometheus_bin,
        work.path(),
        &prometheus_config(&rules, &jobs),
    );

    // Prometheus starts its scrape loops a few seconds after start-up.
    let targets = jobs.iter().map(|(_, t)| t.len()).sum::<usize>();
    eventually("every target up", Duration::from_secs(60), || {
        let up = prometheus.query("up == 1")?;
        (up.len() == targets)
            .then_some(())
            .ok_or(format!("up: {up:?}"))
    });
    // Break the third job: the doomed exporter stops, the other one's
    // configuration file becomes invalid (the exporter reloads on change).
    drop(doomed);
    std::fs::write(&reloaded_config, "naming: [\n").expect("break config");

    // Every panel query of every dashboard, per naming (the exporter's own
    // dashboard once: its metrics are never renamed).
    let mut queries = Vec::new();
    // Per naming, then the exporter's own dashboard.
    let mut dashboard_queries = vec![0usize; schemes.len() + 1];
    for (file, dashboard) in dashboards() {
        let file = file.file_name().unwrap().to_string_lossy().into_owned();
        let names: BTreeSet<String> = variables(&dashboard)
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_owned())
            .collect();
        let per_scheme = names.contains("vllm_prefix") || names.contains("lmcache_prefix");
        if names.contains("sglang_prefix") {
            // SGLang's dashboard: the `sglang` job, its names unchanged.
            let values = [
                ("sglang_prefix", "sglang:"),
                ("job", "sglang"),
                ("model_name", ".*"),
                ("instance", ".*"),
                ("__rate_interval", RATE_INTERVAL),
            ];
            for q in panel_queries(&dashboard) {
                queries.push(Query {
                    origin: format!("{file}: panel {:?} query {}", q.panel, q.ref_id),
                    promql: substitute(&q.expr, &values),
                    job: Some("sglang".to_owned()),
                });
            }
            continue;
        }
        for (i, scheme) in schemes.iter().enumerate() {
            if !per_scheme && i > 0 {
                break;
            }
            let job = if per_scheme { scheme.job } else { ".*" };
            let values = [
                ("vllm_prefix", scheme.vllm_prefix.as_str()),
                ("lmcache_prefix", scheme.lmcache_prefix.as_str()),
                ("job", job),
                ("model_name", ".*"),
                ("instance", ".*"),
                ("__rate_interval", RATE_INTERVAL),
            ];
            for q in panel_queries(&dashboard) {
                queries.push(Query {
                    origin: format!(
                        "{file} ({}): panel {:?} query {}",
                        scheme.naming, q.panel, q.ref_id
                    ),
                    promql: substitute(&q.expr, &values),
                    job: per_scheme.then(|| scheme.job.to_owned()),
                });
                dashboard_queries[if per_scheme { i } else { schemes.len() }] += 1;
            }
        }
    }
    // Every rule expression, as written (the vLLM rules of one naming find
    // that naming's job only).
    let mut rule_queries = 0;
    for file in rule_files() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let job = schemes
            .iter()
            .find(|s| s.rule_file == name)
            .map(|s| s.job.to_owned())
            .or_else(|| (name == "sglang.rules.yml").then(|| "sglang".to_owned()));
        for rule in read_rules(&file) {
            queries.push(Query {
                origin: format!("{name}: {}", rule.name()),
                promql: rule.expr.clone(),
                job: job.clone(),
            });
            rule_queries += 1;
        }
    }
    let data_started = Instant::now();
    assert_all_return_data(&prometheus, &queries);
    let data_after = data_started.elapsed();

    // Template variables find what Grafana would offer.
    for (file, dashboard) in dashboards() {
        let file = file.file_name().unwrap().to_string_lossy().into_owned();
        if variable_names(&dashboard).contains("sglang_prefix") {
            let values = [
                ("sglang_prefix", "sglang:"),
                ("job", "sglang"),
                ("model_name", ".*"),
            ];
            for v in variables(&dashboard)
                .iter()
                .filter(|v| v["type"] == "query")
            {
                let name = v["name"].as_str().unwrap();
                let query = substitute(v["query"]["query"].as_str().unwrap(), &values);
                let (selector, label) = monitoring::parse_label_values(&query);
                let found = prometheus.label_values(&selector, &label);
                let expected = match name {
                    "sglang_prefix" => "sglang:num_running_reqs".to_owned(),
                    "job" => "sglang".to_owned(),
                    "model_name" => "qwen".to_owned(),
                    "instance" => sglang_instance.clone(),
                    other => panic!("{file}: no expectation for variable {other}"),
                };
                assert!(
                    found.contains(&expected),
                    "{file}: variable {name} ({query}): {found:?} lacks {expected}"
                );
            }
            continue;
        }
        for scheme in &schemes {
            let values = [
                ("vllm_prefix", scheme.vllm_prefix.as_str()),
                ("lmcache_prefix", scheme.lmcache_prefix.as_str()),
                ("job", scheme.job),
                ("model_name", ".*"),
            ];
            for v in variables(&dashboard)
                .iter()
                .filter(|v| v["type"] == "query")
            {
                let name = v["name"].as_str().unwrap();
                let query = substitute(v["query"]["query"].as_str().unwrap(), &values);
                let (selector, label) = monitoring::parse_label_values(&query);
                let mut found = prometheus.label_values(&selector, &label);
                if let Some(regex) = v["regex"].as_str().filter(|r| !r.is_empty()) {
                    // `/^(A|B)/`: the value is the alternative a name starts with.
                    let alternatives = regex
                        .strip_prefix("/^(")
                        .and_then(|r| r.strip_suffix(")/"))
                        .unwrap_or_else(|| panic!("{file}: unexpected regex {regex}"));
                    found = found
                        .iter()
                        .filter_map(|f| alternatives.split('|').find(|a| f.starts_with(a)))
                        .map(str::to_owned)
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect();
                }
                let expected: Vec<String> = match name {
                    "vllm_prefix" => vec![scheme.vllm_prefix.clone()],
                    "lmcache_prefix" => vec![scheme.lmcache_prefix.clone()],
                    "model_name" => vec![LLAMA.into(), QWEN.into()],
                    "instance" if selector.contains("multiproc_exporter") => vec![],
                    "instance" => vec![scheme.instances.0.clone(), scheme.instances.1.clone()],
                    "job" if selector.contains("multiproc_exporter") => {
                        let mut all: Vec<String> =
                            schemes.iter().map(|s| s.job.to_owned()).collect();
                        all.push("misconfigured".into());
                        all
                    }
                    "job" => vec![scheme.job.into()],
                    other => panic!("{file}: no expectation for variable {other}"),
                };
                assert!(
                    !found.is_empty(),
                    "{file}: variable {name} ({query}) finds nothing"
                );
                for e in &expected {
                    assert!(
                        found.contains(e),
                        "{file}: variable {name} ({query}): {found:?} lacks {e}"
                    );
                }
            }
        }
    }

    // Every recorded series, for both models under both namings, plausible.
    let records: Vec<String> = read_rules(&monitoring::rules_dir().join("vllm.rules.yml"))
        .into_iter()
        .filter_map(|r| r.record)
        .collect();
    for scheme in &schemes {
        for record in &records {
            let promql = format!("{record}{{naming=\"{}\"}}", scheme.naming);
            let result = eventually(&promql, Duration::from_secs(20), || {
                let r = prometheus.query(&promql)?;
                (r.len() == 2).then_some(r.clone()).ok_or(format!("{r:?}"))
            });
            for (labels, value) in result {
                assert_eq!(labels["job"], scheme.job, "{promql}");
                let writer = match labels["model_name"].as_str() {
                    Some(LLAMA) => &llama,
                    Some(QWEN) => &qwen,
                    other => panic!("{promql}: model {other:?}"),
                };
                let within = |(low, high): (f64, f64), times: f64| {
                    assert!(
                        value >= low * times && value <= high * times,
                        "{promql} {labels}: {value} not within [{low}, {high}] x {times}"
                    );
                };
                // Two engines per pod.
                match record.split(':').nth(1).unwrap() {
                    "vllm_num_requests_running" => within(writer.range("running"), 2.0),
                    "vllm_num_requests_waiting" => within(writer.range("waiting"), 2.0),
                    "vllm_kv_cache_usage_perc" => within(writer.range("kv_cache_usage"), 1.0),
                    "vllm_time_to_first_token_seconds" => within(writer.range("ttft"), 1.0),
                    "vllm_inter_token_latency_seconds"
                    | "vllm_request_time_per_output_token_seconds" => {
                        within(writer.range("itl"), 1.0)
                    }
                    "vllm_spec_decode_accepted_tokens_per_draft_tokens"
                    | "vllm_prefix_cache_hits_per_queries" => within((0.0, 1.0), 1.0),
                    "vllm_spec_decode_acceptance_length" => within((1.0, 4.0), 1.0),
                    _ => assert!(value > 0.0, "{promql} {labels}: {value}"),
                }
            }
        }
    }

    // Exactly the expected alerts fire.
    let mut expected = BTreeSet::new();
    for scheme in &schemes {
        let qwen_instance = &scheme.instances.1;
        for engine in ["0", "1"] {
            for alert in [
                "VllmKvCacheAlmostFull",
                "VllmRequestsWaiting",
                "VllmQueueTimeHigh",
                "VllmNixlTransfersFailing",
            ] {
                expected.insert(format!(
                    "{alert} job={} instance={qwen_instance} model_name={QWEN} engine={engine}",
                    scheme.job
                ));
            }
        }
        expected.insert(format!(
            "MultiprocExporterFilesSkipped job={} instance={qwen_instance} reason=short_file",
            scheme.job
        ));
    }
    for alert in [
        "SglangTokenUsageHigh",
        "SglangRequestsQueueing",
        "SglangTimeToFirstTokenHigh",
    ] {
        expected.insert(format!(
            "{alert} job=sglang instance={sglang_instance} model_name=qwen"
        ));
    }
    expected.insert(format!(
        "MultiprocExporterDirectoryMissing job=misconfigured instance={misconfigured_instance}"
    ));
    expected.insert(format!(
        "MultiprocExporterConfigReloadFailed job=misconfigured instance={misconfigured_instance}"
    ));
    expected.insert(format!(
        "MultiprocExporterDown job=misconfigured instance={doomed_instance}"
    ));
    expected.insert(format!(
        "MultiprocExporterCompactionFailing job=misconfigured instance={stuck_instance}"
    ));
    let alerts = eventually(
        "exactly the expected alerts to fire",
        Duration::from_secs(30),
        || {
            let alerts = prometheus.api("/api/v1/alerts")?["alerts"].clone();
            let firing: BTreeSet<String> = alerts
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["state"] == "firing")
                .map(|a| alert_key(&a["labels"]))
                .collect();
            if firing == expected {
                Ok(alerts)
            } else {
                Err(format!(
                    "missing: {:#?}\nunexpected: {:#?}",
                    expected.difference(&firing).collect::<Vec<_>>(),
                    firing.difference(&expected).collect::<Vec<_>>()
                ))
            }
        },
    );
    for alert in alerts.as_array().unwrap() {
        for text in alert["annotations"].as_object().unwrap().values() {
            let text = text.as_str().unwrap();
            assert!(
                !text.contains("<no value>") && !text.contains("{{"),
                "{}: {text}",
                alert_key(&alert["labels"])
            );
        }
    }

    // Every rule evaluates without error.
    let groups = prometheus.api("/api/v1/rules").expect("rules")["groups"].clone();
    let mut evaluated = 0;
    for group in groups.as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "{}: {rule}", group["name"]);
            evaluated += 1;
        }
    }
    assert_eq!(evaluated, rule_queries);

    let per_naming: Vec<String> = schemes
        .iter()
        .zip(&dashboard_queries)
        .map(|(s, n)| format!("{n} ({})", s.naming))
        .collect();
    eprintln!(
        "queries_e2e: dashboard queries {} and {} on the exporter's own metrics; \
         {rule_queries} rule expressions in {} files; {} recorded series per naming; \
         {} alerts firing; every query had data {:.1?} after all targets were up; total {:.1?}",
        per_naming.join(", "),
        dashboard_queries[schemes.len()],
        rule_files().len(),
        records.len(),
        expected.len(),
        data_after,
        started.elapsed()
    );
}
