//! What each part of a multi-directory collection (`--dir.subdirectories-label`,
//! `--discover.processes`) held at the last collection: its labels, its
//! directories, its files and its writers, for the status page and
//! `/api/v1/status` (issue 36). Filled by [`super::parts::PartReaders::collect`].

use std::path::PathBuf;
use std::sync::Arc;

use crate::model::Label;
use crate::pipeline::Collection;

/// One part at one collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartStatus {
    /// How logs name it (`namespace/pod/container`, a subdirectory's path).
    pub name: Arc<str>,
    /// The labels every one of its samples gets.
    pub labels: Vec<Label>,
    /// Its directories, as its writers see them (or as given).
    pub directories: Vec<PathBuf>,
    /// Files listed.
    pub files_listed: usize,
    /// Files read (merged, or folded in as a dead writer's frozen file).
    pub files_merged: usize,
    /// Files (and directories) left out with a problem.
    pub files_skipped: usize,
    /// Files being created.
    pub files_pending: usize,
    /// Writers live, dead, of unknown liveness.
    pub writers: [usize; 3],
    /// Samples it contributed (before the parts were combined).
    pub samples: usize,
}

impl PartStatus {
    /// The status of a part named `name` with `labels` reading
    /// `directories`, after its `collection`.
    pub fn of(
        name: Arc<str>,
        labels: Vec<Label>,
        directories: Vec<PathBuf>,
        collection: &Collection,
    ) -> Self {
        Self {
            name,
            labels,
            directories,
            files_listed: collection.stats.files_listed,
            files_merged: collection.stats.files_merged + collection.stats.files_skipped,
            files_skipped: collection.problems.len(),
            files_pending: collection.writers.pending,
            writers: collection.writers.writers,
            samples: collection.families.iter().map(|f| f.samples.len()).sum(),
        }
    }
}
