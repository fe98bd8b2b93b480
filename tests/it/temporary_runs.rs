//! Servers that write their files in a temporary subdirectory of the
//! metrics directory (SGLang, TensorRT-LLM: `set_prometheus_multiproc_dir()`,
//! `tests/python/temporary_dir_server.py`), served with default flags: the
//! current run as prometheus_client merges it, a killed run left out and
//! reported, a cleanly exited one leaving nothing (issue 43).

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support::shapes::Shape;
use crate::support::{
    self, listing_order, merged_part, python, python_exposition, repo_root, sample_value, Exporter,
};

/// A running `temporary_dir_server.py`, in a process group of its own.
pub(crate) struct Server {
    child: Child,
    /// The directory its writers write.
    pub(crate) written: PathBuf,
}

impl Server {
    /// Starts the server with `PATTERN RUN`; with `multiproc_dir`,
    /// PROMETHEUS_MULTIPROC_DIR is set to it, else TMPDIR is `tmpdir`.
    fn start(
        python: &Path,
        pattern: &str,
        run: u32,
        multiproc_dir: Option<&Path>,
        tmpdir: &Path,
    ) -> Self {
        Self::start_in(python, pattern, run, multiproc_dir, tmpdir, None)
    }

    /// [`Server::start`], first moving itself into the cgroup `cgroup` (a
    /// directory of the cgroup file system) when given.
    pub(crate) fn start_in(
        python: &Path,
        pattern: &str,
        run: u32,
        multiproc_dir: Option<&Path>,
        tmpdir: &Path,
        cgroup: Option<&Path>,
    ) -> Self {
        Self::spawn(
            python,
            &[pattern, &run.to_string()],
            multiproc_dir,
            tmpdir,
            cgroup,
        )
    }

    /// An overloaded SGLang server (a long queue, a nearly full KV cache,
    /// slow first tokens, traffic going on) in a temporary subdirectory of
    /// `tmpdir`.
    pub(crate) fn start_overloaded(python: &Path, tmpdir: &Path) -> Self {
        Self::spawn(python, &["sglang", "1", "overloaded"], None, tmpdir, None)
    }

    fn spawn(
        python: &Path,
        args: &[&str],
        multiproc_dir: Option<&Path>,
        tmpdir: &Path,
        cgroup: Option<&Path>,
    ) -> Self {
        let mut command = match cgroup {
            Some(cgroup) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
                    .arg(cgroup)
                    .arg(python);
                c
            }
            None => Command::new(python),
        };
        command
            .arg(repo_root().join("tests/python/temporary_dir_server.py"))
            .args(args)
            .env_remove("PROMETHEUS_MULTIPROC_DIR")
            .env("TMPDIR", tmpdir)
            .stdout(Stdio::piped())
            .process_group(0);
        if let Some(dir) = multiproc_dir {
            command.env("PROMETHEUS_MULTIPROC_DIR", dir);
        }
        let mut child = command.spawn().expect("start temporary_dir_server.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let written = PathBuf::from(
            line.trim()
                .strip_prefix("READY ")
                .unwrap_or_else(|| panic!("no READY line: {line:?}")),
        );
        Self { child, written }
    }

    /// SIGKILL to every process of the server (its schedulers too).
    pub(crate) fn kill(mut self) {
        let group = i32::try_from(self.child.id()).unwrap();
        assert!(signal(-group, "KILL"), "kill the server's group");
        self.child.wait().unwrap();
    }

    /// SIGTERM: a clean exit.
    fn stop(mut self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        assert!(signal(pid, "TERM"));
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Server {
    /// A failed test leaves no writer behind.
    fn drop(&mut self) {
        if let Ok(group) = i32::try_from(self.child.id()) {
            signal(-group, "KILL");
        }
        let _ = self.child.wait();
    }
}

/// Sends `signal` to `pid` (a negative pid: a process group) with the
/// `kill` command; whether it was delivered.
fn signal(pid: i32, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The temporary subdirectories of `dir`.
fn runs_in(dir: &Path) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("tmp"))
        .map(|e| e.path())
        .collect();
    runs.sort();
    runs
}

/// prometheus_client's text exposition of `dir` alone, as its own
/// `MultiProcessCollector` would print it.
fn python_merge_of(python: &Path, dir: &Path) -> String {
    let files = listing_order(dir)
        .into_iter()
        .map(|n| dir.join(n))
        .collect();
    python_exposition(python, files).text
}

/// The exporter's merged families once they equal `want` (the exporter sees
/// a new run at its next scrape).
fn serves(exporter: &Exporter, want: &str) -> String {
    let mut last = String::new();
    for _ in 0..200 {
        last = exporter.metrics();
        if merged_part(&last) == want {
            return last;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("never served prometheus_client's merge:\nwant:\n{want}\nlast:\n{last}");
}

fn status(exporter: &Exporter) -> serde_json::Value {
    serde_json::from_slice(&exporter.get("/api/v1/status").body).unwrap()
}

fn stale_paths(status: &serde_json::Value) -> Vec<String> {
    status["last"]["stale_subdirectories"]
        .as_array()
        .unwrap_or_else(|| panic!("no stale_subdirectories in {status:#}"))
        .iter()
        .map(|s| s["path"].as_str().unwrap().to_owned())
        .collect()
}

/// An SGLang-like run in a temporary subdirectory of `dir`, SIGKILLed, and
/// a second run started after it: the first run's subdirectory and the
/// second run.
fn killed_and_restarted(python: &Path, dir: &Path) -> (PathBuf, Server) {
    let first = Server::start(python, "sglang", 1, None, dir);
    let old = first.written.clone();
    first.kill();
    (old, Server::start(python, "sglang", 2, None, dir))
}

/// `multiproc_exporter_scrape_stale_temporary_directories` of a scrape.
fn stale_metric(body: &str) -> Option<f64> {
    sample_value(
        body,
        "multiproc_exporter_scrape_stale_temporary_directories",
    )
}

const ARGS: &[&str] = &["--writers.disable-process-metrics"];

#[test]
fn a_killed_sglang_run_is_left_out_and_reported_and_the_new_run_served_alone() {
    let Some(python) = python() else { return };
    let shapes = Shape::each();
    let cases = shapes
        .iter()
        .flat_map(|shape| ["auto", "off"].map(|liveness| (*shape, liveness)));
    for (shape, liveness) in cases {
        let shared = tempfile::tempdir().unwrap();
        let dir = shared.path();
        let first = Server::start(&python, "sglang", 1, None, dir);
        assert_eq!(
            first.written.parent(),
            Some(dir),
            "a temporary subdirectory"
        );
        let dir_arg = dir.to_str().unwrap();
        let exporter =
            shape.start(&[ARGS, &["--dir", dir_arg, "--writers.liveness", liveness]].concat());
        // The run is served with default flags, byte for byte as
        // prometheus_client merges the subdirectory, without a label.
        serves(&exporter, &python_merge_of(&python, &first.written));
        let old = first.written.clone();
        first.kill();
        assert!(old.exists(), "SIGKILL leaves the run behind");

        let second = Server::start(&python, "sglang", 2, None, dir);
        assert_ne!(second.written, old);
        let want = python_merge_of(&python, &second.written);
        assert!(want.contains("sglang:prompt_tokens_total{engine_type=\"unified\",is_streaming=\"true\",model_name=\"qwen\"} 2000.0"), "{want}");
        let body = serves(&exporter, &want);
        // The endpoint picker's view: SGLang's three families, of this run.
        let view = exporter.get("/metrics/endpoint-picker").text();
        let declared: Vec<&str> = view
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            declared,
            [
                "sglang:num_queue_reqs gauge",
                "sglang:num_running_reqs gauge",
                "sglang:token_usage gauge"
            ]
            .iter()
            .filter(|d| want.contains(&format!("# TYPE {d}\n")))
            .copied()
            .collect::<Vec<_>>(),
            "{view}"
        );
        // The scheduler ranks folded into one series per pod: the fullest
        // rank's token usage (docs/sglang.md).
        assert!(
            view.contains("sglang:token_usage{engine_type=\"unified\",model_name=\"qwen\"} 0.25\n"),
            "{view}"
        );
        // The old run: left out, reported on the API, the status page, the
        // metric and one log line.
        assert_eq!(stale_metric(&body), Some(1.0), "{liveness}");
        let status = status(&exporter);
        assert_eq!(stale_paths(&status), vec![old.display().to_string()]);
        assert_eq!(
            status["last"]["current_subdirectories"],
            serde_json::json!([second.written.display().to_string()])
        );
        let page = exporter.get("/").text();
        assert!(page.contains("stale_subdirectory"), "status page lists it");
        assert!(page.contains(&old.display().to_string()));
        exporter.sync_logs();
        let lines = exporter.logs_with("Leaving out a temporary subdirectory left by an earlier run of the server (its values are not summed with the current run's); --dir.remove-stale-subdirectories removes such subdirectories.");
        assert_eq!(lines.len(), 1, "{liveness}: {lines:#?}");
        // Nothing is removed without the flag.
        assert!(old.exists());
        second.kill();
    }
}

/// Issue 47: a live run idle for 10 minutes was removed while its writer
/// held its files open (writes through mmap do not move modification
/// times). A run is removed only when its writers are seen exited; where
/// pids cannot be seen (the exporter in its own pid namespace) nothing is
/// removed, and one log line says why.
#[test]
fn stale_runs_are_removed_only_with_the_flag_once_their_writers_exited() {
    let Some(python) = python() else { return };
    for shape in Shape::each() {
        let shared = tempfile::tempdir().unwrap();
        let dir = shared.path();
        let (old, second) = killed_and_restarted(&python, dir);
        let exporter = shape.start(
            &[
                ARGS,
                &[
                    "--dir",
                    dir.to_str().unwrap(),
                    "--dir.remove-stale-subdirectories",
                ],
            ]
            .concat(),
        );
        let body = serves(&exporter, &python_merge_of(&python, &second.written));
        let not_removing = "Not removing temporary subdirectories left by earlier runs (--dir.remove-stale-subdirectories): the writers' processes cannot be seen (the exporter runs in a pid namespace of its own, such as a Kubernetes sidecar without shareProcessNamespace), so nothing shows that their writers exited; share the pod's process namespace to have them removed.";
        if shape.pids_visible() {
            assert!(!old.exists(), "its writers were seen dead: removed");
            assert_eq!(runs_in(dir), vec![second.written.clone()]);
            assert_eq!(stale_metric(&body), Some(0.0));
            exporter.sync_logs();
            assert!(exporter
                .find_log("Removed a temporary subdirectory left by an earlier run (--dir.remove-stale-subdirectories).")
                .is_some());
            assert!(exporter.logs_with(not_removing).is_empty());
        } else {
            // Pids unseen: kept (and its quiet time is no evidence), left
            // out, and said once however often it is scraped.
            for _ in 0..3 {
                let body = exporter.metrics();
                assert_eq!(stale_metric(&body), Some(1.0), "{shape:?}");
            }
            assert!(old.exists(), "{shape:?}: writers unseen, kept");
            assert_eq!(runs_in(dir).len(), 2);
            exporter.sync_logs();
            assert_eq!(
                exporter.logs_with(not_removing).len(),
                1,
                "{:#?}",
                exporter.logs()
            );
            assert_eq!(
                stale_paths(&status(&exporter)),
                vec![old.display().to_string()]
            );
        }
        second.kill();
    }
}

/// Issue 47: two live servers (vLLM and SGLang with `TMPDIR` on the shared
/// volume) each write a temporary subdirectory; from a pid namespace of its
/// own the exporter served only the newer one. Every run being written is
/// current in either shape.
#[test]
fn two_live_servers_sharing_a_tmpdir_are_both_served_in_either_pid_namespace() {
    let Some(python) = python() else { return };
    for shape in Shape::each() {
        let shared = tempfile::tempdir().unwrap();
        let dir = shared.path();
        // The older server keeps serving requests (its files change); the
        // newer one is idle after its first writes.
        let busy = Server::start_overloaded(&python, dir);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let idle = Server::start(&python, "trtllm", 2, None, dir);
        let exporter = shape.start(&[ARGS, &["--dir", dir.to_str().unwrap()]].concat());
        let mut want = vec![
            busy.written.display().to_string(),
            idle.written.display().to_string(),
        ];
        want.sort();
        support::eventually(
            "both runs current",
            std::time::Duration::from_secs(20),
            || {
                exporter.metrics();
                let status = status(&exporter);
                let current = &status["last"]["current_subdirectories"];
                if *current == serde_json::json!(want) && stale_paths(&status).is_empty() {
                    Ok(())
                } else {
                    Err(format!("{shape:?}: {status:#}"))
                }
            },
        );
        busy.kill();
        idle.kill();
    }
}

#[test]
fn a_cleanly_exited_tensorrt_llm_run_leaves_nothing_reported() {
    let Some(python) = python() else { return };
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path();
    let run = Server::start(&python, "trtllm", 1, None, dir);
    let exporter = Exporter::start(&[ARGS, &["--dir", dir.to_str().unwrap()]].concat());
    serves(&exporter, &python_merge_of(&python, &run.written));
    run.stop();
    assert!(runs_in(dir).is_empty(), "the TemporaryDirectory is removed");
    let body = serves(&exporter, "");
    assert_eq!(stale_metric(&body), Some(0.0));
    assert!(stale_paths(&status(&exporter)).is_empty());
}

#[test]
fn with_prometheus_multiproc_dir_set_sglang_writes_the_directory_itself_and_its_empty_subdirectory_is_ignored(
) {
    let Some(python) = python() else { return };
    for pattern in ["sglang", "trtllm"] {
        let shared = tempfile::tempdir().unwrap();
        let dir = shared.path();
        let tmp = tempfile::tempdir().unwrap();
        let run = Server::start(&python, pattern, 1, Some(dir), tmp.path());
        // SGLang's function leaves the variable pointing at the directory:
        // the files are there, the temporary subdirectory stays empty.
        assert_eq!(run.written, dir);
        let empty = runs_in(dir);
        assert_eq!(empty.len(), 1);
        assert_eq!(std::fs::read_dir(&empty[0]).unwrap().count(), 0);
        let exporter = Exporter::start(&[ARGS, &["--dir", dir.to_str().unwrap()]].concat());
        let body = serves(&exporter, &python_merge_of(&python, dir));
        assert_eq!(stale_metric(&body), Some(0.0));
        assert!(exporter
            .find_log("Metrics directory holds only subdirectories, no metric files: to serve one directory per pod (a DaemonSet), pass --dir.subdirectories-label NAME.")
            .is_none());
        run.kill();
        // The killed run's empty subdirectory is left behind: nothing to
        // report about it.
        assert!(stale_paths(&status(&exporter)).is_empty());
    }
}

#[test]
fn dump_prints_the_current_run_and_names_the_stale_one() {
    let Some(python) = python() else { return };
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path();
    let (old, second) = killed_and_restarted(&python, dir);
    let (code, stdout, stderr) = support::run_exporter(&[
        "dump",
        "--writers.disable-process-metrics",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        String::from_utf8(stdout).unwrap(),
        python_merge_of(&python, &second.written)
    );
    assert!(
        stderr.contains(&format!(
            "left out {}: a temporary subdirectory of an earlier run",
            old.display()
        )),
        "{stderr}"
    );
    second.kill();
}

#[test]
fn the_status_page_charts_an_sglang_run() {
    let Some(chromium) = crate::support::browser::chromium() else {
        return;
    };
    let Some(python) = python() else { return };
    let shared = tempfile::tempdir().unwrap();
    let run = Server::start(&python, "sglang", 1, None, shared.path());
    let exporter = Exporter::start(&["--dir", shared.path().to_str().unwrap()]);
    let shot = crate::status_page::screenshot("status-page-sglang.png");
    // The page polls every 2 s: 7 s are three collections at least.
    let page = crate::support::browser::load(
        &chromium,
        &format!("{}/", exporter.base),
        std::time::Duration::from_secs(7),
        Some(&shot),
    );
    crate::status_page::assert_no_errors(&page);
    assert!(
        page.dom.contains("data-model=\"qwen\""),
        "no model section: {}",
        page.dom
    );
    // Running and queued requests, token usage, throughput, TTFT,
    // inter-token latency and the cache hit rate: six charts, with points.
    let points = crate::status_page::chart_points(&page);
    assert_eq!(points.len(), 6, "{points:?}");
    assert!(points[0] >= 3 && points[1] >= 3, "{points:?}");
    assert!(points[2] >= 2, "{points:?}");
    run.kill();
}

/// Issue 47 (why 6, read in the code): a run listed empty within the same
/// timestamp tick as its first file stayed "empty" for good (the parent
/// listing had a settle guard, the run listing none). Kernels with
/// fine-grained timestamps hide it; an ext2 volume with 128-byte inodes
/// (one-second timestamps, as old ext3 volumes and many network file
/// systems) shows it every time: the run is created, surveyed empty, and
/// given its first file within one second.
#[test]
fn a_run_listed_empty_in_the_same_timestamp_tick_as_its_first_file_is_read_once_it_has_one() {
    let (Some(_), Some(_), Some(_)) = (
        support::tool("mkfs.ext2"),
        support::tool("nsenter"),
        support::tool("curl"),
    ) else {
        return;
    };
    if !support::is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "needs root in CI (a loop mount)"
        );
        eprintln!("skipping: needs root (a loop mount)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("coarse.img");
    let mount = tmp.path().join("metrics");
    std::fs::create_dir(&mount).unwrap();
    std::fs::File::create(&image)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let made = Command::new("mkfs.ext2")
        .args(["-q", "-I", "128"])
        .arg(&image)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(made.success(), "mkfs.ext2");
    let template = tmp.path().join("template.db");
    support::write_db(
        &template,
        &[(support::key("tick", "tick_total", &[], "Ticks."), 7.0)],
    );
    // The exporter in a mount namespace of its own with the volume mounted.
    let launch = support::Launch {
        wrapper: [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -o loop \"$0\" \"$1\" && shift && exec \"$@\"",
        ]
        .iter()
        .map(std::ffi::OsString::from)
        .chain([
            image.clone().into_os_string(),
            mount.clone().into_os_string(),
        ])
        .collect(),
        ..support::Launch::default()
    };
    let exporter = Exporter::launch(
        &[ARGS, &["--dir", mount.to_str().unwrap()]].concat(),
        &launch,
    );
    let namespace = format!("--mount=/proc/{}/ns/mnt", exporter.pid());
    // Create the run, have it surveyed empty, give it its file: in one
    // second (checked by its times), else again with another run.
    let mut same_tick = false;
    for attempt in 0..20 {
        let script = "d=\"$0\"; mkdir \"$d\" && before=$(stat -c %Y.%Z \"$d\") \
            && curl -sf \"$1\" > /dev/null && cp \"$2\" \"$d/counter_7.db\" \
            && [ \"$(stat -c %Y.%Z \"$d\")\" = \"$before\" ] || { rm -rf \"$d\"; exit 1; }";
        let run = mount.join(format!("tmptick__{attempt:02}"));
        let status = Command::new("nsenter")
            .arg(&namespace)
            .args(["sh", "-c", script])
            .arg(&run)
            .arg(format!("{}/metrics", exporter.base))
            .arg(&template)
            .status()
            .unwrap();
        if status.success() {
            same_tick = true;
            break;
        }
    }
    assert!(same_tick, "never within one second");
    support::eventually(
        "the run's file served",
        std::time::Duration::from_secs(8),
        || {
            let body = exporter.metrics();
            if sample_value(&body, "tick_total") == Some(7.0) {
                Ok(())
            } else {
                Err(body)
            }
        },
    );
}
