//! Liveness without pids: whether a group of files (a temporary run) is
//! being written, told by its content moving between looks, and whether a
//! file is laid out as prometheus_client writes one at all.
//!
//! Where the writers' pids cannot be seen (the exporter in a pid namespace of
//! its own: a Kubernetes sidecar without `shareProcessNamespace`), the only
//! evidence that a run is alive is that its values or its `used` header
//! move. Modification times are no evidence: prometheus_client writes
//! through `mmap`, which does not move them. A run's content is hashed at
//! most every [`CHECK_INTERVAL`]; a run whose content moved within
//! [`ACTIVE_WINDOW`] is *changing*.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::format::layout::{read_used, scan_window, HEADER_LEN};

/// How often a run's content is hashed, at most.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How long a run stays *changing* after its content last moved: an idle
/// live server (no requests, so no writes) is served this long after its
/// last write.
pub const ACTIVE_WINDOW: Duration = Duration::from_secs(600);

/// How much of a file is read to check its layout.
const LAYOUT_WINDOW: usize = 4096;

/// What a file's first bytes say it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A prometheus_client multiprocess file: a valid `used` header and
    /// records (a JSON list key each) up to it.
    Written,
    /// Not yet: shorter than the header, or a header still 0 (the writer
    /// has sized the file but not written it). Looked at again.
    Pending,
    /// Something else (a SQLite `cache.db`, any other program's `*.db`).
    Foreign,
}

/// The [`Layout`] of the file at `path`; [`Layout::Pending`] if it cannot be
/// read (it may be being created).
pub fn layout_of(path: &Path) -> Layout {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Layout::Pending;
    };
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return Layout::Pending;
    };
    let mut head = Vec::with_capacity(LAYOUT_WINDOW);
    if (&mut file)
        .take(LAYOUT_WINDOW as u64)
        .read_to_end(&mut head)
        .is_err()
    {
        return Layout::Pending;
    }
    layout_of_bytes(&head, usize::try_from(len).unwrap_or(usize::MAX))
}

/// The [`Layout`] of a file of `file_len` bytes whose first bytes are `head`.
pub fn layout_of_bytes(head: &[u8], file_len: usize) -> Layout {
    if head.len() < HEADER_LEN {
        return Layout::Pending;
    }
    let used = match read_used(head, file_len) {
        Ok(Some(used)) => used,
        Ok(None) => return Layout::Pending,
        Err(_) => return Layout::Foreign,
    };
    let mut records = Vec::new();
    if scan_window(head, 0, HEADER_LEN, used, &mut records).is_err() {
        return Layout::Foreign;
    }
    let keys_are_lists = records.iter().all(|r| r.key(head).first() == Some(&b'['));
    if keys_are_lists {
        Layout::Written
    } else {
        Layout::Foreign
    }
}

/// One run as last looked at.
#[derive(Debug)]
struct Looked {
    signature: u64,
    checked: Instant,
    changed: Option<Instant>,
}

/// Tracks the content of groups of files across collections.
#[derive(Debug, Default)]
pub struct Activity {
    runs: FxHashMap<PathBuf, Looked>,
}

impl Activity {
    /// Whether the content of `run` (its files' hash, `signature`) moved
    /// within [`ACTIVE_WINDOW`] (looked at again when the last look is older
    /// than [`CHECK_INTERVAL`]). The first look sets the baseline:
    /// unchanged.
    pub fn changing(&mut self, run: &Path, now: Instant, signature: impl FnOnce() -> u64) -> bool {
        match self.runs.get_mut(run) {
            Some(looked) => {
                if now.duration_since(looked.checked) >= CHECK_INTERVAL {
                    let signature = signature();
                    if signature != looked.signature {
                        looked.signature = signature;
                        looked.changed = Some(now);
                    }
                    looked.checked = now;
                }
                looked
                    .changed
                    .is_some_and(|at| now.duration_since(at) < ACTIVE_WINDOW)
            }
            None => {
                self.runs.insert(
                    run.to_path_buf(),
                    Looked {
                        signature: signature(),
                        checked: now,
                        changed: None,
                    },
                );
                false
            }
        }
    }

    /// Forgets the runs not in `keep` (removed, or no longer runs).
    pub fn retain(&mut self, keep: impl Fn(&Path) -> bool) {
        self.runs.retain(|run, _| keep(run));
    }

    /// Looks at `run`'s content (`signature`) now, however recent the last
    /// look (a second look at a run first seen): a move makes it changing.
    pub fn look_again(&mut self, run: &Path, now: Instant, signature: impl FnOnce() -> u64) {
        if let Some(looked) = self.runs.get_mut(run) {
            let signature = signature();
            if signature != looked.signature {
                looked.signature = signature;
                looked.changed = Some(now);
            }
            looked.checked = now;
        } else {
            self.changing(run, now, signature);
        }
    }

    /// Whether `run` was looked at already (its baseline is set).
    pub fn known(&self, run: &Path) -> bool {
        self.runs.contains_key(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::layout::file_bytes;

    #[test]
    fn only_prometheus_clients_layout_is_a_written_file() {
        let written = file_bytes(&[("[\"c\", \"c_total\", [], []]", 1.0, 0.0)]);
        assert_eq!(layout_of_bytes(&written, written.len()), Layout::Written);
        assert_eq!(layout_of_bytes(&[0u8; 64], 64), Layout::Pending);
        assert_eq!(layout_of_bytes(&[0u8; 4], 4), Layout::Pending);
        let mut sqlite = b"SQLite format 3\0".to_vec();
        sqlite.resize(4096, 0);
        assert_eq!(layout_of_bytes(&sqlite, 4096), Layout::Foreign);
        // A header within the file but no records where it says.
        let mut bogus = vec![0u8; 64];
        bogus[0] = 40;
        bogus[8] = 200;
        assert_eq!(layout_of_bytes(&bogus, 64), Layout::Foreign);
    }

    #[test]
    fn a_run_is_changing_once_its_content_moved_between_looks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("counter_1.db");
        std::fs::write(&file, file_bytes(&[("[\"c\"]", 1.0, 0.0)])).unwrap();
        let mut activity = Activity::default();
        let t0 = Instant::now();
        let files = [file.as_path()];
        let limits = super::super::evidence::ContentLimits::default();
        let sig = || super::super::evidence::content_signature(&files, limits);
        assert!(!activity.changing(dir.path(), t0, sig), "a baseline");
        assert!(!activity.changing(dir.path(), t0 + CHECK_INTERVAL, sig));
        // A value written in place (as through mmap): same size, same mtime.
        std::fs::write(&file, file_bytes(&[("[\"c\"]", 2.0, 0.0)])).unwrap();
        assert!(
            !activity.changing(dir.path(), t0 + CHECK_INTERVAL + CHECK_INTERVAL / 2, sig),
            "not looked at again within the interval"
        );
        let seen = t0 + CHECK_INTERVAL * 2;
        assert!(activity.changing(dir.path(), seen, sig));
        assert!(activity.changing(dir.path(), seen + CHECK_INTERVAL, sig));
        assert!(!activity.changing(dir.path(), seen + ACTIVE_WINDOW, sig));
    }
}
