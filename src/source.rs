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
//! after that it stays mapped read-only ([`crate::mapped`], which also guards
//! against files that shrink under the map), so reading an unchanged file
//! costs no system call at all: the listing's inode number (from `readdir`)
//! tells that the path still names the same file, and the `used` header and
//! the values are loaded straight from the map. Files are opened read-only and
//! non-blocking (a FIFO named `*.db` cannot stall a scrape), and anything that
//! is not a regular file is skipped. A file that cannot be read or parsed is
//! left out whole and reported as a [`Problem`]; everything else is merged as
//! prometheus_client would merge it without that file. Symbolic links are
//! followed according to a [`LinkPolicy`] (by default only links that stay
//! inside the directory, see [`crate::link_policy`]).

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

use crate::file_name::{is_listed_name, FileName};
use crate::key::KeyError;
use crate::layout::{read_used, read_value, scan_records, LayoutError, HEADER_LEN, VALUE_LEN};
use crate::link_policy::{LinkCheck, LinkPolicy};
use crate::mapped::MappedFile;
use crate::merge::{plan, KeyId, KeyStore, MergeError, MergePlan, PlanInput};
use crate::model::MetricFamily;

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
    }

    /// Lists, reads and merges `inputs` (in order; directories expanded in
    /// `readdir` order in place).
    pub fn collect(&mut self, inputs: &[Input]) -> Collection {
        let mut stats = CollectStats::default();
        let mut problems = Vec::new();
        let paths = list_inputs(inputs, self.link_policy, &mut stats, &mut problems);
        stats.files_listed = paths.len();
        let keys_before = self.store.len();
        for cached in self.files.values_mut() {
            cached.seen = false;
        }

        // Read every listed file; remember which ones can take part.
        let mut merged: Vec<&Path> = Vec::with_capacity(paths.len());
        let mut merged_positions: Vec<usize> = Vec::with_capacity(paths.len());
        for (position, listed) in paths.iter().enumerate() {
            let path = &listed.path;
            let result = match self.read_mapped(listed, &mut stats) {
                true => Ok(()),
                false => self.refresh(path, &mut stats),
            };
            match result {
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

    /// The steady-state fast path: when the listed entry is the file mapped
    /// last time, has not grown and was good, loads its values from the map.
    /// `false` when the file must be read with [`Self::refresh`].
    fn read_mapped(&mut self, listed: &Listed, stats: &mut CollectStats) -> bool {
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
        let loaded = used == cached.parsed_until
            && used <= map.len()
            && map.load_values(&cached.value_offsets, &mut cached.values) == Some(Ok(()));
        if !loaded {
            // Grown, shrunk or corrupt: read it again from the file.
            cached.map = None;
            return false;
        }
        cached.seen = true;
        stats.bytes_read += (HEADER_LEN + cached.values.len() * VALUE_LEN) as u64;
        true
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

/// Expands inputs into the ordered list of files to read.
fn list_inputs(
    inputs: &[Input],
    link_policy: LinkPolicy,
    stats: &mut CollectStats,
    problems: &mut Vec<(usize, Problem)>,
) -> Vec<Listed> {
    let mut paths = Vec::new();
    for input in inputs {
        match input {
            Input::File(path) => paths.push(Listed {
                path: path.clone(),
                inode: None,
            }),
            Input::Directory(dir) => match std::fs::read_dir(dir) {
                Ok(entries) => {
                    stats.directories_present += 1;
                    let mut links = LinkCheck::new(dir, link_policy);
                    for entry in entries.flatten() {
                        let name = entry.file_name();
                        if !name.to_str().is_some_and(is_listed_name) {
                            continue;
                        }
                        let path = entry.path();
                        // `file_type` comes from `readdir` (no `stat`) on the
                        // file systems metrics live on.
                        let file_type = entry.file_type().ok();
                        let is_link = file_type.is_some_and(|t| t.is_symlink());
                        match if is_link { links.check(&path) } else { Ok(()) } {
                            Ok(()) => paths.push(Listed {
                                path,
                                inode: file_type.is_some_and(|t| t.is_file()).then(|| entry.ino()),
                            }),
                            Err(reason) => problems.push((paths.len(), Problem { path, reason })),
                        }
                    }
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
                        paths.len(),
                        Problem {
                            path: dir.clone(),
                            reason,
                        },
                    ));
                }
            },
        }
    }
    paths
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
