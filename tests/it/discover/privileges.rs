//! Which privileges `serve --discover.processes` needs, measured through the
//! exporter run as `nobody` with each set of capabilities (util-linux's
//! `setpriv`, ambient capabilities) against a pod whose writers run as root:
//! only `CAP_SYS_PTRACE` with `CAP_DAC_READ_SEARCH` finds and reads it (root
//! is not needed), and with anything less the exporter says in one line what
//! is missing.

use std::ffi::OsString;

use super::harness::*;
use crate::support::{self, python, sample_value, unprivileged_launch, Exporter, Launch};

/// The start-up line that names the missing capabilities.
const MISSING: &str = "Missing privileges for --discover.processes: without CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH in the effective set, other users' processes cannot be scanned nor their directories read; only what this user may read is served (see multiproc_exporter_discovery_processes_unreadable and docs/configuration.md).";

/// `setpriv` as `nobody` with exactly `caps` (names as `setpriv` writes them).
fn as_nobody_with(caps: &[&str], base: &Launch) -> Launch {
    let set: String = caps.iter().map(|c| format!(",+{c}")).collect();
    let wrapper = [
        "setpriv".to_owned(),
        "--reuid=65534".to_owned(),
        "--regid=65534".to_owned(),
        "--clear-groups".to_owned(),
        format!("--inh-caps=-all{set}"),
        format!("--ambient-caps=-all{set}"),
        format!("--bounding-set=-all{set}"),
        "--".to_owned(),
    ];
    Launch {
        wrapper: wrapper.into_iter().map(OsString::from).collect(),
        ..base.clone()
    }
}

#[test]
fn discovery_needs_cap_sys_ptrace_and_cap_dac_read_search_not_root() {
    if !privileged() || support::tool("setpriv").is_none() {
        return;
    }
    let _beside = super::beside_others();
    let Some(python) = python() else { return };
    let reachable = tempfile::tempdir().unwrap();
    let base = unprivileged_launch(reachable.path());
    let metrics = reachable.path().join("metrics");
    let logs = reachable.path().join("logs");
    std::fs::create_dir_all(&metrics).unwrap();
    std::fs::create_dir_all(logs.join("pods")).unwrap();
    let Some(pod) = Pod::start(
        &python,
        &logs,
        &metrics,
        PodSpec {
            driver: Driver::Cgroupfs,
            names: ("disc-caps", "vllm", "vllm"),
            containers: &["vllm"],
            writers: 1,
            tmpfs: Some("mode=0755"),
        },
    ) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "cannot make cgroups in /sys/fs/cgroup in CI"
        );
        return;
    };
    let pods = logs.join("pods");
    let args = [
        "--discover.processes",
        "--discover.pod-log-dir",
        pods.to_str().unwrap(),
    ];
    let series = format!(
        "app_requests_total{{container=\"vllm\",namespace=\"disc-caps\",pod=\"{}\"}}",
        pod.name
    );
    for (caps, missing) in [
        (&[][..], Some("CAP_SYS_PTRACE,CAP_DAC_READ_SEARCH")),
        (&["sys_ptrace"][..], Some("CAP_DAC_READ_SEARCH")),
        (&["dac_read_search"][..], Some("CAP_SYS_PTRACE")),
        (&["sys_ptrace", "dac_read_search"][..], None),
    ] {
        let exporter = Exporter::launch(&args, &as_nobody_with(caps, &base));
        let text = exporter.metrics();
        let served = sample_value(&text, &series);
        exporter.sync_logs();
        let lines = exporter.logs_with(MISSING);
        match missing {
            Some(missing) => {
                assert_eq!(served, None, "{caps:?}: {text}");
                assert_eq!(lines.len(), 1, "{caps:?}: {:#?}", exporter.logs());
                assert_eq!(lines[0]["missing"], missing, "{caps:?}");
                assert_eq!(lines[0]["uid"], "65534", "{caps:?}");
                // What it could not read is counted.
                assert!(
                    sample_value(&text, "multiproc_exporter_discovery_processes_unreadable")
                        > Some(0.0),
                    "{caps:?}: {text}"
                );
            }
            None => {
                assert_eq!(served, Some(3.0), "{caps:?}: {text}");
                assert!(lines.is_empty(), "{caps:?}: {lines:#?}");
            }
        }
    }
}
