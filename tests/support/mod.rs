//! Helpers for the tests that run the real exporter binary over HTTP: starting
//! and stopping it on an ephemeral port, an HTTP client, polling with a
//! timeout, writing `.db` files in prometheus_client's layout, and finding the
//! Python venv.
#![allow(dead_code)]

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
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running exporter (killed on drop).
pub(crate) struct Exporter {
    child: Child,
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
        let mut command = Command::new(exporter_bin());
        command
            .arg("serve")
            .args(args)
            .args(["--web.listen-address", "127.0.0.1:0"])
            .args(["--log.format", "json", "--log.level", "debug"])
            .env_remove("PROMETHEUS_MULTIPROC_DIR")
            .env_remove("prometheus_multiproc_dir")
            .env_remove("MULTIPROC_EXPORTER_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
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

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
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
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(TIMEOUT))
        .build()
        .into();
    let mut request = agent.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.call().expect("HTTP request");
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .read_to_end(&mut body)
        .expect("read body");
    Reply {
        status,
        headers,
        body,
    }
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
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

/// A record key as prometheus_client's `mmap_key` writes it:
/// `json.dumps([metric_name, name, labels, help], sort_keys=True)`.
pub(crate) fn key(metric_name: &str, name: &str, labels: &[(&str, &str)], help: &str) -> String {
    multiproc_exporter::writer::encode_key(metric_name, name, labels, help)
}

/// A `.db` file in prometheus_client's layout (8-byte header with `used`,
/// records of length, key, padding, value, timestamp), grown to 64 KiB like
/// Python's files. Returns each record's value offset.
pub(crate) fn write_db(path: &Path, records: &[(String, f64)]) -> Vec<u64> {
    let image: Vec<(&str, f64, f64)> = records.iter().map(|(k, v)| (k.as_str(), *v, 0.0)).collect();
    let data = multiproc_exporter::writer::file_bytes(&image);
    let mut offsets = Vec::new();
    let mut end = 8u64;
    for (key, value) in records {
        end += multiproc_exporter::writer::encode_record(key, *value, 0.0).len() as u64;
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
/// `target/venv/bin/python`. `None` (with a notice) when there is none,
/// except under `CI=true`, where that is a failure.
pub(crate) fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MPE_PYTHON").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let venv = repo_root().join("target/venv/bin/python");
    if venv.exists() {
        return Some(venv);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("no Python venv in CI: set MPE_PYTHON or run scripts/setup-python-venv");
    }
    eprintln!("skipping: no Python with prometheus_client (set MPE_PYTHON)");
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
