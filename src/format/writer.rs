//! Writer side of `prometheus_client`'s multiprocess mode, reimplemented in Rust.
//!
//! This module produces the per-process `.db` files that Python's `prometheus_client` 0.26.0
//! writes when `PROMETHEUS_MULTIPROC_DIR` is set (`mmap_dict.py`, `values.py`, `metrics.py`).
//! The files it writes are byte-identical to Python's for the same metrics, values and
//! timestamps. It exists for the demo ([`crate::demo`]), for benchmarks and for tests; the
//! exporter itself only reads.
//!
//! Layout written (all integers and floats native-endian, as Python's `struct` without prefix):
//!
//! * offset 0: `i32 used` (first free byte, including the 8-byte header); offset 4: 4 zero bytes;
//! * records from offset 8: `i32 len | len bytes UTF-8 JSON key | 1..=8 spaces | f64 value | f64 timestamp`,
//!   where the pad is [`layout::padded_key_len`]'s (never 0);
//! * a new file is created empty, then grown to 65,536 bytes; when a record does not fit, the
//!   file size doubles until it does.
//!
//! A record is written in full (value and timestamp 0.0) **before** `used` is bumped, and a
//! value update is a single 16-byte positioned write of `value | timestamp`, exactly like
//! Python's slice assignments into its `MAP_SHARED` mapping. Plain `pwrite` through the page
//! cache is as visible to a concurrent reader as a store into a shared mapping, so no `mmap`
//! (and no `unsafe`) is needed.
//!
//! The typed helpers ([`ProcessWriter::counter`], [`ProcessWriter::gauge`],
//! [`ProcessWriter::histogram`], [`ProcessWriter::summary`]) mirror `prometheus_client`'s
//! `Counter`, `Gauge`, `Histogram` and `Summary` children: same file, same sample names, same
//! record creation order, same value semantics (`inc` writes timestamp 0.0; `set` on a
//! `mostrecent`/`livemostrecent` gauge writes the wall-clock time).

use std::fmt::{self, Write as _};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;

use crate::format::layout::{self, HEADER_LEN};

/// [`layout::INITIAL_FILE_LEN`] as a file length.
const INITIAL_FILE_SIZE: u64 = layout::INITIAL_FILE_LEN as u64;

/// [`HEADER_LEN`] as a file offset.
const HEADER_SIZE: u64 = HEADER_LEN as u64;

/// Largest `used` value the format can express (it is stored as a signed 32-bit integer).
const MAX_USED: u64 = i32::MAX as u64;

// ---------------------------------------------------------------------------------------------
// File naming
// ---------------------------------------------------------------------------------------------

pub use crate::format::file_name::GaugeMode;

/// Which per-process file a value lives in (`MmapedValue.__reset` in `values.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `counter_<pid>.db`
    Counter,
    /// `gauge_<mode>_<pid>.db`
    Gauge(GaugeMode),
    /// `histogram_<pid>.db`
    Histogram,
    /// `summary_<pid>.db`
    Summary,
}

impl FileKind {
    /// The file-name prefix: `counter`, `histogram`, `summary` or `gauge_<mode>`.
    pub fn prefix(self) -> String {
        match self {
            FileKind::Counter => "counter".to_owned(),
            FileKind::Histogram => "histogram".to_owned(),
            FileKind::Summary => "summary".to_owned(),
            FileKind::Gauge(mode) => format!("gauge_{mode}"),
        }
    }

    /// The file name Python uses: `'{}_{}.db'.format(prefix, pid)`.
    pub fn file_name(self, pid: impl fmt::Display) -> String {
        format!("{}_{pid}.db", self.prefix())
    }
}

/// `counter_<pid>.db`
pub fn counter_file_name(pid: impl fmt::Display) -> String {
    FileKind::Counter.file_name(pid)
}

/// `histogram_<pid>.db`
pub fn histogram_file_name(pid: impl fmt::Display) -> String {
    FileKind::Histogram.file_name(pid)
}

/// `summary_<pid>.db`
pub fn summary_file_name(pid: impl fmt::Display) -> String {
    FileKind::Summary.file_name(pid)
}

/// `gauge_<mode>_<pid>.db`
pub fn gauge_file_name(mode: GaugeMode, pid: impl fmt::Display) -> String {
    FileKind::Gauge(mode).file_name(pid)
}

/// Python's `multiprocess.mark_process_dead(pid, path)`: deletes the `gauge_live*_<pid>.db`
/// files of a dead process (and nothing else). Missing files are ignored. Returns how many
/// files were removed.
pub fn mark_process_dead(dir: &Path, pid: impl fmt::Display) -> io::Result<usize> {
    let pid = pid.to_string();
    let mut removed = 0;
    for mode in GaugeMode::ALL_MODES.into_iter().filter(|m| m.is_live()) {
        match std::fs::remove_file(dir.join(gauge_file_name(mode, &pid))) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

// ---------------------------------------------------------------------------------------------
// Keys and names
// ---------------------------------------------------------------------------------------------

/// The record key: exactly `json.dumps([family, sample, {labels}, help], sort_keys=True)`
/// (`mmap_dict.mmap_key`).
///
/// Python's defaults apply: separators `", "` and `": "`, `ensure_ascii=True` (non-ASCII as
/// lowercase `\uXXXX`, astral characters as surrogate pairs; `"`, `\`, `\n`, `\r`, `\t`, `\b`,
/// `\f` as short escapes; other control characters and DEL as `\u00XX`; `/` unescaped), labels
/// sorted by name in code-point order. A label name given twice keeps its last value, as a
/// Python `dict` built from the pairs would.
pub fn encode_key(family: &str, sample: &str, labels: &[(&str, &str)], help: &str) -> String {
    let mut sorted: Vec<(&str, &str)> = labels.to_vec();
    // Stable sort, then keep the last of equal names (dict semantics).
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut deduped: Vec<(&str, &str)> = Vec::with_capacity(sorted.len());
    for pair in sorted {
        match deduped.last_mut() {
            Some(last) if last.0 == pair.0 => *last = pair,
            _ => deduped.push(pair),
        }
    }

    let mut out = String::with_capacity(
        family.len()
            + sample.len()
            + help.len()
            + 16
            + labels
                .iter()
                .map(|(k, v)| k.len() + v.len() + 8)
                .sum::<usize>(),
    );
    out.push('[');
    push_json_str(&mut out, family);
    out.push_str(", ");
    push_json_str(&mut out, sample);
    out.push_str(", {");
    for (i, (k, v)) in deduped.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_json_str(&mut out, k);
        out.push_str(": ");
        push_json_str(&mut out, v);
    }
    out.push_str("}, ");
    push_json_str(&mut out, help);
    out.push(']');
    out
}

/// Appends `s` as a JSON string literal the way CPython's `encode_basestring_ascii` does.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let cp = u32::from(c);
                if cp >= 0x1_0000 {
                    let v = cp - 0x1_0000;
                    let hi = 0xd800 | ((v >> 10) & 0x3ff);
                    let lo = 0xdc00 | (v & 0x3ff);
                    let _ = write!(out, "\\u{hi:04x}\\u{lo:04x}");
                } else {
                    let _ = write!(out, "\\u{cp:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Python's `metrics._build_full_name`: `namespace_` + `subsystem_` + `name`, a trailing
/// `_total` stripped for counters, then `_<unit>` appended unless already a suffix.
///
/// `metric_type` is Python's type string (`"counter"`, `"gauge"`, `"histogram"`, `"summary"`).
/// Python's validation errors (empty name, unit on info/stateset) are not reproduced.
pub fn build_full_name(
    metric_type: &str,
    name: &str,
    namespace: &str,
    subsystem: &str,
    unit: &str,
) -> String {
    let mut full = String::new();
    if !namespace.is_empty() {
        full.push_str(namespace);
        full.push('_');
    }
    if !subsystem.is_empty() {
        full.push_str(subsystem);
        full.push('_');
    }
    full.push_str(name);
    if metric_type == "counter" && full.ends_with("_total") {
        full.truncate(full.len() - "_total".len());
    }
    if !unit.is_empty() && !full.ends_with(&format!("_{unit}")) {
        full.push('_');
        full.push_str(unit);
    }
    full
}

// ---------------------------------------------------------------------------------------------
// Float formatting for `le`
// ---------------------------------------------------------------------------------------------

/// `floatToGoString(bound)` as stored in a bucket's `le` label (`metrics.py` `Histogram._metric_init`).
fn bucket_label(bound: f64) -> String {
    crate::model::float::go_float_string(bound)
}

// ---------------------------------------------------------------------------------------------
// The file
// ---------------------------------------------------------------------------------------------

/// One record as stored in a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// The decoded JSON key.
    pub key: String,
    /// The stored value.
    pub value: f64,
    /// The stored timestamp (UNIX seconds, or 0.0).
    pub timestamp: f64,
    /// Byte offset of the value (the timestamp follows at `offset + 8`).
    pub offset: u64,
}

/// Parses the records of a file image the way `mmap_dict._read_all_values` does, but strictly:
/// any record that does not fit entirely within `used` is an `InvalidData` error. The layout
/// rules are [`layout`]'s.
pub(crate) fn parse_records(data: &[u8]) -> io::Result<Vec<Record>> {
    let used = layout::read_used(data, data.len())
        .map_err(|e| invalid_data(e.to_string()))?
        .unwrap_or(0);
    let mut locations = Vec::new();
    layout::scan_records(data, HEADER_LEN, used, &mut locations)
        .map_err(|e| invalid_data(e.to_string()))?;
    locations
        .iter()
        .map(|location| {
            let key = std::str::from_utf8(location.key(data))
                .map_err(|e| {
                    invalid_data(format!("key at {} is not UTF-8: {e}", location.key_offset))
                })?
                .to_owned();
            let (value, timestamp) = layout::read_value(data, location.value_offset);
            Ok(Record {
                key,
                value,
                timestamp,
                offset: location.value_offset as u64,
            })
        })
        .collect()
}

/// Reads every record of the file at `path` (strictly; see [`MetricsFile::open`]).
pub fn read_records(path: &Path) -> io::Result<Vec<Record>> {
    parse_records(&std::fs::read(path)?)
}

fn invalid_data(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn invalid_input(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The bytes of a whole new file holding `records` ([`layout::file_bytes`]).
pub fn file_bytes(records: &[(&str, f64, f64)]) -> Vec<u8> {
    layout::file_bytes(records)
}

/// Builds a complete record ([`layout::encode_record`]).
pub fn encode_record(key: &str, value: f64, timestamp: f64) -> Vec<u8> {
    layout::encode_record(key.as_bytes(), value, timestamp)
}

/// `value | timestamp` as one 16-byte buffer (Python's `struct.pack('dd', ...)`).
fn encode_pair(value: f64, timestamp: f64) -> [u8; 16] {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&value.to_ne_bytes());
    buf[8..].copy_from_slice(&timestamp.to_ne_bytes());
    buf
}

#[derive(Clone, Debug)]
struct Entry {
    key: String,
    offset: u64,
    value: f64,
    timestamp: f64,
}

/// One `.db` file opened for writing, like Python's `MmapedDict(filename)`.
///
/// Single writer: the struct caches the key → offset map and the last written value of each
/// key. Opening an existing file continues from its records (a recycled pid continues from the
/// dead process's values, as in Python).
#[derive(Debug)]
pub struct MetricsFile {
    file: File,
    path: PathBuf,
    capacity: u64,
    used: u64,
    entries: Vec<Entry>,
    index: FxHashMap<String, usize>,
}

impl MetricsFile {
    /// Opens or creates the file at `path`, exactly like `MmapedDict.__init__`:
    /// create it empty if missing, grow a 0-byte file to 65,536 bytes, write `used = 8` if the
    /// stored `used` is 0, and otherwise read back the existing records.
    ///
    /// Unlike Python, an existing file whose records are inconsistent (negative or out-of-range
    /// `used`, a record running past `used`, a non-UTF-8 key) is rejected with `InvalidData`
    /// instead of being appended to.
    pub fn open(path: impl Into<PathBuf>) -> io::Result<MetricsFile> {
        let path = path.into();
        // Python opens with 'a+b'. O_APPEND is deliberately not used: Linux pwrite() ignores the
        // offset on O_APPEND descriptors.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut capacity = file.metadata()?.len();
        if capacity == 0 {
            file.set_len(INITIAL_FILE_SIZE)?;
            capacity = INITIAL_FILE_SIZE;
        }
        if capacity < HEADER_SIZE {
            return Err(invalid_data(format!(
                "{}: {capacity} bytes is too short for the header",
                path.display()
            )));
        }
        let mut header = [0u8; 4];
        file.read_exact_at(&mut header, 0)?;
        let stored = i32::from_ne_bytes(header);
        let mut mf = MetricsFile {
            file,
            path,
            capacity,
            used: HEADER_SIZE,
            entries: Vec::new(),
            index: FxHashMap::default(),
        };
        if stored == 0 {
            mf.file
                .write_all_at(&(HEADER_SIZE as i32).to_ne_bytes(), 0)?;
        } else {
            let used = u64::try_from(stored)
                .ok()
                .filter(|&u| (HEADER_SIZE..=capacity).contains(&u))
                .ok_or_else(|| invalid_data(format!("{}: bad used {stored}", mf.path.display())))?;
            let mut data = vec![0u8; used as usize];
            mf.file.read_exact_at(&mut data, 0)?;
            let records = parse_records(&data)
                .map_err(|e| invalid_data(format!("{}: {e}", mf.path.display())))?;
            for r in records {
                let idx = mf.entries.len();
                mf.index.insert(r.key.clone(), idx);
                mf.entries.push(Entry {
                    key: r.key,
                    offset: r.offset,
                    value: r.value,
                    timestamp: r.timestamp,
                });
            }
            mf.used = used;
        }
        Ok(mf)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes in use, including the header (the stored `used`).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Current file size (65,536 or a doubling of it).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file has no records.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The records in file order, as `(key, value, timestamp)` from this writer's cache.
    pub fn records(&self) -> impl Iterator<Item = (&str, f64, f64)> + '_ {
        self.entries
            .iter()
            .map(|e| (e.key.as_str(), e.value, e.timestamp))
    }

    /// The last written `(value, timestamp)` of `key`, if the key exists.
    pub fn value(&self, key: &str) -> Option<(f64, f64)> {
        self.index
            .get(key)
            .map(|&i| (self.entries[i].value, self.entries[i].timestamp))
    }

    /// Ensures a record for `key` exists and returns its index (`MmapedDict._init_value`):
    /// a new record is appended with value and timestamp 0.0, the file doubling in size as
    /// often as needed, and only then is `used` bumped.
    pub fn add_key(&mut self, key: &str) -> io::Result<usize> {
        if let Some(&idx) = self.index.get(key) {
            return Ok(idx);
        }
        let record = encode_record(key, 0.0, 0.0);
        let new_used = self.used + record.len() as u64;
        if new_used > MAX_USED {
            return Err(invalid_input(format!(
                "{}: adding a {}-byte record would exceed the format's 2 GiB limit",
                self.path.display(),
                record.len()
            )));
        }
        if new_used > self.capacity {
            let mut capacity = self.capacity;
            while new_used > capacity {
                capacity *= 2;
            }
            self.file.set_len(capacity)?;
            self.capacity = capacity;
        }
        self.file.write_all_at(&record, self.used)?;
        self.used = new_used;
        self.file
            .write_all_at(&(new_used as i32).to_ne_bytes(), 0)?;
        let idx = self.entries.len();
        self.entries.push(Entry {
            key: key.to_owned(),
            offset: new_used - 16,
            value: 0.0,
            timestamp: 0.0,
        });
        self.index.insert(key.to_owned(), idx);
        Ok(idx)
    }

    /// Writes `(value, timestamp)` for `key` (`MmapedDict.write_value`), creating the record
    /// first if needed.
    pub fn write_value(&mut self, key: &str, value: f64, timestamp: f64) -> io::Result<()> {
        let idx = self.add_key(key)?;
        self.write_index(idx, value, timestamp)
    }

    /// Writes `(value, timestamp)` for the record at `idx` (as returned by [`Self::add_key`])
    /// with one 16-byte positioned write.
    pub fn write_index(&mut self, idx: usize, value: f64, timestamp: f64) -> io::Result<()> {
        let entry = self
            .entries
            .get_mut(idx)
            .ok_or_else(|| invalid_input(format!("no record #{idx} in {}", self.path.display())))?;
        self.file
            .write_all_at(&encode_pair(value, timestamp), entry.offset)?;
        entry.value = value;
        entry.timestamp = timestamp;
        Ok(())
    }

    /// The cached `(value, timestamp)` of the record at `idx`.
    pub fn value_at(&self, idx: usize) -> Option<(f64, f64)> {
        self.entries.get(idx).map(|e| (e.value, e.timestamp))
    }
}

/// The current time as Python's `time.time()` returns it (UNIX seconds as `f64`).
pub fn now_timestamp() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// A process's set of files and typed metric children
// ---------------------------------------------------------------------------------------------

static NEXT_WRITER_ID: AtomicU64 = AtomicU64::new(1);

/// The files of one (simulated) Python process: the `files` dict of `MultiProcessValue`.
///
/// Files are created lazily, when the first value of their kind is created, like in Python.
/// Metric children are created with [`Self::counter`], [`Self::gauge`], [`Self::histogram`] and
/// [`Self::summary`]; the returned handles are used with this same writer (using them with
/// another writer is an `InvalidInput` error).
#[derive(Debug)]
pub struct ProcessWriter {
    id: u64,
    dir: PathBuf,
    pid: String,
    files: Vec<(FileKind, MetricsFile)>,
}

/// Where one value lives: which writer, which file, which record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    writer: u64,
    file: usize,
    entry: usize,
}

impl ProcessWriter {
    /// A process with identifier `pid` (anything `Display`, like Python's `'{}'.format(pid)`)
    /// writing into `dir`. No file is created yet.
    pub fn new(dir: impl Into<PathBuf>, pid: impl fmt::Display) -> ProcessWriter {
        ProcessWriter {
            id: NEXT_WRITER_ID.fetch_add(1, Ordering::Relaxed),
            dir: dir.into(),
            pid: pid.to_string(),
            files: Vec::new(),
        }
    }

    /// The directory written into.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process identifier used in file names.
    pub fn pid(&self) -> &str {
        &self.pid
    }

    /// The files opened so far, in creation order.
    pub fn files(&self) -> impl Iterator<Item = (FileKind, &MetricsFile)> + '_ {
        self.files.iter().map(|(k, f)| (*k, f))
    }

    /// Opens (creating if needed) the file of `kind` for this process and returns it.
    pub fn file(&mut self, kind: FileKind) -> io::Result<&mut MetricsFile> {
        let idx = self.file_index(kind)?;
        Ok(&mut self.files[idx].1)
    }

    fn file_index(&mut self, kind: FileKind) -> io::Result<usize> {
        if let Some(i) = self.files.iter().position(|(k, _)| *k == kind) {
            return Ok(i);
        }
        let f = MetricsFile::open(self.dir.join(kind.file_name(&self.pid)))?;
        self.files.push((kind, f));
        Ok(self.files.len() - 1)
    }

    /// Creates the record for one value, like `MmapedValue.__init__` (value read back if the
    /// key already exists in the file).
    fn slot(&mut self, kind: FileKind, key: &str) -> io::Result<Slot> {
        let file = self.file_index(kind)?;
        let entry = self.files[file].1.add_key(key)?;
        Ok(Slot {
            writer: self.id,
            file,
            entry,
        })
    }

    fn get(&self, slot: Slot) -> io::Result<f64> {
        self.check(slot)?;
        Ok(self.files[slot.file]
            .1
            .value_at(slot.entry)
            .map_or(0.0, |(v, _)| v))
    }

    fn put(&mut self, slot: Slot, value: f64, timestamp: f64) -> io::Result<()> {
        self.check(slot)?;
        self.files[slot.file]
            .1
            .write_index(slot.entry, value, timestamp)
    }

    /// `MmapedValue.inc`: add to the cached value, store it with timestamp 0.0.
    fn add(&mut self, slot: Slot, amount: f64) -> io::Result<()> {
        let v = self.get(slot)? + amount;
        self.put(slot, v, 0.0)
    }

    fn check(&self, slot: Slot) -> io::Result<()> {
        if slot.writer == self.id && slot.file < self.files.len() {
            Ok(())
        } else {
            Err(invalid_input(format!(
                "metric handle used with a different ProcessWriter (pid {})",
                self.pid
            )))
        }
    }

    /// A counter child: family `name` with `_total` stripped, sample `<family>_total`, in
    /// `counter_<pid>.db` (`Counter._metric_init`).
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> io::Result<Counter> {
        let family = build_full_name("counter", name, "", "", "");
        let key = encode_key(&family, &format!("{family}_total"), labels, help);
        Ok(Counter {
            slot: self.slot(FileKind::Counter, &key)?,
        })
    }

    /// A gauge child in `gauge_<mode>_<pid>.db`; sample name = family name (`Gauge._metric_init`).
    pub fn gauge(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        mode: GaugeMode,
    ) -> io::Result<Gauge> {
        let key = encode_key(name, name, labels, help);
        Ok(Gauge {
            slot: self.slot(FileKind::Gauge(mode), &key)?,
            mode,
        })
    }

    /// A histogram child in `histogram_<pid>.db` (`Histogram._metric_init`): the `_sum` record
    /// first, then one `_bucket` record per upper bound in ascending order, with `le` formatted
    /// by `floatToGoString`. `+Inf` is appended if `buckets` does not end with it.
    ///
    /// Errors like Python's `ValueError`s: unsorted buckets, fewer than two buckets after
    /// appending `+Inf`, or a label named `le`.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        buckets: &[f64],
    ) -> io::Result<Histogram> {
        let mut bounds = buckets.to_vec();
        if bounds
            .windows(2)
            .any(|w| w[0] > w[1] || w[0].is_nan() || w[1].is_nan())
        {
            return Err(invalid_input(format!(
                "{name}: buckets not in sorted order"
            )));
        }
        if bounds.last().is_some_and(|&b| b != f64::INFINITY) {
            bounds.push(f64::INFINITY);
        }
        if bounds.len() < 2 {
            return Err(invalid_input(format!(
                "{name}: must have at least two buckets"
            )));
        }
        if labels.iter().any(|(k, _)| *k == "le") {
            return Err(invalid_input(format!("{name}: reserved label name le")));
        }
        let sum_key = encode_key(name, &format!("{name}_sum"), labels, help);
        let sum = self.slot(FileKind::Histogram, &sum_key)?;
        let bucket_sample = format!("{name}_bucket");
        let les: Vec<String> = bounds.iter().map(|&b| bucket_label(b)).collect();
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        let mut slots = Vec::with_capacity(bounds.len());
        for (&b, le) in bounds.iter().zip(&les) {
            with_le.push(("le", le.as_str()));
            let key = encode_key(name, &bucket_sample, &with_le, help);
            with_le.pop();
            slots.push((b, self.slot(FileKind::Histogram, &key)?));
        }
        Ok(Histogram {
            sum,
            buckets: slots,
        })
    }

    /// A summary child in `summary_<pid>.db` (`Summary._metric_init`): `_count` then `_sum`.
    /// A label named `quantile` is rejected like in Python.
    pub fn summary(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> io::Result<Summary> {
        if labels.iter().any(|(k, _)| *k == "quantile") {
            return Err(invalid_input(format!(
                "{name}: reserved label name quantile"
            )));
        }
        let count_key = encode_key(name, &format!("{name}_count"), labels, help);
        let count = self.slot(FileKind::Summary, &count_key)?;
        let sum_key = encode_key(name, &format!("{name}_sum"), labels, help);
        let sum = self.slot(FileKind::Summary, &sum_key)?;
        Ok(Summary { count, sum })
    }
}

/// A counter child (see [`ProcessWriter::counter`]).
#[derive(Clone, Copy, Debug)]
pub struct Counter {
    slot: Slot,
}

impl Counter {
    /// `Counter.inc(amount)`: negative amounts are rejected (`InvalidInput`), like Python's
    /// `ValueError`. Writes timestamp 0.0.
    pub fn inc(&self, w: &mut ProcessWriter, amount: f64) -> io::Result<()> {
        if amount < 0.0 {
            return Err(invalid_input(format!(
                "counters can only be incremented by non-negative amounts, not {amount}"
            )));
        }
        w.add(self.slot, amount)
    }

    /// `Counter.reset()`: sets the value to 0.
    pub fn reset(&self, w: &mut ProcessWriter) -> io::Result<()> {
        w.put(self.slot, 0.0, 0.0)
    }

    /// The current value.
    pub fn get(&self, w: &ProcessWriter) -> io::Result<f64> {
        w.get(self.slot)
    }
}

/// A gauge child (see [`ProcessWriter::gauge`]).
#[derive(Clone, Copy, Debug)]
pub struct Gauge {
    slot: Slot,
    mode: GaugeMode,
}

impl Gauge {
    /// The gauge's multiprocess mode.
    pub fn mode(&self) -> GaugeMode {
        self.mode
    }

    /// `Gauge.set(value)`: in the `mostrecent` modes the timestamp is `time.time()`, otherwise 0.0.
    pub fn set(&self, w: &mut ProcessWriter, value: f64) -> io::Result<()> {
        let ts = if self.mode.is_most_recent() {
            now_timestamp()
        } else {
            0.0
        };
        w.put(self.slot, value, ts)
    }

    /// Like [`Self::set`] with an explicit timestamp for the `mostrecent` modes (for
    /// reproducible files). In the other modes the timestamp is ignored and 0.0 is written,
    /// as Python does.
    pub fn set_at(&self, w: &mut ProcessWriter, value: f64, timestamp: f64) -> io::Result<()> {
        let ts = if self.mode.is_most_recent() {
            timestamp
        } else {
            0.0
        };
        w.put(self.slot, value, ts)
    }

    /// `Gauge.set_to_current_time()`.
    pub fn set_to_current_time(&self, w: &mut ProcessWriter) -> io::Result<()> {
        self.set(w, now_timestamp())
    }

    /// `Gauge.inc(amount)`; an error in the `mostrecent` modes (Python raises `RuntimeError`).
    /// Writes timestamp 0.0.
    pub fn inc(&self, w: &mut ProcessWriter, amount: f64) -> io::Result<()> {
        if self.mode.is_most_recent() {
            return Err(invalid_input(
                "inc must not be used with the mostrecent mode".to_owned(),
            ));
        }
        w.add(self.slot, amount)
    }

    /// `Gauge.dec(amount)`; an error in the `mostrecent` modes.
    pub fn dec(&self, w: &mut ProcessWriter, amount: f64) -> io::Result<()> {
        if self.mode.is_most_recent() {
            return Err(invalid_input(
                "dec must not be used with the mostrecent mode".to_owned(),
            ));
        }
        w.add(self.slot, -amount)
    }

    /// The current value.
    pub fn get(&self, w: &ProcessWriter) -> io::Result<f64> {
        w.get(self.slot)
    }
}

/// A histogram child (see [`ProcessWriter::histogram`]).
#[derive(Clone, Debug)]
pub struct Histogram {
    sum: Slot,
    buckets: Vec<(f64, Slot)>,
}

impl Histogram {
    /// `Histogram.observe(amount)`: adds to `_sum`, then increments the first bucket whose
    /// upper bound is `>= amount` (buckets are stored non-cumulative). A NaN observation only
    /// changes `_sum`, as in Python.
    pub fn observe(&self, w: &mut ProcessWriter, amount: f64) -> io::Result<()> {
        w.add(self.sum, amount)?;
        if let Some((_, slot)) = self.buckets.iter().find(|(b, _)| amount <= *b) {
            w.add(*slot, 1.0)?;
        }
        Ok(())
    }

    /// The upper bounds, ending with `+Inf`.
    pub fn bounds(&self) -> impl Iterator<Item = f64> + '_ {
        self.buckets.iter().map(|(b, _)| *b)
    }

    /// The current `_sum`.
    pub fn sum(&self, w: &ProcessWriter) -> io::Result<f64> {
        w.get(self.sum)
    }

    /// The current total count (sum of all bucket values).
    pub fn count(&self, w: &ProcessWriter) -> io::Result<f64> {
        self.buckets
            .iter()
            .try_fold(0.0, |acc, (_, s)| Ok(acc + w.get(*s)?))
    }
}

/// A summary child (see [`ProcessWriter::summary`]).
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    count: Slot,
    sum: Slot,
}

impl Summary {
    /// `Summary.observe(amount)`: `_count` += 1, then `_sum` += amount.
    pub fn observe(&self, w: &mut ProcessWriter, amount: f64) -> io::Result<()> {
        w.add(self.count, 1.0)?;
        w.add(self.sum, amount)
    }

    /// The current `_count`.
    pub fn count(&self, w: &ProcessWriter) -> io::Result<f64> {
        w.get(self.count)
    }

    /// The current `_sum`.
    pub fn sum(&self, w: &ProcessWriter) -> io::Result<f64> {
        w.get(self.sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn key_examples() {
        assert_eq!(
            encode_key("c", "c_total", &[("l", "x")], "help"),
            r#"["c", "c_total", {"l": "x"}, "help"]"#
        );
        assert_eq!(encode_key("g", "g", &[], "gh"), r#"["g", "g", {}, "gh"]"#);
        assert_eq!(
            encode_key("uni", "uni", &[("lbl", "é😀\"x")], "unicode é help"),
            r#"["uni", "uni", {"lbl": "\u00e9\ud83d\ude00\"x"}, "unicode \u00e9 help"]"#
        );
        assert_eq!(
            encode_key(
                "vllm:prompt_tokens",
                "vllm:prompt_tokens_total",
                &[("model_name", "m"), ("engine", "0")],
                "Number of prefill tokens processed."
            ),
            r#"["vllm:prompt_tokens", "vllm:prompt_tokens_total", {"engine": "0", "model_name": "m"}, "Number of prefill tokens processed."]"#
        );
    }

    #[test]
    fn key_escapes() {
        let s = "a\"b\\c\nd\re\tf\u{8}g\u{c}h\u{1}i\u{1f}j\u{7f}k/l\u{80}m\u{ffff}n\u{10ffff}";
        assert_eq!(
            encode_key(s, "", &[], ""),
            r#"["a\"b\\c\nd\re\tf\bg\fh\u0001i\u001fj\u007fk/l\u0080m\uffffn\udbff\udfff", "", {}, ""]"#
        );
    }

    #[test]
    fn key_sorts_by_code_point_and_dedups_last() {
        assert_eq!(
            encode_key(
                "f",
                "f",
                &[("b", "1"), ("a", "2"), ("B", "3"), ("é", "4"), ("a", "5")],
                ""
            ),
            r#"["f", "f", {"B": "3", "a": "5", "b": "1", "\u00e9": "4"}, ""]"#
        );
    }

    #[test]
    fn full_names() {
        assert_eq!(build_full_name("counter", "x_total", "", "", ""), "x");
        assert_eq!(
            build_full_name("counter", "vllm:estimated_flops_per_gpu_total", "", "", ""),
            "vllm:estimated_flops_per_gpu"
        );
        assert_eq!(build_full_name("gauge", "x_total", "", "", ""), "x_total");
        assert_eq!(
            build_full_name("histogram", "lat", "ns", "sub", "seconds"),
            "ns_sub_lat_seconds"
        );
        assert_eq!(
            build_full_name("counter", "b_bytes_total", "", "", "bytes"),
            "b_bytes"
        );
    }

    #[test]
    fn bucket_labels() {
        let cases: &[(f64, &str)] = &[
            (0.005, "0.005"),
            (1.0, "1.0"),
            (2048.0, "2048.0"),
            (1e6, "1e+06"),
            (2097152.0, "2.097152e+06"),
            (8589934592.0, "8.589934592e+09"),
            (0.00001 * 16.0, "0.00016"),
            (f64::INFINITY, "+Inf"),
        ];
        for &(x, want) in cases {
            assert_eq!(bucket_label(x), want, "{x:e}");
        }
    }

    /// Research note §2.2, first dump: `Counter('c','help',['l']).labels('x').inc(2)` under pid 42.
    #[test]
    fn counter_hexdump() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ProcessWriter::new(dir.path(), 42);
        let c = w.counter("c", "help", &[("l", "x")]).unwrap();
        c.inc(&mut w, 2.0).unwrap();
        let bytes = std::fs::read(dir.path().join("counter_42.db")).unwrap();
        assert_eq!(bytes.len(), 65536);
        let want = hex("4800 0000 0000 0000 2400 0000 5b22 6322
             2c20 2263 5f74 6f74 616c 222c 207b 226c
             223a 2022 7822 7d2c 2022 6865 6c70 225d
             2020 2020 2020 2020 0000 0000 0000 0040
             0000 0000 0000 0000");
        assert_eq!(&bytes[..want.len()], &want[..]);
        assert!(bytes[want.len()..].iter().all(|&b| b == 0));
    }

    /// Research note §2.2, second dump: a `mostrecent` gauge set to 7 at 1700000000.5.
    #[test]
    fn gauge_hexdump() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ProcessWriter::new(dir.path(), 42);
        let g = w.gauge("g", "gh", &[], GaugeMode::MostRecent).unwrap();
        g.set_at(&mut w, 7.0, 1700000000.5).unwrap();
        let bytes = std::fs::read(dir.path().join("gauge_mostrecent_42.db")).unwrap();
        let want = hex("3800 0000 0000 0000 1400 0000 5b22 6722
             2c20 2267 222c 207b 7d2c 2022 6768 225d
             2020 2020 2020 2020 0000 0000 0000 1c40
             0000 2040 fc54 d941");
        assert_eq!(&bytes[..want.len()], &want[..]);
        assert!(bytes[want.len()..].iter().all(|&b| b == 0));
        assert_eq!(bytes.len(), 65536);
    }

    #[test]
    fn padding_is_one_to_eight() {
        for len in 0..40usize {
            let key = "x".repeat(len);
            let rec = encode_record(&key, 1.0, 2.0);
            let pad = rec.len() - 4 - len - 16;
            assert!((1..=8).contains(&pad), "len {len} pad {pad}");
            assert_eq!(rec.len() % 8, 0);
            assert!(rec[4 + len..4 + len + pad].iter().all(|&b| b == b' '));
        }
    }

    #[test]
    fn file_names() {
        assert_eq!(counter_file_name(12), "counter_12.db");
        assert_eq!(histogram_file_name("A"), "histogram_A.db");
        assert_eq!(summary_file_name(0), "summary_0.db");
        assert_eq!(
            gauge_file_name(GaugeMode::LiveMostRecent, 7),
            "gauge_livemostrecent_7.db"
        );
        let names: Vec<String> = GaugeMode::ALL_MODES
            .iter()
            .map(|m| gauge_file_name(*m, 1))
            .collect();
        assert_eq!(names.len(), 10);
        for m in GaugeMode::ALL_MODES {
            assert_eq!(GaugeMode::from_name(m.as_str()), Some(m));
        }
        assert_eq!(
            GaugeMode::ALL_MODES.iter().filter(|m| m.is_live()).count(),
            5
        );
        assert_eq!(GaugeMode::from_name("MostRecent"), None);
    }

    #[test]
    fn growth_doubles_and_reopen_continues() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counter_1.db");
        let mut f = MetricsFile::open(&path).unwrap();
        assert_eq!((f.used(), f.capacity()), (8, 65536));
        let n = 3000;
        for i in 0..n {
            let key = encode_key("c", "c_total", &[("i", &i.to_string())], "h");
            f.write_value(&key, i as f64, 0.0).unwrap();
        }
        assert_eq!(f.capacity(), 262144);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 262144);
        let used = f.used();
        drop(f);

        let recs = read_records(&path).unwrap();
        assert_eq!(recs.len(), n);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.value, i as f64);
        }

        let mut f = MetricsFile::open(&path).unwrap();
        assert_eq!(f.len(), n);
        assert_eq!(f.used(), used);
        let key = encode_key("c", "c_total", &[("i", "5")], "h");
        assert_eq!(f.value(&key), Some((5.0, 0.0)));
        f.write_value(&key, 50.0, 0.0).unwrap();
        assert_eq!(f.used(), used, "existing key must not add a record");
        f.write_value(&encode_key("c", "c_total", &[("i", "new")], "h"), 1.0, 0.0)
            .unwrap();
        assert!(f.used() > used);
        let recs = read_records(&path).unwrap();
        assert_eq!(recs.len(), n + 1);
        assert_eq!(recs[5].value, 50.0);
    }

    #[test]
    fn reopen_via_process_writer_continues_counter() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut w = ProcessWriter::new(dir.path(), 77);
            let c = w.counter("c", "h", &[]).unwrap();
            c.inc(&mut w, 5.0).unwrap();
            let g = w.gauge("g", "h", &[], GaugeMode::LiveSum).unwrap();
            g.inc(&mut w, 3.0).unwrap();
        }
        let mut w = ProcessWriter::new(dir.path(), 77);
        let c = w.counter("c", "h", &[]).unwrap();
        assert_eq!(c.get(&w).unwrap(), 5.0);
        c.inc(&mut w, 1.0).unwrap();
        assert_eq!(c.get(&w).unwrap(), 6.0);
        let g = w.gauge("g", "h", &[], GaugeMode::LiveSum).unwrap();
        assert_eq!(g.get(&w).unwrap(), 3.0);
        assert_eq!(mark_process_dead(dir.path(), 77).unwrap(), 1);
        assert!(!dir.path().join("gauge_livesum_77.db").exists());
        assert!(dir.path().join("counter_77.db").exists());
    }

    #[test]
    fn histogram_and_summary_records_in_python_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ProcessWriter::new(dir.path(), 3);
        let h = w
            .histogram("h", "hh", &[("a", "1")], &[0.5, 1.0, 1e6])
            .unwrap();
        h.observe(&mut w, 0.7).unwrap();
        h.observe(&mut w, 5e6).unwrap();
        h.observe(&mut w, f64::NAN).unwrap();
        let s = w.summary("s", "sh", &[]).unwrap();
        s.observe(&mut w, 2.5).unwrap();
        s.observe(&mut w, 1.5).unwrap();

        let recs = read_records(&dir.path().join("histogram_3.db")).unwrap();
        let keys: Vec<&str> = recs.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                r#"["h", "h_sum", {"a": "1"}, "hh"]"#,
                r#"["h", "h_bucket", {"a": "1", "le": "0.5"}, "hh"]"#,
                r#"["h", "h_bucket", {"a": "1", "le": "1.0"}, "hh"]"#,
                r#"["h", "h_bucket", {"a": "1", "le": "1e+06"}, "hh"]"#,
                r#"["h", "h_bucket", {"a": "1", "le": "+Inf"}, "hh"]"#,
            ]
        );
        assert!(recs[0].value.is_nan());
        let buckets: Vec<f64> = recs[1..].iter().map(|r| r.value).collect();
        assert_eq!(buckets, [0.0, 1.0, 0.0, 1.0]);
        assert_eq!(h.count(&w).unwrap(), 2.0);

        let recs = read_records(&dir.path().join("summary_3.db")).unwrap();
        assert_eq!(recs[0].key, r#"["s", "s_count", {}, "sh"]"#);
        assert_eq!((recs[0].value, recs[1].value), (2.0, 4.0));
        assert_eq!(recs[1].key, r#"["s", "s_sum", {}, "sh"]"#);
    }

    #[test]
    fn python_errors_are_reproduced() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ProcessWriter::new(dir.path(), 1);
        assert!(w.histogram("h", "", &[], &[2.0, 1.0]).is_err());
        assert!(w.histogram("h", "", &[], &[f64::INFINITY]).is_err());
        assert!(w.histogram("h", "", &[("le", "x")], &[1.0]).is_err());
        assert!(w.summary("s", "", &[("quantile", "x")]).is_err());
        let c = w.counter("c", "", &[]).unwrap();
        assert!(c.inc(&mut w, -1.0).is_err());
        let g = w.gauge("g", "", &[], GaugeMode::MostRecent).unwrap();
        assert!(g.inc(&mut w, 1.0).is_err());
        assert!(g.dec(&mut w, 1.0).is_err());
        let mut other = ProcessWriter::new(dir.path(), 2);
        assert!(c.inc(&mut other, 1.0).is_err());
    }

    #[test]
    fn gauge_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ProcessWriter::new(dir.path(), 1);
        let all = w.gauge("a", "", &[], GaugeMode::All).unwrap();
        all.set_at(&mut w, 1.0, 123.0).unwrap();
        let mr = w.gauge("m", "", &[], GaugeMode::LiveMostRecent).unwrap();
        let before = now_timestamp();
        mr.set(&mut w, 2.0).unwrap();
        let a = read_records(&dir.path().join("gauge_all_1.db")).unwrap();
        assert_eq!((a[0].value, a[0].timestamp), (1.0, 0.0));
        let m = read_records(&dir.path().join("gauge_livemostrecent_1.db")).unwrap();
        assert_eq!(m[0].value, 2.0);
        assert!(m[0].timestamp >= before && m[0].timestamp > 1.6e9);
    }

    #[test]
    fn rejects_corrupt_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counter_9.db");
        let mut data = vec![0u8; 65536];
        data[..4].copy_from_slice(&100i32.to_ne_bytes());
        data[8..16].copy_from_slice(b"somejunk");
        std::fs::write(&path, &data).unwrap();
        assert_eq!(
            MetricsFile::open(&path).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
