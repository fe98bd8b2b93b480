//! One pass over `/proc`: every directory whose prometheus_client
//! multiprocess files some process holds open for writing, with the processes
//! that hold them.
//!
//! prometheus_client keeps every file it writes open for the life of the
//! process (`a+b`, read-write), so `readlink` of `/proc/<pid>/fd/<n>` names
//! each one as the path the writer sees, in the writer's mount namespace. A
//! file name counts when it is in prometheus_client's grammar
//! ([`is_multiprocess_file_name`]); a descriptor opened read-only (a reader,
//! such as an exporter) does not make its process a holder. The holders of one
//! directory are grouped by the directory's path **and** the holder's mount
//! namespace (the inode of `/proc/<pid>/ns/mnt`): two pods whose writers both
//! use `/tmp/metrics` are two [`Sighting`]s. Whether two sightings are the same
//! directory (a pod's containers sharing an `emptyDir`, a restarted container)
//! is the tracker's question; it compares the directories' identities.
//!
//! The exporter's own process is left out. A process whose descriptors
//! cannot be listed or read (`EACCES`: another user's process without
//! `CAP_DAC_READ_SEARCH` or `CAP_SYS_PTRACE`, see [`super::privileges`]) is
//! not an error: its pid is listed in
//! [`Scan::unreadable`] for the caller to log and count. A process that exits
//! during the scan is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cgroup::{self, CgroupOwner};
use crate::format::file_name::{self, FileName, GaugeMode};
use crate::model::MetricType;
use crate::source::writers::evidence::{self, Evidence};
use crate::source::writers::procfs;

/// Whether prometheus_client 0.26.0 writes files with this base name:
/// `<kind>_<id>.db`, where `<kind>` is `counter`, `histogram`, `summary` or
/// `gauge_<mode>` with one of the ten gauge modes, and `<id>` is the process
/// identifier (the pid unless the application supplies its own). The
/// exporter's compaction archives (`<kind>_archive.db`) are not writers'
/// files.
pub fn is_multiprocess_file_name(name: &str) -> bool {
    if !file_name::is_listed_name(name.as_bytes()) || file_name::is_archive_name(name) {
        return false;
    }
    let parsed = FileName::parse(name);
    let kind_ok = match parsed.metric_type {
        Some(MetricType::Counter | MetricType::Histogram | MetricType::Summary) => true,
        Some(MetricType::Gauge) => parsed
            .gauge_mode_name
            .as_deref()
            .and_then(GaugeMode::from_name)
            .is_some(),
        _ => false,
    };
    kind_ok && !file_name::writer_id(name).is_empty()
}

/// One process holding multiprocess files of a directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    /// Its pid as the exporter sees it (the host's, with `hostPID`).
    pub pid: u32,
    /// Its pid in its own pid namespace (`NSpid`), which prometheus_client
    /// names its files after.
    pub ns_pid: Option<u32>,
    /// When it started, in seconds since the Unix epoch
    /// ([`procfs::start_time`]): with `pid`, tells it from a later process
    /// that reuses the pid.
    pub start_time: Option<f64>,
    /// Its command name (`/proc/<pid>/comm`), for labels outside Kubernetes.
    pub command: Option<String>,
    /// The pod and container its cgroup names ([`cgroup::read`]); `None`
    /// when unreadable.
    pub cgroup: Option<CgroupOwner>,
    /// How many multiprocess files of the directory it holds open (distinct
    /// files: Python's `mmap` holds a second descriptor on each).
    pub files: usize,
}

impl Holder {
    /// Whether this process is still running: `/proc/<pid>` exists and the
    /// process there started when this one did (not a reuse of the pid).
    pub fn is_alive(&self) -> bool {
        let dir = procfs::process_dir(self.pid);
        match (self.start_time, procfs::start_time(&dir)) {
            (Some(then), Some(now)) => (then - now).abs() < procfs::START_TIME_PRECISION_SECONDS,
            (None, now) => now.is_some(),
            (Some(_), None) => false,
        }
    }
}

/// A file a holder has open, as the sightings keep one for checking what a
/// path through `/proc/<pid>/root` reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldFile {
    /// Its base name.
    pub name: String,
    /// Its device and inode, from the descriptor itself.
    pub identity: (u64, u64),
}

/// A directory as the holders in one mount namespace see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sighting {
    /// The inode of the holders' mount namespace (`/proc/<pid>/ns/mnt`).
    pub mount_ns: u64,
    /// The directory's path in that namespace (absolute).
    pub dir: PathBuf,
    /// The processes holding its files, by pid.
    pub holders: Vec<Holder>,
    /// One of the files held (the first seen), to check that a path reaches
    /// this very directory.
    pub sample: HeldFile,
}

impl Sighting {
    /// `/proc/<pid>/root/<dir>` through each holder, in pid order: the
    /// directory seen from the exporter while that holder lives.
    pub fn paths(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.holders.iter().map(|h| through_root(h.pid, &self.dir))
    }
}

/// `/proc/<pid>/root/<dir>`: `dir` (absolute, in the process's mount
/// namespace) reached through the process's root.
pub fn through_root(pid: u32, dir: &Path) -> PathBuf {
    let relative = dir.strip_prefix("/").unwrap_or(dir);
    procfs::process_dir(pid).join("root").join(relative)
}

/// The result of one scan of `/proc`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scan {
    /// The directories found, ordered by mount namespace and path.
    pub sightings: Vec<Sighting>,
    /// Processes whose descriptors were listed.
    pub processes: usize,
    /// Descriptors read (`readlink`).
    pub descriptors: usize,
    /// Pids whose descriptors could not be listed (permission denied).
    pub unreadable: Vec<u32>,
    /// Processes outside the exporter's own process tree (neither its
    /// ancestors nor its descendants): 0 in a pid namespace of its own, even
    /// under `sh -c`, tini or dumb-init.
    pub outside_own_tree: usize,
    /// How long the scan took.
    pub elapsed: Duration,
}

/// How many of `processes` (pid, parent's pid) are outside the process tree
/// of `me`: neither `me`, nor an ancestor (a shell, tini or dumb-init
/// started it), nor a descendant.
pub fn outside_own_tree(me: u32, processes: &[(u32, Option<u32>)]) -> usize {
    let parent: BTreeMap<u32, u32> = processes
        .iter()
        .filter_map(|&(pid, parent)| Some((pid, parent?)))
        .collect();
    let mut ancestors = std::collections::BTreeSet::new();
    let mut at = me;
    while let Some(&up) = parent.get(&at) {
        if up == 0 || !ancestors.insert(up) {
            break;
        }
        at = up;
    }
    let descends = |pid: u32| {
        let mut at = pid;
        let mut steps = 0;
        while let Some(&up) = parent.get(&at) {
            if up == me {
                return true;
            }
            steps += 1;
            if up == 0 || steps > processes.len() {
                return false;
            }
            at = up;
        }
        false
    };
    processes
        .iter()
        .filter(|&&(pid, _)| pid != me && !ancestors.contains(&pid) && !descends(pid))
        .count()
}

/// How many of the processes `pids` (as `evidence` lists them) are outside
/// the exporter's own process tree ([`outside_own_tree`]), their parents
/// taken from `evidence`: what the node agent's warning and
/// `…_discovery_processes_visible` say.
pub fn count_outside_own_tree(evidence: &dyn Evidence, pids: &[u32]) -> usize {
    let parents: Vec<(u32, Option<u32>)> = pids
        .iter()
        .map(|&pid| (pid, evidence.parent_pid(pid)))
        .collect();
    outside_own_tree(evidence.own_pid(), &parents)
}

/// Scans every process in `/proc` but the exporter's own.
pub fn scan() -> Scan {
    let started = Instant::now();
    let me = std::process::id();
    let mut result = Scan::default();
    let mut groups: BTreeMap<(u64, PathBuf), (Vec<Holder>, HeldFile)> = BTreeMap::new();
    let system = evidence::system();
    let pids = system.processes();
    result.outside_own_tree = count_outside_own_tree(&*system, &pids);
    for pid in pids {
        if pid == me {
            continue;
        }
        let dir = procfs::process_dir(pid);
        let held = match held_files(&dir, &mut result.descriptors) {
            Ok(held) => held,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                result.unreadable.push(pid);
                continue;
            }
            // Gone, or a kernel quirk: nothing to learn from it.
            Err(_) => continue,
        };
        result.processes += 1;
        if held.is_empty() {
            continue;
        }
        let Some(mount_ns) = mount_namespace(&dir) else {
            continue;
        };
        let holder = Holder {
            pid,
            ns_pid: procfs::innermost_pid(&dir),
            start_time: procfs::start_time(&dir),
            command: std::fs::read_to_string(dir.join("comm"))
                .ok()
                .map(|c| c.trim_end().to_owned()),
            cgroup: cgroup::read(&dir).ok(),
            files: 0,
        };
        for (path, (files, sample)) in held {
            let (holders, _) = groups
                .entry((mount_ns, path))
                .or_insert_with(|| (Vec::new(), sample));
            holders.push(Holder {
                files,
                ..holder.clone()
            });
        }
    }
    result.sightings = groups
        .into_iter()
        .map(|((mount_ns, dir), (holders, sample))| Sighting {
            mount_ns,
            dir,
            holders,
            sample,
        })
        .collect();
    result.elapsed = started.elapsed();
    result
}

/// The inode of the mount namespace of the process of `dir` (`/proc/<pid>`).
pub fn mount_namespace(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir.join("ns/mnt")).ok().map(|m| m.ino())
}

/// The directories of the multiprocess files the process of `dir` holds open
/// for writing: how many distinct files, and the first one's name and
/// identity. Counts every descriptor read into `descriptors`.
fn held_files(
    dir: &Path,
    descriptors: &mut usize,
) -> io::Result<BTreeMap<PathBuf, (usize, HeldFile)>> {
    let mut held: BTreeMap<PathBuf, (BTreeSet<(u64, u64)>, HeldFile)> = BTreeMap::new();
    for entry in std::fs::read_dir(dir.join("fd"))? {
        let Ok(entry) = entry else { continue };
        *descriptors += 1;
        let fd = entry.path();
        let target = match std::fs::read_link(&fd) {
            Ok(target) => target,
            // Listed but not readable (no `CAP_SYS_PTRACE` for another
            // user's process): the process is unreadable, not empty.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(e),
            Err(_) => continue,
        };
        let Some((parent, name)) = multiprocess_file(&target) else {
            continue;
        };
        // The link's own mode is the descriptor's access mode; `stat`
        // follows it to the file, in the holder's namespace.
        let writable = entry.metadata().is_ok_and(|m| m.mode() & 0o200 != 0);
        if !writable {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&fd) else {
            continue;
        };
        if !meta.file_type().is_file() {
            continue;
        }
        let identity = (meta.dev(), meta.ino());
        held.entry(parent.to_path_buf())
            .or_insert_with(|| {
                let sample = HeldFile {
                    name: name.to_owned(),
                    identity,
                };
                (BTreeSet::new(), sample)
            })
            .0
            .insert(identity);
    }
    Ok(held
        .into_iter()
        .map(|(dir, (files, sample))| (dir, (files.len(), sample)))
        .collect())
}

/// The directory and base name of a descriptor's target when it is a
/// multiprocess file reachable by its path (absolute, not deleted).
fn multiprocess_file(target: &Path) -> Option<(&Path, &str)> {
    if !target.is_absolute() {
        return None; // pipe:[…], socket:[…], anon_inode:[…]
    }
    let name = target.file_name().and_then(OsStr::to_str)?;
    // An unlinked file's target ends in " (deleted)", which no name in the
    // grammar does: it is not reachable through the directory any more.
    is_multiprocess_file_name(name).then_some((target.parent()?, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 53 (defect 8): the node agent without `hostPID` warned only
    /// when it was literally alone: under `sh -c`, tini or dumb-init (one
    /// more process in its namespace) there was no warning and
    /// `…_discovery_processes_visible` said 1.
    #[test]
    fn the_node_agent_alone_under_an_init_sees_no_process_outside_its_tree() {
        // Run directly: pid 1.
        assert_eq!(outside_own_tree(1, &[(1, Some(0))]), 0);
        // Under tini (pid 1), with a child of its own.
        let tree = [(1, Some(0)), (7, Some(1)), (9, Some(7))];
        assert_eq!(outside_own_tree(7, &tree), 0);
        // Under `sh -c` under dumb-init.
        let tree = [(1, Some(0)), (2, Some(1)), (3, Some(2))];
        assert_eq!(outside_own_tree(3, &tree), 0);
        // With hostPID: the host's processes are outside.
        let host = [
            (1, Some(0)),
            (40, Some(1)),
            (41, Some(40)),
            (50, Some(1)),
            (51, Some(50)),
        ];
        assert_eq!(outside_own_tree(41, &host), 2);
        // A parent unknown (gone, unreadable): outside.
        assert_eq!(outside_own_tree(3, &[(3, Some(1)), (5, None)]), 1);
    }

    #[test]
    fn the_grammar_is_prometheus_clients() {
        for good in [
            "counter_12.db",
            "histogram_12.db",
            "summary_12.db",
            "gauge_all_12.db",
            "gauge_livesum_12.db",
            "gauge_livemostrecent_12.db",
            "counter_worker-3.db",
            "gauge_all_host_12.db",
        ] {
            assert!(is_multiprocess_file_name(good), "{good}");
        }
        for bad in [
            "counter_12.db (deleted)",
            "counter.db",
            "counter_.db",
            "gauge_12.db",
            "gauge_weird_12.db",
            "gauge_livesum_.db",
            "info_12.db",
            "state_12.db",
            "cache.db",
            ".counter_12.db",
            "counter_12.db-journal",
            "counter_archive.db",
            "counter_12.DB",
        ] {
            assert!(!is_multiprocess_file_name(bad), "{bad}");
        }
    }

    #[test]
    fn descriptor_targets() {
        let dir = Path::new("/tmp/metrics");
        assert_eq!(
            multiprocess_file(Path::new("/tmp/metrics/counter_7.db")),
            Some((dir, "counter_7.db"))
        );
        assert_eq!(
            multiprocess_file(Path::new("/tmp/metrics/counter_7.db (deleted)")),
            None
        );
        assert_eq!(multiprocess_file(Path::new("socket:[1234]")), None);
        assert_eq!(multiprocess_file(Path::new("counter_7.db")), None);
        assert_eq!(
            through_root(42, dir),
            Path::new(procfs::PROC).join("42/root/tmp/metrics")
        );
    }

    #[test]
    fn a_scan_finds_this_process_children_and_leaves_this_one_out() {
        if !Path::new(procfs::PROC).join("self/fd").exists() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // Held by this process (left out) read-write.
        let mine = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(dir.path().join("counter_1.db"))
            .unwrap();
        std::fs::write(dir.path().join("histogram_9.db"), b"").unwrap();
        // A child holds one file read-write and one read-only.
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg("exec 3<>\"$0/counter_9.db\" 4<\"$0/histogram_9.db\"; echo ready; exec sleep 30")
            .arg(dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        // `ready` comes before the shell replaces itself with `sleep`: wait
        // for that (regression: the scan could see the command `sh`).
        let comm = procfs::process_dir(child.id()).join("comm");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::fs::read_to_string(&comm).map_or(true, |c| c.trim() != "sleep") {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never ran sleep"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let scan = scan();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(scan.processes >= 2 && scan.descriptors >= 3, "{scan:?}");
        let found: Vec<&Sighting> = scan
            .sightings
            .iter()
            .filter(|s| s.dir == dir.path())
            .collect();
        assert_eq!(found.len(), 1, "{:?}", scan.sightings);
        let holders: Vec<(u32, usize)> =
            found[0].holders.iter().map(|h| (h.pid, h.files)).collect();
        assert_eq!(holders, [(child.id(), 1)]);
        assert_eq!(found[0].sample.name, "counter_9.db");
        assert_eq!(found[0].holders[0].command.as_deref(), Some("sleep"));
        assert!(!found[0].holders[0].is_alive());
        assert_eq!(
            found[0].mount_ns,
            mount_namespace(&procfs::process_dir(std::process::id())).unwrap()
        );
        drop(mine);
    }
}
