//! Reading the listed files incrementally ([`Reader`]): a file is read whole
//! the first time and whenever it grew, then stays mapped read-only so that
//! an unchanged file costs no system call; only records appended since the
//! last read are decoded.
//!
//! What it reads while a writer writes, with which memory ordering, and why
//! a torn or reordered read is impossible or detected and retried (on
//! aarch64 as on x86-64): the docs of `reader/ordering.rs`.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::budget::MemoryBudget;
use super::link_policy::LinkPolicy;
use super::listing::{list_inputs, CachedListing, Listed};
use super::mapped::MappedFile;
use super::{Input, Problem, ReadStats, SkipReason};
use crate::format::file_name::{writer_pid, FileName};
use crate::format::layout::{
    read_used, read_value, record_len, scan_window, LayoutError, HEADER_LEN, VALUE_LEN,
};
use crate::merge::{KeyId, KeyStore, MergeError, MergeInput};
use crate::transform::views::SourceFilter;
use file_io::{
    birth, io_reason, is_live_gauge_path, open_read_only, read_values, read_window, READ_CHUNK,
};

/// Bytes read at least on a file's first read (Python reads one page first).
const FIRST_READ: usize = 4096;

/// What is remembered about one file between collections.
#[derive(Debug)]
struct CachedFile {
    device: u64,
    inode: u64,
    /// Birth time (or change time where the file system has none): tells a
    /// new file from an old one whose inode number it got.
    born: (i64, i64),
    name: FileName,
    /// Offset where record scanning stopped.
    parsed_until: usize,
    keys: Vec<KeyId>,
    value_offsets: Vec<u32>,
    values: Vec<(f64, f64)>,
    /// Changes whenever `keys` changes; identifies the file's structure.
    generation: u64,
    /// Changes whenever a value may have changed (with `generation`, it
    /// identifies what the file gives the merge).
    values_version: u64,
    /// The collection that last listed it.
    seen_in: u64,
    /// Where that collection listed it (an index into its listing).
    listed_at: usize,
    /// Check the path with `stat` before trusting the map again.
    recheck: bool,
    /// Its values are to be loaded from the map in this collection.
    pending: bool,
    /// The file mapped read-only (within the process-wide budget of maps),
    /// so that a steady-state read is a few loads and no system call.
    map: Option<MappedFile>,
}

impl CachedFile {
    /// Estimated heap bytes held for this file (its path and name included).
    fn heap_bytes(&self) -> usize {
        const FILE_OVERHEAD: usize = 256;
        FILE_OVERHEAD
            + self.keys.capacity() * (4 + PLAN_BYTES_PER_RECORD)
            + self.value_offsets.capacity() * 4
            + self.values.capacity() * 16
    }
}

/// One file that was read and can take part in the merge.
#[derive(Debug)]
pub struct ReadFile<'a> {
    /// Its position in the listing (problems are reported at theirs).
    pub position: usize,
    /// Its path.
    pub path: PathBuf,
    /// Its device and inode.
    pub identity: (u64, u64),
    /// When it was created (or changed, where the file system keeps no
    /// birth time), in seconds since the Unix epoch.
    pub born: f64,
    /// The bytes its header says are used.
    pub used_bytes: usize,
    /// Already frozen ([`Reader::freeze`]): its values were not loaded.
    pub frozen: bool,
    /// Changes whenever one of its values may have changed: equal
    /// `merge.generation` and `values_version`, equal input to the merge.
    pub values_version: u64,
    /// What the merge needs: name, keys, values and structure generation.
    pub merge: MergeInput<'a>,
}

/// The result of one [`Reader::read`].
#[derive(Debug)]
pub struct Read<'a> {
    /// The files that can take part in the merge, in listing order, except
    /// the frozen files that were skipped.
    pub files: Vec<ReadFile<'a>>,
    /// The frozen files skipped (not even looked up): they are those of the
    /// last collection that marked them, unchanged.
    pub skipped: Skipped<'a>,
    /// Paths left out, with their listing positions.
    pub problems: Vec<(usize, Problem)>,
    /// Counters.
    pub stats: ReadStats,
}

/// Reads inputs incrementally; keep one per set of inputs.
#[derive(Debug, Default)]
pub struct Reader {
    /// Keyed by path bytes (hashing a `Path` walks its components).
    files: FxHashMap<OsString, CachedFile>,
    /// The frozen files ([`Self::freeze`]), apart, so that a collection
    /// that skips them walks none of them.
    frozen: FxHashMap<OsString, CachedFile>,
    /// Changes whenever the set of frozen files does.
    frozen_epoch: u64,
    /// Estimated heap bytes of the frozen files.
    frozen_bytes: usize,
    next_generation: u64,
    buffer: Vec<u8>,
    /// Which symbolic links in a directory are followed.
    link_policy: LinkPolicy,
    /// Directory listings, reused while a directory is unchanged.
    listings: FxHashMap<PathBuf, CachedListing>,
    /// The memory budget shared with the other readers, if any.
    budget: Option<Arc<MemoryBudget>>,
    /// What this reader last charged to the budget.
    charged: usize,
    /// Estimated heap bytes of the cached files' vectors.
    files_bytes: usize,
    /// Files skipped for the budget, not read again while unchanged and
    /// while the budget has no more room than when they were skipped.
    over_budget: FxHashMap<OsString, OverBudget>,
    /// The most this reader could hold when the current collection started
    /// (what it charged plus [`MemoryBudget::free`]).
    room_at_start: usize,
    /// What it charged when the current collection started.
    charged_at_start: usize,
    /// Collections made so far.
    collections: u64,
    /// With a view: only the records of the families it keeps are read.
    key_filter: Option<SourceFilter>,
}

/// A file skipped for the memory budget.
#[derive(Debug)]
struct OverBudget {
    /// Device, inode and `used` when it was skipped.
    identity: (u64, u64, usize),
    /// The reader's room and charge when the collection that skipped it
    /// started: with more room at the start of a later one (its allowance
    /// grew, another reader let go of its charge) or less charged (files of
    /// its own went), it is read again (issue 53: a file skipped once was
    /// never retried while unchanged, whatever room was made since).
    room: usize,
    charged: usize,
    /// The last collection that listed it.
    collection: u64,
}

/// A reader gives back what it charged to the budget when it goes, on
/// every path (a view's source evicted, a configuration reloaded, a source
/// rebuilt after a panic), not only when someone remembers to.
impl Drop for Reader {
    fn drop(&mut self) {
        self.release_budget();
    }
}

impl Reader {
    /// A reader with nothing cached.
    pub fn new() -> Self {
        Self::default()
    }

    /// A reader with nothing cached that follows symbolic links in a
    /// directory according to `policy`.
    pub fn with_link_policy(policy: LinkPolicy) -> Self {
        let mut reader = Self::default();
        reader.link_policy = policy;
        reader
    }

    /// Shares `budget` with this reader: a file whose reading would take
    /// the memory held past it is skipped ([`SkipReason::OverMemoryBudget`]).
    pub fn set_memory_budget(&mut self, budget: Option<Arc<MemoryBudget>>) {
        self.budget = budget;
    }

    /// Reads only the records whose family `filter` keeps (a view's:
    /// [`SourceFilter`]), or every record (`None`). A change forgets every
    /// cached file ([`Self::forget_files`]): the caller rebuilds its key
    /// store and plans too. Returns whether it changed.
    pub fn set_key_filter(&mut self, filter: Option<SourceFilter>) -> bool {
        let changed = self.key_filter != filter;
        if changed {
            self.key_filter = filter;
            self.forget_files();
        }
        changed
    }

    /// Forgets every cached file (and the files skipped for the budget), to
    /// rebuild the caches from scratch with a new key store; listings and
    /// settings are kept.
    pub fn forget_files(&mut self) {
        self.files.clear();
        self.frozen.clear();
        self.frozen_bytes = 0;
        self.frozen_epoch += 1;
        self.over_budget.clear();
        self.files_bytes = 0;
        self.buffer = Vec::new();
    }

    /// Bytes this reader charges to the budget now (0 without one).
    pub fn charged(&self) -> usize {
        self.charged
    }

    /// Withdraws this reader's charge from the budget (before it is
    /// rebuilt; dropping a reader does it too).
    pub fn release_budget(&mut self) {
        if let Some(budget) = &self.budget {
            budget.update(self.charged, 0);
        }
        self.charged = 0;
    }

    /// Charges the budget with what this reader and `store` hold now: called
    /// at the end of every read, and again by the caller once the merge has
    /// grown `store` (its plans and output labels), so that what is charged
    /// is what is held, not what was held before the merge (issue 53: the
    /// charge for the same files grew about 40 % at the next read, past
    /// the reader's allowance).
    pub fn recharge(&mut self, store: &KeyStore) {
        if let Some(budget) = &self.budget {
            let now = records_bytes(store)
                + self
                    .files
                    .values()
                    .map(CachedFile::heap_bytes)
                    .sum::<usize>()
                + self.frozen_bytes
                + self.buffer.capacity();
            budget.update(self.charged, now);
            self.charged = now;
        }
    }

    /// Makes the next collection check `path` with a `stat` before trusting
    /// its map: call it when the file may have been truncated in place (the
    /// server does on every inotify modification event for a metric file).
    ///
    /// Values are read through the map without any system call, so a file
    /// that another process shrinks in place (prometheus_client never does)
    /// is noticed by the fault it causes only when a whole page disappears;
    /// this check notices every size change.
    pub fn recheck(&mut self, path: &Path) {
        self.thaw(path.as_os_str());
        if let Some(cached) = self.files.get_mut(path.as_os_str()) {
            cached.recheck = true;
        }
    }

    /// Marks the file at `path` (device and inode `identity`) as one whose
    /// writer is dead: while the same file stays listed, its header and
    /// values are not loaded again (a dead process's file cannot change), and
    /// once the directory is unchanged it is not even looked up (see
    /// [`Read::skipped`]), so it costs a scrape nothing. [`Self::recheck`]
    /// and a changed identity undo it.
    pub fn freeze(&mut self, path: &Path, identity: (u64, u64)) {
        let matches = self
            .files
            .get(path.as_os_str())
            .is_some_and(|cached| (cached.device, cached.inode) == identity);
        if let Some((key, mut cached)) = self
            .files
            .remove_entry(path.as_os_str())
            .filter(|_| matches)
        {
            cached.pending = false;
            cached.recheck = false;
            // Its values are never loaded again: release the map (and the
            // pages it brought in) for the live writers' files.
            cached.map = None;
            self.frozen_bytes += cached.heap_bytes();
            self.frozen.insert(key, cached);
            self.frozen_epoch += 1;
        }
    }

    /// Undoes [`Self::freeze`] for the file at `path`, if it was frozen.
    fn thaw(&mut self, path: &OsStr) {
        if let Some((key, cached)) = self.frozen.remove_entry(path) {
            self.frozen_bytes = self.frozen_bytes.saturating_sub(cached.heap_bytes());
            self.files.insert(key, cached);
            self.frozen_epoch += 1;
        }
    }

    /// Undoes [`Self::freeze`] for every file whose name gives `pid` as its
    /// writer's (a process of that pid holds one of them again).
    pub fn thaw_writer(&mut self, pid: u32) {
        let thawed: Vec<OsString> = self
            .frozen
            .keys()
            .filter(|path| {
                Path::new(path)
                    .file_name()
                    .and_then(OsStr::to_str)
                    .and_then(writer_pid)
                    == Some(pid)
            })
            .cloned()
            .collect();
        for path in thawed {
            self.thaw(&path);
        }
    }

    /// [`Self::recheck`] for every file but the frozen ones (the server calls
    /// it on its periodic rescan, for file systems that deliver no events):
    /// a frozen file's map is never read, so there is nothing to check.
    pub fn recheck_all(&mut self) {
        for cached in self.files.values_mut() {
            cached.recheck = true;
        }
        for listing in self.listings.values_mut() {
            listing.verify_next();
        }
    }

    /// Lists and reads `inputs` (in order; directories expanded in `readdir`
    /// order in place), decoding new keys into `store`. The files that can
    /// take part in the merge come back in order, with the problems of the
    /// others at their listing positions.
    pub fn read(&mut self, inputs: &[Input], store: &mut KeyStore) -> Read<'_> {
        let mut stats = ReadStats::default();
        let mut problems = Vec::new();
        // Mark the frozen entries of the listings kept (once per change of
        // the frozen set): unchanged directories skip them.
        let epoch = self.frozen_epoch;
        for listing in self.listings.values_mut() {
            if listing.frozen_epoch() != Some(epoch) {
                let frozen = &self.frozen;
                listing.mark_frozen(epoch, |path| frozen.contains_key(path.as_os_str()));
            }
        }
        let listing = list_inputs(
            inputs,
            self.link_policy,
            &mut self.listings,
            epoch,
            &mut stats,
            &mut problems,
        );
        let paths = listing.paths;
        let skipped_directories = listing.skipped;
        stats.files_listed =
            paths.len() + skipped_directories.iter().map(|d| d.skipped).sum::<usize>();
        self.collections += 1;
        let collection = self.collections;
        self.room_at_start = self
            .budget
            .as_ref()
            .map_or(usize::MAX, |b| b.free().saturating_add(self.charged));
        self.charged_at_start = self.charged;
        self.files_bytes = self.frozen_bytes;
        if self.budget.is_some() {
            self.files_bytes += self
                .files
                .values()
                .map(CachedFile::heap_bytes)
                .sum::<usize>();
        }

        // Read every listed file: unchanged mapped files only have their
        // values loaded (all together, below); the others are read now.
        let mut outcomes: Vec<Option<Result<(), SkipReason>>> = Vec::with_capacity(paths.len());
        for (index, listed) in paths.iter().enumerate() {
            outcomes.push(if self.check_mapped(listed, index) {
                None
            } else {
                Some(self.refresh_settled(&listed.path, index, store, &mut stats))
            });
        }
        if load::load_pending_values(&mut self.files, &mut stats) {
            // Some file grew, or shrank under its map: read those from the file.
            for (index, (listed, outcome)) in paths.iter().zip(outcomes.iter_mut()).enumerate() {
                let unloaded = outcome.is_none()
                    && !self.frozen.contains_key(listed.path.as_os_str())
                    && self
                        .files
                        .get(listed.path.as_os_str())
                        .is_none_or(|c| c.map.is_none());
                if unloaded {
                    *outcome = Some(self.refresh_settled(&listed.path, index, store, &mut stats));
                }
            }
        }

        // Forget the files that are gone (their maps are released with them).
        let before = self.files.len();
        self.files.retain(|_, cached| cached.seen_in == collection);
        stats.files_forgotten = before - self.files.len();
        // A frozen file is gone only if a directory was listed anew (or is
        // named); a skipped one is still there.
        let named = inputs.iter().any(|i| matches!(i, Input::File(_)));
        if listing.relisted || named {
            let before = self.frozen.len();
            let mut released = 0;
            self.frozen.retain(|path, cached| {
                let kept = cached.seen_in == collection
                    || skipped_directories
                        .iter()
                        .any(|d| Path::new(path).parent() == Some(d.dir.as_path()));
                if !kept {
                    released += cached.heap_bytes();
                }
                kept
            });
            if self.frozen.len() != before {
                stats.files_forgotten += before - self.frozen.len();
                self.frozen_bytes = self.frozen_bytes.saturating_sub(released);
                self.frozen_epoch += 1;
            }
        }
        self.over_budget.retain(|_, o| o.collection == collection);
        // The window read into is not kept between collections (a window
        // of a file that grew could hold a megabyte a part for nothing, and
        // a first page each reader outside the budget).
        self.buffer = Vec::new();
        self.recharge(store);
        // The files read, by listing index.
        let mut read: Vec<Option<(usize, PathBuf)>> = Vec::with_capacity(paths.len());
        for (listed, outcome) in paths.into_iter().zip(outcomes) {
            let position = listed.position;
            match outcome.unwrap_or(Ok(())) {
                Ok(()) => {
                    read.push(Some((position, listed.path)));
                    continue;
                }
                // A missing live gauge file is normal (mark_process_dead),
                // even when named: Python skips it silently.
                Err(SkipReason::Vanished) if is_live_gauge_path(&listed.path) => {}
                Err(SkipReason::Vanished) if listed.named => problems.push((
                    position,
                    Problem {
                        path: listed.path,
                        reason: SkipReason::FileMissing,
                    },
                )),
                Err(reason) => problems.push((
                    position,
                    Problem {
                        path: listed.path,
                        reason,
                    },
                )),
            }
            read.push(None);
        }
        Read {
            files: read_files(&self.files, &self.frozen, collection, read),
            skipped: Skipped {
                directories: skipped_directories,
                listings: &self.listings,
                frozen: &self.frozen,
                epoch,
            },
            problems,
            stats,
        }
    }

    /// The steady-state fast path: whether the listed entry is the file
    /// mapped last time and was good. If so, its values (and whether it
    /// grew) are left to [`load::load_pending_values`]; if not, it must be
    /// read with [`Self::refresh`].
    fn check_mapped(&mut self, listed: &Listed, index: usize) -> bool {
        let collection = self.collections;
        if let Some(cached) = self.frozen.get_mut(listed.path.as_os_str()) {
            // A dead writer's file, still the same inode: nothing to load.
            // Its map was released, so its inode number may have gone to a
            // new file, unless the directory is unchanged since: compare
            // birth times.
            let identity = (listed.inode, listed.device);
            let same = identity == (Some(cached.inode), Some(cached.device)) && listed.unchanged
                || std::fs::metadata(&listed.path).is_ok_and(|meta| {
                    (meta.dev(), meta.ino()) == (cached.device, cached.inode)
                        && birth(&meta) == cached.born
                });
            if same {
                cached.seen_in = collection;
                cached.listed_at = index;
                return true;
            }
            self.thaw(listed.path.as_os_str());
            return false;
        }
        let (Some(inode), Some(device)) = (listed.inode, listed.device) else {
            return false;
        };
        let Some(cached) = self.files.get_mut(listed.path.as_os_str()) else {
            return false;
        };
        // Device and inode: a tmpfs or bind mount over the directory brings
        // other files with the same inode numbers. While the map is held the
        // kernel cannot give its inode number to another file of the device.
        if cached.inode != inode || cached.device != device {
            return false;
        }
        let Some(map) = &cached.map else {
            return false;
        };
        if std::mem::take(&mut cached.recheck) {
            let same = std::fs::metadata(&listed.path).is_ok_and(|meta| {
                meta.ino() == inode && usize::try_from(meta.len()).is_ok_and(|len| len >= map.len())
            });
            if !same {
                cached.map = None;
                return false;
            }
        }
        // Whether it grew is seen when its values are loaded
        // ([`load::load_pending_values`]): reading each header here would
        // wait for one cache miss per file on this thread alone.
        cached.seen_in = collection;
        cached.listed_at = index;
        cached.pending = true;
        true
    }

    /// Brings the cached state of `path` up to date; `Err` if it must be left out.
    fn refresh(
        &mut self,
        path: &Path,
        index: usize,
        store: &mut KeyStore,
        stats: &mut ReadStats,
    ) -> Result<(), SkipReason> {
        let base_name = path
            .file_name()
            .map(OsStr::to_string_lossy)
            .unwrap_or_default();
        let mut name = FileName::parse(&base_name);
        if matches!(base_name, std::borrow::Cow::Owned(_)) {
            // Not UTF-8: the name names no writer (as `writer_pid` of the
            // path's own name would find).
            name.writer_pid = None;
            name.archive = false;
        }
        // `stat` first: it follows links like `open`, rules out FIFOs and
        // directories without opening them, and tells whether the descriptor
        // kept from the last collection still belongs to this path.
        // Following no link: the path itself, opened with `O_NOFOLLOW`.
        let no_links = self.link_policy == LinkPolicy::NoLinks;
        let meta = if no_links {
            std::fs::symlink_metadata(path)
        } else {
            std::fs::metadata(path)
        }
        .map_err(io_reason)?;
        if no_links && meta.file_type().is_symlink() {
            return Err(SkipReason::LinkOutsideDirectory);
        }
        if !meta.file_type().is_file() {
            return Err(SkipReason::NotRegularFile);
        }
        // The name alone rules out another program's `app.db`: don't parse it.
        if name.metric_type.is_none() {
            return Err(SkipReason::Merge(MergeError::UnknownType {
                prefix: name.type_prefix,
            }));
        }
        let file = open_read_only(path, no_links)?;
        // The path may have been replaced since `stat`: trust the descriptor.
        let meta = file.metadata().map_err(io_reason)?;
        if !meta.file_type().is_file() {
            return Err(SkipReason::NotRegularFile);
        }
        let mut file_len = usize::try_from(meta.len()).unwrap_or(usize::MAX);

        // One read in the steady state: as much as was used last time (at least
        // a page, like Python's first read, at most a chunk), then the rest if
        // the file grew, a bounded window at a time: nothing is ever allocated
        // from what the header claims.
        let previous = self
            .files
            .get(path.as_os_str())
            .filter(|c| c.device == meta.dev() && c.inode == meta.ino())
            .map_or(0, |c| c.parsed_until);
        let first = previous.clamp(FIRST_READ, READ_CHUNK).min(file_len);
        let got = read_window(&file, &mut self.buffer, 0, first)?;
        let used = match read_used(&self.buffer[..got], file_len) {
            // A writer grew the file (and then `used`) after it was measured:
            // measure again before calling the header bad.
            Err(LayoutError::UsedBeyondFile { .. }) => {
                let grown = file.metadata().map_err(io_reason)?.len();
                file_len = usize::try_from(grown).unwrap_or(usize::MAX);
                read_used(&self.buffer[..got], file_len)
            }
            other => other,
        }
        .map_err(SkipReason::Layout)?;
        let used = used.unwrap_or(HEADER_LEN);

        // The same file as last time: device and inode, and, unless its map
        // kept the inode alive (so the number cannot have been reused), the
        // same birth (or change) time.
        let born = birth(&meta);
        let identity = (meta.dev(), meta.ino(), used);
        let (room, charged) = (self.room_at_start, self.charged_at_start);
        if self
            .over_budget
            .get(path.as_os_str())
            .is_some_and(|o| o.identity == identity && room <= o.room && charged >= o.charged)
        {
            // Skipped for the budget, unchanged since, and the budget has no
            // more room than then: not read again.
            if let Some(over) = self.over_budget.get_mut(path.as_os_str()) {
                over.collection = self.collections;
            }
            return Err(self.over_budget_reason());
        }
        let still_valid = self.files.get(path.as_os_str()).is_some_and(|c| {
            c.device == meta.dev()
                && c.inode == meta.ino()
                && (c.map.is_some() || c.born == born)
                && used >= c.parsed_until
        });
        let parsed_from = if still_valid {
            self.files
                .get(path.as_os_str())
                .map_or(HEADER_LEN, |c| c.parsed_until)
        } else {
            HEADER_LEN
        };
        // A file whose new records alone are more than the whole budget is
        // left out before it is read.
        if self
            .budget
            .as_ref()
            .is_some_and(|b| used - parsed_from > b.limit())
        {
            return Err(self.skip_over_budget(path, identity));
        }
        if !still_valid {
            let generation = self.next_generation;
            self.next_generation += 1;
            if let Some(old) = self.files.insert(
                path.as_os_str().to_os_string(),
                CachedFile {
                    device: meta.dev(),
                    born,
                    inode: meta.ino(),
                    name,
                    parsed_until: HEADER_LEN,
                    keys: Vec::new(),
                    value_offsets: Vec::new(),
                    values: Vec::new(),
                    generation,
                    values_version: 0,
                    seen_in: self.collections,
                    listed_at: index,
                    recheck: false,
                    pending: false,
                    map: None,
                },
            ) {
                self.files_bytes = self.files_bytes.saturating_sub(old.heap_bytes());
            }
        }
        let over_budget = self.over_budget_reason();
        let cached = self
            .files
            .get_mut(path.as_os_str())
            .ok_or(SkipReason::Vanished)?;
        cached.seen_in = self.collections;
        cached.listed_at = index;
        let old_records = cached.keys.len();

        // Scan the new records, a window at a time. Every window starts at a
        // record boundary and holds at least that record.
        let mut new_keys = Vec::new();
        let mut new_offsets = Vec::new();
        let mut new_values = Vec::new();
        let mut locations = Vec::new();
        let mut window = (0, got.min(used));
        let mut pos = cached.parsed_until;
        let mut read_bytes = got;
        // The store's size at the last check of the budget (never: none).
        let mut checked_keys = usize::MAX;
        // What the store holds before this file's new keys: a file left
        // out takes its keys back out.
        let mark = store.mark();
        let mut failure = None;
        let mut stalled = false;
        while pos < used {
            // A new window when `pos` left the current one, or when the
            // record at `pos` does not fit in it.
            if stalled || pos < window.0 || pos >= window.0 + window.1 {
                let mut len = READ_CHUNK.min(used - pos);
                if stalled {
                    // The record at `pos` is larger than a chunk: a window
                    // of its own length (its length field read first).
                    if read_window(&file, &mut self.buffer, pos, 4.min(used - pos))? == 4 {
                        let field = [
                            self.buffer[0],
                            self.buffer[1],
                            self.buffer[2],
                            self.buffer[3],
                        ];
                        if let Some(record) = record_len(field) {
                            len = len.max(record.min(used - pos));
                        }
                    }
                }
                // The merge of the keys interned since the last one grows
                // the store: reserved now, so that what is charged after
                // the merge stays within the budget.
                let unmerged = store.merge_reserve();
                let held = new_keys.len() * RECORD_BYTES + len + unmerged;
                if !within_budget(
                    self.budget.as_deref(),
                    self.charged,
                    store,
                    self.files_bytes + held,
                ) {
                    failure = Some(over_budget.clone());
                    break;
                }
                let n = read_window(&file, &mut self.buffer, pos, len)?;
                read_bytes += n;
                if n < len {
                    // Truncated while it was read.
                    failure = Some(SkipReason::Layout(LayoutError::UsedBeyondFile {
                        used,
                        len: pos + n,
                    }));
                    break;
                }
                window = (pos, n);
            }
            let data = &self.buffer[..window.1];
            let scanned = scan_window(data, window.0, pos, used, &mut locations);
            let in_window = locations.len();
            for (n, location) in locations.drain(..).enumerate() {
                let key_at = location.key_offset - window.0;
                let raw = &data[key_at..key_at + location.key_len];
                // Before a key that may be new is interned (the first record,
                // and each one after a new key), the store's growth is
                // checked: a window's records cost several times its bytes
                // (issue 53: checked once per window, the charge passed the
                // budget by the cost of a whole window).
                if self.budget.is_some() && store.len() != checked_keys {
                    checked_keys = store.len();
                    let unmerged = store.merge_reserve();
                    // Every record left in the window is held too, new key
                    // or not.
                    let held = (new_keys.len() + in_window - n) * RECORD_BYTES
                        + window.1
                        + unmerged
                        + NEXT_KEY_BYTES
                        + raw.len() * 3
                        + store.growth_bytes();
                    if !within_budget(
                        self.budget.as_deref(),
                        self.charged,
                        store,
                        self.files_bytes + held,
                    ) {
                        failure = Some(over_budget.clone());
                        break;
                    }
                }
                // A view's reader leaves out the families it does not serve
                // before their keys are interned: its key store holds only
                // the view's keys, and their values are never loaded.
                let interned = match &self.key_filter {
                    Some(filter) => store.intern_kept(raw, |family| filter.keeps(family)),
                    None => store.intern(raw).map(Some),
                };
                match interned {
                    Ok(None) => {}
                    Ok(Some(id)) => {
                        new_keys.push(id);
                        new_offsets.push(location.value_offset as u32);
                        new_values.push(read_value(data, location.value_offset - window.0));
                    }
                    Err(e) => {
                        failure = Some(SkipReason::Key(e));
                        break;
                    }
                }
            }
            match scanned {
                _ if failure.is_some() => break,
                Err(e) => {
                    failure = Some(SkipReason::Layout(e));
                    break;
                }
                Ok(stop) => {
                    if stalled && stop == pos {
                        // A fresh window holds the whole record yet nothing
                        // was scanned: cannot happen; never loop on it.
                        failure = Some(SkipReason::Layout(LayoutError::RecordPastUsed {
                            offset: pos,
                            len: 0,
                            used,
                        }));
                        break;
                    }
                    stalled = stop == pos;
                    pos = stop;
                }
            }
        }
        stats.bytes_read += read_bytes as u64;
        // Not remembered: the same bytes are checked again (at once by
        // `refresh_settled`, for record bytes that became visible after
        // their `used` on a weakly ordered CPU; next time, for a file
        // repaired in place).
        if failure.is_some() {
            // Its keys interned so far are never merged (issue 53: kept,
            // they were charged for nothing and kept a cut source cut).
            store.truncate(mark);
        }
        match failure {
            Some(SkipReason::OverMemoryBudget { .. }) => {
                return Err(self.skip_over_budget(path, identity))
            }
            Some(reason) => return Err(reason),
            None => {}
        }
        let before = cached.heap_bytes();
        if !new_keys.is_empty() {
            cached.keys.extend(new_keys);
            cached.value_offsets.extend(new_offsets);
            cached.parsed_until = used;
            cached.generation = self.next_generation;
            self.next_generation += 1;
        }
        cached.parsed_until = cached.parsed_until.max(used);
        // Only the used bytes: fault-around never brings the unused tail in.
        let map_len = used.min(file_len);
        if cached.map.as_ref().is_none_or(|m| m.len() != map_len) {
            cached.map = MappedFile::new(&file, map_len);
        }
        // The values of the records read before: from the first read when it
        // holds them (read again if a later window replaced it), else from
        // the map, else read again a window at a time.
        cached.values.clear();
        cached.values_version = cached.values_version.wrapping_add(1);
        let old_offsets = &cached.value_offsets[..old_records];
        let first_len = got.min(used);
        if old_offsets
            .last()
            .is_none_or(|&last| last as usize + VALUE_LEN <= first_len)
        {
            if window.0 != 0 {
                read_window(&file, &mut self.buffer, 0, first_len)?;
            }
            let data = &self.buffer;
            if old_offsets
                .last()
                .is_some_and(|&last| last as usize + VALUE_LEN > data.len())
            {
                return Err(SkipReason::Layout(LayoutError::UsedBeyondFile {
                    used,
                    len: data.len(),
                }));
            }
            cached
                .values
                .extend(old_offsets.iter().map(|&o| read_value(data, o as usize)));
        } else {
            let loaded = cached
                .map
                .as_ref()
                .and_then(|map| map.load_values(old_offsets, &mut cached.values));
            if !matches!(loaded, Some(Ok(_))) {
                cached.values.clear();
                read_values(&file, &mut self.buffer, old_offsets, &mut cached.values)?;
            }
        }
        cached.values.extend(new_values);
        if self.buffer.capacity() > READ_CHUNK {
            // A record larger than a chunk was read: give the memory back.
            self.buffer = Vec::new();
        }
        self.files_bytes = (self.files_bytes + cached.heap_bytes()).saturating_sub(before);
        Ok(())
    }

    /// Remembers that `path` (`identity`: device, inode, used) was skipped
    /// for the budget, forgets what was read of it, and returns the reason.
    fn skip_over_budget(&mut self, path: &Path, identity: (u64, u64, usize)) -> SkipReason {
        if let Some(old) = self.files.remove(path.as_os_str()) {
            self.files_bytes = self.files_bytes.saturating_sub(old.heap_bytes());
        }
        self.over_budget.insert(
            path.as_os_str().to_os_string(),
            OverBudget {
                identity,
                room: self.room_at_start,
                charged: self.charged_at_start,
                collection: self.collections,
            },
        );
        self.over_budget_reason()
    }

    fn over_budget_reason(&self) -> SkipReason {
        SkipReason::OverMemoryBudget {
            limit: self.budget.as_ref().map_or(0, |b| b.limit()),
        }
    }
}

/// Estimated bytes of the merge plan per record.
const PLAN_BYTES_PER_RECORD: usize = 24;

/// What a key interned next may cost besides its raw bytes (counted
/// three times: its strings, its label pairs, its output labels) and the
/// store's growth: the strings' and tuples' headers, the tables' entries,
/// and the overhead of the file it is in, not counted until it is read.
const NEXT_KEY_BYTES: usize = 1024;

/// Estimated bytes held per record: its key id, value offset and value in
/// the reader, and its share of the merge plan.
const RECORD_BYTES: usize = 4 + 4 + 16 + PLAN_BYTES_PER_RECORD;

/// What `store` holds for the records read: its estimate less an empty
/// store's (a source's fixed cost, like the reader itself, is not charged:
/// a budget smaller than the sources' fixed costs would be passed before
/// anything is read).
fn records_bytes(store: &KeyStore) -> usize {
    static EMPTY: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let empty = *EMPTY.get_or_init(|| KeyStore::new().approx_bytes());
    store.approx_bytes().saturating_sub(empty)
}

/// Whether a reader that charged `charged` to `budget` may hold `held`
/// bytes besides what `store` holds.
fn within_budget(
    budget: Option<&MemoryBudget>,
    charged: usize,
    store: &KeyStore,
    held: usize,
) -> bool {
    budget.is_none_or(|b| b.allows(charged, records_bytes(store) + held))
}

mod file_io;
mod load;
mod ordering;
mod skipped;

use skipped::read_files;
pub use skipped::{SkipToken, Skipped};

#[cfg(test)]
mod tests;
