//! Where discovery learns of the processes and their files: the seam of the
//! node agent's discovery, as [`crate::source::writers::evidence`] is the
//! seam of a directory's writers' liveness.
//!
//! [`Discovery`](super::Discovery) asks a [`Processes`] for a scan (which
//! processes hold which directories' multiprocess files), whether a holder
//! of the last scan still runs, the path a directory is reached through
//! while a holder lives, and the time (scans' schedule, the linger). The
//! production code takes them from `/proc` and the monotonic clock
//! ([`SystemProcesses`]); a test gives its own implementation and drives
//! discovery with no real process and no sleep (`pipeline::liveness_model`).
//! The rules (what is kept, named, lingers or dropped) stay the tracker's.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::scan::{self, Holder, Scan};

/// What discovery reads of the processes.
pub trait Processes: Send + Sync + fmt::Debug {
    /// One scan: every directory whose multiprocess files some process
    /// holds open for writing, with its holders ([`scan::scan`]).
    fn scan(&self) -> Scan;
    /// Whether `holder` (seen by an earlier scan) still runs: not exited,
    /// and not a later process given its pid.
    fn is_alive(&self, holder: &Holder) -> bool;
    /// The path reaching `dir` (absolute, in the mount namespace of process
    /// `pid`) from the exporter while that process lives
    /// ([`scan::through_root`]).
    fn through_root(&self, pid: u32, dir: &Path) -> PathBuf;
    /// The monotonic clock.
    fn now(&self) -> Instant;
}

/// The processes of the running system: `/proc` and the monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemProcesses;

impl Processes for SystemProcesses {
    fn scan(&self) -> Scan {
        scan::scan()
    }

    fn is_alive(&self, holder: &Holder) -> bool {
        holder.is_alive()
    }

    fn through_root(&self, pid: u32, dir: &Path) -> PathBuf {
        scan::through_root(pid, dir)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}
