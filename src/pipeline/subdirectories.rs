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
//! are skipped), reads and merges each with its own [`Collector`], exactly as
//! prometheus_client would merge that directory alone, and combines the
//! results with [`crate::transform::combine`], labelling every sample with the
//! subdirectory's name. Subdirectories that appear are read from the next
//! collection on; the reader of one that disappears is dropped (closing its
//! files). `*.db` files directly in a parent are not read.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::pipeline::lifecycle::WriterReport;
use crate::pipeline::{CollectStats, Collection, Collector};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget, Problem, SkipReason};
use crate::transform::combine::{combine, Conflict, Part};
use crate::transform::config::PerWriter as PerWriterConfig;

/// Reads every subdirectory of the parents as its own metrics directory.
#[derive(Debug)]
pub struct SubdirectoryReader {
    parents: Vec<PathBuf>,
    label: Arc<str>,
    /// Which symbolic links the subdirectories' readers follow.
    link_policy: LinkPolicy,
    /// One reader per subdirectory seen at the last collection.
    readers: BTreeMap<PathBuf, Collector>,
    /// The memory budget the readers share, if any.
    memory_budget: Option<Arc<MemoryBudget>>,
    /// What the readers do about writers.
    writer_policy: WriterPolicy,
    /// The label of each writer's own series, when writers are served apart.
    per_writer: Option<PerWriterConfig>,
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
}

impl SubdirectoryReader {
    /// A reader of the subdirectories of `parents` (in that order), labelling
    /// samples with `label`.
    pub fn new(parents: Vec<PathBuf>, label: impl Into<Arc<str>>, link_policy: LinkPolicy) -> Self {
        Self {
            parents,
            label: label.into(),
            link_policy,
            readers: BTreeMap::new(),
            memory_budget: None,
            writer_policy: WriterPolicy::exact(),
            per_writer: None,
        }
    }

    /// [`Collector::set_per_writer`] for every subdirectory's reader.
    pub fn set_per_writer(&mut self, config: Option<&PerWriterConfig>) {
        for reader in self.readers.values_mut() {
            reader.set_per_writer(config);
        }
        self.per_writer = config.cloned();
    }

    /// Applies `policy` to every subdirectory's reader.
    pub fn set_writer_policy(&mut self, policy: WriterPolicy) {
        for reader in self.readers.values_mut() {
            reader.set_writer_policy(policy);
        }
        self.writer_policy = policy;
    }

    /// Shares `budget` with every subdirectory's reader.
    pub fn set_memory_budget(&mut self, budget: Option<Arc<MemoryBudget>>) {
        for reader in self.readers.values_mut() {
            reader.set_memory_budget(budget.clone());
        }
        self.memory_budget = budget;
    }

    /// Withdraws every subdirectory reader's charge from the budget.
    pub fn release_budget(&mut self) {
        for reader in self.readers.values_mut() {
            reader.release_budget();
        }
    }

    /// The parent directories.
    pub fn parents(&self) -> &[PathBuf] {
        &self.parents
    }

    /// The name of the label that tells the subdirectories apart.
    pub fn label(&self) -> Arc<str> {
        self.label.clone()
    }

    /// [`Collector::recheck`] for a file of one of the subdirectories.
    pub fn recheck(&mut self, path: &Path) {
        if let Some(reader) = path.parent().and_then(|dir| self.readers.get_mut(dir)) {
            reader.recheck(path);
        }
    }

    /// [`Collector::recheck_all`] for every subdirectory.
    pub fn recheck_all(&mut self) {
        for reader in self.readers.values_mut() {
            reader.recheck_all();
        }
    }

    /// Lists the subdirectories, reads and merges each, and combines them.
    pub fn collect(&mut self) -> SubdirectoryCollection {
        let mut out = SubdirectoryCollection::default();
        let mut problems = Vec::new();
        let mut stats = CollectStats::default();
        let mut writers = WriterReport::default();
        let mut writer_conflicts = Vec::new();
        let mut ray_logs_unreadable = None;
        let mut subdirectories: Vec<(Arc<str>, PathBuf)> = Vec::new();
        let mut names: HashSet<OsString> = HashSet::new();
        for parent in &self.parents {
            match list_subdirectories(parent) {
                Ok(found) => {
                    stats.directories_present += 1;
                    for (name, path) in found {
                        if names.insert(name.clone()) {
                            subdirectories.push((name.to_string_lossy().into(), path));
                        } else {
                            out.duplicates.push(path);
                        }
                    }
                }
                Err(reason) => {
                    if reason == SkipReason::DirectoryMissing {
                        stats.directories_missing += 1;
                    }
                    problems.push(Problem {
                        path: parent.clone(),
                        reason,
                    });
                }
            }
        }

        out.subdirectories = subdirectories.len();
        let mut previous = std::mem::take(&mut self.readers);
        let mut parts = Vec::with_capacity(subdirectories.len());
        for (value, path) in subdirectories {
            let mut reader = match previous.remove(&path) {
                Some(reader) => reader,
                None => {
                    out.appeared.push(path.clone());
                    let mut reader = Collector::with_link_policy(self.link_policy);
                    reader.set_memory_budget(self.memory_budget.clone());
                    reader.set_writer_policy(self.writer_policy);
                    reader.set_per_writer(self.per_writer.as_ref());
                    reader
                }
            };
            let collection = reader.collect(&[Input::Directory(path.clone())]);
            add_stats(&mut stats, &collection.stats);
            writers.add(&collection.writers);
            problems.extend(collection.problems);
            writer_conflicts.extend(collection.conflicts);
            ray_logs_unreadable = ray_logs_unreadable.or(collection.ray_logs_unreadable);
            parts.push(Part {
                value,
                families: collection.families,
            });
            self.readers.insert(path, reader);
        }
        out.disappeared = previous
            .into_iter()
            .map(|(path, mut reader)| {
                reader.release_budget();
                path
            })
            .collect();

        let combined = combine(&self.label, parts);
        out.collection = Collection {
            families: combined.families,
            problems,
            stats,
            writers,
            conflicts: Vec::new(),
            ray_logs_unreadable,
            // Always merged anew: never `unchanged`.
            merged_id: 0,
            unchanged: false,
        };
        out.conflicts = combined.conflicts;
        out.writer_conflicts = writer_conflicts;
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

/// Adds the per-file statistics of one subdirectory's collection.
fn add_stats(total: &mut CollectStats, one: &CollectStats) {
    total.files_listed += one.files_listed;
    total.files_merged += one.files_merged;
    total.records += one.records;
    total.bytes_read += one.bytes_read;
    total.keys_decoded += one.keys_decoded;
    total.replanned |= one.replanned;
}
