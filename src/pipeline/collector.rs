//! Collecting: read the inputs ([`crate::source`]), then merge them
//! ([`crate::merge`]), keeping both stages' caches between collections.

use crate::merge::{KeyStore, MergeInput, PlanCache};
use crate::model::MetricFamily;
use crate::source::link_policy::LinkPolicy;
use crate::source::{Input, Problem, Reader, SkipReason};

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

/// Reads and merges a set of inputs incrementally; keep one per set of
/// inputs. An unchanged directory decodes no key and plans nothing again.
#[derive(Debug, Default)]
pub struct Collector {
    reader: Reader,
    store: KeyStore,
    plans: PlanCache,
}

impl Collector {
    /// A collector with nothing cached.
    pub fn new() -> Self {
        Self::default()
    }

    /// A collector with nothing cached that follows symbolic links in a
    /// directory according to `policy`.
    pub fn with_link_policy(policy: LinkPolicy) -> Self {
        Self {
            reader: Reader::with_link_policy(policy),
            ..Self::default()
        }
    }

    /// Number of distinct record keys decoded so far.
    pub fn keys_decoded(&self) -> usize {
        self.store.len()
    }

    /// See [`crate::source::Reader::recheck`].
    pub fn recheck(&mut self, path: &std::path::Path) {
        self.reader.recheck(path);
    }

    /// See [`crate::source::Reader::recheck_all`].
    pub fn recheck_all(&mut self) {
        self.reader.recheck_all();
    }

    /// Lists, reads and merges `inputs` (in order; directories expanded in
    /// `readdir` order in place).
    pub fn collect(&mut self, inputs: &[Input]) -> Collection {
        let keys_before = self.store.len();
        let read = self.reader.read(inputs, &mut self.store);
        let merge_inputs: Vec<MergeInput<'_>> = read.files.iter().map(|f| f.merge).collect();
        let merged = self.plans.merge(&mut self.store, &merge_inputs);
        let mut problems = read.problems;
        for (i, error) in merged.excluded {
            let file = &read.files[i];
            problems.push((
                file.position,
                Problem {
                    path: file.path.clone(),
                    reason: SkipReason::Merge(error),
                },
            ));
        }
        problems.sort_by_key(|(position, _)| *position);
        let stats = CollectStats {
            directories_present: read.stats.directories_present,
            directories_missing: read.stats.directories_missing,
            directories_unreadable: read.stats.directories_unreadable,
            files_listed: read.stats.files_listed,
            files_merged: merged.files_merged,
            records: merged.records,
            bytes_read: read.stats.bytes_read,
            keys_decoded: self.store.len() - keys_before,
            replanned: merged.replanned,
        };
        Collection {
            families: merged.families,
            problems: problems.into_iter().map(|(_, p)| p).collect(),
            stats,
        }
    }
}
