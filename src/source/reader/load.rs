//! Loading the values of the mapped files that [`Reader::read`](super::Reader::read)
//! found unchanged in the directory, from their maps, on two threads when
//! there are many.

use std::ffi::OsString;

use rustc_hash::FxHashMap;

use super::CachedFile;
use crate::format::layout::{HEADER_LEN, VALUE_LEN};
use crate::source::ReadStats;

/// Values above which [`load_pending_values`] uses two threads (about 150
/// vLLM processes; below, waking the helper costs more than it saves).
const PARALLEL_LOAD_VALUES: usize = 1 << 16;

/// Files in each chunk of the loads the two threads take in turn (a few
/// thousand values for vLLM's files).
const CHUNK_FILES: usize = 16;

/// Loads the values of every file marked `pending`, from their maps. The
/// loads are memory-bound (each value sits on its own cache line), so a
/// large directory is shared between two threads, which halves the wait
/// when a second core is free.
///
/// Each file's header is read first, on the loading thread: a file whose
/// `used` bytes changed since it was parsed (it grew, or was rewritten)
/// loses its map, as does one whose map faults (it shrank); the caller reads
/// those from the file. Returns whether that happened to any file.
pub(super) fn load_pending_values(
    files: &mut FxHashMap<OsString, CachedFile>,
    stats: &mut ReadStats,
) -> bool {
    let mut pending: Vec<&mut CachedFile> = files
        .values_mut()
        .filter_map(|c| std::mem::take(&mut c.pending).then_some(c))
        .collect();
    let total: usize = pending.iter().map(|c| c.value_offsets.len()).sum();
    let pool = (total >= PARALLEL_LOAD_VALUES && available_cores() > 1)
        .then(helper_pool)
        .flatten();
    match pool {
        Some(pool) => {
            // Both threads take chunks of files until none is left: the
            // helper, woken last, takes fewer, and neither waits long for
            // the other.
            let chunks = std::sync::Mutex::new(pending.chunks_mut(CHUNK_FILES));
            let work = || loop {
                let next = chunks.lock().unwrap_or_else(|e| e.into_inner()).next();
                match next {
                    Some(chunk) => load_values(chunk),
                    None => break,
                }
            };
            pool.in_place_scope(|scope| {
                scope.spawn(|_| work());
                work();
            });
        }
        None => load_values(&mut pending),
    }
    stats.bytes_read += pending
        .iter()
        .filter(|c| c.map.is_some())
        .map(|c| (HEADER_LEN + c.value_offsets.len() * VALUE_LEN) as u64)
        .sum::<u64>();
    pending.iter().any(|c| c.map.is_none())
}

/// The thread that helps load the values, started once (a thread started
/// for each collection costs about as much as a tenth of the loads it
/// takes over); `None` if it cannot be started, or in a child process
/// forked after it started (the Python package: the child does not have the
/// thread, and waiting for it would never end).
fn helper_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<(u32, Option<rayon::ThreadPool>)> = std::sync::OnceLock::new();
    let (pid, pool) = POOL.get_or_init(|| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "multiproc-exporter-load".into())
            .build()
            .map_err(|e| tracing::warn!(error = %e, "Cannot start the thread that helps load values; loading on one."))
            .ok();
        (std::process::id(), pool)
    });
    pool.as_ref().filter(|_| *pid == std::process::id())
}

/// The number of cores this process may run on, read once.
fn available_cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Loads the values of `files` from their maps (a file whose values differ
/// from the last ones gets a new `values_version`). A file whose header says
/// it changed, or whose map faults, loses its map (and its values) and is
/// marked as not listed in this collection.
fn load_values(files: &mut [&mut CachedFile]) {
    for cached in files.iter_mut() {
        let cached = &mut **cached;
        let loaded = cached.map.as_ref().and_then(|map| {
            let used = match map.load_i32(0)? {
                Ok(0) => HEADER_LEN,
                Ok(used) => usize::try_from(used).ok()?,
                Err(_) => return None,
            };
            // Grown, shrunk or corrupt: read again from the file.
            if used != cached.parsed_until || used > map.len() {
                return None;
            }
            map.load_values(&cached.value_offsets, &mut cached.values)
        });
        match loaded {
            Some(Ok(false)) => {}
            Some(Ok(true)) => cached.values_version = cached.values_version.wrapping_add(1),
            Some(Err(_)) | None => {
                cached.map = None;
                cached.values.clear();
                // Not listed until it is read again: if it cannot be read now,
                // it is forgotten, as a file the check before the loads turned
                // away, and read afresh next time.
                cached.seen_in = 0;
            }
        }
    }
}
