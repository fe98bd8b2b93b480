//! The kernel harness of the discovery tests: fake pods made of real kernel
//! features (a mount and pid namespace with a private `tmpfs`, a cgroup named
//! as the kubelet names it, a `/var/log/pods`-like log directory) running
//! real prometheus_client writers, and the helpers the tests share.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use multiproc_exporter::source::discover::{Discovery, Target};

use crate::support::{self, python_exposition, python_script, run_exporter, wait_for};

/// Whether the tests may run: root, or a failure under `CI=true`.
pub(super) fn privileged() -> bool {
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
pub(super) fn hex(n: usize) -> String {
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
pub(super) fn pod_uid() -> String {
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
pub(super) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The processes whose parent is `pid`.
pub(super) fn children_of(pid: u32) -> Vec<u32> {
    let mut children: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&p| parent_of(p) == Some(pid))
        .collect();
    children.sort_unstable();
    children
}

/// The inode of a process's mount namespace.
pub(super) fn mount_ns(pid: u32) -> Option<u64> {
    std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

/// Whether any process lives in the mount namespace `ns`.
pub(super) fn namespace_alive(ns: u64) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .any(|p| mount_ns(p) == Some(ns))
}

/// The cgroup layouts the kubelet uses.
#[derive(Clone, Copy, Debug)]
pub(super) enum Driver {
    /// `kubepods/burstable/pod<uid>/<container-id>`.
    Cgroupfs,
    /// `kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/cri-containerd-<id>.scope`.
    Systemd,
}

/// A cgroup made for a fake container (removed on drop, with the parents it
/// made, once empty).
pub(super) struct FakeCgroup {
    /// The container's cgroup directory.
    pub(super) dir: PathBuf,
    /// What was created, outermost first.
    pub(super) created: Vec<PathBuf>,
}

impl FakeCgroup {
    /// Makes the container's cgroup for `driver` in the hierarchy this machine
    /// has for it: cgroup v2 at `/sys/fs/cgroup` (pure v2), else the v1 `pids`
    /// hierarchy for the cgroupfs layout and the v2 `unified` hierarchy (a
    /// hybrid host) for the systemd layout. `None` when it cannot be made.
    pub(super) fn make(driver: Driver, uid: &str, container: &str) -> Option<FakeCgroup> {
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

/// Skips (or fails under `CI=true`) when cgroups cannot be made.
pub(super) fn or_skip<T>(made: Option<T>) -> Option<T> {
    if made.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "cannot make cgroups in /sys/fs/cgroup in CI"
        );
        eprintln!("skipping: cannot make cgroups in /sys/fs/cgroup");
    }
    made
}

/// A fake pod's sandbox: `unshare -m -p -f` with a private `tmpfs` at the
/// metrics directory, its pid 1 sleeping (killed, with every process of its
/// pid namespace, on drop).
pub(super) struct Sandbox {
    pub(super) unshare: Child,
    /// The host pid of its pid 1.
    pub(super) init: u32,
}

impl Sandbox {
    /// With `tmpfs` (its mount options, e.g. `mode=0755`), a private
    /// `tmpfs` is mounted at `metrics` in the sandbox.
    pub(super) fn start(metrics: &Path, tmpfs: Option<&str>) -> Sandbox {
        let mount = match tmpfs {
            Some(options) => format!("mount -t tmpfs -o {options} none \"$0\" && "),
            None => String::new(),
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

    pub(super) fn mount_ns(&self) -> u64 {
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
pub(super) struct Writer {
    pub(super) nsenter: Child,
    pub(super) stdin: ChildStdin,
    pub(super) _stdout: BufReader<ChildStdout>,
    /// The Python process's host pid.
    pub(super) pid: u32,
}

impl Writer {
    pub(super) fn start(
        python: &Path,
        sandbox: &Sandbox,
        cgroup: &FakeCgroup,
        metrics: &Path,
    ) -> Writer {
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
    pub(super) fn exit(mut self) {
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
pub(super) struct Pod {
    pub(super) namespace: &'static str,
    pub(super) name: &'static str,
    pub(super) container: &'static str,
    pub(super) uid: String,
    pub(super) container_id: String,
    pub(super) writers: Vec<Writer>,
    pub(super) sandbox: Option<Sandbox>,
    /// Removed once the writers and the sandbox are gone.
    pub(super) cgroup: FakeCgroup,
}

/// What a fake pod is made of.
pub(super) struct PodSpec {
    /// Its cgroup layout.
    pub(super) driver: Driver,
    /// Its namespace, name, and the name of its writers' container.
    pub(super) names: (&'static str, &'static str, &'static str),
    /// Every container directory of its log directory.
    pub(super) containers: &'static [&'static str],
    /// How many writers it runs.
    pub(super) writers: usize,
    /// The mount options of the private `tmpfs` its sandbox mounts at the
    /// metrics directory (`mode=0755`), if any (else the writers write to
    /// whatever the host has there, as to an `emptyDir`).
    pub(super) tmpfs: Option<&'static str>,
}

impl Pod {
    /// Starts the pod and makes its log directory (with its containers, and
    /// the kubelet's link for the writers' container).
    pub(super) fn start(python: &Path, logs: &Path, metrics: &Path, spec: PodSpec) -> Option<Pod> {
        let PodSpec {
            driver,
            names: (namespace, name, container),
            containers,
            writers,
            tmpfs,
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
        let sandbox = Sandbox::start(metrics, tmpfs);
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
            cgroup,
        })
    }

    /// Starts one more writer in the pod.
    pub(super) fn add_writer(&mut self, python: &Path, metrics: &Path) {
        let sandbox = self.sandbox.as_ref().expect("the pod's sandbox");
        let writer = Writer::start(python, sandbox, &self.cgroup, metrics);
        self.writers.push(writer);
    }

    pub(super) fn log_dir(&self, logs: &Path) -> PathBuf {
        logs.join("pods")
            .join(format!("{}_{}_{}", self.namespace, self.name, self.uid))
    }

    /// The writers' pids in the pod's pid namespace.
    pub(super) fn ns_pids(&self) -> Vec<u32> {
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
    pub(super) fn file_names(&self) -> Vec<String> {
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
    pub(super) fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.writers.iter().map(|w| w.pid).collect();
        pids.sort_unstable();
        pids
    }

    /// The target whose owner is in this pod.
    pub(super) fn target<'a>(&self, discovery: &'a Discovery) -> Option<&'a Target> {
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
pub(super) fn for_others(path: &Path) -> PathBuf {
    let me = std::process::id().to_string();
    let text = path
        .to_str()
        .unwrap()
        .replacen("/proc/self/", &format!("/proc/{me}/"), 1);
    PathBuf::from(text)
}

/// The `*.db` names of a directory, sorted.
pub(super) fn names(dir: &Path) -> Vec<String> {
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
pub(super) fn dump_equals_prometheus_client(python: &Path, target: &Target) -> String {
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

/// A `tmpfs` mounted on the host (as the kubelet mounts an `emptyDir` with
/// `medium: Memory`), lazily unmounted on drop if still there.
pub(super) struct HostMount(pub(super) PathBuf);

impl HostMount {
    pub(super) fn new(dir: &Path) -> HostMount {
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
    pub(super) fn unmount(&self) {
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

/// Starts `n` sleeping processes, each holding two files of `dir` open
/// read-write: `<first>_<i>.<ext>` and `<second>_<i>.<ext>`.
pub(super) fn sleepers(dir: &Path, n: usize, first: &str, second: &str, ext: &str) -> Vec<Child> {
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
pub(super) fn stop(children: Vec<Child>) {
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}
