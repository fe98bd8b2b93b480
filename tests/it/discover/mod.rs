//! Discovery of multiprocess directories through `/proc` (issue 30), on real
//! kernel features, as root. The fake pods are [`harness`]'s; here, the
//! scan and the tracker (phase 1):
//!
//! * two fake pods, each a mount and pid namespace (`unshare -m -p`, like a
//!   pod's sandbox) with a private `tmpfs` mounted at the **same** path, whose
//!   real prometheus_client writers (`tests/python/writer_process.py`,
//!   entered with `nsenter`) have the **same** pod-local pid, placed in cgroups
//!   named as the kubelet names them (the cgroupfs driver's
//!   `kubepods/burstable/pod<uid>/<container-id>` and the systemd driver's
//!   `kubepods.slice/…/cri-containerd-<id>.scope`, in the v1 or v2 hierarchy
//!   this machine has), and a `/var/log/pods`-like tree made by the test: the
//!   scan finds one target per pod with the right holders, cgroups and names,
//!   and each target reads exactly as prometheus_client merges it;
//! * a pod whose writers and sandbox have exited (its mount namespace gone)
//!   stays readable, with the dead writers' values, while its log directory
//!   exists, and is dropped when it goes;
//! * run as `nobody`, the scan counts the processes it may not read and goes
//!   on;
//! * the scan's cost over 500 processes each holding two files.
//!
//! `serve --discover.processes` end to end is [`serve`]'s, what an operator
//! sees of it (status page, API, `dump`) and the labels outside Kubernetes
//! [`status`]', and the capabilities it needs [`privileges`]'; a pod's read
//! stuck in the kernel [`stuck`]'s; pods of unequal size under one memory
//! budget [`budget`]'s.
//!
//! Skipped, with a notice, when not root, except under `CI=true`, where that
//! is a failure.

mod budget;
mod harness;
mod hostile;
mod privileges;
mod serve;
mod shapes;
mod status;
mod stuck;
mod temporary;

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use multiproc_exporter::source::discover::{
    cgroup, scan, Decision, DirId, Discovery, DiscoveryOptions, DropReason, PodLogs, Scan,
};

use crate::support::{self, python, wait_for};
use harness::*;

/// Every agent a test runs scans the whole machine's `/proc`, so it sees the
/// other tests' processes too. The tests that load the machine (hundreds of
/// processes, thousands of directories) hold this lock alone
/// ([`machine_wide`]): each bounds what the exporter costs, or what it
/// serves, which such a test beside it would decide instead. The others
/// share it ([`beside_others`]).
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Runs alone among the discovery tests (a test that panicked while holding
/// the lock does not stop the others).
fn machine_wide() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// Runs beside the other ordinary discovery tests, never beside a
/// [`machine_wide`] one.
fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn two_pods_with_the_same_path_and_pid_are_two_targets_kept_while_their_pod_exists() {
    if !privileged() {
        return;
    }
    let _beside = beside_others();
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().unwrap();
    let metrics = work.path().join("metrics");
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&metrics).unwrap();
    std::fs::create_dir_all(logs.join("pods")).unwrap();

    // Pod A: two writers in the container `vllm` of a pod with a sidecar;
    // pod B: one writer, one container. Same path, same pod-local pid 2.
    let started = (
        Pod::start(
            &python,
            &logs,
            &metrics,
            PodSpec {
                driver: Driver::Cgroupfs,
                names: ("llm", "vllm-a", "vllm"),
                containers: &["proxy", "vllm"],
                writers: 2,
                tmpfs: Some("mode=0755"),
            },
        ),
        Pod::start(
            &python,
            &logs,
            &metrics,
            PodSpec {
                driver: Driver::Systemd,
                names: ("llm", "vllm-b", "server"),
                containers: &["server"],
                writers: 1,
                tmpfs: Some("mode=0755"),
            },
        ),
    );
    let (Some(mut a), Some(b)) = started else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "cannot make cgroups in /sys/fs/cgroup in CI"
        );
        eprintln!("skipping: cannot make cgroups in /sys/fs/cgroup");
        return;
    };
    let (ns_a, ns_b) = (
        a.sandbox.as_ref().unwrap().mount_ns(),
        b.sandbox.as_ref().unwrap().mount_ns(),
    );
    assert_ne!(ns_a, ns_b);
    // The host sees neither pod's files.
    assert!(names(&metrics).is_empty());

    // The real cgroups parse to the pods' UIDs and container IDs.
    for pod in [&a, &b] {
        for pid in pod.pids() {
            let owner = cgroup::read(Path::new(&format!("/proc/{pid}"))).unwrap();
            assert_eq!(
                owner.pod_uid.as_deref(),
                Some(pod.uid.as_str()),
                "{owner:?}"
            );
            assert_eq!(
                owner.container_id.as_deref(),
                Some(pod.container_id.as_str()),
                "{owner:?}"
            );
        }
    }

    // The scan: one sighting per pod, at the same path, with its holders.
    let found = scan();
    let ours: Vec<_> = found
        .sightings
        .iter()
        .filter(|s| s.dir == metrics)
        .collect();
    assert_eq!(ours.len(), 2, "{ours:#?}");
    // The pod-local pids: A's first writer's is B's writer's.
    assert_eq!(a.ns_pids()[0], b.ns_pids()[0]);
    for (pod, ns) in [(&a, ns_a), (&b, ns_b)] {
        let sighting = ours.iter().find(|s| s.mount_ns == ns).unwrap();
        let pids: Vec<u32> = sighting.holders.iter().map(|h| h.pid).collect();
        assert_eq!(pids, pod.pids());
        let mut inner: Vec<u32> = sighting.holders.iter().filter_map(|h| h.ns_pid).collect();
        inner.sort_unstable();
        assert_eq!(inner, pod.ns_pids());
        for holder in &sighting.holders {
            // A counter, a histogram, a summary and gauges in six modes.
            assert_eq!(holder.files, 9, "{holder:?}");
            let command = holder.command.as_deref().unwrap_or_default();
            assert!(command.starts_with("python"), "{holder:?}");
        }
    }

    // The tracker: two targets, named from the log tree, each read as
    // prometheus_client merges its own directory.
    let mut discovery = Discovery::new(DiscoveryOptions {
        pod_logs: Some(
            PodLogs::new(logs.join("pods")).with_container_links(logs.join("containers")),
        ),
        ..DiscoveryOptions::default()
    });
    let refresh = discovery.refresh();
    // (Processes with capabilities beyond this one's, such as a container's
    // pid 1, may be unreadable even to root: not the pods'.)
    for pid in a.pids().into_iter().chain(b.pids()) {
        assert!(
            !refresh.unreadable.contains(&pid),
            "{:?}",
            refresh.unreadable
        );
    }
    let mut texts = Vec::new();
    for pod in [&a, &b] {
        let target = pod.target(&discovery).expect("the pod's target");
        assert!(target.is_held() && target.is_kept());
        assert_eq!(target.dir(), metrics);
        let holders: Vec<u32> = target.holders().iter().map(|h| h.pid).collect();
        assert_eq!(holders, pod.pids());
        let names_of_pod = target.pod().unwrap();
        assert_eq!(
            (
                names_of_pod.namespace.as_str(),
                names_of_pod.pod.as_str(),
                names_of_pod.container.as_deref()
            ),
            (pod.namespace, pod.name, Some(pod.container))
        );
        assert_eq!(target.container_id(), Some(pod.container_id.as_str()));
        let read = target.read_path().unwrap();
        assert_eq!(names(&read), pod.file_names());
        texts.push(dump_equals_prometheus_client(&python, target));
    }
    assert!(
        texts[0].contains("app_requests_total 6.0\n"),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains("app_requests_total 3.0\n"),
        "{}",
        texts[1]
    );

    // Pod A's writers exit and its sandbox with them: its mount namespace is
    // gone, and its target stays, with the dead writers' values, while its
    // log directory exists.
    let id_a: DirId = a.target(&discovery).unwrap().id();
    for writer in a.writers.drain(..) {
        writer.exit();
    }
    a.sandbox = None;
    wait_for("pod A's mount namespace to go", || {
        (!namespace_alive(ns_a)).then_some(())
    });
    let refresh = discovery.refresh();
    // (Other tests' pods, unknown to this log tree, may go.)
    assert!(
        !refresh.dropped.iter().any(|(id, _)| *id == id_a),
        "{:?}",
        refresh.dropped
    );
    let target = &discovery.targets()[&id_a];
    assert!(!target.is_held());
    assert_eq!(target.decision(), Decision::PodExists);
    assert_eq!(dump_equals_prometheus_client(&python, target), texts[0]);
    assert!(b.target(&discovery).unwrap().is_held());

    // Its pod is deleted: dropped at the next refresh; pod B stays.
    std::fs::remove_dir_all(a.log_dir(&logs)).unwrap();
    let refresh = discovery.refresh();
    assert!(
        refresh.dropped.contains(&(id_a, DropReason::PodGone)),
        "{:?}",
        refresh.dropped
    );
    assert!(a.target(&discovery).is_none());
    assert_eq!(
        dump_equals_prometheus_client(&python, b.target(&discovery).unwrap()),
        texts[1]
    );
}

#[test]
fn a_kept_emptydir_outlives_its_pods_namespace_without_holding_the_hosts_mount() {
    if !privileged() {
        return;
    }
    let _beside = beside_others();
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(logs.join("pods")).unwrap();
    let volume = HostMount::new(&work.path().join("empty-dir"));
    let Some(mut pod) = Pod::start(
        &python,
        &logs,
        &volume.0,
        PodSpec {
            driver: Driver::Cgroupfs,
            names: ("llm", "vllm-c", "vllm"),
            containers: &["vllm"],
            writers: 1,
            tmpfs: None,
        },
    ) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "cannot make cgroups in /sys/fs/cgroup in CI"
        );
        eprintln!("skipping: cannot make cgroups in /sys/fs/cgroup");
        return;
    };
    let ns = pod.sandbox.as_ref().unwrap().mount_ns();
    let mut discovery = Discovery::new(DiscoveryOptions {
        pod_logs: Some(PodLogs::new(logs.join("pods"))),
        ..DiscoveryOptions::default()
    });
    discovery.refresh();
    let target = pod.target(&discovery).expect("the pod's target");
    assert_eq!(target.dir(), volume.0);
    assert_eq!(target.pod().unwrap().container.as_deref(), Some("vllm"));
    let id = target.id();
    let before = dump_equals_prometheus_client(&python, target);

    for writer in pod.writers.drain(..) {
        writer.exit();
    }
    pod.sandbox = None;
    wait_for("the pod's mount namespace to go", || {
        (!namespace_alive(ns)).then_some(())
    });
    // The kubelet tears the volume down: not blocked by the kept directory,
    // which still reads as before.
    volume.unmount();
    discovery.refresh();
    let target = &discovery.targets()[&id];
    assert_eq!(target.decision(), Decision::PodExists);
    assert_eq!(dump_equals_prometheus_client(&python, target), before);
    std::fs::remove_dir_all(pod.log_dir(&logs)).unwrap();
    let dropped = discovery.refresh().dropped;
    assert!(dropped.contains(&(id, DropReason::PodGone)), "{dropped:?}");
}

/// Run by [`a_scan_without_privileges_counts_what_it_cannot_read`] as
/// `nobody`; does nothing otherwise.
#[test]
#[ignore = "a helper run as nobody by another test"]
fn unprivileged_scan_helper() {
    if std::env::var_os("MPE_DISCOVER_HELPER").is_none() {
        return;
    }
    let _beside = beside_others();
    let found = scan();
    println!(
        "scan processes={} unreadable={} sightings={}",
        found.processes,
        found.unreadable.len(),
        found.sightings.len()
    );
}

#[test]
fn a_scan_without_privileges_counts_what_it_cannot_read() {
    if !privileged() {
        return;
    }
    let _beside = beside_others();
    if support::tool("setpriv").is_none() {
        return;
    }
    // A root process holding a file: invisible to nobody.
    let work = tempfile::tempdir().unwrap();
    let mut holder = Command::new("sh")
        .arg("-c")
        .arg("exec 3<>\"$0/counter_1.db\"; echo ready; exec sleep 600")
        .arg(work.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let me = std::env::current_exe().unwrap();
    for ancestor in me.ancestors().skip(1) {
        let mode = std::fs::metadata(ancestor).unwrap().mode();
        assert!(
            mode & 0o001 != 0,
            "{} cannot be entered by nobody: build the tests in a directory other users can reach",
            ancestor.display()
        );
    }
    let output = Command::new("setpriv")
        .args(crate::support::AS_NOBODY)
        .arg(&me)
        .args([
            "--exact",
            "discover::unprivileged_scan_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MPE_DISCOVER_HELPER", "1")
        .current_dir("/")
        .output()
        .unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.find("scan processes=").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no result from the helper: {stdout}"));
    let field = |name: &str| -> usize {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    // pid 1 and the root holder at least; nothing found, nothing fatal.
    assert!(field("unreadable") >= 2, "{line}");
    assert_eq!(field("sightings"), 0, "{line}");
}

/// The median and the fastest of seven scans, and the last scan.
fn time_scans() -> (Duration, Duration, Scan) {
    let mut times = Vec::new();
    let mut last = Scan::default();
    for _ in 0..7 {
        let started = Instant::now();
        last = scan();
        times.push(started.elapsed());
    }
    times.sort();
    (times[times.len() / 2], times[0], last)
}

#[test]
fn the_scan_costs_little_with_500_processes_holding_files() {
    if !privileged() {
        return;
    }
    let _alone = machine_wide();
    const PROCESSES: usize = 500;
    let work = tempfile::tempdir().unwrap();
    let held = |found: &Scan, expected_files: usize| {
        found
            .sightings
            .iter()
            .find(|s| s.dir == work.path())
            .map_or(0, |s| {
                s.holders
                    .iter()
                    .filter(|h| h.files == expected_files)
                    .count()
            })
    };
    let report = |what: &str, (median, fastest, found): &(Duration, Duration, Scan)| {
        eprintln!(
            "discovery scan, {what}: {} processes, {} descriptors, {} held directories: \
             median {:.1} ms, fastest {:.1} ms of 7 ({} build)",
            found.processes,
            found.descriptors,
            found.sightings.len(),
            median.as_secs_f64() * 1e3,
            fastest.as_secs_f64() * 1e3,
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        );
    };

    // The usual node: many processes, none writing multiprocess files.
    let others = sleepers(work.path(), PROCESSES, "data", "log", "txt");
    wait_for("every process to hold its files", || {
        let descriptors = scan().descriptors;
        (descriptors >= 2 * PROCESSES).then_some(())
    });
    let without = time_scans();
    stop(others);
    report("500 processes holding other files", &without);
    assert_eq!(held(&without.2, 2), 0);

    // The worst case: every one of them a writer.
    let writers = sleepers(work.path(), PROCESSES, "counter", "gauge_livesum", "db");
    wait_for("every writer to hold its files", || {
        (held(&scan(), 2) == PROCESSES).then_some(())
    });
    let with = time_scans();
    stop(writers);
    report("500 processes holding two multiprocess files each", &with);
    assert_eq!(held(&with.2, 2), PROCESSES);
    // Loose: a scan is a few system calls per descriptor and per holder.
    assert!(with.0 < Duration::from_secs(2), "{:?}", with.0);
}
