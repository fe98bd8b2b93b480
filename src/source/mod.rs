//! Reading metric files from disk, incrementally, into merged families.
//!
//! A [`Reader`] keeps, for every file it has seen, the keys of its records and
//! where their values live. On each [`Reader::collect`] it lists the inputs in
//! `readdir` order (as Python's `glob` does), reads each file's used bytes
//! with one positioned read, decodes only records appended since the last
//! call, reuses the previous merge plan when no file was added, removed,
//! replaced or extended, and evaluates the merge on the current values.
//!
//! A file is read whole with `pread` the first time and whenever it grew;
//! after that it stays mapped read-only (`source::mapped`, which also guards
//! against files that shrink under the map), so reading an unchanged file
//! costs no system call at all: the listing's inode number (from `readdir`)
//! tells that the path still names the same file, and the `used` header and
//! the values are loaded straight from the map. Files are opened read-only and
//! non-blocking (a FIFO named `*.db` cannot stall a scrape), and anything that
//! is not a regular file is skipped. A file that cannot be read or parsed is
//! left out whole and reported as a [`Problem`]; everything else is merged as
//! prometheus_client would merge it without that file. Symbolic links are
//! followed according to a [`LinkPolicy`] (by default only links that stay
//! inside the directory, see [`crate::source::link_policy`]).

pub mod link_policy;
mod mapped;

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

use crate::format::file_name::{is_listed_name, FileName};
use crate::format::key::KeyError;
use crate::format::layout::{
    read_used, read_value, scan_records, LayoutError, HEADER_LEN, VALUE_LEN,
};
use crate::merge::{plan, KeyId, KeyStore, MergeError, MergePlan, PlanInput};
use crate::model::MetricFamily;
use crate::source::link_policy::{LinkCheck, LinkPolicy};
use crate::source::mapped::MappedFile;

/// Bytes read at least on a file's first read (Python reads one page first).
const FIRST_READ: usize = 4096;

/// An input to read: a directory (its `*.db` entries, in `readdir` order) or
/// one file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Input {
    /// A metrics directory (`PROMETHEUS_MULTIPROC_DIR`).
    Directory(PathBuf),
    /// A single `.db` file.
    File(PathBuf),
}

impl Input {
    /// A directory input if `path` is a directory now, else a file input.
    pub fn detect(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if path.is_dir() {
            Self::Directory(path)
        } else {
            Self::File(path)
        }
    }

    /// The path of this input.
    pub fn path(&self) -> &Path {
        match self {
            Self::Directory(p) | Self::File(p) => p,
        }
    }
}

/// Why a file or directory was skipped. The label is stable and used as a
/// metric label value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// The directory does not exist (yet).
    DirectoryMissing,
    /// The directory exists but cannot be listed.
    DirectoryUnreadable(String),
    /// The path does not exist (a file named on the command line, or a file
    /// deleted between listing and reading).
    Vanished,
    /// Opening or reading failed with permission denied.
    PermissionDenied,
    /// Not a regular file (a directory, FIFO, socket or device named `*.db`).
    NotRegularFile,
    /// A symbolic link whose target is outside the metrics directory (not
    /// followed unless the [`LinkPolicy`] allows it).
    LinkOutsideDirectory,
    /// A symbolic link that resolves to itself (too many levels of links).
    LinkLoop,
    /// Any other I/O error.
    Io(String),
    /// The bytes do not follow the file layout.
    Layout(LayoutError),
    /// A record key does not decode.
    Key(KeyError),
    /// The file cannot be merged (unknown type, bad bucket bound, ...).
    Merge(MergeError),
}

impl SkipReason {
    /// A short, stable label for metrics (`reason="..."`).
    pub fn label(&self) -> &'static str {
        match self {
            Self::DirectoryMissing => "directory_missing",
            Self::DirectoryUnreadable(_) => "directory_unreadable",
            Self::Vanished => "vanished",
            Self::PermissionDenied => "permission_denied",
            Self::NotRegularFile => "not_regular_file",
            Self::LinkOutsideDirectory => "link_outside_directory",
            Self::LinkLoop => "link_loop",
            Self::Io(_) => "io_error",
            Self::Layout(LayoutError::ShorterThanHeader { .. }) => "short_file",
            Self::Layout(
                LayoutError::UsedBelowHeader { .. } | LayoutError::UsedBeyondFile { .. },
            ) => "bad_header",
            Self::Layout(
                LayoutError::NegativeKeyLength { .. } | LayoutError::RecordPastUsed { .. },
            ) => "bad_record",
            Self::Key(KeyError::NotUtf8) => "key_not_utf8",
            Self::Key(KeyError::NotJson { .. }) => "key_not_json",
            Self::Key(KeyError::WrongShape { .. } | KeyError::EmptyFamily) => "key_bad_shape",
            Self::Merge(MergeError::UnknownType { .. }) => "unknown_type",
            Self::Merge(MergeError::GaugeNameWithoutPid) => "bad_file_name",
            Self::Merge(MergeError::InvalidBucketBound { .. }) => "bad_bucket_bound",
        }
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DirectoryMissing => f.write_str("directory does not exist"),
            Self::DirectoryUnreadable(e) => write!(f, "directory cannot be listed: {e}"),
            Self::Vanished => f.write_str("file does not exist (deleted before it could be read)"),
            Self::PermissionDenied => f.write_str("permission denied"),
            Self::NotRegularFile => f.write_str("not a regular file"),
            Self::LinkOutsideDirectory => f.write_str(
                "symbolic link to a path outside the metrics directory (not followed without --dir.follow-links-outside)",
            ),
            Self::LinkLoop => f.write_str("symbolic link loop (too many levels of symbolic links)"),
            Self::Io(e) => write!(f, "read error: {e}"),
            Self::Layout(e) => write!(f, "corrupt file: {e}"),
            Self::Key(e) => write!(f, "corrupt record: {e}"),
            Self::Merge(e) => write!(f, "cannot merge: {e}"),
        }
    }
}

/// A path left out of a collection, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file or directory.
    pub path: PathBuf,
    /// Why it was left out.
    pub reason: SkipReason,
}

/// Counters describing one collection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectStats {
    /// Input directories that exist.
    pub directories_present: usize,
    /// Input directories that do not exist.
    pub directories_missing: usize,
    /// Input directories that exist but cannot be listed.
    pub directories_unreadable: usize,
    /// Files listed (after the `*.db` filter) or named.
    pub files_listed: usize,
    /// Files merged.
    pub files_merged: usize,
    /// Records merged.
    pub records: usize,
    /// Bytes read from files.
    pub bytes_read: u64,
    /// Keys decoded in this collection (0 when nothing was appended).
    pub keys_decoded: usize,
    /// Whether the merge had to be re-planned.
    pub replanned: bool,
}

/// The result of one collection.
#[derive(Debug, Clone, Default)]
pub struct Collection {
    /// Merged families in prometheus_client's order.
    pub families: Vec<MetricFamily>,
    /// Paths left out, in listing order.
    pub problems: Vec<Problem>,
    /// Counters.
    pub stats: CollectStats,
}

/// What is remembered about one file between collections.
#[derive(Debug)]
struct CachedFile {
    device: u64,
    inode: u64,
    name: FileName,
    /// Offset where record scanning stopped.
    parsed_until: usize,
    keys: Vec<KeyId>,
    value_offsets: Vec<u32>,
    values: Vec<(f64, f64)>,
    /// Changes whenever `keys` changes; identifies the file's structure.
    generation: u64,
    /// Seen in the current collection.
    seen: bool,
    /// Check the path with `stat` before trusting the map again.
    recheck: bool,
    /// Its values are to be loaded from the map in this collection.
    pending: bool,
    /// The file mapped read-only (within the process-wide budget of maps),
    /// so that a steady-state read is a few loads and no system call.
    map: Option<MappedFile>,
}

/// A file to read, as listed.
#[derive(Debug)]
struct Listed {
    path: PathBuf,
    /// The inode number `readdir` gave for an entry that is a regular file
    /// (not a link), which identifies the file without a `stat`.
    inode: Option<u64>,
}

/// Reads inputs incrementally and merges them; keep one per set of inputs.
#[derive(Debug, Default)]
pub struct Reader {
    store: KeyStore,
    /// Keyed by path bytes (hashing a `Path` walks its components).
    files: FxHashMap<OsString, CachedFile>,
    next_generation: u64,
    plan: Option<(Vec<u64>, MergePlan)>,
    plan_problems: Vec<(u64, MergeError)>,
    buffer: Vec<u8>,
    /// Which symbolic links in a directory are followed.
    link_policy: LinkPolicy,
    /// Directory listings, reused while a directory is unchanged.
    listings: FxHashMap<PathBuf, CachedListing>,
}

impl Reader {
    /// A reader with nothing cached.
    pub fn new() -> Self {
        Self::default()
    }

    /// A reader with nothing cached that follows symbolic links in a
    /// directory according to `policy`.
    pub fn with_link_policy(policy: LinkPolicy) -> Self {
        Self {
            link_policy: policy,
            ..Self::default()
        }
    }

    /// Number of distinct record keys decoded so far.
    pub fn keys_decoded(&self) -> usize {
        self.store.len()
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
        if let Some(cached) = self.files.get_mut(path.as_os_str()) {
            cached.recheck = true;
        }
    }

    /// [`Self::recheck`] for every file (the server calls it on its periodic
    /// rescan, for file systems that deliver no events).
    pub fn recheck_all(&mut self) {
        for cached in self.files.values_mut() {
            cached.recheck = true;
        }
        self.listings.clear();
    }

    /// Lists, reads and merges `inputs` (in order; directories expanded in
    /// `readdir` order in place).
    pub fn collect(&mut self, inputs: &[Input]) -> Collection {
        let mut stats = CollectStats::default();
        let mut problems = Vec::new();
        let paths = list_inputs(
            inputs,
            self.link_policy,
            &mut self.listings,
            &mut stats,
            &mut problems,
        );
        stats.files_listed = paths.len();
        let keys_before = self.store.len();
        for cached in self.files.values_mut() {
            cached.seen = false;
        }

        // Read every listed file: unchanged mapped files only have their
        // values loaded (all together, below); the others are read now.
        let mut outcomes: Vec<Option<Result<(), SkipReason>>> = Vec::with_capacity(paths.len());
        for listed in &paths {
            outcomes.push(if self.check_mapped(listed) {
                None
            } else {
                Some(self.refresh(&listed.path, &mut stats))
            });
        }
        if self.load_pending_values(&mut stats) {
            // Some file shrank under its map: read those from the file.
            for (listed, outcome) in paths.iter().zip(outcomes.iter_mut()) {
                let unloaded = outcome.is_none()
                    && self
                        .files
                        .get(listed.path.as_os_str())
                        .is_none_or(|c| c.map.is_none());
                if unloaded {
                    *outcome = Some(self.refresh(&listed.path, &mut stats));
                }
            }
        }

        // Remember which files can take part.
        let mut merged: Vec<&Path> = Vec::with_capacity(paths.len());
        let mut merged_positions: Vec<usize> = Vec::with_capacity(paths.len());
        for (position, (listed, outcome)) in paths.iter().zip(outcomes).enumerate() {
            let path = &listed.path;
            match outcome.unwrap_or(Ok(())) {
                Ok(()) => {
                    merged.push(path);
                    merged_positions.push(position);
                }
                Err(reason) => {
                    // A missing live gauge file is normal (mark_process_dead); Python skips it silently.
                    let silent = reason == SkipReason::Vanished && is_live_gauge_path(path);
                    if !silent {
                        problems.push((
                            position,
                            Problem {
                                path: path.clone(),
                                reason,
                            },
                        ));
                    }
                }
            }
        }
        self.files.retain(|_, cached| cached.seen);
        let files = &self.files;
        let merged_files: Vec<&CachedFile> = merged
            .iter()
            .filter_map(|p| files.get(p.as_os_str()))
            .collect();
        debug_assert_eq!(merged_files.len(), merged.len());

        // Re-plan only when the structure changed.
        let signature: Vec<u64> = merged_files.iter().map(|c| c.generation).collect();
        let reuse = matches!(&self.plan, Some((previous, _)) if *previous == signature);
        if !reuse {
            let inputs: Vec<PlanInput<'_>> = merged_files
                .iter()
                .map(|cached| PlanInput {
                    name: &cached.name,
                    keys: &cached.keys,
                })
                .collect();
            let planned = plan(&mut self.store, &inputs, true);
            self.plan_problems = planned
                .excluded
                .into_iter()
                .map(|(i, e)| (signature[i], e))
                .collect();
            self.plan = Some((signature.clone(), planned.plan));
            stats.replanned = true;
        }
        for (generation, error) in &self.plan_problems {
            if let Some(i) = signature.iter().position(|g| g == generation) {
                problems.push((
                    merged_positions[i],
                    Problem {
                        path: merged[i].to_path_buf(),
                        reason: SkipReason::Merge(error.clone()),
                    },
                ));
            }
        }
        problems.sort_by_key(|(position, _)| *position);

        let mut families = Vec::new();
        if let Some((_, plan)) = &self.plan {
            for &i in plan.files() {
                stats.files_merged += 1;
                stats.records += merged_files[i].values.len();
            }
            families = plan
                .evaluate(|i| merged_files[i].values.as_slice())
                .unwrap_or_default();
        }
        stats.keys_decoded = self.store.len() - keys_before;
        Collection {
            families,
            problems: problems.into_iter().map(|(_, p)| p).collect(),
            stats,
        }
    }

    /// The steady-state fast path: whether the listed entry is the file
    /// mapped last time, has not grown and was good. If so, its values are
    /// left to [`Self::load_pending_values`]; if not, it must be read with
    /// [`Self::refresh`].
    fn check_mapped(&mut self, listed: &Listed) -> bool {
        let Some(inode) = listed.inode else {
            return false;
        };
        let Some(cached) = self.files.get_mut(listed.path.as_os_str()) else {
            return false;
        };
        if cached.inode != inode {
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
        let used = match map.load_i32(0) {
            Some(Ok(0)) => HEADER_LEN,
            Some(Ok(used)) => usize::try_from(used).unwrap_or(0),
            Some(Err(_)) | None => 0,
        };
        if used != cached.parsed_until || used > map.len() {
            // Grown, shrunk or corrupt: read it again from the file.
            cached.map = None;
            return false;
        }
        cached.seen = true;
        cached.pending = true;
        true
    }

    /// Loads the values of every file [`Self::check_mapped`] accepted, from
    /// their maps. The loads are memory-bound (each value sits on its own
    /// cache line), so a large directory is split between two threads, which
    /// halves the wait when a second core is free. A file whose map faults
    /// (it shrank) loses its map; the caller reads it from the file. Returns
    /// whether that happened to any file.
    fn load_pending_values(&mut self, stats: &mut CollectStats) -> bool {
        let mut pending: Vec<&mut CachedFile> = self
            .files
            .values_mut()
            .filter_map(|c| std::mem::take(&mut c.pending).then_some(c))
            .collect();
        let total: usize = pending.iter().map(|c| c.value_offsets.len()).sum();
        stats.bytes_read += pending
            .iter()
            .map(|c| (HEADER_LEN + c.value_offsets.len() * VALUE_LEN) as u64)
            .sum::<u64>();
        if total >= PARALLEL_LOAD_VALUES && available_cores() > 1 {
            // Split where half of the values are.
            let mut seen = 0;
            let split = pending
                .iter()
                .position(|c| {
                    seen += c.value_offsets.len();
                    seen * 2 >= total
                })
                .map_or(pending.len(), |i| i + 1);
            let (first, second) = pending.split_at_mut(split);
            // The helper thread takes `second` through a lock, so that this
            // thread can still load it if the thread cannot start or panics.
            let second = std::sync::Mutex::new(second);
            let done = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|scope| {
                let helper = std::thread::Builder::new()
                    .name("multiproc-exporter-load".into())
                    .spawn_scoped(scope, || {
                        let mut second = second.lock().unwrap_or_else(|e| e.into_inner());
                        load_values(&mut second);
                        done.store(true, std::sync::atomic::Ordering::Release);
                    });
                load_values(first);
                if let Ok(handle) = helper {
                    let _ = handle.join();
                }
            });
            if !done.load(std::sync::atomic::Ordering::Acquire) {
                let mut second = second.lock().unwrap_or_else(|e| e.into_inner());
                load_values(&mut second);
            }
        } else {
            load_values(&mut pending);
        }
        pending.iter().any(|c| c.map.is_none())
    }

    /// Brings the cached state of `path` up to date; `Err` if it must be left out.
    fn refresh(&mut self, path: &Path, stats: &mut CollectStats) -> Result<(), SkipReason> {
        let base_name = path
            .file_name()
            .map(OsStr::to_string_lossy)
            .unwrap_or_default();
        let name = FileName::parse(&base_name);
        // `stat` first: it follows links like `open`, rules out FIFOs and
        // directories without opening them, and tells whether the descriptor
        // kept from the last collection still belongs to this path.
        let meta = std::fs::metadata(path).map_err(io_reason)?;
        if !meta.file_type().is_file() {
            return Err(SkipReason::NotRegularFile);
        }
        // The name alone rules out another program's `app.db`: don't parse it.
        if name.metric_type.is_none() {
            return Err(SkipReason::Merge(MergeError::UnknownType {
                prefix: name.type_prefix,
            }));
        }
        let file = open_read_only(path)?;
        // The path may have been replaced since `stat`: trust the descriptor.
        let meta = file.metadata().map_err(io_reason)?;
        if !meta.file_type().is_file() {
            return Err(SkipReason::NotRegularFile);
        }
        let mut file_len = usize::try_from(meta.len()).unwrap_or(usize::MAX);

        // One read in the steady state: as much as was used last time (at least
        // a page, like Python's first read), then the rest if the file grew.
        let previous = self
            .files
            .get(path.as_os_str())
            .filter(|c| c.device == meta.dev() && c.inode == meta.ino())
            .map_or(0, |c| c.parsed_until);
        let first = previous.max(FIRST_READ).min(file_len);
        self.buffer.resize(first, 0);
        let mut got = read_fully_at(&file, &mut self.buffer[..first], 0).map_err(io_reason)?;
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
        if used > got {
            self.buffer.resize(used, 0);
            got +=
                read_fully_at(&file, &mut self.buffer[got..used], got as u64).map_err(io_reason)?;
        }
        stats.bytes_read += got as u64;
        if got < used {
            // Truncated between fstat and read.
            return Err(SkipReason::Layout(LayoutError::UsedBeyondFile {
                used,
                len: got,
            }));
        }

        let still_valid = self.files.get(path.as_os_str()).is_some_and(|c| {
            c.device == meta.dev() && c.inode == meta.ino() && used >= c.parsed_until
        });
        if !still_valid {
            let generation = self.next_generation;
            self.next_generation += 1;
            self.files.insert(
                path.as_os_str().to_os_string(),
                CachedFile {
                    device: meta.dev(),
                    inode: meta.ino(),
                    name,
                    parsed_until: HEADER_LEN,
                    keys: Vec::new(),
                    value_offsets: Vec::new(),
                    values: Vec::new(),
                    generation,
                    seen: true,
                    recheck: false,
                    pending: false,
                    map: None,
                },
            );
        }
        let cached = self
            .files
            .get_mut(path.as_os_str())
            .ok_or(SkipReason::Vanished)?;
        cached.seen = true;

        let data = &self.buffer[..used];

        if used > cached.parsed_until {
            let mut locations = Vec::new();
            let scanned = scan_records(data, cached.parsed_until, used, &mut locations);
            let mut new_keys = Vec::with_capacity(locations.len());
            let mut failure = scanned.err().map(SkipReason::Layout);
            if failure.is_none() {
                for location in &locations {
                    match self.store.intern(location.key(data)) {
                        Ok(id) => new_keys.push(id),
                        Err(e) => {
                            failure = Some(SkipReason::Key(e));
                            break;
                        }
                    }
                }
            }
            // Not remembered: the same bytes are checked again next time, so
            // a file repaired in place (or whose record bytes became visible
            // after its `used`, on a weakly ordered CPU) is read again.
            if let Some(reason) = failure {
                return Err(reason);
            }
            cached.keys.extend(new_keys);
            cached
                .value_offsets
                .extend(locations.iter().map(|l| l.value_offset as u32));
            cached.parsed_until = used;
            cached.generation = self.next_generation;
            self.next_generation += 1;
        }
        if cached.map.as_ref().is_none_or(|m| m.len() != file_len) {
            cached.map = MappedFile::new(&file, file_len);
        }
        cached.values.clear();
        cached.values.extend(
            cached
                .value_offsets
                .iter()
                .map(|&offset| read_value(data, offset as usize)),
        );
        Ok(())
    }
}

fn is_live_gauge_path(path: &Path) -> bool {
    path.file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|name| FileName::parse(name).is_live_gauge())
}

/// Values above which [`Reader::load_pending_values`] uses two threads (about
/// 150 vLLM processes; below, a thread costs more than it saves).
const PARALLEL_LOAD_VALUES: usize = 1 << 16;

/// The number of cores this process may run on, read once.
fn available_cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Loads the values of `files` from their maps; a file whose map faults
/// loses it (and its values).
fn load_values(files: &mut [&mut CachedFile]) {
    for cached in files.iter_mut() {
        let cached = &mut **cached;
        let loaded = cached
            .map
            .as_ref()
            .and_then(|map| map.load_values(&cached.value_offsets, &mut cached.values));
        if loaded != Some(Ok(())) {
            cached.map = None;
            cached.values.clear();
        }
    }
}

/// A directory's `*.db` entries as last listed.
#[derive(Debug)]
struct CachedListing {
    device: u64,
    inode: u64,
    modified: (i64, i64),
    entries: Vec<ListedEntry>,
}

/// One entry of a [`CachedListing`].
#[derive(Debug)]
struct ListedEntry {
    path: PathBuf,
    /// The inode number of a regular file (see [`Listed::inode`]).
    inode: Option<u64>,
    is_link: bool,
}

/// How long a directory must have been unchanged before its listing is
/// reused: file-system timestamps advance in ticks (a few milliseconds), so
/// an entry added in the same tick as the last change could leave the
/// modification time as it was. Once the last change is older than this when
/// the directory is listed, any later change gives a new modification time.
const LISTING_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Expands inputs into the ordered list of files to read.
///
/// A directory whose identity and modification time are those of its last
/// listing, made when its last change was already [`LISTING_SETTLE`] old, is
/// not listed again: one `stat` replaces reading every entry (adding,
/// removing or renaming an entry always changes the directory's modification
/// time). Links are checked against the policy on every call.
fn list_inputs(
    inputs: &[Input],
    link_policy: LinkPolicy,
    listings: &mut FxHashMap<PathBuf, CachedListing>,
    stats: &mut CollectStats,
    problems: &mut Vec<(usize, Problem)>,
) -> Vec<Listed> {
    let mut paths = Vec::new();
    listings.retain(|dir, _| inputs.iter().any(|i| i.path() == dir));
    for input in inputs {
        let dir = match input {
            Input::File(path) => {
                paths.push(Listed {
                    path: path.clone(),
                    inode: None,
                });
                continue;
            }
            Input::Directory(dir) => dir,
        };
        let listed_at = std::time::SystemTime::now();
        let identity = std::fs::metadata(dir)
            .ok()
            .filter(|m| m.is_dir())
            .map(|m| (m.dev(), m.ino(), (m.mtime(), m.mtime_nsec())));
        let unchanged = identity.is_some_and(|(device, inode, modified)| {
            listings
                .get(dir)
                .is_some_and(|l| l.device == device && l.inode == inode && l.modified == modified)
        });
        if !unchanged {
            listings.remove(dir);
            let Some(entries) = read_directory(dir, stats, problems, paths.len()) else {
                continue;
            };
            let settled = identity.filter(|(_, _, (secs, nanos))| {
                let modified = u64::try_from(*secs).ok().map(|secs| {
                    std::time::UNIX_EPOCH
                        + std::time::Duration::new(secs, u32::try_from(*nanos).unwrap_or(0))
                });
                modified.is_some_and(|m| m + LISTING_SETTLE <= listed_at)
            });
            let listing = CachedListing {
                device: identity.map_or(0, |i| i.0),
                inode: identity.map_or(0, |i| i.1),
                modified: identity.map_or((0, 0), |i| i.2),
                entries,
            };
            if settled.is_none() {
                push_listing(&listing, dir, link_policy, &mut paths, problems);
                continue;
            }
            listings.insert(dir.clone(), listing);
        } else {
            stats.directories_present += 1;
        }
        if let Some(listing) = listings.get(dir) {
            push_listing(listing, dir, link_policy, &mut paths, problems);
        }
    }
    paths
}

/// Lists the `*.db` entries of `dir` in `readdir` order, or reports why it
/// cannot (at `position` in the problems).
fn read_directory(
    dir: &Path,
    stats: &mut CollectStats,
    problems: &mut Vec<(usize, Problem)>,
    position: usize,
) -> Option<Vec<ListedEntry>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            stats.directories_present += 1;
            let mut listed = Vec::new();
            for entry in entries.flatten() {
                let name = entry.file_name();
                if !name.to_str().is_some_and(is_listed_name) {
                    continue;
                }
                // `file_type` comes from `readdir` (no `stat`) on the file
                // systems metrics live on.
                let file_type = entry.file_type().ok();
                listed.push(ListedEntry {
                    path: entry.path(),
                    inode: file_type.is_some_and(|t| t.is_file()).then(|| entry.ino()),
                    is_link: file_type.is_some_and(|t| t.is_symlink()),
                });
            }
            Some(listed)
        }
        Err(e) => {
            let reason = if e.kind() == io::ErrorKind::NotFound {
                stats.directories_missing += 1;
                SkipReason::DirectoryMissing
            } else {
                stats.directories_unreadable += 1;
                SkipReason::DirectoryUnreadable(e.to_string())
            };
            problems.push((
                position,
                Problem {
                    path: dir.to_path_buf(),
                    reason,
                },
            ));
            None
        }
    }
}

/// Appends a listing's entries to `paths`, leaving out (and reporting) links
/// that the policy does not follow.
fn push_listing(
    listing: &CachedListing,
    dir: &Path,
    link_policy: LinkPolicy,
    paths: &mut Vec<Listed>,
    problems: &mut Vec<(usize, Problem)>,
) {
    let mut links = LinkCheck::new(dir, link_policy);
    for entry in &listing.entries {
        let allowed = if entry.is_link {
            links.check(&entry.path)
        } else {
            Ok(())
        };
        match allowed {
            Ok(()) => paths.push(Listed {
                path: entry.path.clone(),
                inode: entry.inode,
            }),
            Err(reason) => problems.push((
                paths.len(),
                Problem {
                    path: entry.path.clone(),
                    reason,
                },
            )),
        }
    }
}

fn open_read_only(path: &Path) -> Result<File, SkipReason> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io_reason)
}

fn io_reason(e: io::Error) -> SkipReason {
    match e.kind() {
        io::ErrorKind::NotFound => SkipReason::Vanished,
        io::ErrorKind::PermissionDenied => SkipReason::PermissionDenied,
        _ if e.raw_os_error() == Some(libc::EISDIR) => SkipReason::NotRegularFile,
        _ if e.raw_os_error() == Some(libc::ELOOP) => SkipReason::LinkLoop,
        _ => SkipReason::Io(e.to_string()),
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_fully_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
