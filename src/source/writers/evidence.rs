//! The one seam for liveness evidence: everything that decides whether a
//! writer or a run is alive comes in through [`Evidence`]: the process table
//! and each process's descriptors and parent (which entries are the
//! exporter's own thread group, which processes its own tree: the node
//! agent's count, `source::discover::scan`), the clocks, the files' birth
//! times and their content (each file opened through
//! [`Evidence::open_content`], so a test sees what a look reads).
//!
//! [`System`] takes it from `/proc` and the kernel's clocks; a test gives
//! its own implementation and drives liveness with no real process and no
//! sleep (`pipeline::liveness_model`).
//!
//! Clocks: liveness compares a process's start with a file's birth in the
//! boot clock (`/proc/<pid>/stat`'s start ticks count from boot); a file's
//! birth, a wall-clock time, is turned into the boot clock once, when the
//! file is first seen, with the offset between the two clocks read then (never
//! cached at start), so a wall clock stepped afterwards changes no verdict.
//! Intervals (lookups, looks at a run's content) use the monotonic clock.

use std::fmt;
use std::hash::Hasher as _;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHasher;

use super::procfs::{self, OpenFile};
use crate::format::layout::{padded_key_len, HEADER_LEN, VALUE_LEN};

/// A process kept open while it is a live writer: one cheap check per
/// collection tells it is still the same process.
pub trait ProcessHandle: Send + Sync + fmt::Debug {
    /// Its start time (seconds since boot) while it runs; `None` once gone.
    fn start_time(&self) -> Option<f64>;
}

/// A file whose content the liveness check hashes, opened through
/// [`Evidence::open_content`].
pub trait ContentFile {
    /// Its length in bytes.
    fn size(&self) -> u64;
    /// Reads into `buf` from offset `at`; how many bytes were read.
    fn read_at(&mut self, buf: &mut [u8], at: u64) -> io::Result<usize>;
}

impl ContentFile for std::fs::File {
    fn size(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }

    fn read_at(&mut self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, at)
    }
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
    /// The pid of process `host`'s parent (0: outside the exporter's pid
    /// namespace).
    fn parent_pid(&self, host: u32) -> Option<u32>;
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
    /// The file at `path`, for its content to be hashed.
    fn open_content(&self, path: &Path) -> Option<Box<dyn ContentFile>> {
        open_file(path)
    }
    /// A hash of the bytes in use of each of `files` (their `used` header
    /// and records), read within `limits` ([`content_signature`]), each
    /// file opened with [`Self::open_content`].
    fn content(&self, files: &[&Path], limits: ContentLimits) -> u64 {
        signature_and_cost(&|path: &Path| self.open_content(path), files, limits).0
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

    fn parent_pid(&self, host: u32) -> Option<u32> {
        procfs::parent_pid(&procfs::process_dir(host))
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

/// How much of a file is read at a time by the content check: what it
/// holds at once.
pub(crate) const CONTENT_WINDOW: usize = 64 << 10;

/// How much of a file the content check reads first, its header included
/// (a collection's first read): a file a collection leaves out at its first
/// records costs it no more.
const FIRST_WINDOW: usize = 4096;

/// Opens `path` for its content to be hashed.
fn open_file(path: &Path) -> Option<Box<dyn ContentFile>> {
    std::fs::File::open(path)
        .ok()
        .map(|f| Box::new(f) as Box<dyn ContentFile>)
}

/// A hash of the bytes in use of each file (its `used` header and its
/// records), read a window at a time: memory is one window whatever a
/// header claims, never more of a file than `limits` allow, nor past its
/// end, nor past its first record a collection would stop at (issue 53:
/// at no more than the cost of a collection).
pub fn content_signature(files: &[&Path], limits: ContentLimits) -> u64 {
    signature_and_cost(&open_file, files, limits).0
}

/// What opens a file for [`signature_and_cost`].
pub(crate) type Open<'a> = dyn Fn(&Path) -> Option<Box<dyn ContentFile>> + 'a;

/// [`content_signature`] of the files `open` opens, and how many bytes of
/// them it read.
pub(crate) fn signature_and_cost(
    open: &Open<'_>,
    files: &[&Path],
    limits: ContentLimits,
) -> (u64, u64) {
    let mut read = 0u64;
    let mut hasher = FxHasher::default();
    let mut window = Vec::new();
    for path in files {
        hasher.write(path.as_os_str().as_encoded_bytes());
        let Some(mut file) = open(path) else {
            hasher.write_u8(0);
            continue;
        };
        let len = file.size();
        let mut header = [0u8; HEADER_LEN];
        if !matches!(file.read_at(&mut header, 0), Ok(HEADER_LEN)) {
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
        if window.is_empty() {
            window = vec![0u8; CONTENT_WINDOW];
        }
        read += hash_records(&mut *file, end, &mut window, &mut hasher);
    }
    (hasher.finish(), read)
}

/// Hashes the records of `file` from its header to `end`, a window at a
/// time, each byte read once (a record cut by a window's end is carried to
/// the next window's start), up to the first record a collection would stop
/// at: a negative length, a key that is not a JSON list, a record past
/// `end`. Returns the bytes read.
fn hash_records(
    file: &mut dyn ContentFile,
    end: u64,
    window: &mut [u8],
    hasher: &mut FxHasher,
) -> u64 {
    let mut read = 0u64;
    // The window holds the file's bytes from `base` on, `filled` of them;
    // those before `base + pos` are hashed.
    let (mut base, mut filled, mut pos) = (HEADER_LEN as u64, 0usize, 0usize);
    let mut size = FIRST_WINDOW - HEADER_LEN;
    loop {
        while filled - pos > 4 {
            let at = &window[pos..filled];
            let Ok(key_len) = usize::try_from(i32::from_ne_bytes([at[0], at[1], at[2], at[3]]))
            else {
                return read;
            };
            if key_len == 0 || at[4] != b'[' {
                return read;
            }
            let record = 4 + padded_key_len(key_len) + VALUE_LEN;
            let record_end = base + (pos + record) as u64;
            if record_end > end {
                return read;
            }
            if record <= at.len() {
                hasher.write(&at[..record]);
                pos += record;
                continue;
            }
            if record <= window.len() {
                // Carried to the next window.
                break;
            }
            // Longer than a window: hashed a window at a time.
            hasher.write(at);
            let mut next = base + filled as u64;
            while next < record_end {
                let want = usize::try_from(record_end - next)
                    .map_or(window.len(), |n| n.min(window.len()));
                match file.read_at(&mut window[..want], next) {
                    Ok(0) | Err(_) => return read,
                    Ok(n) => {
                        hasher.write(&window[..n]);
                        next += n as u64;
                        read += n as u64;
                    }
                }
            }
            (base, filled, pos) = (record_end, 0, 0);
        }
        let next = base + filled as u64;
        if next >= end {
            return read;
        }
        window.copy_within(pos..filled, 0);
        base += pos as u64;
        filled -= pos;
        pos = 0;
        let want = usize::try_from(end - next)
            .map_or(size, |n| n.min(size))
            .min(window.len() - filled);
        match file.read_at(&mut window[filled..filled + want], next) {
            Ok(0) | Err(_) => return read,
            Ok(n) => {
                filled += n;
                read += n as u64;
            }
        }
        size = CONTENT_WINDOW;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::writer::{encode_key, file_bytes};

    /// `records` series of a counter `odd`, as prometheus_client writes them.
    fn records(records: usize) -> Vec<u8> {
        let keys: Vec<String> = (0..records)
            .map(|i| encode_key("odd", "odd_total", &[("i", &i.to_string())], "Odd."))
            .collect();
        let records: Vec<(&str, f64, f64)> = keys.iter().map(|k| (k.as_str(), 1.0, 0.0)).collect();
        file_bytes(&records)
    }

    fn used_of(bytes: &[u8]) -> usize {
        u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize
    }

    fn cost(files: &[&Path], limits: ContentLimits) -> (u64, u64) {
        signature_and_cost(&open_file, files, limits)
    }

    /// Issue 53 (defect 2): the content hash of a temporary run read each
    /// file into memory up to its `used` header: a sparse file whose header
    /// claims 1.75 GiB got the exporter OOM-killed in a 256 MiB cgroup. The
    /// hash now reads a window at a time and no more of a file than a
    /// collection could.
    #[test]
    fn the_content_hash_of_a_run_reads_a_window_at_a_time_and_within_the_limits() {
        let dir = tempfile::tempdir().unwrap();
        // Real records, then a header claiming 1.75 GiB over a sparse tail.
        let path = dir.path().join("counter_2.db");
        std::fs::write(&path, records(100)).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let claimed: u64 = 1_879_048_192;
        file.set_len(claimed).unwrap();
        file.write_all_at(&(claimed as u32).to_ne_bytes(), 0)
            .unwrap();
        let limits = ContentLimits {
            max_file_bytes: 1 << 20,
        };
        let (first, read) = cost(&[path.as_path()], limits);
        assert_eq!(read, HEADER_LEN as u64, "its header only");
        assert_eq!(first, content_signature(&[path.as_path()], limits));
        // Within the limits: up to its first zero-filled record (where a
        // collection stops too), in its first window.
        let limits = ContentLimits {
            max_file_bytes: 4 << 30,
        };
        let (_, read) = cost(&[path.as_path()], limits);
        assert!(
            read <= FIRST_WINDOW as u64 + CONTENT_WINDOW as u64,
            "{read}"
        );
        // Within the limits, every byte in use counts, a window at a time,
        // each read once.
        let small = dir.path().join("counter_3.db");
        let mut bytes = records(3 * CONTENT_WINDOW / 60);
        let used = used_of(&bytes);
        assert!(used > 2 * CONTENT_WINDOW + 8, "{used}");
        std::fs::write(&small, &bytes).unwrap();
        let (before, read) = cost(&[small.as_path()], limits);
        assert_eq!(read, used as u64);
        // A value near the end moves.
        bytes[used - 9] ^= 1;
        std::fs::write(&small, &bytes).unwrap();
        assert_ne!(before, content_signature(&[small.as_path()], limits));
        // A record longer than a window.
        let long = dir.path().join("counter_4.db");
        let key = encode_key(
            "odd",
            "odd_total",
            &[("i", &"x".repeat(3 * CONTENT_WINDOW))],
            "Odd.",
        );
        let bytes = file_bytes(&[(key.as_str(), 1.0, 0.0), ("[\"c\"]", 2.0, 0.0)]);
        std::fs::write(&long, &bytes).unwrap();
        assert_eq!(cost(&[long.as_path()], limits).1, used_of(&bytes) as u64);
    }
}
