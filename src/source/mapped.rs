//! Long-lived read-only maps of metric files, and giving freed heap back to
//! the system ([`release_free_heap`], [`limit_heap_arenas`]): the crate's
//! only `unsafe` code.
//!
//! Once a file's structure is known, a scrape needs only its `used` header and
//! its values, which sit at fixed offsets. Reading them through a long-lived,
//! read-only, shared map costs a few loads per value, where `pread` would copy
//! every used byte (keys included) on every scrape. Two hazards come with it,
//! and this module handles both:
//!
//! * **The bytes change under us.** Writer processes update values through
//!   their own maps at any time. The map is therefore never turned into a Rust
//!   reference (memmap2's [`MmapRaw`] hands out a raw pointer only), and every
//!   access is one relaxed atomic load of an aligned 4- or 8-byte word: a
//!   single load instruction (`mov` on x86-64, `ldr` on aarch64, which never
//!   write, so a read-only map is fine), single-copy atomic on both, so our
//!   side never splits a word the writer stored whole; no assumption is made
//!   that two loads agree, nor that they are ordered with each other (nothing
//!   on the writer's side releases, so `Acquire` here would order nothing).
//!   Why that is enough on a weakly ordered CPU (aarch64) as on x86-64 is
//!   argued in the reader's `reader/ordering.rs`.
//! * **The file may shrink under us.** prometheus_client only ever grows its
//!   files, but anything else (a stray `truncate`, a test, a wiped volume) may
//!   shrink one, and a load from a mapped page past the end of a file raises
//!   `SIGBUS`, whose default action kills the process. A process-wide `SIGBUS`
//!   handler, installed the first time a file is mapped, checks whether the
//!   faulting address lies in the map that the current thread is reading
//!   (recorded in a thread-local before the loads start). If so, it maps a
//!   page of zeros over the faulting page, notes the fault and returns, so the
//!   load completes; the read then reports [`Truncated`] and the caller drops
//!   the map and falls back to `pread`. Any other `SIGBUS` goes to the handler
//!   that was installed before ours (Rust's runtime handler, or the default
//!   action), so genuine faults still crash as they would have.
//!
//! The number of maps held at once is bounded process-wide (a quarter of
//! `vm.max_map_count`), so a directory of 100,000 files cannot exhaust the
//! address-space map limit; files beyond the budget are read with `pread`.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::fs::File;
use std::sync::atomic::{compiler_fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

use memmap2::{MmapOptions, MmapRaw};

/// Returns the heap memory that is free but still held by the allocator to
/// the system (glibc's `malloc_trim`; nothing elsewhere). Called after the
/// caches were rebuilt, so that memory released by vanished writers' state
/// leaves the process's resident set instead of staying with the allocator.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer, only walks glibc's own arenas
    // under their locks, and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps the allocator's heaps (glibc's arenas) at `arenas`. By default glibc
/// gives each thread that allocates under contention its own heap, up to
/// eight per core, and each keeps what it freed: a server whose scrapes run
/// on several threads at once then holds several copies of a scrape's
/// working memory. Called once at start, before the threads exist; nothing
/// elsewhere.
pub fn limit_heap_arenas(arenas: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` takes two integers, no pointer; changing M_ARENA_MAX
    // only bounds how many arenas glibc creates from now on.
    unsafe {
        libc::mallopt(
            libc::M_ARENA_MAX,
            libc::c_int::try_from(arenas.max(1)).unwrap_or(libc::c_int::MAX),
        );
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

/// A load touched a page past the end of the file: the file shrank after it
/// was mapped. The map must be dropped; the file must be read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truncated;

/// A read-only shared map of the first `len` bytes of a metric file.
#[derive(Debug)]
pub(crate) struct MappedFile {
    map: MmapRaw,
}

/// Maps currently held by the whole process.
static MAPS_HELD: AtomicUsize = AtomicUsize::new(0);

impl MappedFile {
    /// Maps the first `len` bytes of `file` read-only, or returns `None` when
    /// `len` is 0, the process already holds its budget of maps, or the
    /// system refuses the map (the caller then reads with `pread`).
    pub(crate) fn new(file: &File, len: usize) -> Option<Self> {
        if len == 0 || !take_budget() {
            return None;
        }
        install_sigbus_handler();
        match MmapOptions::new().len(len).map_raw_read_only(file) {
            Ok(map) => Some(Self { map }),
            Err(_) => {
                MAPS_HELD.fetch_sub(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Length of the map in bytes (the file's size when it was mapped).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Reads the `i32` (native byte order) at `offset` (the `used` header at 0).
    ///
    /// # Panics
    /// Never: an offset that is out of bounds or misaligned returns `None`.
    pub(crate) fn load_i32(&self, offset: usize) -> Option<Result<i32, Truncated>> {
        if offset % 4 != 0 || offset.checked_add(4)? > self.len() {
            return None;
        }
        Some(self.guarded(|base| {
            // SAFETY: `offset + 4 <= len`, so the word lies inside the map,
            // which stays mapped while `self` lives; the map's base is page
            // aligned and `offset` a multiple of 4, so the pointer is aligned
            // for `AtomicU32` (whose alignment is 4 on every target with
            // 32-bit atomics). Only atomic loads are made through it in this
            // process (a load never writes, so the read-only map is fine);
            // other processes store to this memory, which is why the load is
            // atomic: one single-copy atomic load, never a torn one. A fault
            // on a page past the end of a shrunk file is absorbed by the
            // SIGBUS guard that `guarded` sets up.
            let word = unsafe {
                AtomicU32::from_ptr(base.add(offset).cast::<u32>().cast_mut())
                    .load(Ordering::Relaxed)
            };
            // Native byte order, as prometheus_client writes and `layout` reads.
            word as i32
        }))
    }

    /// Reads the value and timestamp (two `f64`s in native byte order, as
    /// [`crate::format::layout`] reads them) at each of `offsets` into
    /// `values`, replacing its contents. `Ok(true)` if they differ from what
    /// `values` held, bit for bit (`-0.0` is not `0.0`, a NaN is not another
    /// NaN's payload): a caller that keeps the previous values learns whether
    /// the file changed for the price of reading them. Only the values that
    /// changed are written (an unchanged directory dirties no cache line).
    ///
    /// Returns `None` (and leaves `values` empty) if an offset is out of
    /// bounds or not a multiple of 8: the caller reads the file with `pread`.
    pub(crate) fn load_values(
        &self,
        offsets: &[u32],
        values: &mut Vec<(f64, f64)>,
    ) -> Option<Result<bool, Truncated>> {
        let len = self.len();
        if !offsets
            .iter()
            .all(|&o| o % 8 == 0 && (o as usize).checked_add(16).is_some_and(|end| end <= len))
        {
            values.clear();
            return None;
        }
        let resized = values.len() != offsets.len();
        values.resize(offsets.len(), (0.0, 0.0));
        let result = self.guarded(|base| {
            let mut changed = resized;
            for (slot, &offset) in values.iter_mut().zip(offsets) {
                // SAFETY: every offset was checked above: `offset + 16 <= len`
                // (both words inside the map, which stays mapped while `self`
                // lives) and `offset % 8 == 0` with a page-aligned base, so
                // both pointers are aligned for `AtomicU64` (alignment 8 on
                // the 64-bit targets this crate builds for; `from_ptr`'s
                // alignment requirement). Only atomic loads are made through
                // them in this process; other processes store to these words,
                // hence one single-copy atomic load each (never torn by us).
                // Faults are absorbed by the SIGBUS guard that `guarded` sets up.
                let (value, timestamp) = unsafe {
                    let word = base.add(offset as usize).cast::<u64>().cast_mut();
                    (
                        AtomicU64::from_ptr(word).load(Ordering::Relaxed),
                        AtomicU64::from_ptr(word.add(1)).load(Ordering::Relaxed),
                    )
                };
                if (slot.0.to_bits(), slot.1.to_bits()) != (value, timestamp) {
                    *slot = (f64::from_bits(value), f64::from_bits(timestamp));
                    changed = true;
                }
            }
            changed
        });
        if result.is_err() {
            values.clear();
        }
        Some(result)
    }

    /// Runs `loads` with this map registered as the current thread's guarded
    /// range; `Err(Truncated)` if any load faulted.
    fn guarded<T>(&self, loads: impl FnOnce(*const u8) -> T) -> Result<T, Truncated> {
        let base = self.map.as_ptr();
        let start = base as usize;
        GUARD.with(|g| {
            g.set(Guard {
                start,
                end: start + self.len(),
                faulted: false,
            })
        });
        // The handler runs on this thread between any two instructions: keep
        // the compiler from moving the guard's setup after the loads, or its
        // teardown before them.
        compiler_fence(Ordering::SeqCst);
        let out = loads(base);
        compiler_fence(Ordering::SeqCst);
        let faulted = GUARD.with(|g| g.replace(Guard::NONE).faulted);
        if faulted {
            Err(Truncated)
        } else {
            Ok(out)
        }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        MAPS_HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reserves one map in the process-wide budget.
fn take_budget() -> bool {
    let budget = map_budget();
    MAPS_HELD
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            (held < budget).then_some(held + 1)
        })
        .is_ok()
}

/// How many files may be mapped at once: a quarter of `vm.max_map_count`
/// (65,530 by default), leaving the rest to the allocator, thread stacks and
/// libraries. A map patched by the SIGBUS guard splits into a few more areas,
/// which the margin covers.
fn map_budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(65_530)
            / 4
    })
}

/// The range the current thread is loading from, and whether a load in it faulted.
#[derive(Debug, Clone, Copy)]
struct Guard {
    start: usize,
    end: usize,
    faulted: bool,
}

impl Guard {
    const NONE: Self = Self {
        start: 0,
        end: 0,
        faulted: false,
    };
}

thread_local! {
    /// Read by the SIGBUS handler. A `const`-initialised thread-local of a
    /// type without `Drop` is a plain slot in the thread's static TLS block:
    /// accessing it never allocates, locks or registers a destructor, so the
    /// handler may touch it.
    static GUARD: Cell<Guard> = const { Cell::new(Guard::NONE) };
}

/// The page size, read once before the handler is installed.
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);

/// The `SIGBUS` disposition before ours, to hand foreign faults to.
static PREVIOUS_ACTION: OnceLock<PreviousAction> = OnceLock::new();

/// A saved `sigaction`.
struct PreviousAction(libc::sigaction);

// SAFETY: a `sigaction` is plain data (a handler address, a signal mask and
// flags); it is written once before it is shared and only read afterwards.
unsafe impl Sync for PreviousAction {}
// SAFETY: as above; it holds no pointer to thread-owned data.
unsafe impl Send for PreviousAction {}

/// Installs the SIGBUS handler once per process.
fn install_sigbus_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if let Ok(page) = usize::try_from(page) {
            if page.is_power_of_two() {
                PAGE_SIZE.store(page, Ordering::Relaxed);
            }
        }
        // SAFETY: `action` is fully initialised (zeroed, then every field we
        // rely on set) before `sigaction` reads it; `previous` is written by
        // `sigaction`. The handler only does async-signal-safe work: atomic
        // and thread-local loads and stores, `mmap`, `sigaction`, and calling
        // the previous handler.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_sigbus;
            action.sa_sigaction = handler as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &action, &mut previous) == 0 {
                let _ = PREVIOUS_ACTION.set(PreviousAction(previous));
            }
        }
    });
}

/// The SIGBUS handler: absorbs faults in the current thread's guarded map,
/// hands every other fault to the previous disposition.
extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: for an `SA_SIGINFO` handler the kernel passes a valid
    // `siginfo_t`; `si_addr` is the faulting address for SIGBUS.
    let address = unsafe { (*info).si_addr() } as usize;
    let guard = GUARD.with(Cell::get);
    if guard.start <= address && address < guard.end {
        let page = PAGE_SIZE.load(Ordering::Relaxed);
        let page_start = address & !(page - 1);
        // SAFETY: the page lies inside a map this thread owns and is reading
        // right now (the guarded range). Replacing it with a private
        // anonymous zero page changes nothing but what that map's loads
        // return; the map is dropped (unmapped whole) after the read reports
        // `Truncated`. `mmap` is a plain system call, safe in a handler.
        let replaced = unsafe {
            libc::mmap(
                page_start as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced != libc::MAP_FAILED {
            GUARD.with(|g| {
                g.set(Guard {
                    faulted: true,
                    ..guard
                })
            });
            return;
        }
    }
    forward_to_previous(signal, info, context);
}

/// Delivers a SIGBUS that is not ours as if our handler did not exist.
fn forward_to_previous(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    let previous = PREVIOUS_ACTION.get().map(|p| p.0);
    let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
        let siginfo = previous.is_some_and(|p| p.sa_flags & libc::SA_SIGINFO != 0);
        // SAFETY: `handler` is the address the previous `sigaction` installed
        // for this signal, with the signature its `SA_SIGINFO` flag promises;
        // we call it with the arguments the kernel gave us.
        unsafe {
            if siginfo {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(handler);
                f(signal, info, context);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                f(signal);
            }
        }
        return;
    }
    // Default (or ignored, which the kernel overrides for a fault): restore
    // the default action and return; the faulting load runs again and the
    // process terminates as it would have without us.
    // SAFETY: `signal` with `SIG_DFL` has no preconditions and is
    // async-signal-safe.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn file_with(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn loads_words_written_after_mapping() {
        let mut bytes = vec![0u8; 64];
        bytes[0..4].copy_from_slice(&24i32.to_ne_bytes());
        let file = file_with(&bytes);
        let map = MappedFile::new(&file, 64).unwrap();
        assert_eq!(map.load_i32(0), Some(Ok(24)));
        std::os::unix::fs::FileExt::write_at(&file, &1.5f64.to_ne_bytes(), 16).unwrap();
        std::os::unix::fs::FileExt::write_at(&file, &7.0f64.to_ne_bytes(), 24).unwrap();
        let mut values = Vec::new();
        assert_eq!(map.load_values(&[16, 48], &mut values), Some(Ok(true)));
        assert_eq!(values, vec![(1.5, 7.0), (0.0, 0.0)]);
    }

    #[test]
    fn load_values_tells_whether_any_bit_changed() {
        let file = file_with(&[0u8; 64]);
        let map = MappedFile::new(&file, 64).unwrap();
        let write = |offset: u64, value: f64| {
            std::os::unix::fs::FileExt::write_at(&file, &value.to_ne_bytes(), offset).unwrap();
        };
        write(16, 2.0);
        let mut values = Vec::new();
        assert_eq!(map.load_values(&[16, 32], &mut values), Some(Ok(true)));
        assert_eq!(map.load_values(&[16, 32], &mut values), Some(Ok(false)));
        // A value, a timestamp, a sign bit alone, a NaN's payload.
        for (offset, value) in [(16, 3.0), (24, 1.0), (32, -0.0), (40, f64::NAN)] {
            write(offset, value);
            assert_eq!(
                map.load_values(&[16, 32], &mut values),
                Some(Ok(true)),
                "{offset}"
            );
            assert_eq!(
                map.load_values(&[16, 32], &mut values),
                Some(Ok(false)),
                "{offset}"
            );
        }
        write(40, -f64::NAN);
        assert_eq!(map.load_values(&[16, 32], &mut values), Some(Ok(true)));
        assert_eq!(values[1].0.to_bits(), (-0.0f64).to_bits());
        // Other offsets: other values, even when the bits happen to match.
        assert_eq!(map.load_values(&[16], &mut values), Some(Ok(true)));
        assert_eq!(values, vec![(3.0, 1.0)]);
    }

    #[test]
    fn rejects_out_of_bounds_and_misaligned_offsets() {
        let file = file_with(&[0u8; 32]);
        let map = MappedFile::new(&file, 32).unwrap();
        let mut values = vec![(1.0, 1.0)];
        assert_eq!(map.load_values(&[24], &mut values), None);
        assert_eq!(map.load_values(&[12], &mut values), None);
        assert!(values.is_empty());
        assert_eq!(map.load_i32(30), None);
        assert_eq!(map.load_i32(2), None);
    }

    #[test]
    fn truncated_file_reports_instead_of_crashing() {
        let page = PAGE_SIZE.load(Ordering::Relaxed).max(4096);
        let file = file_with(&vec![1u8; 4 * page]);
        let map = MappedFile::new(&file, 4 * page).unwrap();
        file.set_len(page as u64).unwrap();
        // Inside the remaining page: fine.
        assert_eq!(map.load_i32(0), Some(Ok(0x0101_0101)));
        // Past the new end: SIGBUS, absorbed.
        let mut values = Vec::new();
        let offset = (2 * page) as u32;
        assert_eq!(
            map.load_values(&[0, offset], &mut values),
            Some(Err(Truncated))
        );
        assert!(values.is_empty());
        // The thread's guard is cleared: later reads of other maps work.
        let other = file_with(&[0u8; 16]);
        let other_map = MappedFile::new(&other, 16).unwrap();
        assert_eq!(other_map.load_i32(0), Some(Ok(0)));
    }

    /// Run in a child process by `foreign_sigbus_still_terminates_the_process`.
    #[test]
    fn child_faults_outside_any_guarded_map() {
        if std::env::var_os("MPE_SIGBUS_CHILD").is_none() {
            return;
        }
        let page = 4096;
        let guarded = file_with(&vec![0u8; page]);
        let _installed = MappedFile::new(&guarded, page).unwrap();
        let other = file_with(&vec![0u8; 2 * page]);
        let map = MmapOptions::new()
            .len(2 * page)
            .map_raw_read_only(&other)
            .unwrap();
        other.set_len(0).unwrap();
        // SAFETY: in bounds of a live map; the fault this raises (the file
        // was emptied) is the point of the test.
        let byte = unsafe { std::ptr::read_volatile(map.as_ptr().add(page)) };
        panic!("read {byte} from a truncated file without SIGBUS");
    }

    #[test]
    fn foreign_sigbus_still_terminates_the_process() {
        use std::os::unix::process::ExitStatusExt as _;
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "source::mapped::tests::child_faults_outside_any_guarded_map",
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env("MPE_SIGBUS_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
    }

    #[test]
    fn empty_file_is_not_mapped() {
        let file = file_with(&[]);
        assert!(MappedFile::new(&file, 0).is_none());
    }
}
