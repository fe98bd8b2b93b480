//! Removing the temporary subdirectories left by earlier runs of a server
//! (`--dir.remove-stale-subdirectories`, off by default; see
//! [`crate::source::temporary`]): with compaction, the only code that writes
//! to a metrics directory.
//!
//! A stale run is removed only on positive evidence that its writers are
//! gone: their pids visible and their processes exited, as
//! [`crate::source::writers`] (the one owner of liveness) decides. Where pids
//! cannot be seen (the exporter in a pid namespace of its own) nothing is
//! removed: a run's modification time is no evidence (prometheus_client
//! writes through `mmap`, which does not move it, so an idle live run looks
//! as old as a dead one), and the pipeline says so once. Crash safety: the
//! subdirectory is first renamed, in one atomic `rename`, to a hidden name
//! ([`REMOVING_PREFIX`] and its own name), which no survey takes for a run
//! (so it is never read again, current or stale), then removed with its
//! files. A crash at any step leaves either the run as it was or the hidden
//! subdirectory, whose removal `finish` completes at the next round. No
//! value is served twice or lost from what is served: a stale run's values
//! are not served before its removal either.

use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use crate::source::temporary::StaleRun;

/// The name a stale run is renamed to before its files are removed: this
/// prefix, then its own name.
pub const REMOVING_PREFIX: &str = ".multiproc-exporter-removing-";

/// What one round of removal did.
#[derive(Debug, Default)]
pub struct Removal {
    /// Stale runs removed.
    pub removed: Vec<PathBuf>,
    /// Stale runs (or hidden leftovers of a removal) that could not be
    /// removed, with why.
    pub failed: Vec<(PathBuf, io::Error)>,
}

/// Whether `run` may be removed: every one of its writers seen exited.
pub fn removable(run: &StaleRun) -> bool {
    run.writers_dead
}

/// Removes the stale runs that [`removable`] allows, after finishing any
/// removal a crash interrupted in `dir`.
pub fn remove(dir: &Path, stale: &[StaleRun]) -> Removal {
    let mut removal = Removal::default();
    finish(dir, &mut removal);
    for run in stale.iter().filter(|run| removable(run)) {
        let Some(name) = run.path.file_name() else {
            continue;
        };
        let mut hidden = std::ffi::OsString::from(REMOVING_PREFIX);
        hidden.push(name);
        let hidden = dir.join(hidden);
        match std::fs::rename(&run.path, &hidden).and_then(|()| std::fs::remove_dir_all(&hidden)) {
            Ok(()) => removal.removed.push(run.path.clone()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => removal.failed.push((run.path.clone(), e)),
        }
    }
    removal
}

/// Completes the removals a crash interrupted: every hidden subdirectory of
/// `dir` named with [`REMOVING_PREFIX`].
fn finish(dir: &Path, removal: &mut Removal) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .as_bytes()
            .starts_with(REMOVING_PREFIX.as_bytes())
            || !entry.file_type().is_ok_and(|t| t.is_dir())
        {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => removal.failed.push((entry.path(), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn stale(path: PathBuf, writers_dead: bool, last_change: SystemTime) -> StaleRun {
        StaleRun {
            path,
            files: 1,
            writers_dead,
            superseded: false,
            last_change,
        }
    }

    /// Issue 47: a live run idle for 10 minutes was removed while its writer
    /// held its files open (mmap writes do not move the modification time).
    #[test]
    fn a_stale_run_is_removed_only_when_its_writers_are_seen_dead_never_for_being_quiet() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let mut runs = Vec::new();
        for (name, dead, age) in [
            ("tmpdead____", true, 0),
            ("tmpquiet___", false, 601),
            ("tmprecent__", false, 10),
        ] {
            let path = dir.path().join(name);
            std::fs::create_dir(&path).unwrap();
            std::fs::write(path.join("counter_1.db"), [0u8; 8]).unwrap();
            runs.push(stale(path, dead, now - Duration::from_secs(age)));
        }
        let removal = remove(dir.path(), &runs);
        assert!(removal.failed.is_empty(), "{:?}", removal.failed);
        assert_eq!(removal.removed, vec![runs[0].path.clone()]);
        assert!(!runs[0].path.exists());
        assert!(
            runs[1].path.exists(),
            "quiet for 601 s, writers unseen: kept"
        );
        assert!(runs[2].path.exists(), "changed 10 s ago: kept");
    }

    #[test]
    fn a_removal_a_crash_interrupted_is_finished_at_the_next_round() {
        let dir = tempfile::tempdir().unwrap();
        // The state a crash after the rename leaves.
        let hidden = dir.path().join(format!("{REMOVING_PREFIX}tmpcrashed_"));
        std::fs::create_dir(&hidden).unwrap();
        std::fs::write(hidden.join("counter_1.db"), [0u8; 8]).unwrap();
        let kept = dir.path().join("counter_2.db");
        std::fs::write(&kept, [0u8; 8]).unwrap();
        let removal = remove(dir.path(), &[]);
        assert!(removal.failed.is_empty());
        assert!(!hidden.exists());
        assert!(kept.exists(), "nothing else is touched");
    }
}
