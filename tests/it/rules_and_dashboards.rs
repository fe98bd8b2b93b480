//! The monitoring files, checked without a running Prometheus: the rule files
//! of `deploy/prometheus/` pass `promtool check rules` and their unit tests
//! (`promtool test rules`), every rule has unit tests firing and not firing,
//! the unit tests fail when a rule is broken, the generated rules for the
//! other namings (`ray_vllm_*`, `vllm_*`) are the source rules with exactly
//! those names, the PrometheusRule
//! manifests hold the rule files, the generated files are up to date, and the
//! Grafana dashboards are provisioning-ready and work with both namings.
//!
//! `tests/queries_e2e.rs` runs every query against a real Prometheus.

use crate::support;
use crate::support::monitoring;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::monitoring::{
    dashboards, files_ending, grafana_dir, panel_queries, panels, read_rules, read_yaml,
    rule_files, rules_dir, variable, variables,
};
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

/// Runs a command; (success, stdout + stderr).
fn run(command: &mut Command) -> (bool, String) {
    let output = command.output().expect("run command");
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// `tests/NAME.test.yml` for the rule file `NAME.yml`.
fn test_file_of(rule_file: &Path) -> PathBuf {
    let stem = rule_file
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("file name");
    rules_dir().join("tests").join(format!("{stem}.test.yml"))
}

#[test]
fn generated_files_are_up_to_date() {
    let Some(python) = support::python() else {
        return;
    };
    let (ok, output) = run(Command::new(python)
        .arg(support::repo_root().join("scripts/generate-monitoring"))
        .arg("--check"));
    assert!(ok, "{output}");
}

#[test]
fn promtool_checks_and_unit_tests_every_rule_file() {
    let Some(promtool) = support::tool("promtool") else {
        return;
    };
    let rules = rule_files();
    let names: Vec<String> = rules
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "multiproc-exporter.rules.yml",
            "sglang.rules.yml",
            "vllm-ray.rules.yml",
            "vllm-underscores.rules.yml",
            "vllm.rules.yml"
        ]
    );
    let (ok, output) = run(Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .args(&rules));
    assert!(ok, "promtool check rules:\n{output}");

    let tests = files_ending(&rules_dir().join("tests"), ".test.yml");
    let expected: Vec<PathBuf> = rules.iter().map(|r| test_file_of(r)).collect();
    assert_eq!(tests, expected, "one unit-test file per rule file");
    let (ok, output) = run(Command::new(&promtool)
        .current_dir(rules_dir())
        .arg("test")
        .arg("rules")
        .args(&tests));
    assert!(ok, "promtool test rules:\n{output}");
    assert_eq!(output.matches("SUCCESS").count(), tests.len(), "{output}");
}

#[test]
fn every_rule_has_unit_tests_firing_and_not_firing() {
    for rule_file in rule_files() {
        let test_file = test_file_of(&rule_file);
        let tests = read_yaml(&test_file);
        let rule_name = rule_file.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            tests["rule_files"],
            serde_yaml::from_str::<Yaml>(&format!("[../{rule_name}]")).unwrap(),
            "{}",
            test_file.display()
        );
        let cases = tests["tests"].as_sequence().expect("tests");
        let exprs: Vec<&str> = cases
            .iter()
            .flat_map(|c| c["promql_expr_test"].as_sequence().into_iter().flatten())
            .map(|t| t["expr"].as_str().expect("expr"))
            .collect();
        // alertname -> (evaluations expecting no alert, evaluations expecting some)
        let mut alert_checks: Vec<(String, bool)> = Vec::new();
        for case in cases {
            for check in case["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = check["alertname"].as_str().expect("alertname").to_owned();
                let fires = check["exp_alerts"]
                    .as_sequence()
                    .is_some_and(|alerts| !alerts.is_empty());
                alert_checks.push((name, fires));
            }
        }
        for rule in read_rules(&rule_file) {
            if let Some(record) = &rule.record {
                assert!(
                    exprs.iter().any(|e| e.contains(record.as_str())),
                    "{}: no promql_expr_test for {record}",
                    test_file.display()
                );
            }
            if let Some(alert) = &rule.alert {
                for fires in [true, false] {
                    assert!(
                        alert_checks.contains(&(alert.clone(), fires)),
                        "{}: no alert_rule_test where {alert} {}",
                        test_file.display(),
                        if fires { "fires" } else { "does not fire" }
                    );
                }
            }
        }
    }
}

/// Runs `promtool test rules` on a copy of a rule file and its tests, with
/// `from` replaced by `to` in the rule file; returns promtool's output if it
/// fails, panics if it passes.
fn unit_tests_of_mutant(promtool: &Path, rule_file: &str, from: &str, to: &str) -> String {
    let work = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(work.path().join("tests")).unwrap();
    let original = std::fs::read_to_string(rules_dir().join(rule_file)).unwrap();
    assert_eq!(original.matches(from).count(), 1, "{from:?} in {rule_file}");
    std::fs::write(work.path().join(rule_file), original.replace(from, to)).unwrap();
    let test_file = test_file_of(Path::new(rule_file));
    let test_name = test_file.file_name().unwrap();
    std::fs::copy(&test_file, work.path().join("tests").join(test_name)).unwrap();
    let (ok, output) = run(Command::new(promtool)
        .current_dir(work.path())
        .args(["test", "rules"])
        .arg(Path::new("tests").join(test_name)));
    assert!(
        !ok,
        "the unit tests of {rule_file} pass with {from:?} -> {to:?}:\n{output}"
    );
    output
}

#[test]
fn unit_tests_fail_when_a_rule_is_broken() {
    let Some(promtool) = support::tool("promtool") else {
        return;
    };
    let mutants = [
        ("vllm.rules.yml", "vllm:kv_cache_usage_perc > 0.95", "vllm:kv_cache_usage_perc > 0.98", "VllmKvCacheAlmostFull"),
        ("vllm.rules.yml", "vllm:num_requests_waiting > 10", "vllm:num_requests_waiting >= 10", "VllmRequestsWaiting"),
        ("vllm.rules.yml", "histogram_quantile(0.95,", "histogram_quantile(0.5,", "VllmQueueTimeHigh"),
        ("vllm.rules.yml", "avg by (namespace, job, model_name) (vllm:kv_cache_usage_perc)", "max by (namespace, job, model_name) (vllm:kv_cache_usage_perc)", "vllm_kv_cache_usage_perc:avg"),
        (
            "vllm.rules.yml",
            "(sum by (namespace, job, model_name) (rate(vllm:prefix_cache_queries_total[5m])) > 0)",
            "sum by (namespace, job, model_name) (rate(vllm:prefix_cache_queries_total[5m]))",
            "prefix_cache_hits_per_queries",
        ),
        ("vllm-ray.rules.yml", "naming: ray\n      - record: namespace_job_model_name:vllm_num_requests_waiting:sum", "naming: prometheus\n      - record: namespace_job_model_name:vllm_num_requests_waiting:sum", "vllm_num_requests_running:sum"),
        ("multiproc-exporter.rules.yml", "{reason!=\"vanished\"}", "", "MultiprocExporterFilesSkipped"),
        ("multiproc-exporter.rules.yml", "max_over_time(multiproc_exporter_build_info[1d])", "max_over_time(up[1d])", "MultiprocExporterDown"),
    ];
    for (file, from, to, named) in mutants {
        let output = unit_tests_of_mutant(&promtool, file, from, to);
        assert!(
            output.contains(named),
            "{file}: {from:?} -> {to:?}: {output}"
        );
    }
}

/// Every `vllm:NAME` / `lmcache:NAME` metric name in `text` renamed by `rename`.
fn rename_metrics(text: &str, rename: fn(&str) -> String) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let at_boundary = !out.ends_with(is_name);
        if at_boundary && (rest.starts_with("vllm:") || rest.starts_with("lmcache:")) {
            let end = rest.find(|c: char| !is_name(c)).unwrap_or(rest.len());
            out.push_str(&rename(&rest[..end]));
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The exporter's own `naming: ray` function.
fn ray(name: &str) -> String {
    multiproc_exporter::transform::ray_name(name)
}

/// What `escaping=underscores` makes of a vLLM name in OpenMetrics sample
/// lines (the only character to replace in vLLM's names is `:`).
fn underscores(name: &str) -> String {
    name.replace(':', "_")
}

#[test]
fn generated_rules_are_the_rules_with_the_names_of_their_naming() {
    assert_eq!(
        rename_metrics(
            "sum(rate(vllm:prompt_tokens_total[5m])) / lmcache:retrieve_speed_sum + x:vllm_y:sum",
            ray
        ),
        "sum(rate(ray_vllm_prompt_tokens_total[5m])) / ray_lmcache_retrieve_speed_sum + x:vllm_y:sum"
    );
    let source = read_rules(&rules_dir().join("vllm.rules.yml"));
    for (naming, rename) in [
        ("ray", ray as fn(&str) -> String),
        ("underscores", underscores),
    ] {
        let stem = format!("vllm-{naming}");
        for file in [
            format!("{stem}.rules.yml"),
            format!("tests/{stem}.rules.test.yml"),
        ] {
            let text = std::fs::read_to_string(rules_dir().join(&file)).unwrap();
            assert!(
                !text.contains("vllm:") && !text.contains("lmcache:"),
                "{file} still has a colon name"
            );
            assert!(
                !text.contains("naming: prometheus") && !text.contains("naming=\"prometheus\""),
                "{file}"
            );
        }
        let generated = read_rules(&rules_dir().join(format!("{stem}.rules.yml")));
        assert_eq!(source.len(), generated.len(), "{stem}");
        for (s, g) in source.iter().zip(&generated) {
            assert_eq!(s.group.replacen("vllm", &stem, 1), g.group);
            assert_eq!(
                (&s.record, &s.alert),
                (&g.record, &g.alert),
                "same names under every naming"
            );
            let mut expected = s.yaml.clone();
            expected["expr"] = Yaml::String(rename_metrics(&s.expr, rename));
            if let Some(label) = expected.get_mut("labels").and_then(|l| l.get_mut("naming")) {
                assert_eq!(label.as_str(), Some("prometheus"), "{}", s.name());
                *label = Yaml::String(naming.into());
            } else {
                assert!(
                    s.record.is_none(),
                    "recording rule {} has no naming label",
                    s.name()
                );
            }
            if let Some(annotations) = expected
                .get_mut("annotations")
                .and_then(Yaml::as_mapping_mut)
            {
                for (_, v) in annotations.iter_mut() {
                    *v = Yaml::String(rename_metrics(v.as_str().unwrap(), rename));
                }
            }
            assert_eq!(expected, g.yaml, "{stem}: {}", s.name());
        }
    }
}

#[test]
fn prometheus_rule_manifests_hold_the_rule_files() {
    for (manifest, rules, name) in [
        ("prometheusrule-vllm.yaml", "vllm.rules.yml", "vllm"),
        (
            "prometheusrule-vllm-ray.yaml",
            "vllm-ray.rules.yml",
            "vllm-ray",
        ),
        (
            "prometheusrule-multiproc-exporter.yaml",
            "multiproc-exporter.rules.yml",
            "multiproc-exporter",
        ),
        ("prometheusrule-sglang.yaml", "sglang.rules.yml", "sglang"),
    ] {
        let m = read_yaml(&rules_dir().join(manifest));
        assert_eq!(
            m["apiVersion"],
            Yaml::from("monitoring.coreos.com/v1"),
            "{manifest}"
        );
        assert_eq!(m["kind"], Yaml::from("PrometheusRule"), "{manifest}");
        assert_eq!(m["metadata"]["name"], Yaml::from(name), "{manifest}");
        assert_eq!(
            m["spec"]["groups"],
            read_yaml(&rules_dir().join(rules))["groups"],
            "{manifest}"
        );
    }
    let kustomization = read_yaml(&rules_dir().join("kustomization.yaml"));
    assert_eq!(kustomization["kind"], Yaml::from("Kustomization"));
    let resources = kustomization["resources"].as_sequence().expect("resources");
    assert!(!resources.is_empty());
    for resource in resources {
        let path = rules_dir().join(resource.as_str().expect("path"));
        assert!(path.is_file(), "{}", path.display());
    }
}

/// The datasource reference every panel and target must use.
fn datasource_variable_ref() -> Json {
    serde_json::json!({"type": "prometheus", "uid": "${datasource}"})
}

/// The `$name` / `${name}` variables an expression refers to.
fn referenced_variables(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let braced = rest.starts_with('{');
        let name_part = if braced { &rest[1..] } else { rest };
        let end = name_part
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(name_part.len());
        out.insert(name_part[..end].to_owned());
    }
    out
}

#[test]
fn dashboards_are_provisioning_ready() {
    let all = dashboards();
    let names: Vec<String> = all
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "mpe-exporter.json",
            "mpe-lmcache.json",
            "mpe-sglang-overview.json",
            "mpe-vllm-kv-cache.json",
            "mpe-vllm-overview.json",
            "mpe-vllm-spec-decode.json"
        ]
    );
    let mut uids = BTreeSet::new();
    for (path, d) in &all {
        let file = path.display();
        let uid = d["uid"].as_str().expect("uid");
        assert!(!uid.is_empty() && uid.len() <= 40, "{file}: uid {uid:?}");
        assert!(uids.insert(uid.to_owned()), "{file}: uid {uid} used twice");
        assert_eq!(
            format!("{uid}.json"),
            path.file_name().unwrap().to_string_lossy(),
            "{file}"
        );
        assert!(
            d["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{file}: title"
        );
        assert!(
            d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
            "{file}: schemaVersion"
        );
        assert_eq!(
            d["id"],
            Json::Null,
            "{file}: id must be null to import anywhere"
        );
        assert!(
            d.get("__inputs").is_none(),
            "{file}: provisioning cannot fill __inputs"
        );

        // The data source is a variable: a Prometheus data source chosen at view time.
        let ds =
            variable(d, "datasource").unwrap_or_else(|| panic!("{file}: no datasource variable"));
        assert_eq!(ds["type"], "datasource", "{file}");
        assert_eq!(ds["query"], "prometheus", "{file}");
        let defined: BTreeSet<String> = variables(d)
            .iter()
            .map(|v| v["name"].as_str().expect("variable name").to_owned())
            .collect();
        assert!(defined.contains("instance"), "{file}: no instance selector");
        for v in variables(d).iter().filter(|v| v["type"] == "query") {
            assert_eq!(
                v["datasource"],
                datasource_variable_ref(),
                "{file}: variable {}",
                v["name"]
            );
            let query = v["query"]["query"].as_str().expect("variable query");
            assert_eq!(
                v["definition"].as_str(),
                Some(query),
                "{file}: variable {}",
                v["name"]
            );
            monitoring::parse_label_values(query);
            for used in referenced_variables(query) {
                assert!(
                    defined.contains(&used),
                    "{file}: variable {} uses undefined ${used}",
                    v["name"]
                );
            }
        }

        let mut ids = BTreeSet::new();
        let mut cells = BTreeSet::new();
        for panel in panels(d) {
            let title = panel["title"].as_str().unwrap_or("");
            let id = panel["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("{file}: panel {title} has no id"));
            assert!(ids.insert(id), "{file}: panel id {id} used twice");
            let pos = &panel["gridPos"];
            let (x, y, w, h) = (
                pos["x"].as_u64().unwrap(),
                pos["y"].as_u64().unwrap(),
                pos["w"].as_u64().unwrap(),
                pos["h"].as_u64().unwrap(),
            );
            assert!(
                x + w <= 24 && w > 0 && h > 0,
                "{file}: panel {title} gridPos {pos}"
            );
            for cx in x..x + w {
                for cy in y..y + h {
                    assert!(
                        cells.insert((cx, cy)),
                        "{file}: panel {title} overlaps another"
                    );
                }
            }
            if panel["type"] == "row" {
                continue;
            }
            assert!(!title.is_empty(), "{file}: panel {id} has no title");
            assert!(
                panel["description"].as_str().is_some_and(|s| !s.is_empty()),
                "{file}: {title}: description"
            );
            assert_eq!(
                panel["datasource"],
                datasource_variable_ref(),
                "{file}: {title}"
            );
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{file}: {title} has no query");
            for target in targets {
                assert_eq!(
                    target["datasource"],
                    datasource_variable_ref(),
                    "{file}: {title}"
                );
            }
        }
        for q in panel_queries(d) {
            for used in referenced_variables(&q.expr) {
                assert!(
                    defined.contains(&used) || used == "__rate_interval",
                    "{file}: {} uses undefined ${used}",
                    q.panel
                );
            }
        }
    }
}

#[test]
fn dashboards_work_with_every_naming() {
    for (path, d) in dashboards() {
        let file = path.display();
        let prefix = ["vllm_prefix", "lmcache_prefix", "sglang_prefix"]
            .into_iter()
            .find(|name| variable(&d, name).is_some());
        for q in panel_queries(&d) {
            // No metric name spelled out in one naming: every vLLM/LMCache name
            // goes through the prefix variable.
            for literal in [
                "vllm:",
                "lmcache:",
                "sglang:",
                "ray_vllm",
                "ray_lmcache",
                "ray_sglang",
            ] {
                assert!(
                    !q.expr.contains(literal),
                    "{file}: {}: {literal} in {}",
                    q.panel,
                    q.expr
                );
            }
            if let Some(prefix) = prefix {
                assert!(
                    q.expr.contains(&format!("${{{prefix}}}")),
                    "{file}: {}: {}",
                    q.panel,
                    q.expr
                );
            }
        }
        let Some(prefix) = prefix else {
            // The exporter's own metrics are never renamed.
            assert!(panel_queries(&d)
                .iter()
                .all(|q| q.expr.contains("multiproc_exporter_")
                    || q.expr.contains("process_")
                    || q.expr.contains("up{")
                    || q.expr.contains("scrape_duration_seconds")));
            continue;
        };
        let v = variable(&d, prefix).unwrap();
        assert_eq!(v["includeAll"], false, "{file}");
        assert_eq!(v["multi"], false, "{file}");
        // The three ways the names can read in Prometheus.
        let kind = match prefix {
            "vllm_prefix" => "vllm:",
            "sglang_prefix" => "sglang:",
            _ => "lmcache:",
        };
        assert_eq!(
            v["regex"],
            format!("/^({kind}|{}|{})/", underscores(kind), ray(kind)),
            "{file}"
        );
        for name in ["job", "model_name", "instance"] {
            let v = variable(&d, name).unwrap_or_else(|| panic!("{file}: no {name} variable"));
            assert_eq!(v["includeAll"], true, "{file}: {name}");
            assert_eq!(v["allValue"], ".*", "{file}: {name}");
            assert!(
                v["query"]["query"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("${{{prefix}}}")),
                "{file}: {name}"
            );
        }
    }
}

#[test]
fn provisioning_files_point_at_the_dashboards() {
    let dashboards =
        read_yaml(&grafana_dir().join("provisioning/dashboards/multiproc-exporter.yaml"));
    assert_eq!(dashboards["apiVersion"], Yaml::from(1));
    let provider = &dashboards["providers"][0];
    assert_eq!(provider["type"], Yaml::from("file"));
    assert!(provider["options"]["path"]
        .as_str()
        .is_some_and(|p| p.starts_with('/')));
    let datasources = read_yaml(&grafana_dir().join("provisioning/datasources/prometheus.yaml"));
    assert_eq!(datasources["apiVersion"], Yaml::from(1));
    assert_eq!(
        datasources["datasources"][0]["type"],
        Yaml::from("prometheus")
    );
}
