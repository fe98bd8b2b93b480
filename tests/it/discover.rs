//! Discovery of multiprocess directories through `/proc` (issue 30, phase 1),
//! on real kernel features, as root:
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
//! Skipped, with a notice, when not root, except under `CI=true`, where that
//! is a failure.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use multiproc_exporter::source::discover::{
    cgroup, scan, Decision, DirId, Discovery, DiscoveryOptions, DropReason, PodLogs, Scan, Target,
};

use crate::support::{self, python, python_exposition, python_script, run_exporter, wait_for};

/// Whether the tests may run: root, or a failure under `CI=true`.
fn privileged() -> bool {
    if support::is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "the discovery tests need root in CI (mount namespaces, cgroups, other processes' /proc)"
    );
    eprintln!("skipping: the discovery tests need root (mount namespaces, cgroups, other processes' /proc)");
    false
}

/// Random hex digits for UIDs and container IDs unique to this run.
fn hex(n: usize) -> String {
    let mut state = support::random_seed() | 1;
    let mut out = String::new();
    while out.len() < n {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push_str(&format!("{state:016x}"));
    }
    out.truncate(n);
    out
}

/// A random pod UID (`8-4-4-4-12`).
fn pod_uid() -> String {
    let h = hex(32);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The parent pid of `pid`, from its `stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&p| parent_of(p) == Some(pid))
        .collect();
    children.sort_unstable();
    children
}

/// The inode of a process's mount namespace.
fn mount_ns(pid: u32) -> Option<u64> {
    std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

/// Whether any process lives in the mount namespace `ns`.
fn namespace_alive(ns: u64) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .any(|p| mount_ns(p) == Some(ns))
}

/// The cgroup layouts the kubelet uses.
#[derive(Clone, Copy, Debug)]
enum Driver {
    /// `kubepods/burstable/pod<uid>/<container-id>`.
    Cgroupfs,
    /// `kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/cri-containerd-<id>.scope`.
    Systemd,
}

/// A cgroup made for a fake container (removed on drop, with the parents it
/// made, once empty).
struct FakeCgroup {
    /// The container's cgroup directory.
    dir: PathBuf,
    /// What was created, outermost first.
    created: Vec<PathBuf>,
}

impl FakeCgroup {
    /// Makes the container's cgroup for `driver` in the hierarchy this machine
    /// has for it: cgroup v2 at `/sys/fs/cgroup` (pure v2), else the v1 `pids`
    /// hierarchy for the cgroupfs layout and the v2 `unified` hierarchy (a
    /// hybrid host) for the systemd layout. `None` when it cannot be made.
    fn make(driver: Driver, uid: &str, container: &str) -> Option<FakeCgroup> {
        let root = Path::new("/sys/fs/cgroup");
        let base = if root.join("cgroup.controllers").exists() {
            root.to_path_buf()
        } else {
            match driver {
                Driver::Cgroupfs => root.join("pids"),
                Driver::Systemd if root.join("unified/cgroup.procs").exists() => {
                    root.join("unified")
                }
                Driver::Systemd => root.join("pids"),
            }
        };
        let segments = match driver {
            Driver::Cgroupfs => vec![
                "kubepods".to_owned(),
                "burstable".to_owned(),
                format!("pod{uid}"),
                container.to_owned(),
            ],
            Driver::Systemd => vec![
                "kubepods.slice".to_owned(),
                "kubepods-besteffort.slice".to_owned(),
                format!("kubepods-besteffort-pod{}.slice", uid.replace('-', "_")),
                format!("cri-containerd-{container}.scope"),
            ],
        };
        let mut dir = base;
        let mut created = Vec::new();
        for segment in segments {
            dir.push(segment);
            if !dir.exists() {
                if let Err(e) = std::fs::create_dir(&dir) {
                    eprintln!("cannot make cgroup {}: {e}", dir.display());
                    return None;
                }
                created.push(dir.clone());
            }
        }
        Some(FakeCgroup { dir, created })
    }
}

impl Drop for FakeCgroup {
    fn drop(&mut self) {
        for dir in self.created.iter().rev() {
            // Processes leave a cgroup when they exit; give them a moment.
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A fake pod's sandbox: `unshare -m -p -f` with a private `tmpfs` at the
/// metrics directory, its pid 1 sleeping (killed, with every process of its
/// pid namespace, on drop).
struct Sandbox {
    unshare: Child,
    /// The host pid of its pid 1.
    init: u32,
}

impl Sandbox {
    fn start(metrics: &Path, private_tmpfs: bool) -> Sandbox {
        let mount = if private_tmpfs {
            "mount -t tmpfs -o mode=0755 none \"$0\" && "
        } else {
            ""
        };
        let mut unshare = Command::new("unshare")
            .args(["-m", "-p", "-f", "--propagation", "private", "--kill-child"])
            .args(["sh", "-c"])
            .arg(format!("{mount}echo ready && exec sleep 100000"))
            .arg(metrics)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run unshare");
        let mut line = String::new();
        BufReader::new(unshare.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "the sandbox could not mount its tmpfs"
        );
        let init = wait_for("the sandbox's pid 1", || {
            children_of(unshare.id()).first().copied()
        });
        Sandbox { unshare, init }
    }

    fn mount_ns(&self) -> u64 {
        mount_ns(self.init).expect("the sandbox's mount namespace")
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// A `writer_process.py` in a sandbox's namespaces and a cgroup.
struct Writer {
    nsenter: Child,
    stdin: ChildStdin,
    _stdout: BufReader<ChildStdout>,
    /// The Python process's host pid.
    pid: u32,
}

impl Writer {
    fn start(python: &Path, sandbox: &Sandbox, cgroup: &FakeCgroup, metrics: &Path) -> Writer {
        let mut nsenter = Command::new("sh")
            .arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && exec nsenter -t \"$1\" -m -p -- \"$2\" \"$3\"")
            .arg(&cgroup.dir)
            .arg(sandbox.init.to_string())
            .arg(python)
            .arg(python_script("writer_process.py"))
            .env("PROMETHEUS_MULTIPROC_DIR", metrics)
            .env("WRITER_ALL_KINDS", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run nsenter");
        let stdin = nsenter.stdin.take().unwrap();
        let mut stdout = BufReader::new(nsenter.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the writer did not start");
        let pid = wait_for("the writer's process", || {
            children_of(nsenter.id()).first().copied()
        });
        Writer {
            nsenter,
            stdin,
            _stdout: stdout,
            pid,
        }
    }

    /// Exits (without `mark_process_dead`, like a crash).
    fn exit(mut self) {
        writeln!(self.stdin, "exit").unwrap();
        self.stdin.flush().unwrap();
        self.nsenter.wait().unwrap();
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.nsenter.kill();
        let _ = self.nsenter.wait();
    }
}

/// One fake pod: its names, its log directory, its cgroup, its sandbox and
/// writers (dropped in that reverse order: writers, sandbox, cgroup).
struct Pod {
    namespace: &'static str,
    name: &'static str,
    container: &'static str,
    uid: String,
    container_id: String,
    writers: Vec<Writer>,
    sandbox: Option<Sandbox>,
    /// Removed once the writers and the sandbox are gone.
    _cgroup: FakeCgroup,
}

/// What a fake pod is made of.
struct PodSpec {
    /// Its cgroup layout.
    driver: Driver,
    /// Its namespace, name, and the name of its writers' container.
    names: (&'static str, &'static str, &'static str),
    /// Every container directory of its log directory.
    containers: &'static [&'static str],
    /// How many writers it runs.
    writers: usize,
    /// Whether its sandbox mounts a private `tmpfs` at the metrics directory
    /// (else the writers write to whatever the host has there, as to an
    /// `emptyDir`).
    private_tmpfs: bool,
}

impl Pod {
    /// Starts the pod and makes its log directory (with its containers, and
    /// the kubelet's link for the writers' container).
    fn start(python: &Path, logs: &Path, metrics: &Path, spec: PodSpec) -> Option<Pod> {
        let PodSpec {
            driver,
            names: (namespace, name, container),
            containers,
            writers,
            private_tmpfs,
        } = spec;
        let uid = pod_uid();
        let container_id = hex(64);
        let cgroup = FakeCgroup::make(driver, &uid, &container_id)?;
        let pod_dir = logs.join("pods").join(format!("{namespace}_{name}_{uid}"));
        for c in containers {
            std::fs::create_dir_all(pod_dir.join(c)).unwrap();
            std::fs::write(pod_dir.join(c).join("0.log"), "").unwrap();
        }
        std::fs::create_dir_all(logs.join("containers")).unwrap();
        std::os::unix::fs::symlink(
            pod_dir.join(container).join("0.log"),
            logs.join("containers")
                .join(format!("{name}_{namespace}_{container}-{container_id}.log")),
        )
        .unwrap();
        let sandbox = Sandbox::start(metrics, private_tmpfs);
        let writers = (0..writers)
            .map(|_| Writer::start(python, &sandbox, &cgroup, metrics))
            .collect();
        Some(Pod {
            namespace,
            name,
            container,
            uid,
            container_id,
            writers,
            sandbox: Some(sandbox),
            _cgroup: cgroup,
        })
    }

    fn log_dir(&self, logs: &Path) -> PathBuf {
        logs.join("pods")
            .join(format!("{}_{}_{}", self.namespace, self.name, self.uid))
    }

    /// The writers' pids in the pod's pid namespace.
    fn ns_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .writers
            .iter()
            .map(|w| {
                let status = std::fs::read_to_string(format!("/proc/{}/status", w.pid)).unwrap();
                let nspid = status
                    .lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .unwrap();
                nspid.split_whitespace().last().unwrap().parse().unwrap()
            })
            .collect();
        pids.sort_unstable();
        pids
    }

    /// The files the writers write (`WRITER_ALL_KINDS=1`), sorted.
    fn file_names(&self) -> Vec<String> {
        let kinds = [
            "counter",
            "gauge_all",
            "gauge_livesum",
            "gauge_max",
            "gauge_min",
            "gauge_mostrecent",
            "gauge_sum",
            "histogram",
            "summary",
        ];
        let mut names: Vec<String> = self
            .ns_pids()
            .iter()
            .flat_map(|pid| kinds.iter().map(move |k| format!("{k}_{pid}.db")))
            .collect();
        names.sort();
        names
    }

    /// The writers' host pids.
    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.writers.iter().map(|w| w.pid).collect();
        pids.sort_unstable();
        pids
    }

    /// The target whose owner is in this pod.
    fn target<'a>(&self, discovery: &'a Discovery) -> Option<&'a Target> {
        discovery
            .targets()
            .values()
            .find(|t| t.pod_uid() == Some(self.uid.as_str()))
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.writers.clear();
        self.sandbox = None;
    }
}

/// `path` (`/proc/self/fd/<n>`) as another process reaches it:
/// `/proc/<this pid>/fd/<n>`.
fn for_others(path: &Path) -> PathBuf {
    let me = std::process::id().to_string();
    let text = path
        .to_str()
        .unwrap()
        .replacen("/proc/self/", &format!("/proc/{me}/"), 1);
    PathBuf::from(text)
}

/// The `*.db` names of a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".db"))
        .collect();
    names.sort();
    names
}

/// The exporter's `dump` of a target (liveness off: prometheus_client's
/// semantics), asserted equal to prometheus_client's merge of the same files
/// read through the same path; returns the text.
fn dump_equals_prometheus_client(python: &Path, target: &Target) -> String {
    let dir = for_others(&target.read_path().expect("a read path"));
    let (code, stdout, stderr) =
        run_exporter(&["dump", "--writers.liveness=off", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "dump {}: {stderr}", dir.display());
    let files = support::listing_order(&dir)
        .into_iter()
        .map(|n| dir.join(n))
        .collect();
    let expected = python_exposition(python, files).text;
    let actual = String::from_utf8(stdout).unwrap();
    assert!(
        expected == actual,
        "{}",
        support::diff(expected.as_bytes(), actual.as_bytes())
    );
    actual
}

#[test]
fn two_pods_with_the_same_path_and_pid_are_two_targets_kept_while_their_pod_exists() {
    if !privileged() {
        return;
    }
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
                private_tmpfs: true,
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
                private_tmpfs: true,
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
    assert!(refresh.unreadable.is_empty(), "{:?}", refresh.unreadable);
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
    assert!(refresh.dropped.is_empty(), "{:?}", refresh.dropped);
    let target = &discovery.targets()[&id_a];
    assert!(!target.is_held());
    assert_eq!(target.decision(), Decision::PodExists);
    assert_eq!(dump_equals_prometheus_client(&python, target), texts[0]);
    assert!(b.target(&discovery).unwrap().is_held());

    // Its pod is deleted: dropped at the next refresh; pod B stays.
    std::fs::remove_dir_all(a.log_dir(&logs)).unwrap();
    let refresh = discovery.refresh();
    assert_eq!(refresh.dropped, [(id_a, DropReason::PodGone)]);
    assert!(a.target(&discovery).is_none());
    assert_eq!(
        dump_equals_prometheus_client(&python, b.target(&discovery).unwrap()),
        texts[1]
    );
}

/// A `tmpfs` mounted on the host (as the kubelet mounts an `emptyDir` with
/// `medium: Memory`), lazily unmounted on drop if still there.
struct HostMount(PathBuf);

impl HostMount {
    fn new(dir: &Path) -> HostMount {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0755", "none"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs at {}", dir.display());
        HostMount(dir.to_path_buf())
    }

    /// `umount` as the kubelet does when the pod goes (not lazily: it must
    /// not be busy), then removes the mount point.
    fn unmount(&self) {
        let output = Command::new("umount").arg(&self.0).output().unwrap();
        assert!(
            output.status.success(),
            "the kept directory keeps the host's mount busy: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::remove_dir(&self.0).unwrap();
    }
}

impl Drop for HostMount {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

#[test]
fn a_kept_emptydir_outlives_its_pods_namespace_without_holding_the_hosts_mount() {
    if !privileged() {
        return;
    }
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
            private_tmpfs: false,
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
    assert_eq!(discovery.refresh().dropped, [(id, DropReason::PodGone)]);
}

/// Run by [`a_scan_without_privileges_counts_what_it_cannot_read`] as
/// `nobody`; does nothing otherwise.
#[test]
#[ignore = "a helper run as nobody by another test"]
fn unprivileged_scan_helper() {
    if std::env::var_os("MPE_DISCOVER_HELPER").is_none() {
        return;
    }
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
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ])
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

/// Starts `n` sleeping processes, each holding two files of `dir` open
/// read-write: `<first>_<i>.<ext>` and `<second>_<i>.<ext>`.
fn sleepers(dir: &Path, n: usize, first: &str, second: &str, ext: &str) -> Vec<Child> {
    (0..n)
        .map(|i| {
            Command::new("sh")
                .arg("-c")
                .arg("exec 3<>\"$0/$2_$1.$4\" 4<>\"$0/$3_$1.$4\"; exec sleep 600")
                .arg(dir)
                .arg((100_000 + i).to_string())
                .args([first, second, ext])
                .stdin(Stdio::null())
                .spawn()
                .expect("start a sleeping process")
        })
        .collect()
}

/// Kills and reaps `children`.
fn stop(children: Vec<Child>) {
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
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
