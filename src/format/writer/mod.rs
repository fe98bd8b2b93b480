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

/// Reads every record of the file at `path` (strictly; see [`MetricsFile::open`]):
/// only its used bytes, not the zeros prometheus_client sizes files with.
pub fn read_records(path: &Path) -> io::Result<Vec<Record>> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let mut data = Vec::new();
    (&mut file).take(HEADER_LEN as u64).read_to_end(&mut data)?;
    if let Some(header) = data.get(..4) {
        let used = i32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        let rest = u64::try_from(used)
            .unwrap_or(0)
            .saturating_sub(HEADER_LEN as u64);
        file.take(rest).read_to_end(&mut data)?;
    }
    parse_records(&data)
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

mod process;
#[cfg(test)]
mod tests;

pub use process::{Counter, Gauge, Histogram, ProcessWriter, Summary};
