//! Several metrics directories served side by side, each merged on its own:
//! one [`Collector`] per part, exactly as prometheus_client would merge that
//! part's directory alone, then the parts combined into one list of families,
//! every sample labelled with its part's labels
//! ([`crate::transform::combine::combine_labelled`]).
//!
//! This is the machinery both multi-application modes share:
//! `--dir.subdirectories-label` ([`super::subdirectories`]: one part per
//! subdirectory of a parent, one label) and `--discover.processes`
//! ([`super::discovered`]: one part per discovered pod and container, found
//! through `/proc`, with `namespace`, `pod` and `container` labels).
//!
//! A part is known by a key that stays the same from one collection to the
//! next (the subdirectory's path, the discovered part's label set); its
//! collector, with its caches, its maps and its writers' states, is kept while
//! the key comes back, and dropped (closing its files, releasing its share of
//! the memory budget) at the first collection without it. A part may read
//! several directories (inputs), merged together as `--dir A --dir B` merges
//! them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::Label;
use crate::pipeline::lifecycle::WriterReport;
use crate::pipeline::part_status::PartStatus;
use crate::pipeline::{CollectStats, Collection, Collector};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget, Problem};
use crate::transform::combine::{combine_labelled, Conflict, LabelledPart};
use crate::transform::config::PerWriter as PerWriterConfig;

/// One part to read at a collection.
#[derive(Debug, Clone)]
pub struct PartSpec<K> {
    /// What the part is known by across collections (unique in a collection).
    pub key: K,
    /// How conflicts and logs name it.
    pub name: Arc<str>,
    /// The labels every one of its samples gets.
    pub labels: Vec<Label>,
    /// What it reads (directories in `readdir` order, in this order).
    pub inputs: Vec<Input>,
    /// The problems of paths under the first of a pair are reported under
    /// the second instead (a directory read through `/proc/self/fd/<n>` is
    /// reported as the writers see it).
    pub shown_as: Vec<(PathBuf, PathBuf)>,
}

/// The result of one [`PartReaders::collect`].
#[derive(Debug, Clone)]
pub struct PartsCollection<K> {
    /// The combined families; every part's problems (renamed as
    /// [`PartSpec::shown_as`] says); statistics summed over the parts (their
    /// directories included); the writers of every part.
    pub collection: Collection,
    /// Families that did not combine cleanly (see [`crate::transform::combine`]).
    pub conflicts: Vec<Conflict>,
    /// With `per_writer`: families a writer of a part disagrees about.
    pub writer_conflicts: Vec<Conflict>,
    /// Parts read for the first time by this collection.
    pub appeared: Vec<K>,
    /// Parts read by the previous collection and not by this one.
    pub disappeared: Vec<K>,
    /// Parts a directory of which could not be listed (missing, unreadable),
    /// with that directory (as the part's inputs name it).
    pub unreadable: Vec<(K, PathBuf)>,
    /// Each part's labels, directories, files and writers, in the order read.
    pub statuses: Vec<PartStatus>,
}

impl<K> Default for PartsCollection<K> {
    fn default() -> Self {
        Self {
            collection: Collection::default(),
            conflicts: Vec::new(),
            writer_conflicts: Vec::new(),
            appeared: Vec::new(),
            disappeared: Vec::new(),
            unreadable: Vec::new(),
            statuses: Vec::new(),
        }
    }
}

/// The collectors of the parts, kept across collections.
#[derive(Debug)]
pub struct PartReaders<K> {
    /// Which symbolic links the parts' readers follow.
    link_policy: LinkPolicy,
    /// One collector per part read at the last collection.
    readers: BTreeMap<K, Collector>,
    /// The memory budget the readers share, if any.
    memory_budget: Option<Arc<MemoryBudget>>,
    /// What the readers do about writers.
    writer_policy: WriterPolicy,
    /// The label of each writer's own series, when writers are served apart.
    per_writer: Option<PerWriterConfig>,
}

impl<K: Ord + Clone> PartReaders<K> {
    /// No part read yet; the parts' readers follow links as `link_policy` says.
    pub fn new(link_policy: LinkPolicy) -> Self {
        Self {
            link_policy,
            readers: BTreeMap::new(),
            memory_budget: None,
            writer_policy: WriterPolicy::exact(),
            per_writer: None,
        }
    }

    /// Which symbolic links the parts' readers follow.
    pub fn link_policy(&self) -> LinkPolicy {
        self.link_policy
    }

    /// [`Collector::set_per_writer`] for every part's reader.
    pub fn set_per_writer(&mut self, config: Option<&PerWriterConfig>) {
        for reader in self.readers.values_mut() {
            reader.set_per_writer(config);
        }
        self.per_writer = config.cloned();
    }

    /// Applies `policy` to every part's reader.
    pub fn set_writer_policy(&mut self, policy: WriterPolicy) {
        for reader in self.readers.values_mut() {
            reader.set_writer_policy(policy);
        }
        self.writer_policy = policy;
    }

    /// Shares `budget` with every part's reader.
    pub fn set_memory_budget(&mut self, budget: Option<Arc<MemoryBudget>>) {
        for reader in self.readers.values_mut() {
            reader.set_memory_budget(budget.clone());
        }
        self.memory_budget = budget;
    }

    /// Withdraws every part reader's charge from the budget.
    pub fn release_budget(&mut self) {
        for reader in self.readers.values_mut() {
            reader.release_budget();
        }
    }

    /// [`Collector::recheck`] for a file of the part `key`.
    pub fn recheck_part(&mut self, key: &K, path: &Path) {
        if let Some(reader) = self.readers.get_mut(key) {
            reader.recheck(path);
        }
    }

    /// [`Collector::recheck`] for a file of whichever part reads it.
    pub fn recheck(&mut self, path: &Path) {
        for reader in self.readers.values_mut() {
            reader.recheck(path);
        }
    }

    /// [`Collector::recheck_all`] for every part.
    pub fn recheck_all(&mut self) {
        for reader in self.readers.values_mut() {
            reader.recheck_all();
        }
    }

    /// Reads and merges each of `parts` on its own (in the order given, the
    /// order they are served in) and combines them.
    pub fn collect(&mut self, parts: Vec<PartSpec<K>>) -> PartsCollection<K> {
        let mut out = PartsCollection::default();
        let mut problems = Vec::new();
        let mut stats = CollectStats::default();
        let mut writers = WriterReport::default();
        let mut ray_logs_unreadable = None;
        let mut previous = std::mem::take(&mut self.readers);
        let mut combined = Vec::with_capacity(parts.len());
        for spec in parts {
            let mut reader = match previous.remove(&spec.key) {
                Some(reader) => reader,
                None => {
                    out.appeared.push(spec.key.clone());
                    let mut reader = Collector::with_link_policy(self.link_policy);
                    reader.set_memory_budget(self.memory_budget.clone());
                    reader.set_writer_policy(self.writer_policy);
                    reader.set_per_writer(self.per_writer.as_ref());
                    reader
                }
            };
            let collection = reader.collect(&spec.inputs);
            out.statuses.push(status_of(&spec, &collection));
            for problem in &collection.problems {
                if problem.reason.is_directory_reason() {
                    out.unreadable
                        .push((spec.key.clone(), problem.path.clone()));
                }
            }
            add_stats(&mut stats, &collection.stats);
            writers.add(&collection.writers);
            problems.extend(
                collection
                    .problems
                    .into_iter()
                    .map(|p| shown(p, &spec.shown_as)),
            );
            out.writer_conflicts.extend(collection.conflicts);
            ray_logs_unreadable = ray_logs_unreadable.or(collection.ray_logs_unreadable);
            combined.push(LabelledPart {
                name: spec.name,
                labels: spec.labels,
                families: collection.families,
            });
            self.readers.insert(spec.key, reader);
        }
        out.disappeared = previous
            .into_iter()
            .map(|(key, mut reader)| {
                reader.release_budget();
                key
            })
            .collect();
        let combined = combine_labelled(combined);
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
        out
    }
}

/// `problem` with its path under the first path of a pair of `shown_as`
/// moved under the second.
fn shown(mut problem: Problem, shown_as: &[(PathBuf, PathBuf)]) -> Problem {
    for (from, to) in shown_as {
        if let Ok(rest) = problem.path.strip_prefix(from) {
            problem.path = if rest.as_os_str().is_empty() {
                to.clone()
            } else {
                to.join(rest)
            };
            break;
        }
    }
    problem
}

/// A part's [`PartStatus`]: its directories as [`PartSpec::shown_as`] shows
/// them.
fn status_of<K>(spec: &PartSpec<K>, collection: &Collection) -> PartStatus {
    let directories = spec
        .inputs
        .iter()
        .map(|input| {
            let path = input.path();
            spec.shown_as
                .iter()
                .find(|(from, _)| from == path)
                .map_or_else(|| path.to_path_buf(), |(_, to)| to.clone())
        })
        .collect();
    PartStatus::of(
        spec.name.clone(),
        spec.labels.clone(),
        directories,
        collection,
    )
}

/// Adds one part's statistics.
fn add_stats(total: &mut CollectStats, one: &CollectStats) {
    total.directories_present += one.directories_present;
    total.directories_missing += one.directories_missing;
    total.directories_unreadable += one.directories_unreadable;
    total.files_listed += one.files_listed;
    total.files_merged += one.files_merged;
    total.files_skipped += one.files_skipped;
    total.records += one.records;
    total.bytes_read += one.bytes_read;
    total.keys_decoded += one.keys_decoded;
    total.replanned |= one.replanned;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SkipReason;

    fn counter(dir: &Path, pid: u32, value: f64) {
        let key = crate::format::writer::encode_key("c", "c_total", &[], "C.");
        let bytes = crate::format::writer::file_bytes(&[(key.as_str(), value, 0.0)]);
        std::fs::write(dir.join(format!("counter_{pid}.db")), bytes).unwrap();
    }

    fn spec(key: &str, dir: &Path, shown: &str) -> PartSpec<String> {
        PartSpec {
            key: key.to_owned(),
            name: key.into(),
            labels: vec![("part".into(), key.into())],
            inputs: vec![Input::Directory(dir.to_path_buf())],
            shown_as: vec![(dir.to_path_buf(), PathBuf::from(shown))],
        }
    }

    #[test]
    fn parts_are_merged_apart_labelled_and_forgotten_when_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        counter(&a, 1, 1.0);
        counter(&a, 2, 2.0);
        counter(&b, 1, 5.0);
        std::fs::write(b.join("counter_3.db"), b"bad").unwrap();
        let mut readers = PartReaders::new(LinkPolicy::NoLinks);
        let out = readers.collect(vec![spec("a", &a, "A:/m"), spec("b", &b, "B:/m")]);
        assert_eq!(out.appeared, ["a", "b"]);
        let text = String::from_utf8(crate::expose::encode::encode(
            &out.collection.families,
            crate::expose::encode::Format::Text,
            crate::expose::encode::Escaping::Underscores,
        ))
        .unwrap();
        assert_eq!(
            text,
            "# HELP c_total C.\n# TYPE c_total counter\nc_total{part=\"a\"} 3.0\nc_total{part=\"b\"} 5.0\n"
        );
        assert_eq!(out.collection.stats.files_merged, 3);
        assert_eq!(out.collection.stats.directories_present, 2);
        let problems: Vec<_> = out.collection.problems.iter().map(|p| &p.path).collect();
        assert_eq!(problems, [Path::new("B:/m/counter_3.db")]);

        // `b` gone, its directory missing for `a`: reported, forgotten.
        std::fs::remove_dir_all(&a).unwrap();
        let out = readers.collect(vec![spec("a", &a, "A:/m")]);
        assert_eq!(out.disappeared, ["b"]);
        assert_eq!(out.unreadable, [("a".to_owned(), a.clone())]);
        assert_eq!(
            out.collection.problems[0].reason,
            SkipReason::DirectoryMissing
        );
        assert_eq!(out.collection.problems[0].path, Path::new("A:/m"));
        assert!(out.collection.families.is_empty());
    }
}
