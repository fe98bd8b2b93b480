//! Helpers for the tests of the monitoring files: the Prometheus rules in
//! `deploy/prometheus/` and the Grafana dashboards in `grafana/dashboards/`
//! (reading their rules, queries and variables), and the one way the tests
//! start a real Prometheus server (Debian's `prometheus` package; find it
//! with `support::tool("prometheus")`) and query it: used by every test that
//! runs Prometheus (`prometheus_e2e`, `deploy_prometheus`, `queries_e2e`,
//! `rules_and_dashboards`, `tls`, `push`).
#![allow(dead_code)]

pub(crate) use super::eventually;

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

/// `deploy/prometheus/` in the repository.
pub(crate) fn rules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus")
}

/// `grafana/` in the repository.
pub(crate) fn grafana_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("grafana")
}

/// The files of `dir` whose names end with `suffix`, sorted.
pub(crate) fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(suffix))
        })
        .collect();
    files.sort();
    files
}

/// Every rule file: `deploy/prometheus/*.rules.yml`.
pub(crate) fn rule_files() -> Vec<PathBuf> {
    files_ending(&rules_dir(), ".rules.yml")
}

/// Every dashboard: `grafana/dashboards/*.json`, parsed.
pub(crate) fn dashboards() -> Vec<(PathBuf, Json)> {
    files_ending(&grafana_dir().join("dashboards"), ".json")
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read dashboard");
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
            (path, json)
        })
        .collect()
}

/// Parses a YAML file.
pub(crate) fn read_yaml(path: &Path) -> Yaml {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()))
}

/// One rule of a rule file.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    /// Name of its group.
    pub(crate) group: String,
    /// The recorded series name, for a recording rule.
    pub(crate) record: Option<String>,
    /// The alert name, for an alerting rule.
    pub(crate) alert: Option<String>,
    /// The PromQL expression.
    pub(crate) expr: String,
    /// The whole rule as YAML.
    pub(crate) yaml: Yaml,
}

impl Rule {
    /// The record or alert name.
    pub(crate) fn name(&self) -> &str {
        self.record
            .as_deref()
            .or(self.alert.as_deref())
            .expect("record or alert")
    }
}

fn string(v: &Yaml, key: &str) -> Option<String> {
    v.get(key).and_then(Yaml::as_str).map(str::to_owned)
}

/// The rules of a rule file, in order.
pub(crate) fn read_rules(path: &Path) -> Vec<Rule> {
    let yaml = read_yaml(path);
    let groups = yaml["groups"].as_sequence().expect("groups");
    let mut rules = Vec::new();
    for group in groups {
        let name = string(group, "name").expect("group name");
        for rule in group["rules"].as_sequence().expect("rules") {
            rules.push(Rule {
                group: name.clone(),
                record: string(rule, "record"),
                alert: string(rule, "alert"),
                expr: string(rule, "expr").expect("expr"),
                yaml: rule.clone(),
            });
        }
    }
    rules
}

/// One query of a dashboard panel.
#[derive(Clone, Debug)]
pub(crate) struct PanelQuery {
    /// The panel's title.
    pub(crate) panel: String,
    /// The target's `refId`.
    pub(crate) ref_id: String,
    /// The PromQL expression, with Grafana variables.
    pub(crate) expr: String,
}

/// Every panel of a dashboard, rows' nested panels included.
pub(crate) fn panels(dashboard: &Json) -> Vec<Json> {
    fn walk(panels: &Json, out: &mut Vec<Json>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel.clone());
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Every target expression of every panel.
pub(crate) fn panel_queries(dashboard: &Json) -> Vec<PanelQuery> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(PanelQuery {
                panel: panel["title"].as_str().unwrap_or("").to_owned(),
                ref_id: target["refId"].as_str().unwrap_or("").to_owned(),
                expr: target["expr"].as_str().expect("target expr").to_owned(),
            });
        }
    }
    out
}

/// The dashboard's template variables.
pub(crate) fn variables(dashboard: &Json) -> Vec<Json> {
    dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The variable named `name`, if any.
pub(crate) fn variable(dashboard: &Json, name: &str) -> Option<Json> {
    variables(dashboard).into_iter().find(|v| v["name"] == name)
}

/// Replaces Grafana variables (`${name}` and `$name`) by their values;
/// panics if a `$` is left.
pub(crate) fn substitute(expr: &str, values: &[(&str, &str)]) -> String {
    let mut sorted: Vec<&(&str, &str)> = values.iter().collect();
    sorted.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let mut out = expr.to_owned();
    for (name, value) in &sorted {
        out = out.replace(&format!("${{{name}}}"), value);
    }
    for (name, value) in &sorted {
        out = out.replace(&format!("${name}"), value);
    }
    assert!(
        !out.contains('$'),
        "a variable is left in {out:?} (from {expr:?})"
    );
    out
}

/// `label_values(SELECTOR, LABEL)` split into its selector and label.
pub(crate) fn parse_label_values(query: &str) -> (String, String) {
    let inner = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not label_values(SELECTOR, LABEL): {query}"));
    let (selector, label) = inner
        .rsplit_once(',')
        .unwrap_or_else(|| panic!("not label_values(SELECTOR, LABEL): {query}"));
    (selector.trim().to_owned(), label.trim().to_owned())
}

/// Percent-encodes a query-string value.
pub(crate) fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A TCP port on 127.0.0.1 that nothing listens on (at the time of the call).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A running Prometheus server (killed on drop).
pub(crate) struct Prometheus {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    log: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts `binary` with `config` (the text of prometheus.yml) and its data
    /// in `work`, and waits until it is ready.
    pub(crate) fn start(binary: &Path, work: &Path, config: &str) -> Prometheus {
        Self::start_with(binary, work, config, free_port(), &[])
    }

    /// Like [`Prometheus::start`], on `port` and with extra flags (a restart
    /// on the same data and port, the remote-write receiver).
    pub(crate) fn start_with(
        binary: &Path,
        work: &Path,
        config: &str,
        port: u16,
        extra_args: &[&str],
    ) -> Prometheus {
        let config_path = work.join("prometheus.yml");
        std::fs::File::create(&config_path)
            .and_then(|mut f| f.write_all(config.as_bytes()))
            .expect("write prometheus.yml");
        let log = work.join("prometheus.log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                work.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start prometheus");
        let mut prometheus = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!("prometheus exited with {status}: {}", prometheus.log());
            }
            // Behind TLS (`--web.config.file`) the port answering is enough.
            let tls = extra_args
                .iter()
                .any(|a| a.starts_with("--web.config.file"));
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && (tls
                    || crate::support::get(&format!("{}/-/ready", prometheus.base), &[]).status
                        == 200)
            {
                return prometheus;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready: {}",
                prometheus.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Prometheus's log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET an API path; the parsed `data` of a successful answer, or the error.
    pub(crate) fn api(&self, path_and_query: &str) -> Result<Json, String> {
        let reply = crate::support::get(&format!("{}{path_and_query}", self.base), &[]);
        let body: Json = serde_json::from_slice(&reply.body)
            .map_err(|e| format!("HTTP {}: not JSON ({e}): {}", reply.status, reply.text()))?;
        if reply.status != 200 || body["status"] != "success" {
            return Err(format!("HTTP {}: {body}", reply.status));
        }
        Ok(body["data"].clone())
    }

    /// The raw samples `(milliseconds, value)` of the one series a range
    /// selector such as `name{a="b"}[5m]` matches (none when it matches no
    /// series).
    pub(crate) fn raw_samples(&self, range_selector: &str) -> Vec<(i64, f64)> {
        let data = self
            .api(&format!(
                "/api/v1/query?query={}",
                percent_encode(range_selector)
            ))
            .unwrap_or_else(|e| panic!("{range_selector}: {e}"));
        assert_eq!(data["resultType"], "matrix", "{data}");
        let series = data["result"].as_array().expect("result");
        assert!(series.len() <= 1, "{range_selector}: {data}");
        series
            .first()
            .map(|s| {
                s["values"]
                    .as_array()
                    .expect("values")
                    .iter()
                    .map(|v| {
                        let ms = (v[0].as_f64().expect("time") * 1000.0).round() as i64;
                        (ms, v[1].as_str().expect("value").parse().expect("number"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Runs an instant query: `(labels, value)` of every series, or the
    /// error Prometheus answered with.
    pub(crate) fn query(&self, promql: &str) -> Result<Vec<(Json, f64)>, String> {
        let data = self.api(&format!("/api/v1/query?query={}", percent_encode(promql)))?;
        if data["resultType"] != "vector" {
            return Err(format!("not a vector: {data}"));
        }
        Ok(data["result"]
            .as_array()
            .expect("result")
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().expect("value");
                let value = match value {
                    "NaN" => f64::NAN,
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    v => v.parse().expect("number"),
                };
                (r["metric"].clone(), value)
            })
            .collect())
    }

    /// Like [`Prometheus::query`], panicking when Prometheus answers with an
    /// error.
    pub(crate) fn query_ok(&self, promql: &str) -> Vec<(Json, f64)> {
        self.query(promql)
            .unwrap_or_else(|e| panic!("{promql}: {e}"))
    }

    /// The value of an instant query with exactly one series; `None` for an
    /// error or any other number of series.
    pub(crate) fn query_one(&self, promql: &str) -> Option<f64> {
        match self.query(promql).ok()?.as_slice() {
            [(_, value)] => Some(*value),
            _ => None,
        }
    }

    /// The values of `label` over every series matching `selector`
    /// (`/api/v1/series`, as Grafana's `label_values(SELECTOR, LABEL)`).
    pub(crate) fn label_values(&self, selector: &str, label: &str) -> Vec<String> {
        let data = self
            .api(&format!(
                "/api/v1/series?match[]={}",
                percent_encode(selector)
            ))
            .unwrap_or_else(|e| panic!("series {selector}: {e}"));
        let mut values: Vec<String> = data
            .as_array()
            .expect("series")
            .iter()
            .filter_map(|s| s[label].as_str().map(str::to_owned))
            .collect();
        values.sort();
        values.dedup();
        values
    }
}
