//! The one seam for liveness evidence: everything that decides whether a
//! writer or a run is alive comes in through [`Evidence`]: the process table
//! and each process's descriptors (and which entries are the exporter's own
//! thread group), the clocks, the files' birth times and their content.
//!
//! [`System`] takes it from `/proc` and the kernel's clocks; a test gives
//! its own implementation and drives liveness with no real process and no
//! sleep (`tests/liveness_model.rs`).
//!
//! Clocks: liveness compares a process's start with a file's birth in the
//! boot clock (`/proc/<pid>/stat`'s start ticks count from boot); a file's
//! birth, a wall-clock time, is turned into the boot clock once, when the
//! file is first seen, with the offset between the two clocks read then (never
//! cached at start), so a wall clock stepped afterwards changes no verdict.
//! Intervals (lookups, looks at a run's content) use the monotonic clock.

use std::fmt;
use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::procfs::{self, OpenFile};
use crate::format::layout::HEADER_LEN;

/// A process kept open while it is a live writer: one cheap check per
/// collection tells it is still the same process.
pub trait ProcessHandle: Send + Sync + fmt::Debug {
    /// Its start time (seconds since boot) while it runs; `None` once gone.
    fn start_time(&self) -> Option<f64>;
}

/// How much of a run's files the content check reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentLimits {
    /// Bytes read of one file at most: a file whose `used` header says more
    /// is checked by its header and length only (a collection would not
    /// read it either: over the memory budget).
    pub max_file_bytes: u64,
}

impl Default for ContentLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 64 << 20,
        }
    }
}

/// Each file's birth in the boot clock, converted from the wall clock when
/// the process first saw it (by any source), with the offset between the
/// clocks read then: a wall clock stepped afterwards changes nothing. One per
/// process ([`Evidence::births`]).
#[derive(Debug, Default)]
pub struct Births {
    boot: std::sync::Mutex<rustc_hash::FxHashMap<(u64, u64, u64), f64>>,
}

/// Conversions kept at most; past it they are forgotten (files seen since
/// are converted again, with the offset of that moment).
const BIRTHS_KEPT: usize = 1 << 18;

impl Births {
    /// The birth of the file `identity` (born `recorded`, wall clock, as its
    /// `stat` says) in seconds since boot.
    pub fn boot_birth(&self, evidence: &dyn Evidence, identity: (u64, u64), recorded: f64) -> f64 {
        let key = (identity.0, identity.1, recorded.to_bits());
        let mut boot = self
            .boot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(born) = boot.get(&key) {
            return *born;
        }
        let wall_born = evidence.birth(identity, recorded);
        let born = match evidence.clocks() {
            Some((boot_now, wall_now)) => wall_born - (wall_now - boot_now),
            None => wall_born,
        };
        if boot.len() >= BIRTHS_KEPT {
            boot.clear();
        }
        boot.insert(key, born);
        born
    }
}

/// Everything liveness is decided from.
pub trait Evidence: Send + Sync + fmt::Debug {
    /// The exporter's own pid (its thread group), as it sees pids.
    fn own_pid(&self) -> u32;
    /// Whether `host` is a task of the exporter's own thread group: its pid
    /// or any of its threads' ids (`/proc/<tid>` resolves for each thread,
    /// though `/proc` lists only thread groups).
    fn own_task(&self, host: u32) -> bool;
    /// The pids the process table lists.
    fn processes(&self) -> Vec<u32>;
    /// When process `host` started, in seconds since boot.
    fn start_time(&self, host: u32) -> Option<f64>;
    /// The regular files process `host` holds open; `None` when its
    /// descriptors cannot be read.
    fn open_files(&self, host: u32) -> Option<Vec<OpenFile>>;
    /// Process `host`'s pid in its innermost pid namespace.
    fn innermost_pid(&self, host: u32) -> Option<u32>;
    /// Process `host`, kept open.
    fn handle(&self, host: u32) -> Option<Box<dyn ProcessHandle>>;
    /// The monotonic clock.
    fn now(&self) -> Instant;
    /// The boot clock and the wall clock (seconds since the Unix epoch),
    /// read together.
    fn clocks(&self) -> Option<(f64, f64)>;
    /// The process's files' births in the boot clock.
    fn births(&self) -> &Births;
    /// When the file `identity` was born, in wall-clock seconds, given what
    /// its `stat` said (`recorded`).
    fn birth(&self, identity: (u64, u64), recorded: f64) -> f64 {
        let _ = identity;
        recorded
    }
    /// A hash of the bytes in use of each of `files` (their `used` header
    /// and records), read within `limits`.
    fn content(&self, files: &[&Path], limits: ContentLimits) -> u64 {
        content_signature(files, limits)
    }
    /// Waits `duration` (a second look at a run's content).
    fn pause(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// The evidence of the running system: `/proc` and the kernel's clocks.
#[derive(Debug, Default)]
pub struct System {
    births: Births,
}

/// The shared [`System`].
pub fn system() -> Arc<dyn Evidence> {
    static SYSTEM: std::sync::OnceLock<Arc<dyn Evidence>> = std::sync::OnceLock::new();
    SYSTEM.get_or_init(|| Arc::new(System::default())).clone()
}

impl ProcessHandle for procfs::ProcessHandle {
    fn start_time(&self) -> Option<f64> {
        procfs::ProcessHandle::start_time(self)
    }
}

impl Evidence for System {
    fn own_pid(&self) -> u32 {
        std::process::id()
    }

    fn own_task(&self, host: u32) -> bool {
        host == std::process::id()
            || Path::new(procfs::PROC)
                .join("self/task")
                .join(host.to_string())
                .exists()
    }

    fn processes(&self) -> Vec<u32> {
        procfs::processes()
    }

    fn start_time(&self, host: u32) -> Option<f64> {
        procfs::start_since_boot(&procfs::process_dir(host))
    }

    fn open_files(&self, host: u32) -> Option<Vec<OpenFile>> {
        procfs::open_files(&procfs::process_dir(host))
    }

    fn innermost_pid(&self, host: u32) -> Option<u32> {
        procfs::innermost_pid(&procfs::process_dir(host))
    }

    fn handle(&self, host: u32) -> Option<Box<dyn ProcessHandle>> {
        procfs::ProcessHandle::open(&procfs::process_dir(host))
            .map(|h| Box::new(h) as Box<dyn ProcessHandle>)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn clocks(&self) -> Option<(f64, f64)> {
        let boot = procfs::since_boot()?;
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs_f64();
        Some((boot, wall))
    }

    fn births(&self) -> &Births {
        &self.births
    }
}

/// How much of a file is read at a time by the content check.
const CONTENT_WINDOW: usize = 64 << 10;

/// A hash of the bytes in use of each file (its `used` header and records),
/// read a window at a time: memory is one window whatever a header claims,
/// and never more than `limits` allow of one file, nor past its end.
pub fn content_signature(files: &[&Path], limits: ContentLimits) -> u64 {
    signature_and_cost(files, limits).0
}

/// [`content_signature`], and how many bytes of the files it read.
fn signature_and_cost(files: &[&Path], limits: ContentLimits) -> (u64, u64) {
    use std::hash::Hasher as _;
    let mut read = 0u64;
    let mut hasher = rustc_hash::FxHasher::default();
    let mut window = vec![0u8; CONTENT_WINDOW];
    for path in files {
        hasher.write(path.as_os_str().as_encoded_bytes());
        let Ok(mut file) = std::fs::File::open(path) else {
            hasher.write_u8(0);
            continue;
        };
        let len = file.metadata().map_or(0, |m| m.len());
        let mut header = [0u8; HEADER_LEN];
        if file.read_exact(&mut header).is_err() {
            hasher.write_u8(1);
            continue;
        }
        read += HEADER_LEN as u64;
        hasher.write(&header);
        let used = u64::from(u32::from_ne_bytes([
            header[0], header[1], header[2], header[3],
        ]));
        let end = used.min(len);
        if end > limits.max_file_bytes {
            // Not read by a collection either: its header and length only.
            hasher.write_u64(len);
            continue;
        }
        let mut at = HEADER_LEN as u64;
        while at < end {
            let want = usize::try_from(end - at).map_or(CONTENT_WINDOW, |n| n.min(CONTENT_WINDOW));
            match file.read_at(&mut window[..want], at) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    hasher.write(&window[..n]);
                    at += n as u64;
                    read += n as u64;
                }
            }
        }
    }
    (hasher.finish(), read)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 53 (defect 2): the content hash of a temporary run read each
    /// file into memory up to its `used` header: a sparse file whose header
    /// claims 1.75 GiB got the exporter OOM-killed in a 256 MiB cgroup. The
    /// hash now reads a window at a time and no more of a file than a
    /// collection could.
    #[test]
    fn the_content_hash_of_a_run_reads_a_window_at_a_time_and_within_the_limits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counter_2.db");
        let file = std::fs::File::create(&path).unwrap();
        let claimed: u64 = 1_879_048_192;
        file.set_len(claimed).unwrap();
        file.write_all_at(&(claimed as u32).to_ne_bytes(), 0)
            .unwrap();
        let limits = ContentLimits {
            max_file_bytes: 1 << 20,
        };
        let (first, read) = signature_and_cost(&[path.as_path()], limits);
        assert_eq!(read, HEADER_LEN as u64, "its header only");
        assert_eq!(first, content_signature(&[path.as_path()], limits));
        // Within the limits, every byte in use counts, a window at a time.
        let small = dir.path().join("counter_3.db");
        let mut bytes = crate::format::layout::file_bytes(&[("[\"c\"]", 1.0, 0.0)]);
        bytes.resize(3 * CONTENT_WINDOW, 0);
        let used = bytes.len() as u32;
        bytes[..4].copy_from_slice(&used.to_ne_bytes());
        std::fs::write(&small, &bytes).unwrap();
        let (before, read) = signature_and_cost(&[small.as_path()], limits);
        assert_eq!(read, u64::from(used));
        bytes[2 * CONTENT_WINDOW + 7] = 1;
        std::fs::write(&small, &bytes).unwrap();
        assert_ne!(before, content_signature(&[small.as_path()], limits));
    }
}
