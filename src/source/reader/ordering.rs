//! What the reader sees of a file while its writer writes it, on any CPU
//! (x86-64's strong store order and aarch64's weak one alike), and the one
//! thing it does about it: a read whose new records do not parse is tried
//! again at once ([`Reader::refresh_settled`]).
//!
//! # The writer
//!
//! prometheus_client 0.26.0 (`mmap_dict.py`) writes through a shared `mmap`
//! with slice assignments (`m[a:b] = bytes`), which CPython turns into one
//! `memcpy` each, with no lock between processes and no memory barrier:
//!
//! * a new key (`_init_value`): first the whole record (4-byte length, UTF-8
//!   JSON key, space padding to a multiple of 8, value and timestamp both
//!   `0.0`) at `used`, **then** the new `used` (4 bytes at offset 0);
//! * a value (`write_value`): value and timestamp, 16 bytes at an 8-byte
//!   aligned offset that never moves.
//!
//! Bytes past `used` have never been written: the file is pre-sized with
//! `truncate` (zeros) and only grows; a record, once inside `used`, is never
//! rewritten except for its value and timestamp.
//!
//! # What the reader reads, and with which ordering
//!
//! * **`used`**: with `pread` in [`Reader::refresh`](super::Reader), or one
//!   relaxed atomic 4-byte load from the map on the fast path
//!   ([`super::load`]). A 4-byte aligned store and load are single-copy atomic
//!   on x86-64 and aarch64, so `used` is some value the writer stored, never
//!   a mix of two.
//! * **Keys** (length fields and JSON): with `pread` only, never from the
//!   map, in [`Reader::refresh`](super::Reader), from the parsed end onwards.
//! * **Values and timestamps**: from the first `pread` window for new records;
//!   afterwards as two relaxed atomic 8-byte loads from the map
//!   ([`MappedFile::load_values`](crate::source::mapped::MappedFile)).
//!
//! No load is ordered with `Acquire`, because nothing on the writer's side
//! releases: Python issues no barrier, so a barrier on our side alone would
//! order nothing. The argument below needs none.
//!
//! # Why a torn or reordered read is impossible or detected and retried
//!
//! * **A new record seen before its bytes.** On x86-64 (TSO) stores become
//!   visible in program order, so a reader that sees the new `used` sees the
//!   record stored before it. On aarch64 (and POWER) they need not: without a
//!   barrier between the writer's two `memcpy`s, another core may see the new
//!   `used` while some of the record's bytes still read as the zeros that were
//!   there before; our own loads may also be satisfied out of order (the
//!   kernel's copy in `pread` reads `used` and the records without a barrier
//!   between them). Either way the reader sees, between the old and the new
//!   `used`, the record's bytes with some of them still zero. That is always
//!   detected: a length field still zero, or partly written (some of its
//!   bytes, so a smaller number), makes the key empty or a strict prefix of
//!   the JSON array, which is invalid JSON (the record after it then does not
//!   line up either); a key with some bytes still zero holds a NUL, which
//!   JSON forbids in and outside strings (json.dumps escapes a NUL in a label
//!   value as `\u0000`), and [`decode_key`](crate::format::key) rejects both.
//!   Zeros in the padding are never read, and zeros in the value and
//!   timestamp are the `0.0, 0.0` the record was written with. A read that
//!   fails this way is **not remembered** (the cached state is only updated on
//!   success) and is tried again at once, up to [`SETTLE_RETRIES`] times, by
//!   [`Reader::refresh_settled`]; each try re-reads `used` and the new
//!   records with fresh system calls, by which time (micro- to nanoseconds
//!   after the writer's stores) they are visible. Only a file that stays
//!   unparsable (really corrupt) is reported, as before, and read again at
//!   the next collection.
//! * **`used` going backwards.** Cannot be observed: each memory location
//!   has one order of stores that every reader agrees on (coherence, on
//!   aarch64 as on x86-64), and successive collections are ordered for this
//!   process (one thread, or the helper thread joined before the next). A
//!   smaller `used` therefore means a rewritten file, which is read afresh.
//! * **A torn value.** Our side loads each 8-byte aligned word with one
//!   atomic load, so it cannot split it. The writer's `memcpy` of 16 bytes is,
//!   with glibc, one 16-byte vector store (x86-64) or a pair of 8-byte stores
//!   or one 16-byte vector store (aarch64), each 8-byte aligned half of which
//!   is single-copy atomic on both architectures; so a value is one the writer
//!   stored. The value and its timestamp are two words and may come from two
//!   different writes (new value, old timestamp), exactly as
//!   prometheus_client's own reader may see them: it copies the file with
//!   `read(2)`, and the writer takes no lock either. A value read out of order
//!   with `used` is fine: every value of a known record is one its writer
//!   stored at some point, and coherence keeps a later collection from seeing
//!   an older value of the same word than an earlier one did (no counter goes
//!   backwards).
//!
//! # How strong the evidence is
//!
//! The argument above is the guarantee; tests can only illustrate it. The
//! regression test of this module makes a record's bytes appear between two
//! tries deterministically. Running the test suite for aarch64 under
//! `qemu-user` on an x86-64 host (`scripts/test-aarch64`) checks that the
//! code is correct for the architecture (byte order, alignment, the
//! `SIGBUS` guard, system calls) but is **weak evidence about ordering**:
//! qemu's translated code runs on the host's x86-64 memory model, so ARM's
//! reordering never happens there. Only a run on real aarch64 hardware
//! (Grace, Graviton) exercises it; docs/platforms.md says how.

use std::path::Path;

use super::{Reader, SkipReason};
use crate::merge::KeyStore;
use crate::source::ReadStats;

/// Tries after the first when the bytes past the header do not parse.
pub(super) const SETTLE_RETRIES: usize = 3;

impl Reader {
    /// [`Reader::refresh`], tried again (up to [`SETTLE_RETRIES`] times, the
    /// thread yielding in between) while it fails on the layout or a key:
    /// what a record looks like when its `used` became visible before its
    /// bytes (the module docs). Other failures (I/O, budget, a vanished
    /// file) are returned at once.
    pub(super) fn refresh_settled(
        &mut self,
        path: &Path,
        index: usize,
        store: &mut KeyStore,
        stats: &mut ReadStats,
    ) -> Result<(), SkipReason> {
        let mut retries = 0;
        loop {
            match self.refresh(path, index, store, stats) {
                Err(SkipReason::Layout(_) | SkipReason::Key(_)) if retries < SETTLE_RETRIES => {
                    retries += 1;
                    std::thread::yield_now();
                    #[cfg(test)]
                    tests::between_tries();
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::cell::RefCell;
    use std::os::unix::fs::FileExt as _;

    use super::*;
    use crate::format::layout::{file_bytes, HEADER_LEN};
    use crate::format::writer::encode_key;
    use crate::source::Input;

    thread_local! {
        /// Run between two tries of [`Reader::refresh_settled`] on this
        /// thread: the writer's stores becoming visible in between.
        static BETWEEN_TRIES: RefCell<Option<Box<dyn FnMut()>>> = const { RefCell::new(None) };
    }

    pub(super) fn between_tries() {
        BETWEEN_TRIES.with(|hook| {
            if let Some(hook) = hook.borrow_mut().as_mut() {
                hook();
            }
        });
    }

    /// A file of two records whose second record's bytes (the last
    /// `second_len` bytes) read as zeros although `used` covers them.
    fn file_with_second_record_unseen(path: &Path) -> (Vec<u8>, usize) {
        let first = encode_key("req", "req_total", &[("path", "/a")], "Requests.");
        let second = encode_key("req", "req_total", &[("path", "/b")], "Requests.");
        let one = file_bytes(&[(first.as_str(), 1.0, 0.0)]);
        let both = file_bytes(&[(first.as_str(), 1.0, 0.0), (second.as_str(), 0.0, 0.0)]);
        let second_at = i32::from_ne_bytes(one[..4].try_into().unwrap()) as usize;
        assert!(second_at > HEADER_LEN);
        // What a reader on a weakly ordered CPU may see: the new `used`, the
        // second record's bytes still zero.
        let mut seen = both.clone();
        let used_end = i32::from_ne_bytes(both[..4].try_into().unwrap()) as usize;
        seen[second_at..used_end].fill(0);
        std::fs::write(path, &seen).unwrap();
        (both, second_at)
    }

    /// Regression (issue 49, aarch64): a record whose `used` became visible
    /// before its bytes (prometheus_client writes them without a barrier)
    /// left the whole file out of the collection with a key or layout
    /// problem, as if it were corrupt; it is read again at once.
    #[test]
    fn a_record_seen_before_its_bytes_is_read_again_not_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counter_1.db");
        let (written, second_at) = file_with_second_record_unseen(&path);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let tries = std::rc::Rc::new(std::cell::Cell::new(0));
        let seen = tries.clone();
        BETWEEN_TRIES.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || {
                seen.set(seen.get() + 1);
                // The record's stores become visible.
                file.write_all_at(&written[second_at..], second_at as u64)
                    .unwrap();
            }));
        });
        let mut reader = Reader::new();
        let mut store = KeyStore::new();
        let read = reader.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
        BETWEEN_TRIES.with(|hook| hook.borrow_mut().take());
        assert!(read.problems.is_empty(), "{:?}", read.problems);
        let values: Vec<f64> = read.files[0].merge.values.iter().map(|v| v.0).collect();
        assert_eq!(values, vec![1.0, 0.0]);
        assert_eq!(tries.get(), 1);
    }

    /// A file that stays unparsable is reported after the retries, as
    /// before, and costs a bounded number of reads.
    #[test]
    fn a_file_that_stays_corrupt_is_reported_after_bounded_retries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counter_1.db");
        file_with_second_record_unseen(&path);
        let tries = std::rc::Rc::new(std::cell::Cell::new(0));
        let seen = tries.clone();
        BETWEEN_TRIES.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || seen.set(seen.get() + 1)));
        });
        let mut reader = Reader::new();
        let mut store = KeyStore::new();
        let read = reader.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
        BETWEEN_TRIES.with(|hook| hook.borrow_mut().take());
        assert!(read.files.is_empty());
        assert!(
            matches!(
                read.problems.as_slice(),
                [(
                    _,
                    crate::source::Problem {
                        reason: SkipReason::Key(_),
                        ..
                    }
                )]
            ),
            "{:?}",
            read.problems
        );
        assert_eq!(tries.get(), SETTLE_RETRIES);
    }
}
