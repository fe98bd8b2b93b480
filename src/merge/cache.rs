//! The incremental plan cache ([`PlanCache`]): a merge is planned again only
//! when the file list or a file's keys changed; otherwise the previous plan
//! is evaluated on the current values.

use super::keys::{KeyId, KeyStore};
use super::plan::{plan, MergePlan, PlanInput};
use super::MergeError;
use crate::format::file_name::FileName;
use crate::model::MetricFamily;

/// One file to merge: its parsed name, the keys of its records in file order,
/// their current values and timestamps, and a number that changes whenever
/// its keys change (its structure generation).
#[derive(Debug, Clone, Copy)]
pub struct MergeInput<'a> {
    /// The parsed file name.
    pub name: &'a FileName,
    /// Record keys in file order.
    pub keys: &'a [KeyId],
    /// Value and timestamp of each record.
    pub values: &'a [(f64, f64)],
    /// Identifies the file's structure: equal generations, equal keys.
    pub generation: u64,
}

/// The result of one [`PlanCache::merge`].
#[derive(Debug, Default)]
pub struct Merged {
    /// Merged families in prometheus_client's order.
    pub families: Vec<MetricFamily>,
    /// Inputs left out (index into the inputs) and why.
    pub excluded: Vec<(usize, MergeError)>,
    /// Whether the merge had to be planned again.
    pub replanned: bool,
    /// Files that took part.
    pub files_merged: usize,
    /// Records that took part.
    pub records: usize,
}

/// The last plan and the structure it was made for.
#[derive(Debug, Default)]
pub struct PlanCache {
    plan: Option<(Vec<u64>, MergePlan)>,
    excluded: Vec<(u64, MergeError)>,
}

impl PlanCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Merges `files` in order (keys interned in `store`), planning again
    /// only when their structure differs from the last call's.
    pub fn merge(&mut self, store: &mut KeyStore, files: &[MergeInput<'_>]) -> Merged {
        let signature: Vec<u64> = files.iter().map(|f| f.generation).collect();
        let reuse = matches!(&self.plan, Some((previous, _)) if *previous == signature);
        if !reuse {
            let inputs: Vec<PlanInput<'_>> = files
                .iter()
                .map(|f| PlanInput {
                    name: f.name,
                    keys: f.keys,
                })
                .collect();
            let planned = plan(store, &inputs, true);
            self.excluded = planned
                .excluded
                .into_iter()
                .map(|(i, e)| (signature[i], e))
                .collect();
            self.plan = Some((signature.clone(), planned.plan));
        }
        let mut merged = Merged {
            replanned: !reuse,
            excluded: self
                .excluded
                .iter()
                .filter_map(|(generation, error)| {
                    let i = signature.iter().position(|g| g == generation)?;
                    Some((i, error.clone()))
                })
                .collect(),
            ..Merged::default()
        };
        if let Some((_, plan)) = &self.plan {
            for &i in plan.files() {
                merged.files_merged += 1;
                merged.records += files[i].values.len();
            }
            merged.families = plan.evaluate(|i| files[i].values).unwrap_or_default();
        }
        merged
    }
}
