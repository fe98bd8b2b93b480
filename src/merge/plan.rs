//! Planning a merge ([`plan`]: which record feeds which series, and the
//! output order) and evaluating it on the current values
//! ([`MergePlan::evaluate`], the same float operation order as Python).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use thiserror::Error;

use super::keys::{KeyId, KeyStore, StrId, TupleId};
use super::python_float::python_float;
use super::MergeError;
use crate::format::file_name::{FileName, GaugeMerge};
use crate::model::float::go_float_string;
use crate::model::{Labels, MetricFamily, MetricType, Sample};

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
    /// `series = value` (`all` gauges).
    Assign(u32),
    /// `series += value`.
    Add(u32),
    /// The series' first value, then `if value < series: series = value`.
    Min(u32),
    /// The series' first value, then `if value > series: series = value`.
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
    /// Index of each taking-part file's first operation in `ops`.
    op_starts: Vec<usize>,
    ops: Vec<Op>,
    slots: usize,
    buckets: usize,
    accumulate: bool,
    families: Vec<PlannedFamily>,
    /// The output slots of counters, histograms and summaries: the series
    /// that must never go down (see [`super::floors`]).
    monotone: Vec<u32>,
}

/// The values of a merge's output series ([`MergePlan::output`]), before
/// they are put in families ([`MergePlan::families_of`]).
#[derive(Debug, Clone)]
pub struct Output {
    /// Each output slot's value.
    pub(super) slots: Vec<f64>,
    /// Each slot's first store (`mostrecent` order).
    first_store: Vec<u32>,
}

/// Names one output series across plans: its family, its sample name and
/// its labels.
pub(super) type SeriesId = (Arc<str>, Arc<str>, Labels);

/// The running state of a [`MergePlan`] evaluation: each series' value,
/// timestamp and first store, and the histogram buckets.
#[derive(Debug, Clone)]
pub struct Evaluation {
    slots: Vec<f64>,
    timestamps: Vec<f64>,
    first_store: Vec<u32>,
    buckets: Vec<f64>,
    /// Whether a `min`/`max` series has its first value.
    set: Vec<bool>,
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
        let mut monotone = Vec::new();
        for family in &families {
            let family = builder.family(family, accumulate)?;
            if family.metric_type != MetricType::Gauge {
                monotone.extend(family.samples.iter().map(|s| s.slot));
            }
            planned.push(family);
        }
        monotone.sort_unstable();
        Ok(MergePlan {
            files: included,
            op_starts: record_counts
                .iter()
                .scan(0usize, |start, n| {
                    let this = *start;
                    *start += n;
                    Some(this)
                })
                .collect(),
            record_counts,
            ops: builder.ops,
            slots: builder.slots as usize,
            buckets: builder.buckets as usize,
            accumulate,
            families: planned,
            monotone,
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
                let (slot, _) = groups.entry(&mut self.slots, labels, sample.name, labels);
                match mode {
                    GaugeMerge::All => Op::Assign(slot),
                    // The first value of a series is taken as it is (in
                    // file order that is the op that created the slot; a
                    // folded evaluation may meet another one first).
                    GaugeMerge::Min => Op::Min(slot),
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
        let mut state = self.start();
        for (position, &file) in self.files.iter().enumerate() {
            self.apply(&mut state, position, values(file))?;
        }
        Ok(self.finish(state))
    }

    /// The state before any file is applied.
    pub fn start(&self) -> Evaluation {
        Evaluation {
            slots: vec![0.0f64; self.slots],
            timestamps: vec![0.0f64; self.slots],
            first_store: vec![u32::MAX; self.slots],
            buckets: vec![0.0f64; self.buckets],
            set: vec![false; self.slots],
        }
    }

    /// Applies the values of the file at `position` in [`Self::files`].
    /// Applied in position order, the result is prometheus_client's; in
    /// another order, sums may differ in their last bits (float addition is
    /// not associative) and ties between equal `mostrecent` timestamps may go
    /// to another file.
    pub fn apply(
        &self,
        state: &mut Evaluation,
        position: usize,
        pairs: &[(f64, f64)],
    ) -> Result<(), ShapeMismatch> {
        if pairs.len() != self.record_counts[position] {
            return Err(ShapeMismatch("record count differs"));
        }
        let first_op = self.op_starts[position];
        let ops = &self.ops[first_op..first_op + pairs.len()];
        let Evaluation {
            slots,
            timestamps,
            first_store,
            buckets,
            set,
        } = state;
        for (index, (&(value, timestamp), &operation)) in pairs.iter().zip(ops).enumerate() {
            match operation {
                Op::Assign(s) => slots[s as usize] = value,
                Op::Add(s) => slots[s as usize] += value,
                Op::Min(s) => {
                    let s = s as usize;
                    if std::mem::replace(&mut set[s], true) {
                        if value < slots[s] {
                            slots[s] = value;
                        }
                    } else {
                        slots[s] = value;
                    }
                }
                Op::Max(s) => {
                    let s = s as usize;
                    if std::mem::replace(&mut set[s], true) {
                        if value > slots[s] {
                            slots[s] = value;
                        }
                    } else {
                        slots[s] = value;
                    }
                }
                Op::MostRecent(s) => {
                    let s = s as usize;
                    if timestamps[s] < timestamp {
                        slots[s] = value;
                        timestamps[s] = timestamp;
                    }
                    // In file order the first store is the first record with
                    // a timestamp above 0 (the initial one): the smallest
                    // such op, whatever order the files are applied in.
                    if timestamp > 0.0 {
                        let op = (first_op + index) as u32;
                        first_store[s] = first_store[s].min(op);
                    }
                }
                Op::Bucket(b) => buckets[b as usize] += value,
            }
        }
        Ok(())
    }

    /// The merged families of a state every file was applied to.
    pub fn finish(&self, state: Evaluation) -> Vec<MetricFamily> {
        self.families_of(self.output(state))
    }

    /// The output series' values of a state every file was applied to
    /// (histograms' buckets made cumulative, their `_count` derived).
    pub fn output(&self, state: Evaluation) -> Output {
        let Evaluation {
            mut slots,
            first_store,
            buckets,
            ..
        } = state;
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
        }
        Output { slots, first_store }
    }

    /// The output slots of counters, histograms and summaries, ascending.
    pub(super) fn monotone_slots(&self) -> &[u32] {
        &self.monotone
    }

    /// Every output series with its slot.
    pub(super) fn series_ids(&self) -> impl Iterator<Item = (SeriesId, u32)> + '_ {
        self.families.iter().flat_map(|family| {
            family.samples.iter().map(|sample| {
                let id = (
                    family.name.clone(),
                    sample.name.clone(),
                    sample.labels.clone(),
                );
                (id, sample.slot)
            })
        })
    }

    /// `state`, a state of the `old` plan, as a state of this one, for its
    /// counters', histograms' and summaries' series (sums and bucket
    /// accumulators; a series `old` did not have starts from 0): what
    /// applying the same files would have given, when they are the same in
    /// the same order. Gauges are left at their start.
    pub(super) fn carry(&self, old: &MergePlan, state: &Evaluation) -> Evaluation {
        let mut carried = self.start();
        let slots: FxHashMap<SeriesId, u32> = old.series_ids().collect();
        let mut bucket_of: FxHashMap<u32, u32> = FxHashMap::default();
        for family in &old.families {
            for histogram in &family.histograms {
                bucket_of.extend(
                    histogram
                        .bounds
                        .iter()
                        .map(|&(bucket, slot)| (slot, bucket)),
                );
            }
        }
        let mut new_bucket_of: FxHashMap<u32, u32> = FxHashMap::default();
        for family in &self.families {
            for histogram in &family.histograms {
                new_bucket_of.extend(
                    histogram
                        .bounds
                        .iter()
                        .map(|&(bucket, slot)| (slot, bucket)),
                );
            }
        }
        let monotone = |slot: &u32| self.monotone.binary_search(slot).is_ok();
        for (id, slot) in self.series_ids().filter(|(_, slot)| monotone(slot)) {
            let Some(&from) = slots.get(&id) else {
                continue;
            };
            match (new_bucket_of.get(&slot), bucket_of.get(&from)) {
                (Some(&to), Some(&from)) => {
                    carried.buckets[to as usize] = state.buckets[from as usize]
                }
                (None, None) => carried.slots[slot as usize] = state.slots[from as usize],
                _ => {}
            }
        }
        carried
    }

    /// The merged families of `output`.
    pub fn families_of(&self, output: Output) -> Vec<MetricFamily> {
        let Output { slots, first_store } = output;
        let mut families = Vec::with_capacity(self.families.len());
        for family in &self.families {
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
        families
    }
}
