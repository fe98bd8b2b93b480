//! The node agent beside a pod whose server writes in a temporary
//! subdirectory (SGLang's `set_prometheus_multiproc_dir()` with `TMPDIR` on
//! the pod's volume; issue 43): the directory it finds is the run itself,
//! labelled with the pod, never with the random name; after a restart in a
//! new temporary subdirectory, the old run is reported stale, not summed.

use super::harness::*;
use crate::support::{eventually, python, Exporter};

/// How long discovery may take on a loaded machine (the node agent scans
/// every second; other tests' processes are scanned too).
const DISCOVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Polls `f` until it gives a value, for up to [`DISCOVERY`].
fn within<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    eventually(what, DISCOVERY, || f().ok_or_else(String::new))
}
use crate::temporary_runs::Server;

#[test]
fn an_sglang_pods_temporary_subdirectory_is_labelled_by_its_pod_never_by_the_random_name() {
    if !privileged() {
        return;
    }
    let Some(python) = python() else { return };
    let _beside = super::beside_others();
    let tmp = tempfile::tempdir().unwrap();
    let pods = tmp.path().join("logs/pods");
    let namespace = format!("mpe-{}", hex(6));
    let uid = pod_uid();
    let Some(cgroup) = or_skip(FakeCgroup::make(Driver::Systemd, &uid, &hex(64))) else {
        return;
    };
    let log_dir = pods.join(format!("{namespace}_sglang-a_{uid}/sglang"));
    std::fs::create_dir_all(&log_dir).unwrap();
    std::fs::write(log_dir.join("0.log"), "").unwrap();
    let shared = tmp.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let server = Server::start_in(&python, "sglang", 1, None, &shared, Some(&cgroup.dir));
    let random = server
        .written
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(random.starts_with("tmp"), "{random}");
    let exporter = Exporter::start(&[
        "--discover.processes",
        "--discover.pod-log-dir",
        pods.to_str().unwrap(),
        "--discover.interval",
        "1s",
    ]);
    let part = within("the pod on /api/v1/status", || {
        let status: serde_json::Value =
            serde_json::from_slice(&exporter.get("/api/v1/status").body).ok()?;
        status["last"]["parts"]
            .as_array()?
            .iter()
            .find(|p| p["labels"]["pod"] == "sglang-a" && p["files_merged"].as_u64() > Some(0))
            .cloned()
    });
    assert_eq!(part["labels"]["namespace"], namespace.as_str(), "{part}");
    assert_eq!(part["labels"]["container"], "sglang", "{part}");
    assert_eq!(
        part["directories"][0]["dir"],
        server.written.to_str().unwrap(),
        "the run itself is read: {part}"
    );
    let text = exporter.metrics();
    let labels = format!("namespace=\"{namespace}\",pod=\"sglang-a\"");
    let line = text
        .lines()
        .find(|l| l.starts_with("sglang:prompt_tokens_total{") && l.contains(&labels))
        .unwrap_or_else(|| panic!("no series of the pod: {text}"));
    assert!(line.ends_with(" 1000.0"), "{line}");
    assert!(
        !text.contains(&random),
        "no label names the random name:\n{text}"
    );
    // Killed and started again in a new temporary subdirectory: only the
    // new run is served, the old one is reported stale.
    let old = server.written.clone();
    server.kill();
    let second = Server::start_in(&python, "sglang", 2, None, &shared, Some(&cgroup.dir));
    let series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("sglang:prompt_tokens_total{") && l.contains(&labels))
            .map(str::to_owned)
            .collect()
    };
    let served = within("the new run alone", || {
        let text = exporter.metrics();
        let lines = series(&text);
        (lines.len() == 1 && lines[0].ends_with(" 2000.0")).then_some(text)
    });
    let stale = within("the old run reported stale", || {
        // `/api/v1/status` shows the last collection: a scrape makes one
        // (the scan that finds the old run's writers gone may come after
        // the scrape that first served the new run alone).
        exporter.metrics();
        let status: serde_json::Value =
            serde_json::from_slice(&exporter.get("/api/v1/status").body).ok()?;
        let part = status["last"]["parts"]
            .as_array()?
            .iter()
            .find(|p| p["labels"]["pod"] == "sglang-a")?
            .clone();
        part["directories"]
            .as_array()?
            .iter()
            .any(|d| d["dir"] == old.to_str().unwrap() && d["state"] == "stale")
            .then_some(part)
    });
    let now = exporter.metrics();
    assert!(
        now.contains("multiproc_exporter_discovery_targets{state=\"stale\"} 1.0"),
        "{stale}\n{served}\n{now}"
    );
    // Stays so: never summed again.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(series(&exporter.metrics())[0].ends_with(" 2000.0"));
    second.kill();
}
