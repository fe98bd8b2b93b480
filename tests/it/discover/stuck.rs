//! A pod whose read is stuck (issue 40), as root, on the fake pods of
//! [`super::harness`]: the node agent's worker thread of one pod is stopped
//! where it stands (`tests/python/stop_threads.py`: `PTRACE_INTERRUPT`
//! stops that thread alone, as a read stuck in a hung NFS or FUSE mount
//! stops the thread that makes it), beside another pod whose real
//! prometheus_client writers change:
//!
//! * the stuck pod is served from its last collection while it is younger
//!   than `--discover.late-max-age`, then left out (a gap in Prometheus, not
//!   flat lines), shown in `multiproc_exporter_discovery_part_late{served=
//!   "expired"}`, counted in
//!   `multiproc_exporter_discovery_expired_collections_total` and logged
//!   once; the other pod is served fresh all along;
//! * once the thread runs again, the stuck pod is served anew.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::harness::*;
use super::serve::{pod_value, spec, Work};
use crate::support::{eventually, python, python_script, sample_value, wait_for, Exporter};

/// The node agent's worker threads (`pipeline/fair.rs` names them).
const WORKER: &str = "part-collect";

/// The threads of `pid` named `name`.
fn threads_named(pid: u32, name: &str) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|tid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .collect()
}

/// Threads of another process stopped by `stop_threads.py` until dropped.
struct Stopped {
    tracer: Child,
    stdin: Option<ChildStdin>,
}

impl Stopped {
    fn stop(python: &Path, tids: &[u32]) -> Stopped {
        let mut tracer = Command::new(python)
            .arg(python_script("stop_threads.py"))
            .args(tids.iter().map(u32::to_string))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run stop_threads.py");
        let stdin = tracer.stdin.take();
        let mut line = String::new();
        BufReader::new(tracer.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "stopped", "the threads were not stopped");
        Stopped { tracer, stdin }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // Its standard input closed, the tracer exits: the threads run on.
        drop(self.stdin.take());
        let _ = self.tracer.wait();
    }
}

/// A pod's `app_requests_total` (3 per writer), if served.
fn requests(text: &str, pod: &Pod) -> Option<f64> {
    pod_value(text, "app_requests_total", pod, &[]).map(|v| v.parse().unwrap())
}

/// A pod's `multiproc_exporter_discovery_part_late{served}`.
fn late(text: &str, pod: &Pod, served: &str) -> Option<f64> {
    pod_value(
        text,
        "multiproc_exporter_discovery_part_late",
        pod,
        &[("served", served)],
    )
    .map(|v| v.parse().unwrap())
}

#[test]
fn a_stuck_pod_is_left_out_after_the_age_limit_and_the_others_stay_fresh() {
    if !privileged() {
        return;
    }
    // Every worker of the agent is stopped: none of the other tests' pods.
    let _alone = super::machine_wide();
    let Some(python) = python() else { return };
    let work = Work::new();
    let ns = "disc-stuck";
    let Some(mut stuck) = work.pod(
        &python,
        spec(Driver::Cgroupfs, (ns, "stuck", "vllm"), &["vllm"], 1),
    ) else {
        return;
    };
    let max_age = Duration::from_secs(10);
    let exporter = Exporter::start(&work.args(&[
        "--discover.interval",
        "1s",
        "--web.scrape-timeout",
        "2s",
        "--discover.late-max-age",
        "10s",
    ]));
    let fresh_at = wait_for("the first pod served", || {
        let at = Instant::now();
        (requests(&exporter.metrics(), &stuck) == Some(3.0)).then_some(at)
    });
    // Its read stops where it stands (with those of any other part found
    // on this machine): a read stuck in the kernel.
    let workers = threads_named(exporter.pid(), WORKER);
    assert!(!workers.is_empty());
    let stopped = Stopped::stop(&python, &workers);
    let text = exporter.metrics();
    assert_eq!(late(&text, &stuck, "last"), Some(1.0), "{text}");
    assert_eq!(requests(&text, &stuck), Some(3.0), "{text}");
    // Its files change; it is not read. Another pod comes, with a worker
    // of its own, and is served as its files change.
    stuck.add_writer(&python, &work.metrics);
    let Some(mut other) = work.pod(
        &python,
        spec(Driver::Systemd, (ns, "fresh", "server"), &["server"], 1),
    ) else {
        return;
    };
    wait_for("the other pod served", || {
        (requests(&exporter.metrics(), &other) == Some(3.0)).then_some(())
    });
    // Past the age limit the stuck pod is left out, and said to be.
    let text = eventually("the stuck pod left out", max_age * 6, || {
        let text = exporter.metrics();
        let expired = late(&text, &stuck, "expired") == Some(1.0);
        if expired {
            return Ok(text);
        }
        assert_eq!(late(&text, &stuck, "last"), Some(1.0), "{text}");
        assert_eq!(requests(&text, &stuck), Some(3.0), "{text}");
        Err(text)
    });
    let expired_after = fresh_at.elapsed();
    eprintln!("the stuck pod was left out {expired_after:?} after its last fresh scrape began");
    assert!(expired_after >= max_age, "{expired_after:?}");
    assert_eq!(requests(&text, &stuck), None, "{text}");
    assert!(
        sample_value(
            &text,
            "multiproc_exporter_discovery_expired_collections_total"
        ) >= Some(1.0),
        "{text}"
    );
    other.add_writer(&python, &work.metrics);
    wait_for("the other pod served fresh", || {
        let text = exporter.metrics();
        assert_eq!(requests(&text, &stuck), None, "{text}");
        (requests(&text, &other) == Some(6.0)).then_some(())
    });
    exporter.sync_logs();
    let part = format!("{ns}/stuck/vllm");
    let logged: Vec<_> = exporter
        .logs_with("No read of a pod's metric files has finished within --discover.late-max-age (its read is still running, its last collection was served already): it is left out until a read ends (a gap, not frozen values); the other pods are served (multiproc_exporter_discovery_part_late{served=\"expired\"}).")
        .into_iter()
        .filter(|l| l["part"].as_str() == Some(&part))
        .collect();
    assert_eq!(logged.len(), 1, "{logged:#?}");

    // The thread runs again: its read ends, and the pod is served anew.
    drop(stopped);
    wait_for("the stuck pod served anew", || {
        let text = exporter.metrics();
        (requests(&text, &stuck) == Some(6.0) && late(&text, &stuck, "expired").is_none())
            .then_some(())
    });
}
