//! The node agent in both deployment shapes ([`Shape`]): in the host's pid
//! namespace it finds a prometheus_client writer's directory; in a pid
//! namespace of its own (a pod without `hostPID: true`) it can see no
//! process but its own, finds nothing, and says so once, clearly, with
//! `multiproc_exporter_discovery_processes_visible` at 0 (issue 47).

use super::harness::privileged;
use crate::support::shapes::Shape;
use crate::support::{eventually, python, sample_value};
use crate::writers::Writer;

const ALONE: &str = "The node agent sees no process but its own: it runs in a pid namespace of its own (a pod without hostPID: true, a container without --pid=host), so it finds no pod's directory. --discover.processes finds writers through /proc: run it in the host's pid namespace (hostPID: true, as deploy/kubernetes' DaemonSet has).";

#[test]
fn a_node_agent_in_a_pid_namespace_of_its_own_says_once_that_it_sees_no_process() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let Some(python) = python() else { return };
    for shape in Shape::each() {
        let work = tempfile::tempdir().unwrap();
        let writer = Writer::start(&python, work.path());
        let pods = work.path().join("no-pod-logs");
        let exporter = shape.start(&[
            "--discover.processes",
            "--discover.pod-log-dir",
            pods.to_str().unwrap(),
        ]);
        if shape.pids_visible() {
            eventually(
                "the writer's directory",
                std::time::Duration::from_secs(60),
                || {
                    let text = exporter.metrics();
                    let visible =
                        sample_value(&text, "multiproc_exporter_discovery_processes_visible");
                    match visible {
                        Some(v) if v > 0.0 && text.contains("\napp_in_flight{") => Ok(()),
                        _ => Err(text),
                    }
                },
            );
            exporter.sync_logs();
            assert!(exporter.logs_with(ALONE).is_empty());
        } else {
            for _ in 0..3 {
                let text = exporter.metrics();
                assert_eq!(
                    sample_value(&text, "multiproc_exporter_discovery_processes_visible"),
                    Some(0.0),
                    "{text}"
                );
                assert!(!text.contains("\napp_in_flight{"), "{text}");
            }
            exporter.sync_logs();
            assert_eq!(exporter.logs_with(ALONE).len(), 1, "{:#?}", exporter.logs());
        }
        writer.kill();
    }
}

/// Issue 53 (defect 8): the node agent without `hostPID` warned only when
/// it was literally alone: under `sh -c`, tini or dumb-init (one more
/// process in its namespace, its parent) there was no warning and
/// `multiproc_exporter_discovery_processes_visible` said 1.
#[test]
fn a_node_agent_under_an_init_in_a_pid_namespace_of_its_own_still_says_it_sees_no_process() {
    if !privileged() || !Shape::each().contains(&Shape::OwnPidNamespace) {
        return;
    }
    let _beside = super::beside_others();
    let work = tempfile::tempdir().unwrap();
    let pods = work.path().join("no-pod-logs");
    // `sh` stays pid 1 of the namespace, the exporter its child (pid 2);
    // `sh` passes on the SIGHUP that flushes the exporter's logs. `env
    // --default-signal=HUP` first: a shell cannot trap a signal ignored when
    // it started, and the tests run under `nohup` ignored SIGHUP (this test
    // then timed out waiting for the SIGHUP log line).
    let init = r#""$@" & child=$!; trap 'kill -HUP $child' HUP; while kill -0 $child 2>/dev/null; do wait $child; done"#;
    let mut launch = Shape::OwnPidNamespace.launch(crate::support::Launch::default());
    launch.wrapper.extend(
        ["env", "--default-signal=HUP", "sh", "-c", init, "sh"].map(std::ffi::OsString::from),
    );
    let exporter = crate::support::Exporter::launch(
        &[
            "--discover.processes",
            "--discover.pod-log-dir",
            pods.to_str().unwrap(),
        ],
        &launch,
    );
    for _ in 0..3 {
        let text = exporter.metrics();
        assert_eq!(
            sample_value(&text, "multiproc_exporter_discovery_processes_visible"),
            Some(0.0),
            "{text}"
        );
    }
    exporter.sync_logs();
    assert_eq!(exporter.logs_with(ALONE).len(), 1, "{:#?}", exporter.logs());
}
