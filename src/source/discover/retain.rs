//! Keeping a discovered directory readable after its writers exit, and the
//! rule that decides how long.
//!
//! prometheus_client keeps a dead writer's counters, histograms and `sum`,
//! `min`, `max`, `all` gauges in the directory, and so must the exporter:
//! when the last writer of a pod exits (a crash, or between a container's
//! restarts) the pod's series must not vanish or go back to zero. But a
//! directory found through `/proc/<pid>/root` can only be reached that way
//! while some process lives in its mount namespace; once the last one exits
//! the namespace is destroyed and its mounts (a private `tmpfs`, the
//! container's own root file system) are detached.
//!
//! So the tracker opens every directory it discovers, while a holder lives,
//! and keeps the descriptor ([`KeptDir`]): an open directory pins its mount,
//! detached or not, and the directory stays readable through
//! `/proc/self/fd/<n>/` ([`KeptDir::path`]) for as long as the descriptor is
//! open, even after its mount namespace is gone (`tests/it/discover/` checks
//! that with `unshare`). The descriptor also names the directory itself
//! ([`DirId`], its device and inode), which tells two mount namespaces showing
//! the same directory (a pod's containers sharing an `emptyDir`, a container
//! restarted over the same `emptyDir`) from two directories at the same path.
//!
//! How long a directory without holders is kept ([`decide`]):
//!
//! * while a holder lives: always;
//! * in Kubernetes (the holder's cgroup named a pod and the kubelet's pod log
//!   directory is read): while the pod's log directory exists, that is until
//!   the pod is deleted; then it is dropped at once: no stale series, no
//!   cleanup job;
//! * otherwise (outside Kubernetes, a process with no pod, or the log
//!   directory unreadable): for a linger period after the last holder was
//!   seen ([`Retention::linger`]), long enough for a restarted application
//!   to come back to the same directory and for Prometheus to scrape the last
//!   values, then dropped.
//!
//! A directory that could not be opened while a holder lived cannot be read
//! without one: it is dropped with its last holder.
//!
//! Dropping closes the descriptor, which releases the mount: a kept
//! directory holds no more than its files' memory (a `tmpfs`) or disk space
//! and never blocks the kubelet from unmounting or deleting the pod's
//! volumes, since the mount it pins is the detached copy of the dead
//! namespace, not the kubelet's.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A directory's identity: its device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DirId {
    /// The file system's device number (`st_dev`).
    pub dev: u64,
    /// The directory's inode number (`st_ino`).
    pub ino: u64,
}

impl DirId {
    /// The identity of what `path` names now (following links).
    pub fn of(path: &Path) -> io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        Ok(Self {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// An open directory: readable through [`KeptDir::path`] for as long as it is
/// kept, whatever happens to the mount namespace it was opened from.
#[derive(Debug)]
pub struct KeptDir {
    file: File,
    id: DirId,
}

impl KeptDir {
    /// Opens the directory at `path` read-only (`O_DIRECTORY`, close-on-exec).
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(path)?;
        let meta = file.metadata()?;
        let id = DirId {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        Ok(Self { file, id })
    }

    /// The directory's identity.
    pub fn id(&self) -> DirId {
        self.id
    }

    /// `/proc/self/fd/<n>`: a path to the directory that any file operation
    /// of this process can take (list it, open `<path>/counter_12.db`).
    /// Valid while `self` lives; another process cannot use it.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

/// Whether the pod of a directory exists, as far as the exporter can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodState {
    /// Its log directory exists.
    Exists,
    /// The pod log root was read and has no directory for it.
    Gone,
    /// No pod (outside Kubernetes, or a process outside any pod), or the pod
    /// log root is not read or unreadable.
    Unknown,
}

/// How long directories without holders are kept when their pod is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How long after its last holder was seen a directory whose pod is
    /// [`PodState::Unknown`] is kept.
    pub linger: Duration,
}

impl Retention {
    /// The default linger period: five minutes, a few scrape intervals and
    /// a container's crash-loop back-off start.
    pub const DEFAULT_LINGER: Duration = Duration::from_secs(300);
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            linger: Self::DEFAULT_LINGER,
        }
    }
}

/// What the rule decides for one directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Keep it: a holder lives.
    Held,
    /// Keep it: no holder, but its pod exists.
    PodExists,
    /// Keep it for this much longer: no holder, pod unknown.
    Lingering(Duration),
    /// Drop it.
    Drop(DropReason),
}

impl Decision {
    /// Whether the directory is kept.
    pub fn keeps(self) -> bool {
        !matches!(self, Decision::Drop(_))
    }
}

/// Why a directory was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Its holders are gone and so is its pod.
    PodGone,
    /// Its holders are gone, its pod is unknown, and the linger period is over.
    LingerExpired,
    /// Its holders are gone and it was never opened: it cannot be read.
    NotKept,
}

impl DropReason {
    /// A stable label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            DropReason::PodGone => "pod_gone",
            DropReason::LingerExpired => "linger_expired",
            DropReason::NotKept => "not_kept",
        }
    }
}

/// The rule: `held` (a holder lives), `kept` (the directory is open), the
/// pod's state, and how long ago the last holder was seen.
pub fn decide(
    held: bool,
    kept: bool,
    pod: PodState,
    since_last_held: Duration,
    retention: Retention,
) -> Decision {
    if held {
        return Decision::Held;
    }
    if !kept {
        return Decision::Drop(DropReason::NotKept);
    }
    match pod {
        PodState::Exists => Decision::PodExists,
        PodState::Gone => Decision::Drop(DropReason::PodGone),
        PodState::Unknown => match retention.linger.checked_sub(since_last_held) {
            Some(left) if !left.is_zero() => Decision::Lingering(left),
            _ => Decision::Drop(DropReason::LingerExpired),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule() {
        let r = Retention {
            linger: Duration::from_secs(60),
        };
        let s = Duration::from_secs;
        for pod in [PodState::Exists, PodState::Gone, PodState::Unknown] {
            assert_eq!(decide(true, true, pod, s(999), r), Decision::Held);
            assert_eq!(decide(true, false, pod, s(999), r), Decision::Held);
            assert_eq!(
                decide(false, false, pod, s(0), r),
                Decision::Drop(DropReason::NotKept)
            );
        }
        assert_eq!(
            decide(false, true, PodState::Exists, s(9999), r),
            Decision::PodExists
        );
        assert_eq!(
            decide(false, true, PodState::Gone, s(0), r),
            Decision::Drop(DropReason::PodGone)
        );
        assert_eq!(
            decide(false, true, PodState::Unknown, s(20), r),
            Decision::Lingering(s(40))
        );
        assert_eq!(
            decide(false, true, PodState::Unknown, s(60), r),
            Decision::Drop(DropReason::LingerExpired)
        );
        assert!(!decide(false, true, PodState::Unknown, s(61), r).keeps());
        assert_eq!(DropReason::PodGone.label(), "pod_gone");
        assert_eq!(Retention::default().linger, Retention::DEFAULT_LINGER);
    }

    #[test]
    fn a_kept_directory_is_read_through_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("counter_1.db"), b"x").unwrap();
        let kept = KeptDir::open(dir.path()).unwrap();
        assert_eq!(kept.id(), DirId::of(dir.path()).unwrap());
        assert_eq!(DirId::of(&kept.path()).unwrap(), kept.id());
        assert_eq!(
            std::fs::read(kept.path().join("counter_1.db")).unwrap(),
            b"x"
        );
        // Still readable once the path is gone (renamed away).
        let moved = dir.path().with_extension("moved");
        std::fs::rename(dir.path(), &moved).unwrap();
        let names: Vec<_> = std::fs::read_dir(kept.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["counter_1.db"]);
        std::fs::rename(&moved, dir.path()).unwrap();
        // Not a directory: refused.
        assert!(KeptDir::open(&dir.path().join("counter_1.db")).is_err());
    }
}
