//! The tracker over hand-made scans whose holder is this test process (its
//! `/proc/<pid>/root` is the test's own file system): targets added, merged by
//! identity, kept after their holders go, named from a fake pod log tree, and
//! dropped by the retention rule. `tests/it/discover.rs` runs it on real
//! writers in their own mount namespaces and cgroups.

use std::os::unix::fs::MetadataExt as _;

use super::*;
use crate::source::discover::cgroup::CgroupOwner;
use crate::source::discover::scan::HeldFile;

const UID: &str = "3f1c2b8e-6d2a-4f7e-9a51-0c8d2e4b7a19";
const CID: &str = "8b6f0e3c1d2a4f5b9c7e6d5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";

fn holder(pod_uid: Option<&str>) -> Holder {
    Holder {
        pid: std::process::id(),
        ns_pid: Some(std::process::id()),
        start_time: None,
        command: Some("python".into()),
        cgroup: Some(CgroupOwner {
            path: "/x".into(),
            pod_uid: pod_uid.map(str::to_owned),
            container_id: Some(CID.into()),
        }),
        files: 1,
    }
}

fn sighting(dir: &Path, mount_ns: u64, pod_uid: Option<&str>) -> Sighting {
    let file = dir.join("counter_1.db");
    if !file.exists() {
        std::fs::write(&file, b"x").unwrap();
    }
    let meta = std::fs::metadata(&file).unwrap();
    Sighting {
        mount_ns,
        dir: dir.to_path_buf(),
        holders: vec![holder(pod_uid)],
        sample: HeldFile {
            name: "counter_1.db".into(),
            identity: (meta.dev(), meta.ino()),
        },
    }
}

fn scan_of(sightings: Vec<Sighting>) -> Scan {
    Scan {
        sightings,
        ..Scan::default()
    }
}

fn linger(secs: u64) -> Retention {
    Retention {
        linger: Duration::from_secs(secs),
    }
}

#[test]
fn outside_kubernetes_a_directory_lingers_after_its_holders() {
    let dir = tempfile::tempdir().unwrap();
    let mut discovery = Discovery::new(DiscoveryOptions {
        pod_logs: None,
        retention: linger(60),
        ..DiscoveryOptions::default()
    });
    let t0 = Instant::now();
    let refresh = discovery.apply(scan_of(vec![sighting(dir.path(), 7, None)]), t0);
    assert!(refresh.problems.is_empty(), "{:?}", refresh.problems);
    let id = DirId::of(dir.path()).unwrap();
    assert_eq!(refresh.added, [id]);
    let target = &discovery.targets()[&id];
    assert!(target.is_held() && target.is_kept());
    assert_eq!(target.dir(), dir.path());
    assert_eq!(target.container_id(), Some(CID));
    assert_eq!(target.pod_uid(), None);
    assert_eq!(target.pod(), None);
    assert_eq!(target.decision(), Decision::Held);
    let path = target.read_path().unwrap();
    assert!(path.starts_with("/proc/self/fd/"), "{path:?}");

    // The holders are gone: it lingers, readable through its descriptor.
    let later = t0 + Duration::from_secs(20);
    let refresh = discovery.apply(Scan::default(), later);
    assert!(refresh.added.is_empty() && refresh.dropped.is_empty());
    let target = &discovery.targets()[&id];
    assert!(!target.is_held());
    assert_eq!(
        target.decision(),
        Decision::Lingering(Duration::from_secs(40))
    );
    assert_eq!(std::fs::read(path.join("counter_1.db")).unwrap(), b"x");
    assert_eq!(target.owner().unwrap().command.as_deref(), Some("python"));

    // Back before the end: held again, the linger starts anew.
    discovery.apply(
        scan_of(vec![sighting(dir.path(), 8, None)]),
        t0 + Duration::from_secs(50),
    );
    assert_eq!(discovery.targets()[&id].locations()[0].mount_ns, 8);
    discovery.apply(Scan::default(), t0 + Duration::from_secs(100));
    assert!(discovery.targets().contains_key(&id));
    let refresh = discovery.apply(Scan::default(), t0 + Duration::from_secs(110));
    assert_eq!(refresh.dropped, [(id, DropReason::LingerExpired)]);
    assert!(discovery.targets().is_empty());
}

#[test]
fn in_kubernetes_a_directory_stays_while_its_pod_does() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let pod_dir = logs.path().join(format!("llm_vllm-0_{UID}"));
    std::fs::create_dir_all(pod_dir.join("vllm")).unwrap();
    let mut discovery = Discovery::new(DiscoveryOptions {
        pod_logs: Some(PodLogs::new(logs.path())),
        retention: linger(1),
        ..DiscoveryOptions::default()
    });
    let t0 = Instant::now();
    discovery.apply(scan_of(vec![sighting(dir.path(), 7, Some(UID))]), t0);
    let id = DirId::of(dir.path()).unwrap();
    let pod = discovery.targets()[&id].pod().cloned().unwrap();
    assert_eq!(
        pod,
        PodRef {
            namespace: "llm".into(),
            pod: "vllm-0".into(),
            uid: UID.into(),
            container: Some("vllm".into()),
        }
    );
    // Long after the holders are gone: kept, the pod exists.
    let refresh = discovery.apply(Scan::default(), t0 + Duration::from_secs(3600));
    assert!(refresh.dropped.is_empty());
    assert_eq!(discovery.targets()[&id].decision(), Decision::PodExists);
    // The pod is deleted: dropped at once.
    std::fs::remove_dir_all(&pod_dir).unwrap();
    let refresh = discovery.apply(Scan::default(), t0 + Duration::from_secs(3601));
    assert_eq!(refresh.dropped, [(id, DropReason::PodGone)]);

    // A pod log root that cannot be read: reported, and the rule falls back
    // to lingering.
    let mut discovery = Discovery::new(DiscoveryOptions {
        pod_logs: Some(PodLogs::new(logs.path().join("missing"))),
        retention: linger(60),
        ..DiscoveryOptions::default()
    });
    let refresh = discovery.apply(scan_of(vec![sighting(dir.path(), 7, Some(UID))]), t0);
    assert_eq!(refresh.problems.len(), 1);
    assert_eq!(refresh.problems[0].label(), "pod_logs_unreadable");
    discovery.apply(Scan::default(), t0 + Duration::from_secs(1));
    assert!(matches!(
        discovery.targets()[&id].decision(),
        Decision::Lingering(_)
    ));
}

#[test]
fn one_directory_seen_from_two_namespaces_is_one_target_and_two_are_two() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let mut discovery = Discovery::default();
    let refresh = discovery.apply(
        scan_of(vec![
            sighting(a.path(), 7, None),
            sighting(a.path(), 9, None),
            sighting(b.path(), 7, None),
        ]),
        Instant::now(),
    );
    assert_eq!(refresh.added.len(), 2);
    let target = &discovery.targets()[&DirId::of(a.path()).unwrap()];
    let namespaces: Vec<u64> = target.locations().iter().map(|l| l.mount_ns).collect();
    assert_eq!(namespaces, [7, 9]);
    // The same process twice is one holder holding both sightings' files.
    assert_eq!(target.holders().len(), 1);
    assert_eq!(target.holders()[0].files, 2);
}

#[test]
fn a_path_that_does_not_reach_the_held_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let mut wrong = sighting(dir.path(), 7, None);
    // The holder holds a file elsewhere of the same name.
    let other = sighting(elsewhere.path(), 7, None);
    wrong.sample = other.sample;
    let mut discovery = Discovery::default();
    let refresh = discovery.apply(scan_of(vec![wrong]), Instant::now());
    assert!(discovery.targets().is_empty());
    assert_eq!(refresh.problems.len(), 1, "{:?}", refresh.problems);
    assert_eq!(refresh.problems[0].label(), "directory_unreadable");
    assert!(refresh.problems[0]
        .to_string()
        .contains("not the file it holds"));
    // A directory that is gone is reported too.
    let mut gone = sighting(dir.path(), 7, None);
    gone.dir = dir.path().join("sub-that-is-not-there");
    let refresh = discovery.apply(scan_of(vec![gone]), Instant::now());
    assert_eq!(refresh.problems.len(), 1);
}

#[test]
fn a_container_the_log_tree_names_later_is_named_then() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let pods = logs.path().join("pods");
    let links = logs.path().join("containers");
    let pod_dir = pods.join(format!("llm_vllm-0_{UID}"));
    for container in ["proxy", "vllm"] {
        std::fs::create_dir_all(pod_dir.join(container)).unwrap();
    }
    std::fs::create_dir_all(&links).unwrap();
    let mut discovery = Discovery::new(DiscoveryOptions {
        pod_logs: Some(PodLogs::new(&pods).with_container_links(&links)),
        retention: linger(60),
        ..DiscoveryOptions::default()
    });
    let id = DirId::of(dir.path()).unwrap();
    let t0 = Instant::now();
    discovery.apply(scan_of(vec![sighting(dir.path(), 7, Some(UID))]), t0);
    let pod = discovery.targets()[&id].pod().unwrap();
    assert_eq!(
        (pod.pod.as_str(), pod.container.as_deref()),
        ("vllm-0", None)
    );
    std::os::unix::fs::symlink(
        pod_dir.join("vllm/0.log"),
        links.join(format!("vllm-0_llm_vllm-{CID}.log")),
    )
    .unwrap();
    discovery.apply(scan_of(vec![sighting(dir.path(), 7, Some(UID))]), t0);
    let pod = discovery.targets()[&id].pod().unwrap();
    assert_eq!(pod.container.as_deref(), Some("vllm"));
}

#[test]
fn beyond_max_kept_a_directory_is_read_while_held_and_not_kept_and_a_released_one_is_never_reopened(
) {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut discovery = Discovery::new(DiscoveryOptions {
        pod_logs: None,
        retention: linger(60),
        max_kept: Some(2),
    });
    let sightings = || {
        dirs.iter()
            .enumerate()
            .map(|(i, d)| sighting(d.path(), 7 + i as u64, None))
            .collect()
    };
    let t0 = Instant::now();
    let refresh = discovery.apply(scan_of(sightings()), t0);
    assert_eq!(refresh.added.len(), 3);
    assert_eq!(discovery.kept(), 2);
    assert_eq!(refresh.unretained.len(), 1);
    let unretained = refresh.unretained[0];
    let target = &discovery.targets()[&unretained];
    assert!(!target.is_kept() && target.read_path().is_some());
    // A kept one let go: the unretained one takes its place at the next
    // refresh; the released one is not opened again.
    let kept = *discovery
        .targets()
        .keys()
        .find(|id| **id != unretained)
        .unwrap();
    assert!(discovery.release(kept));
    assert_eq!(discovery.kept(), 1);
    let refresh = discovery.apply(scan_of(sightings()), t0);
    assert!(refresh.unretained.is_empty());
    assert_eq!(discovery.kept(), 2);
    assert!(discovery.targets()[&unretained].is_kept());
    assert!(!discovery.targets()[&kept].is_kept());
    assert!(discovery.targets()[&kept].is_released());
    // Its holders gone, the released one is dropped at once.
    let rest: Vec<_> = sightings()
        .into_iter()
        .filter(|s: &Sighting| DirId::of(&s.dir).unwrap() != kept)
        .collect();
    let refresh = discovery.apply(scan_of(rest), t0);
    assert_eq!(refresh.dropped, [(kept, DropReason::NotKept)]);
}

/// Processes a test sets: one scan, holders alive while listed, paths at
/// the directories themselves, a clock of its own.
#[derive(Debug)]
struct Fake {
    scan: std::sync::Mutex<Scan>,
    alive: std::sync::Mutex<Vec<u32>>,
    now: Instant,
}

impl Processes for Fake {
    fn scan(&self) -> Scan {
        self.scan.lock().unwrap().clone()
    }

    fn is_alive(&self, holder: &Holder) -> bool {
        self.alive.lock().unwrap().contains(&holder.pid)
    }

    fn through_root(&self, _pid: u32, dir: &Path) -> PathBuf {
        dir.to_path_buf()
    }

    fn now(&self) -> Instant {
        self.now
    }
}

#[test]
fn discovery_learns_of_the_processes_through_its_seam() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = sighting(dir.path(), 7, None);
    // A pid no process of this machine need have: its root is not walked.
    seen.holders[0].pid = 4_000_000;
    let later = Instant::now() + Duration::from_secs(3600);
    let fake = Arc::new(Fake {
        scan: std::sync::Mutex::new(scan_of(vec![seen])),
        alive: std::sync::Mutex::new(vec![4_000_000]),
        now: later,
    });
    let mut discovery = Discovery::new(DiscoveryOptions {
        retention: linger(60),
        ..DiscoveryOptions::default()
    });
    discovery.set_processes(fake.clone());
    assert_eq!(discovery.now(), later);
    let refresh = discovery.refresh();
    assert!(refresh.problems.is_empty(), "{:?}", refresh.problems);
    let id = DirId::of(dir.path()).unwrap();
    let target = &discovery.targets()[&id];
    assert!(target.is_held() && target.is_kept());
    assert_eq!(target.first_seen(), later);
    assert!(!discovery.holder_gone());
    // The holder exits: the seam says so.
    fake.alive.lock().unwrap().clear();
    *fake.scan.lock().unwrap() = Scan::default();
    assert!(discovery.holder_gone());
    discovery.refresh();
    assert_eq!(
        discovery.targets()[&id].decision(),
        Decision::Lingering(Duration::from_secs(60))
    );
}
