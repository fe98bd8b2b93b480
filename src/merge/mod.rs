//! Merging records from many process files exactly like prometheus_client's
//! `MultiProcessCollector.merge` (`_read_metrics` + `_accumulate_metrics`).
//!
//! The merge is split in two so that scrapes stay cheap:
//!
//! * [`plan`] looks at the *structure* (the ordered file list and the keys of
//!   their records) and decides, for every record, which output series it
//!   feeds and how (add, min, max, assign, most recent, histogram bucket). It
//!   also fixes the output order of families, label groups and samples. Keys
//!   are decoded and interned once in a [`KeyStore`], so planning hashes small
//!   integers, not strings.
//! * [`MergePlan::evaluate`] runs the arithmetic on the current values, in the
//!   same operation order as Python (so sums are bit-identical), and builds the
//!   [`MetricFamily`] list. A scrape of a directory whose structure did not
//!   change only evaluates.
//!
//! Semantics reproduced (see `../shared/research/prometheus_client_multiproc.md` §3):
//! the type comes from the first file naming a family, help from its first
//! record, the gauge mode from the last gauge file; counters, summaries,
//! `sum` gauges and histogram `_sum` add in file order from `0.0`; histogram
//! buckets are unioned over processes, sorted by their numeric bound, made
//! cumulative and re-labelled with `floatToGoString`, with `_count` derived;
//! `all` gauges get a `pid` label; `mostrecent` takes the strictly newest
//! timestamp and omits never-set series; everything keeps first-seen order.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use thiserror::Error;

use crate::format::file_name::{FileName, GaugeMerge};
use crate::format::key::{decode_key, KeyError};
use crate::model::float::go_float_string;
use crate::model::{Labels, MetricFamily, MetricType, Sample};

/// Identifies a distinct record key within a [`KeyStore`].
pub type KeyId = u32;
type StrId = u32;
type TupleId = u32;

/// Why a file was left out of a merge although its bytes parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MergeError {
    /// The file-name prefix is not a metric type prometheus_client accepts.
    #[error("unknown metric type '{prefix}' in the file name")]
    UnknownType {
        /// The prefix, e.g. `foo` for `foo_1.db`.
        prefix: String,
    },
    /// A gauge file whose name has no mode and pid parts (`gauge_1.db`).
    #[error("gauge file name has no mode and pid parts")]
    GaugeNameWithoutPid,
    /// A histogram bucket's `le` label is not a number Python's `float()`
    /// accepts, or is NaN.
    #[error("histogram bucket bound le=\"{le}\" is not a number")]
    InvalidBucketBound {
        /// The `le` label value.
        le: String,
    },
}

/// Decoded, interned record keys shared by every file and kept across scrapes.
#[derive(Debug)]
pub struct KeyStore {
    raw: FxHashMap<Box<[u8]>, KeyId>,
    keys: Vec<KeyInfo>,
    strings: Vec<Arc<str>>,
    string_ids: FxHashMap<Arc<str>, StrId>,
    tuples: Vec<Box<[(StrId, StrId)]>>,
    tuple_ids: FxHashMap<Box<[(StrId, StrId)]>, TupleId>,
    with_pid: FxHashMap<(TupleId, StrId), TupleId>,
    without_pid: FxHashMap<TupleId, TupleId>,
    split_le: FxHashMap<TupleId, Option<(TupleId, StrId)>>,
    with_le: FxHashMap<(TupleId, StrId), TupleId>,
    output_labels: FxHashMap<TupleId, Labels>,
    pid: StrId,
    le: StrId,
}

#[derive(Debug, Clone, Copy)]
struct KeyInfo {
    family: StrId,
    sample: StrId,
    help: StrId,
    labels: TupleId,
}

impl Default for KeyStore {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyStore {
    /// An empty store.
    pub fn new() -> Self {
        let mut store = Self {
            raw: FxHashMap::default(),
            keys: Vec::new(),
            strings: Vec::new(),
            string_ids: FxHashMap::default(),
            tuples: Vec::new(),
            tuple_ids: FxHashMap::default(),
            with_pid: FxHashMap::default(),
            without_pid: FxHashMap::default(),
            split_le: FxHashMap::default(),
            with_le: FxHashMap::default(),
            output_labels: FxHashMap::default(),
            pid: 0,
            le: 0,
        };
        store.pid = store.string("pid");
        store.le = store.string("le");
        store
    }

    /// Returns the id of a raw key, decoding it the first time it is seen.
    pub fn intern(&mut self, raw: &[u8]) -> Result<KeyId, KeyError> {
        if let Some(&id) = self.raw.get(raw) {
            return Ok(id);
        }
        let key = decode_key(raw)?;
        let family = self.string(&key.family);
        let sample = self.string(&key.sample);
        let help = self.string(&key.help);
        let pairs: Vec<(StrId, StrId)> = key
            .labels
            .iter()
            .map(|(n, v)| (self.string(n), self.string(v)))
            .collect();
        let labels = self.tuple(pairs);
        let id = self.keys.len() as KeyId;
        self.keys.push(KeyInfo {
            family,
            sample,
            help,
            labels,
        });
        self.raw.insert(raw.into(), id);
        Ok(id)
    }

    /// Number of distinct keys decoded so far.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key has been decoded yet.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The family name of a key.
    pub fn family_name(&self, key: KeyId) -> &str {
        &self.strings[self.keys[key as usize].family as usize]
    }

    fn string(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as StrId;
        let shared: Arc<str> = s.into();
        self.strings.push(shared.clone());
        self.string_ids.insert(shared, id);
        id
    }

    fn tuple(&mut self, pairs: Vec<(StrId, StrId)>) -> TupleId {
        if let Some(&id) = self.tuple_ids.get(pairs.as_slice()) {
            return id;
        }
        let id = self.tuples.len() as TupleId;
        let boxed: Box<[(StrId, StrId)]> = pairs.into();
        self.tuples.push(boxed.clone());
        self.tuple_ids.insert(boxed, id);
        id
    }

    /// `labels_key + (('pid', pid),)`.
    fn tuple_with_pid(&mut self, labels: TupleId, pid: StrId) -> TupleId {
        if let Some(&id) = self.with_pid.get(&(labels, pid)) {
            return id;
        }
        let mut pairs = self.tuples[labels as usize].to_vec();
        pairs.push((self.pid, pid));
        let id = self.tuple(pairs);
        self.with_pid.insert((labels, pid), id);
        id
    }

    /// `tuple(l for l in labels if l[0] != 'pid')`.
    fn tuple_without_pid(&mut self, labels: TupleId) -> TupleId {
        if let Some(&id) = self.without_pid.get(&labels) {
            return id;
        }
        let pid = self.pid;
        let pairs: Vec<_> = self.tuples[labels as usize]
            .iter()
            .copied()
            .filter(|&(n, _)| n != pid)
            .collect();
        let id = self.tuple(pairs);
        self.without_pid.insert(labels, id);
        id
    }

    /// For labels holding `le`: the labels without any `le` and the first `le` value.
    fn tuple_split_le(&mut self, labels: TupleId) -> Option<(TupleId, StrId)> {
        if let Some(&cached) = self.split_le.get(&labels) {
            return cached;
        }
        let le = self.le;
        let pairs = &self.tuples[labels as usize];
        let result = pairs.iter().find(|&&(n, _)| n == le).map(|&(_, v)| v);
        let result = match result {
            Some(value) => {
                let without: Vec<_> = pairs.iter().copied().filter(|&(n, _)| n != le).collect();
                Some((self.tuple(without), value))
            }
            None => None,
        };
        self.split_le.insert(labels, result);
        result
    }

    /// `labels + (('le', bound),)`.
    fn tuple_with_le(&mut self, labels: TupleId, bound: StrId) -> TupleId {
        if let Some(&id) = self.with_le.get(&(labels, bound)) {
            return id;
        }
        let mut pairs = self.tuples[labels as usize].to_vec();
        pairs.push((self.le, bound));
        let id = self.tuple(pairs);
        self.with_le.insert((labels, bound), id);
        id
    }

    /// `dict(labels)` as a sorted label set.
    fn labels_for_output(&mut self, labels: TupleId) -> Labels {
        if let Some(found) = self.output_labels.get(&labels) {
            return found.clone();
        }
        let built = Labels::new(self.tuples[labels as usize].iter().map(|&(n, v)| {
            (
                self.strings[n as usize].clone(),
                self.strings[v as usize].clone(),
            )
        }));
        self.output_labels.insert(labels, built.clone());
        built
    }
}

/// One input file for planning: its parsed name and the keys of its records
/// in file order.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// The parsed file name.
    pub name: &'a FileName,
    /// Record keys in file order.
    pub keys: &'a [KeyId],
}

/// What a record does to its output series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `series = value` (`all` gauges, and the first value of `min`/`max`).
    Assign(u32),
    /// `series += value`.
    Add(u32),
    /// `if value < series: series = value`.
    Min(u32),
    /// `if value > series: series = value`.
    Max(u32),
    /// Newest strictly greater timestamp wins.
    MostRecent(u32),
    /// `bucket += value` for a histogram bucket accumulator.
    Bucket(u32),
}

#[derive(Debug, Clone)]
struct PlannedSample {
    slot: u32,
    /// Label group within the family (output order of groups).
    group: u32,
    name: Arc<str>,
    labels: Labels,
}

#[derive(Debug, Clone)]
struct PlannedHistogram {
    /// (bucket accumulator, output slot) in ascending bound order.
    bounds: Vec<(u32, u32)>,
    count_slot: Option<u32>,
}

#[derive(Debug, Clone)]
struct PlannedFamily {
    name: Arc<str>,
    help: Arc<str>,
    metric_type: MetricType,
    /// `mostrecent` gauges: output order and presence depend on values.
    most_recent: bool,
    samples: Vec<PlannedSample>,
    histograms: Vec<PlannedHistogram>,
}

/// The structure of a merge: which record feeds which series, and the output
/// order. Reusable for as long as the file list and their keys are unchanged.
#[derive(Debug, Clone, Default)]
pub struct MergePlan {
    /// Indices (into the planned inputs) of the files that take part.
    files: Vec<usize>,
    /// Record count of each file that takes part, to check evaluation input.
    record_counts: Vec<usize>,
    ops: Vec<Op>,
    slots: usize,
    buckets: usize,
    accumulate: bool,
    families: Vec<PlannedFamily>,
}

/// A planned merge plus the inputs that had to be left out.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The plan over the remaining files.
    pub plan: MergePlan,
    /// Inputs left out (index into the planned inputs) and why.
    pub excluded: Vec<(usize, MergeError)>,
}

/// Plans a merge of `files` in the given order. `accumulate` is
/// prometheus_client's flag: `true` (what scrapes use) makes buckets
/// cumulative and adds `_count`.
///
/// A file that prometheus_client could not merge (see [`MergeError`]) is left
/// out entirely and the rest is planned as if it were absent.
pub fn plan(store: &mut KeyStore, files: &[PlanInput<'_>], accumulate: bool) -> Planned {
    let mut excluded: Vec<(usize, MergeError)> = Vec::new();
    let mut is_excluded = vec![false; files.len()];
    for (index, file) in files.iter().enumerate() {
        if file.name.metric_type.is_none() {
            excluded.push((
                index,
                MergeError::UnknownType {
                    prefix: file.name.type_prefix.clone(),
                },
            ));
            is_excluded[index] = true;
        } else if file.name.is_gauge() && file.name.gauge_pid.is_none() && !file.keys.is_empty() {
            excluded.push((index, MergeError::GaugeNameWithoutPid));
            is_excluded[index] = true;
        }
    }
    loop {
        match Builder::build(store, files, &is_excluded, accumulate) {
            Ok(plan) => {
                excluded.sort_by_key(|(i, _)| *i);
                return Planned { plan, excluded };
            }
            Err((index, error)) => {
                is_excluded[index] = true;
                excluded.push((index, error));
            }
        }
    }
}

/// A record as it enters a family (Python's `metric.samples` before accumulation).
struct RawSample {
    op: u32,
    file: u32,
    name: StrId,
    labels: TupleId,
}

struct FamilyBuild {
    name: StrId,
    help: StrId,
    metric_type: MetricType,
    mode: GaugeMerge,
    samples: Vec<RawSample>,
}

struct Builder<'s> {
    store: &'s mut KeyStore,
    ops: Vec<Op>,
    slots: u32,
    buckets: u32,
}

/// Per-family grouping state (Python's nested `samples` dict).
#[derive(Default)]
struct Groups {
    groups: Vec<Vec<(u32, StrId, TupleId)>>,
    group_of: FxHashMap<TupleId, u32>,
    entry_of: FxHashMap<(StrId, TupleId), u32>,
}

impl Groups {
    /// Returns `(slot, created)` for entry `(name, labels)` in group `group`.
    fn entry(
        &mut self,
        slots: &mut u32,
        group: TupleId,
        name: StrId,
        labels: TupleId,
    ) -> (u32, bool) {
        if let Some(&slot) = self.entry_of.get(&(name, labels)) {
            return (slot, false);
        }
        let slot = *slots;
        *slots += 1;
        let next_group = self.groups.len() as u32;
        let g = *self.group_of.entry(group).or_insert(next_group);
        if g == next_group {
            self.groups.push(Vec::new());
        }
        self.groups[g as usize].push((slot, name, labels));
        self.entry_of.insert((name, labels), slot);
        (slot, true)
    }
}

/// Histogram buckets of one label group: bound → accumulator (Python's `buckets[labels]`).
struct BucketGroup {
    labels: TupleId,
    bounds: Vec<(f64, u32)>,
    index: FxHashMap<u64, usize>,
}

impl<'s> Builder<'s> {
    fn build(
        store: &'s mut KeyStore,
        files: &[PlanInput<'_>],
        excluded: &[bool],
        accumulate: bool,
    ) -> Result<MergePlan, (usize, MergeError)> {
        let mut builder = Builder {
            store,
            ops: Vec::new(),
            slots: 0,
            buckets: 0,
        };
        let mut included = Vec::new();
        let mut record_counts = Vec::new();
        let mut families: Vec<FamilyBuild> = Vec::new();
        let mut family_of: FxHashMap<StrId, usize> = FxHashMap::default();
        let mut op_index: u32 = 0;
        for (index, file) in files.iter().enumerate() {
            if excluded[index] {
                continue;
            }
            included.push(index);
            record_counts.push(file.keys.len());
            let Some(metric_type) = file.name.metric_type else {
                continue;
            };
            let gauge = if file.name.is_gauge() {
                let pid = file.name.gauge_pid.as_deref().unwrap_or_default();
                Some((
                    builder.store.string(pid),
                    file.name.gauge_merge().unwrap_or(GaugeMerge::All),
                ))
            } else {
                None
            };
            for &key in file.keys {
                let info = builder.store.keys[key as usize];
                let family = *family_of.entry(info.family).or_insert_with(|| {
                    families.push(FamilyBuild {
                        name: info.family,
                        help: info.help,
                        metric_type,
                        mode: GaugeMerge::All,
                        samples: Vec::new(),
                    });
                    families.len() - 1
                });
                let labels = match gauge {
                    Some((pid, mode)) => {
                        families[family].mode = mode;
                        builder.store.tuple_with_pid(info.labels, pid)
                    }
                    None => info.labels,
                };
                families[family].samples.push(RawSample {
                    op: op_index,
                    file: index as u32,
                    name: info.sample,
                    labels,
                });
                op_index += 1;
            }
        }
        builder.ops = vec![Op::Assign(0); op_index as usize];
        let mut planned = Vec::with_capacity(families.len());
        for family in &families {
            planned.push(builder.family(family, accumulate)?);
        }
        Ok(MergePlan {
            files: included,
            record_counts,
            ops: builder.ops,
            slots: builder.slots as usize,
            buckets: builder.buckets as usize,
            accumulate,
            families: planned,
        })
    }

    fn family(
        &mut self,
        family: &FamilyBuild,
        accumulate: bool,
    ) -> Result<PlannedFamily, (usize, MergeError)> {
        let mut groups = Groups::default();
        let mut bucket_groups: Vec<BucketGroup> = Vec::new();
        let mut bucket_group_of: FxHashMap<TupleId, usize> = FxHashMap::default();
        let is_gauge = family.metric_type == MetricType::Gauge;
        let mode = family.mode;
        for sample in &family.samples {
            let mut labels = sample.labels;
            if is_gauge && mode != GaugeMerge::All {
                labels = self.store.tuple_without_pid(labels);
            }
            let op = if is_gauge {
                let (slot, created) = groups.entry(&mut self.slots, labels, sample.name, labels);
                match mode {
                    GaugeMerge::All => Op::Assign(slot),
                    GaugeMerge::Min if created => Op::Assign(slot),
                    GaugeMerge::Min => Op::Min(slot),
                    GaugeMerge::Max if created => Op::Assign(slot),
                    GaugeMerge::Max => Op::Max(slot),
                    GaugeMerge::Sum => Op::Add(slot),
                    GaugeMerge::MostRecent => Op::MostRecent(slot),
                }
            } else if family.metric_type == MetricType::Histogram {
                match self.store.tuple_split_le(labels) {
                    Some((without_le, bound)) => {
                        let text = &self.store.strings[bound as usize];
                        let value =
                            python_float(text).filter(|v| !v.is_nan()).ok_or_else(|| {
                                (
                                    sample.file as usize,
                                    MergeError::InvalidBucketBound {
                                        le: text.to_string(),
                                    },
                                )
                            })?;
                        let g = *bucket_group_of.entry(without_le).or_insert_with(|| {
                            bucket_groups.push(BucketGroup {
                                labels: without_le,
                                bounds: Vec::new(),
                                index: FxHashMap::default(),
                            });
                            bucket_groups.len() - 1
                        });
                        let group = &mut bucket_groups[g];
                        // Python dict keys: -0.0 == 0.0 and the first key seen is kept.
                        let normalized = if value == 0.0 { 0 } else { value.to_bits() };
                        let position = match group.index.get(&normalized) {
                            Some(&p) => p,
                            None => {
                                group.bounds.push((value, self.buckets));
                                self.buckets += 1;
                                group.index.insert(normalized, group.bounds.len() - 1);
                                group.bounds.len() - 1
                            }
                        };
                        Op::Bucket(group.bounds[position].1)
                    }
                    None => Op::Add(groups.entry(&mut self.slots, labels, sample.name, labels).0),
                }
            } else {
                Op::Add(groups.entry(&mut self.slots, labels, sample.name, labels).0)
            };
            self.ops[sample.op as usize] = op;
        }

        let name = self.store.strings[family.name as usize].clone();
        let mut histograms = Vec::new();
        if family.metric_type == MetricType::Histogram {
            let bucket_name = self.store.string(&format!("{name}_bucket"));
            let count_name = self.store.string(&format!("{name}_count"));
            for group in &mut bucket_groups {
                // No NaN bounds, and -0.0/0.0 were merged above, so total_cmp
                // orders exactly like Python's sorted().
                group.bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut bounds = Vec::with_capacity(group.bounds.len());
                for &(bound, accumulator) in &group.bounds {
                    let text = self.store.string(&go_float_string(bound));
                    let labels = self.store.tuple_with_le(group.labels, text);
                    let (slot, _) =
                        groups.entry(&mut self.slots, group.labels, bucket_name, labels);
                    bounds.push((accumulator, slot));
                }
                let count_slot = accumulate.then(|| {
                    groups
                        .entry(&mut self.slots, group.labels, count_name, group.labels)
                        .0
                });
                histograms.push(PlannedHistogram { bounds, count_slot });
            }
        }

        let mut samples = Vec::new();
        for (group_index, group) in groups.groups.iter().enumerate() {
            for &(slot, sample_name, labels) in group {
                samples.push(PlannedSample {
                    slot,
                    group: group_index as u32,
                    name: self.store.strings[sample_name as usize].clone(),
                    labels: self.store.labels_for_output(labels),
                });
            }
        }
        Ok(PlannedFamily {
            name,
            help: self.store.strings[family.help as usize].clone(),
            metric_type: family.metric_type,
            most_recent: is_gauge && mode == GaugeMerge::MostRecent,
            samples,
            histograms,
        })
    }
}

/// Why [`MergePlan::evaluate`] refused its input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("evaluation input does not match the plan: {0}")]
pub struct ShapeMismatch(&'static str);

impl MergePlan {
    /// Indices (into the planned inputs) of the files that take part, in order.
    pub fn files(&self) -> &[usize] {
        &self.files
    }

    /// Number of output series slots (a measure of the merged size).
    pub fn series(&self) -> usize {
        self.slots
    }

    /// Number of families in the output.
    pub fn families(&self) -> usize {
        self.families.len()
    }

    /// Computes the merged families from the current values.
    ///
    /// `values(i)` returns the `(value, timestamp)` pairs of planned input `i`
    /// in record order; it is called once for each index in [`Self::files`],
    /// in order, and must return as many pairs as that input had keys.
    pub fn evaluate<'v, F>(&self, mut values: F) -> Result<Vec<MetricFamily>, ShapeMismatch>
    where
        F: FnMut(usize) -> &'v [(f64, f64)],
    {
        let mut slots = vec![0.0f64; self.slots];
        let mut timestamps = vec![0.0f64; self.slots];
        let mut first_store = vec![u32::MAX; self.slots];
        let mut buckets = vec![0.0f64; self.buckets];
        let mut op = 0usize;
        for (position, &file) in self.files.iter().enumerate() {
            let pairs = values(file);
            if pairs.len() != self.record_counts[position] {
                return Err(ShapeMismatch("record count differs"));
            }
            let ops = &self.ops[op..op + pairs.len()];
            for (&(value, timestamp), &operation) in pairs.iter().zip(ops) {
                match operation {
                    Op::Assign(s) => slots[s as usize] = value,
                    Op::Add(s) => slots[s as usize] += value,
                    Op::Min(s) => {
                        if value < slots[s as usize] {
                            slots[s as usize] = value;
                        }
                    }
                    Op::Max(s) => {
                        if value > slots[s as usize] {
                            slots[s as usize] = value;
                        }
                    }
                    Op::MostRecent(s) => {
                        let s = s as usize;
                        if timestamps[s] < timestamp {
                            slots[s] = value;
                            timestamps[s] = timestamp;
                            if first_store[s] == u32::MAX {
                                first_store[s] = op as u32;
                            }
                        }
                    }
                    Op::Bucket(b) => buckets[b as usize] += value,
                }
                op += 1;
            }
        }
        let mut families = Vec::with_capacity(self.families.len());
        for family in &self.families {
            for histogram in &family.histograms {
                let mut acc = 0.0f64;
                for &(bucket, slot) in &histogram.bounds {
                    if self.accumulate {
                        acc += buckets[bucket as usize];
                        slots[slot as usize] = acc;
                    } else {
                        slots[slot as usize] = buckets[bucket as usize];
                    }
                }
                if let Some(count) = histogram.count_slot {
                    slots[count as usize] = acc;
                }
            }
            let sample = |planned: &PlannedSample| Sample {
                name: planned.name.clone(),
                labels: planned.labels.clone(),
                value: slots[planned.slot as usize],
            };
            let samples = if family.most_recent {
                // Python creates a label group when a value is first stored there,
                // and a series that was never set is not emitted at all.
                let mut group_first: FxHashMap<u32, u32> = FxHashMap::default();
                for planned in &family.samples {
                    let stored = first_store[planned.slot as usize];
                    if stored != u32::MAX {
                        let entry = group_first.entry(planned.group).or_insert(stored);
                        *entry = (*entry).min(stored);
                    }
                }
                let mut stored: Vec<&PlannedSample> = family
                    .samples
                    .iter()
                    .filter(|p| first_store[p.slot as usize] != u32::MAX)
                    .collect();
                stored.sort_by_key(|p| (group_first[&p.group], first_store[p.slot as usize]));
                stored.into_iter().map(sample).collect()
            } else {
                family.samples.iter().map(sample).collect()
            };
            families.push(MetricFamily {
                name: family.name.clone(),
                help: family.help.clone(),
                metric_type: family.metric_type,
                samples,
            });
        }
        Ok(families)
    }
}

/// Parses a string the way Python's `float()` does: surrounding whitespace,
/// a sign, `inf`, `infinity` and `nan` in any case, `_` between digits, and
/// decimal digits of any script (`float('١٢.5')` is `12.5`).
pub fn python_float(text: &str) -> Option<f64> {
    // CPython first maps whitespace to ' ' and decimal digits to ASCII
    // (`_PyUnicode_TransformDecimalAndSpaceToASCII`), then parses ASCII.
    let mut ascii = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            ascii.push(if ('\u{1c}'..='\u{1f}').contains(&c) {
                ' '
            } else {
                c
            });
        } else if c.is_whitespace() {
            ascii.push(' ');
        } else {
            ascii.push(unicode_decimal_digit(c)?);
        }
    }
    let trimmed = ascii.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\u{b}');
    if trimmed.is_empty() {
        return None;
    }
    let body = trimmed.strip_prefix(['+', '-']).unwrap_or(trimmed);
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return trimmed.parse::<f64>().ok();
    }
    let bytes = trimmed.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-' => {}
            b'_' => {
                let before = i.checked_sub(1).is_some_and(|j| bytes[j].is_ascii_digit());
                let after = bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
                if !before || !after {
                    return None;
                }
            }
            _ => return None,
        }
    }
    trimmed.replace('_', "").parse::<f64>().ok()
}

/// The ASCII digit for a Unicode decimal digit (general category Nd, which
/// Unicode lays out in runs of ten starting at a zero), as Python maps them.
fn unicode_decimal_digit(c: char) -> Option<char> {
    // The zero of every run of decimal digits, Unicode 14.0 (Python 3.11).
    const ZEROS: [u32; 65] = [
        0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66, 0xDE6,
        0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
        0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0,
        0xFF10, 0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0,
        0x11650, 0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0,
        0x16B50, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
    ];
    let code = c as u32;
    let run = ZEROS.partition_point(|&zero| zero <= code).checked_sub(1)?;
    let offset = code - ZEROS[run];
    (offset < 10).then(|| char::from(b'0' + offset as u8))
}

/// A record as stored in a file: raw key bytes, value and timestamp.
pub type RawRecord = (Vec<u8>, f64, f64);

/// A whole merge in one call: decodes keys, plans and evaluates.
///
/// Each input is a file name plus its records as `(raw key, value,
/// timestamp)`. Returns the families and the inputs left out with their
/// errors (a key that does not decode leaves its whole file out). This is the
/// simple entry point for tests and one-shot tools; servers keep a
/// [`KeyStore`] and a [`MergePlan`] across scrapes instead.
pub fn merge_records(
    files: &[(FileName, Vec<RawRecord>)],
    accumulate: bool,
) -> (Vec<MetricFamily>, Vec<(usize, String)>) {
    let mut store = KeyStore::new();
    let mut problems: Vec<(usize, String)> = Vec::new();
    let mut keys: Vec<Vec<KeyId>> = Vec::with_capacity(files.len());
    let mut values: Vec<Vec<(f64, f64)>> = Vec::with_capacity(files.len());
    let mut usable = Vec::new();
    for (index, (_, records)) in files.iter().enumerate() {
        let decoded: Result<Vec<KeyId>, KeyError> = records
            .iter()
            .map(|(raw, _, _)| store.intern(raw))
            .collect();
        match decoded {
            Ok(ids) => {
                keys.push(ids);
                values.push(records.iter().map(|&(_, v, t)| (v, t)).collect());
                usable.push(index);
            }
            Err(error) => problems.push((index, error.to_string())),
        }
    }
    let inputs: Vec<PlanInput<'_>> = usable
        .iter()
        .zip(&keys)
        .map(|(&index, keys)| PlanInput {
            name: &files[index].0,
            keys,
        })
        .collect();
    let planned = plan(&mut store, &inputs, accumulate);
    for (input, error) in &planned.excluded {
        problems.push((usable[*input], error.to_string()));
    }
    problems.sort_by_key(|(i, _)| *i);
    let families = planned
        .plan
        .evaluate(|i| values[i].as_slice())
        .unwrap_or_default();
    (families, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(family: &str, sample: &str, labels: &[(&str, &str)], help: &str) -> Vec<u8> {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("\"{k}\": \"{v}\""))
            .collect();
        format!(
            "[\"{family}\", \"{sample}\", {{{}}}, \"{help}\"]",
            labels.join(", ")
        )
        .into_bytes()
    }

    fn file(name: &str, records: Vec<(Vec<u8>, f64, f64)>) -> (FileName, Vec<(Vec<u8>, f64, f64)>) {
        (FileName::parse(name), records)
    }

    fn lines(families: &[MetricFamily]) -> Vec<String> {
        families
            .iter()
            .flat_map(|f| {
                f.samples.iter().map(|s| {
                    let labels: Vec<String> =
                        s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!(
                        "{}{{{}}} {}",
                        s.name,
                        labels.join(","),
                        go_float_string(s.value)
                    )
                })
            })
            .collect()
    }

    #[test]
    fn counters_add_in_file_order() {
        let (families, problems) = merge_records(
            &[
                file(
                    "counter_1.db",
                    vec![(key("c", "c_total", &[], "h"), 1.0, 0.0)],
                ),
                file(
                    "counter_2.db",
                    vec![(key("c", "c_total", &[], "other help"), 2.0, 0.0)],
                ),
            ],
            true,
        );
        assert!(problems.is_empty());
        assert_eq!(&*families[0].help, "h");
        assert_eq!(lines(&families), ["c_total{} 3.0"]);
    }

    #[test]
    fn histogram_buckets_union_and_accumulate() {
        let h = |le: &str| key("h", "h_bucket", &[("le", le)], "h");
        let (families, _) = merge_records(
            &[
                file(
                    "histogram_1.db",
                    vec![
                        (key("h", "h_sum", &[], "h"), 1.5, 0.0),
                        (h("1.0"), 1.0, 0.0),
                        (h("2.0"), 0.0, 0.0),
                        (h("+Inf"), 0.0, 0.0),
                    ],
                ),
                file(
                    "histogram_2.db",
                    vec![
                        (key("h", "h_sum", &[], "h"), 2.0, 0.0),
                        (h("1.5"), 1.0, 0.0),
                        (h("3"), 0.0, 0.0),
                        (h("+Inf"), 1.0, 0.0),
                    ],
                ),
            ],
            true,
        );
        assert_eq!(
            lines(&families),
            [
                "h_sum{} 3.5",
                "h_bucket{le=1.0} 1.0",
                "h_bucket{le=1.5} 2.0",
                "h_bucket{le=2.0} 2.0",
                "h_bucket{le=3.0} 2.0",
                "h_bucket{le=+Inf} 3.0",
                "h_count{} 3.0",
            ]
        );
    }

    #[test]
    fn no_accumulate_keeps_raw_buckets_and_no_count() {
        let (families, _) = merge_records(
            &[file(
                "histogram_1.db",
                vec![
                    (key("h", "h_sum", &[], "h"), 1.0, 0.0),
                    (key("h", "h_bucket", &[("le", "1.0")], "h"), 1.0, 0.0),
                    (key("h", "h_bucket", &[("le", "+Inf")], "h"), 0.0, 0.0),
                ],
            )],
            false,
        );
        assert_eq!(
            lines(&families),
            [
                "h_sum{} 1.0",
                "h_bucket{le=1.0} 1.0",
                "h_bucket{le=+Inf} 0.0"
            ]
        );
    }

    #[test]
    fn gauge_modes() {
        let g = |v: f64| (key("g", "g", &[], "h"), v, 0.0);
        let run = |mode: &str| {
            let (families, _) = merge_records(
                &[
                    file(&format!("gauge_{mode}_1.db"), vec![g(1.0)]),
                    file(&format!("gauge_{mode}_2.db"), vec![g(2.0)]),
                ],
                true,
            );
            lines(&families)
        };
        assert_eq!(run("all"), ["g{pid=1} 1.0", "g{pid=2} 2.0"]);
        assert_eq!(run("min"), ["g{} 1.0"]);
        assert_eq!(run("livemax"), ["g{} 2.0"]);
        assert_eq!(run("sum"), ["g{} 3.0"]);
    }

    #[test]
    fn mostrecent_newest_wins_ties_keep_first_never_set_is_omitted() {
        let g = |labels: &[(&str, &str)], v: f64, ts: f64| (key("g", "g", labels, "h"), v, ts);
        let (families, _) = merge_records(
            &[
                file(
                    "gauge_mostrecent_1.db",
                    vec![g(&[("l", "a")], 1.0, 0.0), g(&[("l", "b")], 5.0, 10.0)],
                ),
                file(
                    "gauge_mostrecent_2.db",
                    vec![g(&[("l", "a")], 2.0, 7.0), g(&[("l", "b")], 6.0, 10.0)],
                ),
            ],
            true,
        );
        // Group b is stored first (file 1), then a (file 2).
        assert_eq!(lines(&families), ["g{l=b} 5.0", "g{l=a} 2.0"]);

        let (families, _) = merge_records(
            &[file("gauge_mostrecent_1.db", vec![g(&[], 1.0, 0.0)])],
            true,
        );
        assert_eq!(families.len(), 1);
        assert!(families[0].samples.is_empty());
    }

    #[test]
    fn sum_of_negative_zero_is_positive_zero() {
        let g = (key("g", "g", &[], "h"), -0.0, 0.0);
        let (families, _) = merge_records(&[file("gauge_sum_1.db", vec![g.clone()])], true);
        assert!(families[0].samples[0].value.is_sign_positive());
        let (families, _) = merge_records(&[file("gauge_max_1.db", vec![g])], true);
        assert!(families[0].samples[0].value.is_sign_negative());
    }

    #[test]
    fn last_gauge_file_decides_the_mode() {
        let g = |v: f64| (key("g", "g", &[], "h"), v, 0.0);
        let (families, _) = merge_records(
            &[
                file("gauge_all_1.db", vec![g(1.0)]),
                file("gauge_sum_2.db", vec![g(2.0)]),
                file("gauge_max_3.db", vec![g(3.0)]),
            ],
            true,
        );
        assert_eq!(lines(&families), ["g{} 3.0"]);
    }

    #[test]
    fn user_pid_label_is_replaced_in_all_mode_and_dropped_otherwise() {
        let g = (key("g", "g", &[("pid", "user")], "h"), 1.0, 0.0);
        let (families, _) = merge_records(&[file("gauge_all_7.db", vec![g.clone()])], true);
        assert_eq!(lines(&families), ["g{pid=7} 1.0"]);
        let (families, _) = merge_records(&[file("gauge_min_7.db", vec![g])], true);
        assert_eq!(lines(&families), ["g{} 1.0"]);
    }

    #[test]
    fn bad_files_are_left_out_whole() {
        let good = file(
            "counter_1.db",
            vec![(key("c", "c_total", &[], "h"), 1.0, 0.0)],
        );
        let (families, problems) = merge_records(
            &[
                good.clone(),
                file("foo_2.db", vec![(key("c", "c_total", &[], "h"), 5.0, 0.0)]),
                file(
                    "counter_3.db",
                    vec![
                        (key("c", "c_total", &[], "h"), 5.0, 0.0),
                        (b"junk".to_vec(), 1.0, 0.0),
                    ],
                ),
                file("gauge_4.db", vec![(key("g", "g", &[], "h"), 5.0, 0.0)]),
                file(
                    "histogram_5.db",
                    vec![(key("h", "h_bucket", &[("le", "abc")], "h"), 5.0, 0.0)],
                ),
            ],
            true,
        );
        assert_eq!(lines(&families), ["c_total{} 1.0"]);
        let bad: Vec<usize> = problems.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad, [1, 2, 3, 4]);
    }

    #[test]
    fn python_float_forms() {
        assert_eq!(python_float("1.0"), Some(1.0));
        assert_eq!(python_float(" +Inf "), Some(f64::INFINITY));
        assert_eq!(python_float("-infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(python_float("1e+010"), Some(1e10));
        assert_eq!(python_float("1_0"), Some(10.0));
        assert_eq!(python_float("1__0"), None);
        assert_eq!(python_float("_1"), None);
        assert_eq!(python_float(".5"), Some(0.5));
        assert_eq!(python_float("5."), Some(5.0));
        assert_eq!(python_float("."), None);
        assert_eq!(python_float(""), None);
        assert_eq!(python_float("0x10"), None);
        assert!(python_float("nan").is_some_and(f64::is_nan));
        assert_eq!(python_float("\u{661}\u{662}.5"), Some(12.5));
        assert_eq!(python_float("\u{ff11}"), Some(1.0));
        assert_eq!(python_float("\u{a0}2\u{2003}"), Some(2.0));
        assert_eq!(python_float("\u{669}\u{66a}"), None);
        assert_eq!(python_float("1 0"), None);
    }
}
