//! Reading one metrics directory per subdirectory of a parent, for an
//! exporter that serves several pods (`serve --dir.subdirectories-label NAME`,
//! `dump --subdirectories-label NAME`).
//!
//! A DaemonSet exporter sees, on its node, one parent directory (a `hostPath`)
//! with one subdirectory per pod, each that pod's `PROMETHEUS_MULTIPROC_DIR`:
//!
//! ```text
//! /var/lib/vllm-metrics/            ← --dir (the parent)
//!   default_vllm-7d9f-abcde/        ← one pod's directory
//!     counter_1.db  gauge_mostrecent_1.db  histogram_1.db …
//!   default_vllm-7d9f-fghij/
//!     …
//! ```
//!
//! [`SubdirectoryReader`] lists each parent's immediate subdirectories on
//! every collection (in byte order of their names; names starting with `.`
//! are skipped), reads and merges each with its own
//! [`Collector`](crate::pipeline::Collector) ([`super::parts`]), exactly as
//! prometheus_client would merge that directory alone, and combines the
//! results with [`crate::transform::combine`], labelling every sample with the
//! subdirectory's name. Subdirectories that appear are read from the next
//! collection on; the reader of one that disappears is dropped (closing its
//! files). `*.db` files directly in a parent are not read.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::pipeline::parts::{PartReaders, PartSpec};
use crate::pipeline::{CollectStats, Collection};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget, Problem, SkipReason};
use crate::transform::combine::Conflict;
use crate::transform::config::PerWriter as PerWriterConfig;

/// Reads every subdirectory of the parents as its own metrics directory.
#[derive(Debug)]
pub struct SubdirectoryReader {
    parents: Vec<PathBuf>,
    label: Arc<str>,
    /// One reader per subdirectory seen at the last collection (see
    /// [`super::parts`]).
    parts: PartReaders<PathBuf>,
}

/// The result of one [`SubdirectoryReader::collect`].
#[derive(Debug, Clone, Default)]
pub struct SubdirectoryCollection {
    /// The combined families; problems of the parents and of every
    /// subdirectory's files; statistics summed over the subdirectories, with
    /// `directories_present`/`directories_missing` counting the parents.
    pub collection: Collection,
    /// Subdirectories read (each one part of the combination).
    pub subdirectories: usize,
    /// Families that did not combine cleanly (see [`crate::transform::combine`]).
    pub conflicts: Vec<Conflict>,
    /// With `per_writer`: families a writer of a subdirectory disagrees
    /// about (see [`crate::pipeline::per_writer`]).
    pub writer_conflicts: Vec<Conflict>,
    /// Subdirectories read for the first time by this collection.
    pub appeared: Vec<PathBuf>,
    /// Subdirectories read by the previous collection that are gone now.
    pub disappeared: Vec<PathBuf>,
    /// Subdirectories left out because an earlier parent has one of the same
    /// name (their samples would be indistinguishable).
    pub duplicates: Vec<PathBuf>,
    /// Each subdirectory's labels, files and writers.
    pub statuses: Vec<crate::pipeline::part_status::PartStatus>,
}

impl SubdirectoryReader {
    /// A reader of the subdirectories of `parents` (in that order), labelling
    /// samples with `label`.
    pub fn new(parents: Vec<PathBuf>, label: impl Into<Arc<str>>, link_policy: LinkPolicy) -> Self {
        Self {
            parents,
            label: label.into(),
            parts: PartReaders::new(link_policy),
        }
    }

    /// [`crate::pipeline::Collector::set_per_writer`] for every
    /// subdirectory's reader.
    pub fn set_per_writer(&mut self, config: Option<&PerWriterConfig>) {
        self.parts.set_per_writer(config);
    }

    /// Applies `policy` to every subdirectory's reader.
    pub fn set_writer_policy(&mut self, policy: WriterPolicy) {
        self.parts.set_writer_policy(policy);
    }

    /// [`PartReaders::set_evidence`]: every subdirectory's liveness
    /// evidence.
    pub fn set_evidence(&mut self, evidence: Arc<dyn crate::source::writers::evidence::Evidence>) {
        self.parts.set_evidence(evidence);
    }

    /// Shares `budget` with every subdirectory's reader.
    pub fn set_memory_budget(&mut self, budget: Option<Arc<MemoryBudget>>) {
        self.parts.set_memory_budget(budget);
    }

    /// Withdraws every subdirectory reader's charge from the budget.
    pub fn release_budget(&mut self) {
        self.parts.release_budget();
    }

    /// The parent directories.
    pub fn parents(&self) -> &[PathBuf] {
        &self.parents
    }

    /// The name of the label that tells the subdirectories apart.
    pub fn label(&self) -> Arc<str> {
        self.label.clone()
    }

    /// [`crate::pipeline::Collector::recheck`] for a file of one of the
    /// subdirectories.
    pub fn recheck(&mut self, path: &Path) {
        if let Some(dir) = path.parent() {
            self.parts.recheck_part(&dir.to_path_buf(), path);
        }
    }

    /// [`crate::pipeline::Collector::recheck_all`] for every subdirectory.
    pub fn recheck_all(&mut self) {
        self.parts.recheck_all();
    }

    /// Lists the subdirectories, reads and merges each, and combines them.
    pub fn collect(&mut self) -> SubdirectoryCollection {
        let mut out = SubdirectoryCollection::default();
        let mut problems = Vec::new();
        let mut parents = CollectStats::default();
        let mut subdirectories: Vec<PartSpec<PathBuf>> = Vec::new();
        let mut names: HashSet<OsString> = HashSet::new();
        for parent in &self.parents {
            match list_subdirectories(parent) {
                Ok(found) => {
                    parents.directories_present += 1;
                    for (name, path) in found {
                        if names.insert(name.clone()) {
                            let value: Arc<str> = name.to_string_lossy().into();
                            subdirectories.push(PartSpec {
                                key: path.clone(),
                                name: value.clone(),
                                labels: vec![(self.label.clone(), value)],
                                inputs: vec![Input::Directory(path)],
                                shown_as: Vec::new(),
                                pins: Vec::new(),
                            });
                        } else {
                            out.duplicates.push(path);
                        }
                    }
                }
                Err(reason) => {
                    if reason == SkipReason::DirectoryMissing {
                        parents.directories_missing += 1;
                    }
                    problems.push(Problem {
                        path: parent.clone(),
                        reason,
                    });
                }
            }
        }

        out.subdirectories = subdirectories.len();
        let parts = self.parts.collect(subdirectories);
        let mut collection = parts.collection;
        // The directories counted are the parents.
        collection.stats.directories_present = parents.directories_present;
        collection.stats.directories_missing = parents.directories_missing;
        collection.stats.directories_unreadable = 0;
        problems.extend(collection.problems);
        collection.problems = problems;
        out.collection = collection;
        out.conflicts = parts.conflicts;
        out.writer_conflicts = parts.writer_conflicts;
        out.appeared = parts.appeared;
        out.disappeared = parts.disappeared;
        out.statuses = parts.statuses;
        out
    }
}

/// The subdirectories of `parent` (following symbolic links), sorted by
/// name, without names starting with `.`.
fn list_subdirectories(parent: &Path) -> Result<Vec<(OsString, PathBuf)>, SkipReason> {
    let entries = std::fs::read_dir(parent).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            SkipReason::DirectoryMissing
        } else {
            SkipReason::DirectoryUnreadable(e.to_string())
        }
    })?;
    let mut found: Vec<(OsString, PathBuf)> = entries
        .flatten()
        .filter(|entry| !entry.file_name().as_encoded_bytes().starts_with(b"."))
        .filter(|entry| entry.path().is_dir())
        .map(|entry| (entry.file_name(), entry.path()))
        .collect();
    found.sort();
    Ok(found)
}
