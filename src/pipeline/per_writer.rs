//! Serving each writer's series separately (`per_writer` in the
//! configuration): Ray's per-worker view of a metrics directory.
//!
//! Ray's metrics agent does not merge processes: every series it exports
//! carries `WorkerId`, one value per worker process, and Ray's dashboards
//! group `by (WorkerId)`. [`PerWriter`] gives the same view of a
//! prometheus_client directory: the files are grouped by their writer (the
//! part of the file name after the type, `1234` in `counter_1234.db`, see
//! [`crate::format::file_name::writer_id`]), each group is merged on its own
//! exactly as prometheus_client would merge a directory holding only that
//! writer's files, and the groups are put side by side with
//! [`crate::transform::combine`], each sample labelled `<label>="<writer>"`.
//!
//! So for every series, summing the writers' samples over the label gives
//! the merged value for counters, histograms, summaries and `sum`/`livesum`
//! gauges (in the order the merge adds them, the listing order), and
//! `max`/`min`/`mostrecent` gauges are the writers' own values, of which the
//! merged one is the maximum, the minimum or the newest.
//!
//! One difference is deliberate: a dead writer's gauges (every mode) are not
//! served as its own series, as Ray's agent forgets a worker's gauges once
//! it stops reporting. The collector leaves them out before this merge
//! (its counters, histograms and summaries stay: they are totals), so the
//! equalities above hold for gauges while every writer is alive.
//!
//! Writers are served in the order their first file is listed, so families
//! keep the order prometheus_client's merge gives them whenever the first
//! writer names them all. Each writer keeps its own [`PlanCache`]: a
//! collection whose files did not change structure only evaluates.

use std::collections::HashMap;
use std::sync::Arc;

use crate::format::file_name::writer_id;
use crate::merge::{KeyStore, MergeInput, Merged, PlanCache};
use crate::model::{Labels, MetricFamily};
use crate::source::ray_workers::RayWorkerIds;
use crate::transform::combine::{combine, Conflict, ConflictReason, Part};
use crate::transform::config::PerWriter as PerWriterConfig;

/// The per-writer merge of one set of inputs; keep one per collector.
#[derive(Debug)]
pub struct PerWriter {
    /// What the configuration asks for.
    config: PerWriterConfig,
    /// The label naming the writer (`WorkerId` in the Ray profile).
    label: Arc<str>,
    /// Ray's worker ids by pid, with `ray_logs`.
    ray_ids: Option<RayWorkerIds>,
    /// Each writer's plan cache, by writer.
    plans: HashMap<Arc<str>, PlanCache>,
}

/// The result of [`PerWriter::merge`].
#[derive(Debug, Default)]
pub struct PerWriterMerged {
    /// The writers' families side by side; [`Merged::excluded`] indexes the
    /// files given to [`PerWriter::merge`].
    pub merged: Merged,
    /// Families whose type a later writer disagrees about (that writer's
    /// samples of it are left out). Help texts that differ are not reported:
    /// the first writer's is kept, as prometheus_client's merge keeps the
    /// first file's.
    pub conflicts: Vec<Conflict>,
}

impl PerWriter {
    /// A per-writer merge as `config` says.
    pub fn new(config: &PerWriterConfig) -> Self {
        Self {
            config: config.clone(),
            label: config.label.clone(),
            ray_ids: config.ray_logs.clone().map(RayWorkerIds::new),
            plans: HashMap::new(),
        }
    }

    /// The configuration this merge follows.
    pub fn config(&self) -> &PerWriterConfig {
        &self.config
    }

    /// With `ray_logs`: the directory and why it could not be read at its
    /// last reading, if it could not.
    pub fn ray_logs_error(&self) -> Option<(&std::path::Path, &str)> {
        let ids = self.ray_ids.as_ref()?;
        Some((ids.logs(), ids.error()?))
    }

    /// A `process_*` family of the live writers (labelled `pid`, see
    /// [`crate::pipeline::lifecycle`]) with the writer label in place of
    /// `pid`, valued as the writers' own series are, so they line up.
    pub fn process_family(&mut self, family: &MetricFamily) -> MetricFamily {
        let mut family = family.clone();
        for sample in &mut family.samples {
            let pairs: Vec<_> = sample
                .labels
                .iter()
                .map(|(name, value)| {
                    if &**name == "pid" {
                        (self.label.clone(), self.value(value))
                    } else {
                        (name.clone(), value.clone())
                    }
                })
                .collect();
            sample.labels = Labels::new(pairs);
        }
        family
    }

    /// The label value of `writer`: Ray's worker id of its process with
    /// `ray_logs` (when a log file names it), else the writer as named.
    fn value(&mut self, writer: &str) -> Arc<str> {
        let pid = writer
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| writer.parse::<u32>().ok())
            .flatten();
        match (&mut self.ray_ids, pid) {
            (Some(ids), Some(pid)) => ids.worker_id(pid).unwrap_or_else(|| Arc::from(writer)),
            _ => Arc::from(writer),
        }
    }

    /// The label naming the writer.
    pub fn label(&self) -> &Arc<str> {
        &self.label
    }

    /// Merges each writer's `files` (in listing order, with their base
    /// names) on its own and combines the writers.
    pub fn merge(
        &mut self,
        store: &mut KeyStore,
        files: &[(&str, MergeInput<'_>)],
    ) -> PerWriterMerged {
        // Writers in the order of their first file, each with its files.
        let mut order: Vec<(Arc<str>, Vec<usize>)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, (name, _)) in files.iter().enumerate() {
            let writer = writer_id(name);
            match index.get(writer) {
                Some(&at) => order[at].1.push(i),
                None => {
                    index.insert(writer, order.len());
                    order.push((Arc::from(writer), vec![i]));
                }
            }
        }
        // Writers whose files are gone: their plans go too.
        self.plans.retain(|writer, _| index.contains_key(&**writer));

        let mut out = Merged::default();
        let mut parts = Vec::with_capacity(order.len());
        for (writer, members) in order {
            let inputs: Vec<MergeInput<'_>> = members.iter().map(|&i| files[i].1).collect();
            let merged = self
                .plans
                .entry(writer.clone())
                .or_default()
                .merge(store, &inputs);
            out.replanned |= merged.replanned;
            out.files_merged += merged.files_merged;
            out.records += merged.records;
            out.excluded.extend(
                merged
                    .excluded
                    .into_iter()
                    .map(|(i, error)| (members[i], error)),
            );
            parts.push(Part {
                value: self.value(&writer),
                families: merged.families,
            });
        }
        out.excluded.sort_by_key(|(i, _)| *i);
        let combined = combine(&self.label, parts);
        out.families = combined.families;
        PerWriterMerged {
            merged: out,
            conflicts: combined
                .conflicts
                .into_iter()
                .filter(|c| c.reason == ConflictReason::TypeMismatch)
                .collect(),
        }
    }
}
