//! A process's set of files ([`ProcessWriter`]) and its typed metric children
//! (counters, gauges, histograms, summaries), as prometheus_client's values
//! write them.

use super::*;

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
