//! The one support tree of the integration tests: starting and stopping the
//! real exporter binary on an ephemeral port (directly or through a wrapper
//! such as `setpriv`), an HTTP client, polling with a timeout, writing `.db`
//! files in prometheus_client's layout, finding the Python venv and the
//! command-line tools, computing prometheus_client's exposition for a list of
//! files, and taking a scrape body apart (merged families, self-metrics).
//!
//! Submodules: [`compare`] (byte-for-byte comparison with Python),
//! [`monitoring`] (rules, dashboards and a real Prometheus), [`web`] (TLS
//! certificates, web configs and real TLS clients), and the code shared with
//! the benches ([`fixture`]) and the fuzz targets ([`fuzz_harness`]).
#![allow(dead_code)]

pub(crate) mod browser;
pub(crate) mod compare;
pub(crate) mod exposition;
pub(crate) mod monitoring;
pub(crate) mod shapes;
pub(crate) mod web;

/// The vLLM-like fixture directories of the benchmarks (`benches/support/fixture.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../../../benches/support/fixture.rs"]
pub(crate) mod fixture;

/// The fuzz harnesses (`fuzz/src/lib.rs`): the code the `cargo fuzz` targets call.
#[allow(dead_code, unreachable_pub)]
#[path = "../../../fuzz/src/lib.rs"]
pub(crate) mod fuzz_harness;

pub(crate) use compare::{diff, python_script, random_seed};

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any condition may take before a test fails.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

/// The exporter binary built for this test run.
pub(crate) fn exporter_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_multiproc-exporter"))
}

/// The repository root.
pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Polls `f` every 20 ms until it returns `Some`, or panics after [`TIMEOUT`]
/// with `what`.
pub(crate) fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    poll(what, TIMEOUT, Duration::from_millis(20), || {
        f().ok_or_else(String::new)
    })
}

/// Polls `f` every 250 ms until it returns `Ok`, or panics after `timeout`
/// with `what` and the last error (for conditions that are slow to change,
/// such as a Prometheus query).
pub(crate) fn eventually<T>(
    what: &str,
    timeout: Duration,
    f: impl FnMut() -> Result<T, String>,
) -> T {
    poll(what, timeout, Duration::from_millis(250), f)
}

/// The one polling loop behind [`wait_for`] and [`eventually`].
fn poll<T>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut f: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("timed out waiting for {what}\n{e}"),
            Err(_) => std::thread::sleep(interval),
        }
    }
}

/// A command-line tool the tests drive (`openssl`, `curl`, `prometheus`,
/// `promtool`, ...) found on `PATH`, or `None` when it is missing: a failure
/// under `CI=true`, where `scripts/test` installs it.
pub(crate) fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "`{name}` is required in CI (scripts/test installs it)"
        );
        eprintln!("skipping: no `{name}` command (run scripts/test)");
    }
    found
}

/// How to launch the exporter beyond its arguments.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// A command (and its arguments) that runs the exporter binary, such as
    /// `setpriv --reuid=65534 ... --`; empty to run the binary directly.
    pub(crate) wrapper: Vec<OsString>,
    /// The exporter binary (a copy reachable by another user, for example).
    pub(crate) binary: PathBuf,
    /// Extra environment variables.
    pub(crate) env: Vec<(String, String)>,
    /// `--log.level` (the JSON log lines are captured either way).
    pub(crate) log_level: &'static str,
    /// Negotiate exactly as prometheus_client does
    /// (`--web.negotiation=prometheus-client`), unless `ARGS` say otherwise:
    /// most tests compare every format byte for byte with Python's. The
    /// default (`safe`) negotiation has tests of its own.
    pub(crate) exact_negotiation: bool,
    /// The wrapper forks the exporter as its child instead of executing it
    /// (`unshare --fork`, [`shapes::Shape::OwnPidNamespace`]): signals go to
    /// that child.
    pub(crate) forks: bool,
    /// The subcommand: `serve`, or `demo` ([`start_demo`]).
    pub(crate) subcommand: &'static str,
}

impl Default for Launch {
    fn default() -> Self {
        Self {
            wrapper: Vec::new(),
            binary: exporter_bin(),
            env: Vec::new(),
            log_level: "debug",
            exact_negotiation: true,
            forks: false,
            subcommand: "serve",
        }
    }
}

/// A running exporter (killed on drop).
pub(crate) struct Exporter {
    child: Child,
    /// The exporter's pid when a wrapper forked it ([`Launch::forks`]).
    forked: Option<u32>,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    logs: Arc<Mutex<Vec<serde_json::Value>>>,
}

/// An HTTP response.
#[derive(Debug)]
pub(crate) struct Reply {
    /// Status code.
    pub(crate) status: u16,
    /// Headers (lower-case names), in order.
    pub(crate) headers: Vec<(String, String)>,
    /// Raw body bytes (not decompressed).
    pub(crate) body: Vec<u8>,
}

impl Reply {
    /// The first value of header `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("body is UTF-8")
    }
}

impl Exporter {
    /// Starts `multiproc-exporter serve ARGS --web.listen-address 127.0.0.1:0
    /// --log.format json --log.level debug` and waits until it listens.
    pub(crate) fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// Like [`Exporter::start`], with extra environment variables.
    pub(crate) fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::launch(
            args,
            &Launch {
                env: env
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                ..Launch::default()
            },
        )
    }

    /// Starts `[WRAPPER...] BINARY serve ARGS --web.listen-address 127.0.0.1:0
    /// --log.format json --log.level LEVEL` as `launch` says and waits until
    /// it listens.
    pub(crate) fn launch(args: &[&str], launch: &Launch) -> Self {
        let mut command = match launch.wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut c = Command::new(program);
                c.args(wrapper_args).arg(&launch.binary);
                c
            }
            None => Command::new(&launch.binary),
        };
        command.arg(launch.subcommand).args(args);
        if launch.exact_negotiation && !args.iter().any(|a| a.starts_with("--web.negotiation")) {
            command.args(["--web.negotiation", "prometheus-client"]);
        }
        command
            .args(["--web.listen-address", "127.0.0.1:0"])
            .args(["--log.format", "json", "--log.level", launch.log_level])
            .env_remove("PROMETHEUS_MULTIPROC_DIR")
            .env_remove("prometheus_multiproc_dir")
            .env_remove("MULTIPROC_EXPORTER_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in &launch.env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start the exporter");
        let stderr = child.stderr.take().expect("stderr");
        let logs: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "raw": line }));
                sink.lock().unwrap().push(value);
            }
        });
        let mut exporter = Self {
            child,
            forked: None,
            base: String::new(),
            logs,
        };
        let address = wait_for("the exporter to listen", || {
            if let Ok(Some(status)) = exporter.child.try_wait() {
                panic!(
                    "the exporter exited with {status} before listening: {:#?}",
                    exporter.logs()
                );
            }
            exporter
                .find_log("Listening.")
                .and_then(|l| l["address"].as_str().map(str::to_owned))
        });
        exporter.base = format!("http://{address}");
        if launch.forks {
            let wrapper = exporter.child.id();
            let children =
                std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children"))
                    .expect("the wrapper's children");
            exporter.forked = children
                .split_whitespace()
                .next()
                .map(|p| p.parse().unwrap());
            assert!(exporter.forked.is_some(), "the wrapper forked no exporter");
        }
        exporter
    }

    /// Every log line so far, parsed from JSON.
    pub(crate) fn logs(&self) -> Vec<serde_json::Value> {
        self.logs.lock().unwrap().clone()
    }

    /// The first log line with this message.
    pub(crate) fn find_log(&self, message: &str) -> Option<serde_json::Value> {
        self.logs()
            .into_iter()
            .find(|l| l["message"].as_str() == Some(message))
    }

    /// Log lines with this message.
    pub(crate) fn logs_with(&self, message: &str) -> Vec<serde_json::Value> {
        self.logs()
            .into_iter()
            .filter(|l| l["message"].as_str() == Some(message))
            .collect()
    }

    /// The process id (of the exporter, not of a wrapper that forked it).
    pub(crate) fn pid(&self) -> u32 {
        self.forked.unwrap_or_else(|| self.child.id())
    }

    /// Whether the process is still running (it has neither exited nor been
    /// killed by a signal such as SIGBUS).
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// GET `path`; if the request fails, panics saying whether the process
    /// died (and how: a signal such as SIGBUS shows in the exit status).
    pub(crate) fn get_or_explain(&mut self, path: &str, headers: &[(&str, &str)]) -> Reply {
        match try_get_within(&format!("{}{path}", self.base), headers, TIMEOUT) {
            Ok(reply) => reply,
            Err(e) => {
                // A dying process closes its sockets before it can be waited for.
                for _ in 0..50 {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        panic!("the exporter died ({status}): {e}");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                panic!("GET {path} failed while the exporter runs: {e}")
            }
        }
    }

    /// Asserts that the process is running and answers `/-/healthy`.
    pub(crate) fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the exporter died: {status}; logs: {:#?}", self.logs());
        }
        assert_eq!(self.get("/-/healthy").status, 200);
    }

    /// Sends a signal (`HUP`, `TERM`, `INT`) with the shell's `kill` builtin
    /// (no `kill` binary needed, no unsafe code).
    pub(crate) fn signal(&self, name: &str) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{name} {}", self.pid()))
            .status()
            .expect("run sh -c kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Returns once every log line written before this call has been captured:
    /// sends SIGHUP and waits for the line it logs (`info`; without a
    /// configuration file nothing is reloaded).
    pub(crate) fn sync_logs(&self) {
        let marker = "SIGHUP received; reloading the configuration.";
        let before = self.logs_with(marker).len();
        self.signal("HUP");
        wait_for("the SIGHUP log line", || {
            (self.logs_with(marker).len() > before).then_some(())
        });
    }

    /// Waits for the process to exit.
    pub(crate) fn wait_exit(&mut self) -> ExitStatus {
        let child = &mut self.child;
        wait_for("the exporter to exit", || child.try_wait().unwrap())
    }

    /// GET `path` with extra request headers.
    pub(crate) fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        get(&format!("{}{path}", self.base), headers)
    }

    /// GET `path`.
    pub(crate) fn get(&self, path: &str) -> Reply {
        self.get_with(path, &[])
    }

    /// GET the metrics as text with no Accept header; asserts 200.
    pub(crate) fn metrics(&self) -> String {
        let reply = self.get("/metrics");
        assert_eq!(reply.status, 200);
        reply.text()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET request with a real HTTP client; any status is a reply.
pub(crate) fn get(url: &str, headers: &[(&str, &str)]) -> Reply {
    get_within(url, headers, TIMEOUT)
}

/// Like [`get`], failing when the whole exchange takes longer than `timeout`.
pub(crate) fn get_within(url: &str, headers: &[(&str, &str)], timeout: Duration) -> Reply {
    try_get_within(url, headers, timeout).expect("HTTP request")
}

/// Like [`get_within`], with the transport error (connection refused or
/// reset, timeout) as an `Err` instead of a panic.
pub(crate) fn try_get_within(
    url: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<Reply, ureq::Error> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into();
    let mut request = agent.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    read_reply(request.call()?)
}

/// Reads a ureq response whole: its status, headers and body.
pub(crate) fn read_reply(response: ureq::http::Response<ureq::Body>) -> Result<Reply, ureq::Error> {
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let mut body = Vec::new();
    response.into_body().into_reader().read_to_end(&mut body)?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// Runs `multiproc-exporter ARGS` to completion; (exit code, stdout, stderr).
pub(crate) fn run_exporter(args: &[&str]) -> (i32, Vec<u8>, String) {
    let output = Command::new(exporter_bin())
        .args(args)
        .env_remove("PROMETHEUS_MULTIPROC_DIR")
        .env_remove("prometheus_multiproc_dir")
        .env_remove("MULTIPROC_EXPORTER_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run the exporter");
    (
        output.status.code().unwrap_or(-1),
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Log text as a reader sees it: logfmt's escaped quotes and backslashes
/// inside `msg="..."` undone, so a message can be matched as written.
pub(crate) fn logfmt_unescaped(stderr: &str) -> String {
    stderr.replace("\\\"", "\"").replace("\\\\", "\\")
}

/// `multiproc-exporter dump ARGS`, asserting success; stdout.
pub(crate) fn dump(args: &[&str]) -> Vec<u8> {
    let mut all = vec!["dump"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = run_exporter(&all);
    assert_eq!(code, 0, "dump {args:?} failed: {stderr}");
    stdout
}

/// Copies every file of `from` into `to` (created if needed).
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let mut entries: Vec<_> = std::fs::read_dir(from)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let target = to.join(path.file_name().unwrap());
        if let Err(e) = std::fs::copy(&path, &target) {
            panic!("copy {} to {}: {e}", path.display(), target.display());
        }
    }
}

/// A record key as prometheus_client's `mmap_key` writes it:
/// `json.dumps([metric_name, name, labels, help], sort_keys=True)`.
pub(crate) fn key(metric_name: &str, name: &str, labels: &[(&str, &str)], help: &str) -> String {
    multiproc_exporter::format::writer::encode_key(metric_name, name, labels, help)
}

/// A `.db` file in prometheus_client's layout (8-byte header with `used`,
/// records of length, key, padding, value, timestamp), grown to 64 KiB like
/// Python's files. Returns each record's value offset.
pub(crate) fn write_db(path: &Path, records: &[(String, f64)]) -> Vec<u64> {
    let image: Vec<(&str, f64, f64)> = records.iter().map(|(k, v)| (k.as_str(), *v, 0.0)).collect();
    let data = multiproc_exporter::format::writer::file_bytes(&image);
    let mut offsets = Vec::new();
    let mut end = 8u64;
    for (key, value) in records {
        end += multiproc_exporter::format::writer::encode_record(key, *value, 0.0).len() as u64;
        offsets.push(end - 16);
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &data).unwrap();
    std::fs::rename(&tmp, path).unwrap();
    offsets
}

/// Overwrites one value in place, as a write through Python's mmap does (no
/// change to the file's size or records).
pub(crate) fn set_value(path: &Path, offset: u64, value: f64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(&value.to_ne_bytes(), offset).unwrap();
}

/// One counter file `counter_<pid>.db` with `vllm:prompt_tokens_total{model_name="m"}`.
pub(crate) fn write_counter(dir: &Path, pid: &str, value: f64) -> (PathBuf, u64) {
    let path = dir.join(format!("counter_{pid}.db"));
    let offsets = write_db(
        &path,
        &[(
            key(
                "vllm:prompt_tokens",
                "vllm:prompt_tokens_total",
                &[("model_name", "m")],
                "Number of prefill tokens processed.",
            ),
            value,
        )],
    );
    (path, offsets[0])
}

/// The Python interpreter with prometheus_client 0.26.0: `$MPE_PYTHON`, else
/// `target/venv/bin/python` (`scripts/setup-python-venv`). `None` (with a
/// notice) when there is none, except under `CI=true`, where that is a
/// failure.
pub(crate) fn python() -> Option<PathBuf> {
    venv_python("MPE_PYTHON", "venv", "")
}

/// The Python interpreter with Ray 2.60.0 (`ray[default]`) and
/// prometheus_client 0.26.0: `$MPE_RAY_PYTHON`, else
/// `target/ray-venv/bin/python` (`scripts/setup-python-venv ray`); `None` as
/// for [`python`].
pub(crate) fn ray_python() -> Option<PathBuf> {
    venv_python("MPE_RAY_PYTHON", "ray-venv", " ray")
}

/// `$variable`, else `target/<venv>/bin/python`, made by
/// `scripts/setup-python-venv<setup_argument>`.
fn venv_python(variable: &str, venv: &str, setup_argument: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(variable).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = repo_root().join("target").join(venv).join("bin/python");
    if path.exists() {
        return Some(path);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("no target/{venv} in CI: set {variable} or run scripts/setup-python-venv{setup_argument}");
    }
    eprintln!("skipping: no target/{venv} (set {variable} or run scripts/setup-python-venv{setup_argument})");
    None
}

/// Runs a Python script with arguments; panics with its stderr on failure.
pub(crate) fn run_python(
    python: &Path,
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let mut command = Command::new(python);
    command.arg("-c").arg(script).args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("run python");
    assert!(
        output.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `Accept` of a client that wants OpenMetrics 1.0.0 with the default
/// (`underscores`) escaping.
pub(crate) const ACCEPT_OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0";

/// The merged families of a scrape body: everything before the exporter's
/// own metrics (and before `# EOF` in OpenMetrics).
pub(crate) fn merged_part(body: &str) -> &str {
    let end = body
        .find("# HELP multiproc_exporter_build_info ")
        .or_else(|| body.find("# EOF\n"))
        .unwrap_or(body.len());
    &body[..end]
}

/// The value of one self-metric series (`name{labels}` exactly as written,
/// e.g. `multiproc_exporter_scrape_files_skipped{reason="short_file"}`).
pub(crate) fn sample_value(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.parse().ok()
    })
}

/// Asserts that the self-metric series `series` (as for [`sample_value`]) of
/// a scrape body has the value `want`; the message shows the whole body.
#[track_caller]
pub(crate) fn assert_sample(body: &str, series: &str, want: f64) {
    assert_eq!(sample_value(body, series), Some(want), "{series}:\n{body}");
}

/// The `multiproc_exporter_scrape_files_skipped` values by reason.
pub(crate) fn skipped_by_reason(body: &str) -> HashMap<String, f64> {
    const PREFIX: &str = "multiproc_exporter_scrape_files_skipped{reason=\"";
    body.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(PREFIX)?;
            let (reason, value) = rest.split_once("\"} ")?;
            Some((reason.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The `*.db` entries of a directory (not hidden ones), in `readdir` order:
/// the order in which both the exporter and prometheus_client's `glob` read them.
pub(crate) fn listing_order(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".db") && !n.starts_with('.'))
        .collect()
}

/// prometheus_client's exposition of some files, with the default escaping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exposition {
    /// Text format 0.0.4.
    pub(crate) text: String,
    /// OpenMetrics 1.0.0 (ends with `# EOF`).
    pub(crate) openmetrics: String,
}

/// What prometheus_client 0.26.0 prints for each named, ordered list of
/// files (`tests/python/merge_files.py`); panics if Python fails for one.
pub(crate) fn python_expositions(
    python: &Path,
    lists: &[(String, Vec<PathBuf>)],
) -> HashMap<String, Exposition> {
    let out = tempfile::tempdir().unwrap();
    let spec: serde_json::Map<String, serde_json::Value> = lists
        .iter()
        .map(|(name, files)| {
            let files = files
                .iter()
                .map(|f| serde_json::Value::from(f.to_str().unwrap()))
                .collect();
            (name.clone(), serde_json::Value::Array(files))
        })
        .collect();
    let spec_path = out.path().join("spec.json");
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let status = Command::new(python)
        .arg(repo_root().join("tests/python/merge_files.py"))
        .arg(out.path())
        .arg(&spec_path)
        .status()
        .expect("run merge_files.py");
    assert!(status.success(), "merge_files.py failed");
    lists
        .iter()
        .map(|(name, _)| {
            let read = |kind: &str| {
                let path = out.path().join(format!("{name}.{kind}.underscores"));
                std::fs::read_to_string(&path).unwrap_or_else(|_| {
                    let error = std::fs::read_to_string(out.path().join(format!("{name}.error")));
                    panic!("prometheus_client failed on list {name}: {error:?}")
                })
            };
            let exposition = Exposition {
                text: read("text"),
                openmetrics: read("openmetrics"),
            };
            (name.clone(), exposition)
        })
        .collect()
}

/// What prometheus_client 0.26.0 prints for `files`, in that order.
pub(crate) fn python_exposition(python: &Path, files: Vec<PathBuf>) -> Exposition {
    python_expositions(python, &[("files".into(), files)])
        .remove("files")
        .expect("an exposition")
}

/// A text exposition as its sorted family blocks (from one `# HELP` line to
/// the next), for comparing outputs whose family order may legitimately
/// differ (it follows the order in which files are listed).
pub(crate) fn family_blocks(text: &str) -> Vec<String> {
    let mut blocks: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || blocks.is_empty() {
            blocks.push(String::new());
        }
        let block = blocks.last_mut().unwrap();
        block.push_str(line);
        block.push('\n');
    }
    blocks.sort();
    blocks
}

/// Whether this process runs as root (file modes do not stop it then).
pub(crate) fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// How to run the exporter as an unprivileged user: as root, through
/// `setpriv`'s arguments that run a command as `nobody`: uid and gid 65534,
/// no groups, no capabilities, `no_new_privs` (the command follows).
pub(crate) const AS_NOBODY: [&str; 7] = [
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--no-new-privs",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--",
];

/// util-linux's `setpriv` as `nobody` (uid and gid 65534, no groups, no
/// capabilities, `no_new_privs`), from a copy of the binary in `reachable`
/// (a temporary directory, opened to everyone here; the build directory may
/// not be reachable); otherwise directly, as the current (unprivileged) user.
pub(crate) fn unprivileged_launch(reachable: &Path) -> Launch {
    if !is_root() {
        return Launch::default();
    }
    use std::os::unix::fs::PermissionsExt as _;
    let binary = reachable.join("multiproc-exporter");
    if std::fs::hard_link(exporter_bin(), &binary).is_err() {
        std::fs::copy(exporter_bin(), &binary).expect("copy the exporter binary");
    }
    let mode = std::fs::metadata(reachable).unwrap().permissions().mode();
    std::fs::set_permissions(reachable, std::fs::Permissions::from_mode(mode | 0o555)).unwrap();
    for ancestor in reachable.ancestors().skip(1) {
        let mode = std::fs::metadata(ancestor).unwrap().permissions().mode();
        assert!(
            mode & 0o001 != 0,
            "{} cannot be entered by other users: set TMPDIR to a directory they can reach",
            ancestor.display()
        );
    }
    Launch {
        wrapper: std::iter::once("setpriv")
            .chain(AS_NOBODY)
            .map(OsString::from)
            .collect(),
        binary,
        ..Launch::default()
    }
}

/// Runs `tests/python/vllm_load.py DIR --processes 2 --ticks 3` (real
/// prometheus_client writers of vLLM's families); panics with its stderr on
/// failure.
pub(crate) fn run_vllm_load(python: &Path, dir: &Path) {
    let writer = Command::new(python)
        .arg(repo_root().join("tests/python/vllm_load.py"))
        .arg(dir)
        .args(["--processes", "2", "--ticks", "3", "--interval", "0.01"])
        .output()
        .expect("run the writers");
    assert!(
        writer.status.success(),
        "{}",
        String::from_utf8_lossy(&writer.stderr)
    );
}

/// Starts `multiproc-exporter demo --demo.tick-ms 100` with `extra`
/// arguments, listening on a port the kernel chose (read from its
/// `Listening.` log line, so no other test can take it first), and waits
/// until it serves vLLM's families; the demo and its first `/metrics` body.
pub(crate) fn start_demo(extra: &[&str]) -> (Exporter, String) {
    start_demo_serving(extra, "vllm:generation_tokens_total")
}

/// [`start_demo`], waiting until `/metrics` holds `family` instead.
pub(crate) fn start_demo_serving(extra: &[&str], family: &str) -> (Exporter, String) {
    let args: Vec<&str> = ["--demo.tick-ms", "100"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let mut demo = Exporter::launch(
        &args,
        &Launch {
            subcommand: "demo",
            exact_negotiation: false,
            log_level: "info",
            ..Launch::default()
        },
    );
    let first = wait_for(&format!("the demo to serve {family}"), || {
        let text = demo.get_or_explain("/metrics", &[]).text();
        text.contains(family).then_some(text)
    });
    (demo, first)
}

/// A collector that takes writers' liveness from `/proc`
/// (`--writers.liveness=proc`) without process metrics; `fold_dead` off is
/// `--writers.exact-sums`.
pub(crate) fn proc_collector(fold_dead: bool) -> multiproc_exporter::pipeline::Collector {
    use multiproc_exporter::source::writers::{LivenessMode, WriterPolicy};
    let mut collector = multiproc_exporter::pipeline::Collector::new();
    collector.set_writer_policy(WriterPolicy {
        liveness: LivenessMode::Proc,
        process_metrics: false,
        fold_dead,
        ..WriterPolicy::default()
    });
    collector
}
