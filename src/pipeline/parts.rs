//! Several metrics directories served side by side, each merged on its own:
//! one [`Collector`](crate::pipeline::Collector) per part, exactly as prometheus_client would merge that
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
//!
//! The parts share the memory budget: before each read, a part's allowance
//! is set from every part's last known need
//! ([`crate::source::budget::allowances`]: an equal share is a floor, not a
//! cap; under contention the part furthest over it is cut first). Read one
//! after the other ([`PartReaders::collect`]), the parts never read yet go
//! first, fewest files first, then the others, least needy first, each
//! allowance computed from the needs just learnt: parts that together fit
//! in the budget are all read whole from the first collection. A part cut
//! for the budget is logged once per change, with what it needed and what
//! it got.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Label;
pub use crate::pipeline::fair::Pin;
use crate::pipeline::fair::{
    count_files, wait, CutChange, Finished, Late, Outcome, Settings, Slot,
};
use crate::pipeline::lifecycle::WriterReport;
use crate::pipeline::part_status::PartStatus;
use crate::pipeline::{CollectStats, Collection};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::evidence::{self, Evidence};
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget, Problem, SkipReason};
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
    /// Held for as long as the part's read runs, even past its collection
    /// (a discovered directory's descriptor, so that `/proc/self/fd/<n>`
    /// names no other directory meanwhile).
    pub pins: Vec<Pin>,
}

/// Caps on what one part may cost (`None`: no cap). A part past one is left
/// out of the collection, alone, and reported ([`PartReport::capped`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartCaps {
    /// The most metric files a part may list.
    pub max_files: Option<usize>,
    /// The most samples a part may serve.
    pub max_series: Option<usize>,
}

/// Which cap left a part out, and what it had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capped {
    /// It listed this many files, more than [`PartCaps::max_files`].
    Files(usize),
    /// It had this many samples, more than [`PartCaps::max_series`].
    Series(usize),
}

/// How one part's collection went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartReport<K> {
    /// The part.
    pub key: K,
    /// The files it listed (at its last collection done in time).
    pub files: usize,
    /// The samples it serves now (0 when left out).
    pub series: usize,
    /// The cap that left it out, if one did.
    pub capped: Option<Capped>,
    /// Its collection was not done by the deadline: what was served
    /// instead; `None` when done in time.
    pub late: Option<LateServed>,
}

/// The default oldest a late part's last collection may be to be served in
/// its place (`--discover.late-max-age`): three of Prometheus's default
/// scrape timeouts (10 s), so that a pod stuck for longer shows as a gap,
/// not as flat lines.
pub const DEFAULT_MAX_LATE_AGE: Duration = Duration::from_secs(30);

/// What a part whose collection was not done by the deadline served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateServed {
    /// Its last collection, younger than the maximum age
    /// (`--discover.late-max-age`).
    Last,
    /// Nothing: its last collection was older than the maximum age.
    Expired,
    /// Nothing: it had no collection yet.
    None,
}

impl LateServed {
    /// Its `served` label value (`multiproc_exporter_discovery_part_late`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Last => "last",
            Self::Expired => "expired",
            Self::None => "none",
        }
    }
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
    /// How each part's collection went, in the order of the parts.
    pub reports: Vec<PartReport<K>>,
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
            reports: Vec::new(),
            statuses: Vec::new(),
        }
    }
}

/// The collectors of the parts, kept across collections.
#[derive(Debug)]
pub struct PartReaders<K> {
    /// How every part's collector is set up.
    settings: Settings,
    /// One collector per part read at the last collection.
    readers: BTreeMap<K, Slot>,
    /// What one part may cost.
    caps: PartCaps,
    /// Wakes a collection waiting for its parts ([`Self::collect_by`]).
    finished: Arc<Finished>,
}

impl<K: Ord + Clone> PartReaders<K> {
    /// No part read yet; the parts' readers follow links as `link_policy` says.
    pub fn new(link_policy: LinkPolicy) -> Self {
        Self {
            settings: Settings {
                link_policy,
                budget: None,
                policy: WriterPolicy::exact(),
                evidence: evidence::system(),
                per_writer: None,
                max_late_age: DEFAULT_MAX_LATE_AGE,
            },
            readers: BTreeMap::new(),
            caps: PartCaps::default(),
            finished: Arc::default(),
        }
    }

    /// Which symbolic links the parts' readers follow.
    pub fn link_policy(&self) -> LinkPolicy {
        self.settings.link_policy
    }

    /// Sets what one part may cost.
    pub fn set_caps(&mut self, caps: PartCaps) {
        self.caps = caps;
    }

    /// Sets the oldest a late part's last collection may be to be served
    /// in its place (older, the part is left out).
    pub fn set_max_late_age(&mut self, max_age: Duration) {
        self.settings.max_late_age = max_age;
    }

    /// [`Collector::set_per_writer`](crate::pipeline::Collector::set_per_writer) for every part's reader.
    pub fn set_per_writer(&mut self, config: Option<&PerWriterConfig>) {
        self.settings.per_writer = config.cloned();
    }

    /// Applies `policy` to every part's reader.
    pub fn set_writer_policy(&mut self, policy: WriterPolicy) {
        self.settings.policy = policy;
    }

    /// Decides the writers' liveness in every part, those read already and
    /// those to come, from `evidence` (the system's until then).
    pub fn set_evidence(&mut self, evidence: Arc<dyn Evidence>) {
        self.settings.evidence = evidence;
    }

    /// Where every part's liveness evidence comes from.
    pub fn evidence(&self) -> &Arc<dyn Evidence> {
        &self.settings.evidence
    }

    /// Shares `budget` with every part's reader.
    pub fn set_memory_budget(&mut self, budget: Option<Arc<MemoryBudget>>) {
        self.settings.budget = budget;
    }

    /// What the part `key`'s reader holds of the memory budget now (tests).
    #[cfg(test)]
    pub(crate) fn held_by(&self, key: &K) -> Option<usize> {
        self.readers.get(key).and_then(Slot::share_held)
    }

    /// Withdraws every part reader's charge from the budget.
    pub fn release_budget(&mut self) {
        for (_, slot) in std::mem::take(&mut self.readers) {
            slot.retire();
        }
    }

    /// [`Collector::recheck`](crate::pipeline::Collector::recheck) for a file of the part `key`.
    pub fn recheck_part(&mut self, key: &K, path: &Path) {
        if let Some(reader) = self.readers.get(key) {
            reader.recheck(path);
        }
    }

    /// [`Collector::recheck`](crate::pipeline::Collector::recheck) for a file of whichever part reads it.
    pub fn recheck(&mut self, path: &Path) {
        for reader in self.readers.values() {
            reader.recheck(path);
        }
    }

    /// [`Collector::recheck_all`](crate::pipeline::Collector::recheck_all) for every part.
    pub fn recheck_all(&mut self) {
        for reader in self.readers.values() {
            reader.recheck_all();
        }
    }

    /// Reads and merges each of `parts` on its own (in the order given, the
    /// order they are served in), one after the other, and combines them.
    pub fn collect(&mut self, parts: Vec<PartSpec<K>>) -> PartsCollection<K> {
        self.collect_with(parts, None)
    }

    /// [`Self::collect`], each part on a thread of its own, waiting for them
    /// until `deadline` at the latest: a part not done by then is served from
    /// its last collection (`pipeline/fair.rs`).
    pub fn collect_by(&mut self, parts: Vec<PartSpec<K>>, deadline: Instant) -> PartsCollection<K> {
        self.collect_with(parts, Some(deadline))
    }

    /// Each part's floor of the memory budget when `parts` are read: an
    /// equal share.
    fn floor(&self, parts: usize) -> usize {
        self.settings
            .budget
            .as_ref()
            .map_or(usize::MAX, |budget| budget.limit() / parts.max(1))
    }

    /// Sets the allowance of `slots[index]`, or of every slot (`None`),
    /// from the parts' needs, a part never read counted at `unknown`.
    fn set_allowances(&self, slots: &mut [Slot], index: Option<usize>, unknown: usize) {
        let Some(budget) = &self.settings.budget else {
            return;
        };
        let needs: Vec<usize> = slots.iter().map(|s| s.need().unwrap_or(unknown)).collect();
        let allowances = crate::source::budget::allowances(budget.limit(), &needs);
        for (i, (slot, allowance)) in slots.iter_mut().zip(allowances).enumerate() {
            if index.is_none_or(|index| index == i) {
                // The room it was handed out of what the budget left unused,
                // while the needs are the same.
                let extra = slot.extra_for(&needs);
                if extra == 0 {
                    slot.drop_extra();
                }
                slot.set_allowance(allowance.saturating_add(extra), &self.settings);
            }
        }
    }

    /// Starts a job reading `part` on its slot's worker.
    fn start(&self, part: &PartSpec<K>, slot: &mut Slot) {
        slot.start(
            &part.inputs,
            &part.pins,
            &self.settings,
            self.caps.max_files,
            &self.finished,
        );
    }

    /// Once every part was read: the room the budget leaves unused is
    /// handed to the parts cut, least needy first, each read again with it
    /// (side by side: within `deadline`, one after the other). A part's
    /// files are read whole or not at all, so a part cut at its allowance
    /// holds less, and a part cut at its fair level may fit in what the
    /// others leave (issue 53: unused budget is used). The room handed stays
    /// the part's while the parts' needs stay the same (it is not let go of
    /// and handed again at every collection); `unknown`: what a part not
    /// read counts for ([`Self::set_allowances`]).
    fn use_unused_room(
        &self,
        parts: &[PartSpec<K>],
        slots: &mut [Slot],
        outcomes: &mut [Outcome],
        unknown: usize,
        deadline: Option<Instant>,
    ) {
        let Some(budget) = &self.settings.budget else {
            return;
        };
        let mut cut = cut_and_read(outcomes);
        cut.sort_by_key(|&i| (slots[i].need(), i));
        let mut given = false;
        for i in cut {
            let held = slots[i].share_held().unwrap_or(0);
            let limit = held.saturating_add(budget.free());
            if limit <= slots[i].room() {
                continue;
            }
            slots[i].extend_allowance(limit);
            given = true;
            let max_files = self.caps.max_files;
            match deadline {
                None => outcomes[i] = slots[i].run(&parts[i].inputs, &self.settings, max_files),
                Some(deadline) => {
                    self.start(&parts[i], &mut slots[i]);
                    wait(&self.finished, std::iter::once(&slots[i]), deadline);
                    match slots[i].outcome(self.settings.max_late_age) {
                        Outcome::Fresh(collection) => outcomes[i] = Outcome::Fresh(collection),
                        // Late: the first read stands, and what it will
                        // hold is not known yet.
                        _ => break,
                    }
                }
            }
        }
        if given {
            let needs: Vec<usize> = slots.iter().map(|s| s.need().unwrap_or(unknown)).collect();
            for slot in slots.iter_mut() {
                slot.keep_extra_for(&needs);
            }
        }
    }

    /// After `cut` (parts just read and cut for the budget): the allowances
    /// from the needs just learnt (a cut part's is what it held plus what
    /// its skipped files would cost), the parts holding more than theirs
    /// let go of it, and the cut parts that now have more room than they
    /// were read with are returned, to be read again (issue 53: a small part
    /// read while a big one still held its old charge was cut, and stayed
    /// cut).
    fn make_room(&self, slots: &mut [Slot], cut: &[usize], unknown: usize) -> Vec<usize> {
        if self.settings.budget.is_none() || cut.is_empty() {
            return Vec::new();
        }
        let rooms: Vec<usize> = cut.iter().map(|&i| slots[i].room()).collect();
        self.set_allowances(slots, None, unknown);
        cut.iter()
            .zip(rooms)
            .filter(|&(&i, room)| slots[i].room() > room)
            .map(|(&i, _)| i)
            .collect()
    }

    /// Read side by side, the parts cut for the budget (while the needs of
    /// parts never read were not known yet, counted at their floor, or while
    /// others held charges their new allowances take back) are read again,
    /// within `deadline`, when the needs learnt since leave them more room:
    /// parts that together fit in the budget are all read whole from their
    /// first collection.
    fn read_again_once_known(
        &self,
        parts: &[PartSpec<K>],
        slots: &mut [Slot],
        outcomes: &mut [Outcome],
        floor: usize,
        deadline: Instant,
    ) {
        let cut = cut_and_read(outcomes);
        let again = self.make_room(slots, &cut, floor);
        if again.is_empty() {
            return;
        }
        for &i in &again {
            self.start(&parts[i], &mut slots[i]);
        }
        wait(&self.finished, again.iter().map(|&i| &slots[i]), deadline);
        for i in again {
            // Late: the first read stands (the second's result is taken by
            // the next collection).
            if let Outcome::Fresh(collection) = slots[i].outcome(self.settings.max_late_age) {
                outcomes[i] = Outcome::Fresh(collection);
            }
        }
    }

    /// The order in which `parts` are read one after the other: those never
    /// read first, fewest files first, then the others, least needy first
    /// (so that each finds the needs of the smaller ones known).
    fn read_order(parts: &[PartSpec<K>], slots: &[Slot]) -> Vec<usize> {
        let mut order: Vec<(bool, usize, usize)> = slots
            .iter()
            .zip(parts)
            .enumerate()
            .map(|(i, (slot, spec))| match slot.need() {
                None => (false, spec.inputs.iter().map(count_files).sum(), i),
                Some(need) => (true, need, i),
            })
            .collect();
        order.sort_unstable();
        order.into_iter().map(|(_, _, i)| i).collect()
    }

    fn collect_with(
        &mut self,
        parts: Vec<PartSpec<K>>,
        deadline: Option<Instant>,
    ) -> PartsCollection<K> {
        let mut out = PartsCollection::default();
        let mut previous = std::mem::take(&mut self.readers);
        let floor = self.floor(parts.len());
        let mut slots = Vec::with_capacity(parts.len());
        for spec in &parts {
            let slot = previous.remove(&spec.key).unwrap_or_else(|| {
                out.appeared.push(spec.key.clone());
                Slot::new(&self.settings, floor)
            });
            slots.push(slot);
        }
        out.disappeared = previous
            .into_iter()
            .map(|(key, slot)| {
                slot.retire();
                key
            })
            .collect();
        // Before anything is read, a part holding more than its allowance
        // (a part never read counted at its floor) lets go of it.
        self.set_allowances(&mut slots, None, floor);
        let max_files = self.caps.max_files;
        let outcomes: Vec<Outcome> = match deadline {
            None => {
                let mut outcomes: Vec<Option<Outcome>> = slots.iter().map(|_| None).collect();
                for i in Self::read_order(&parts, &slots) {
                    // The needs of the parts read before are known now; a
                    // part not read yet may need its whole allowance.
                    self.set_allowances(&mut slots, Some(i), usize::MAX);
                    let outcome = slots[i].run(&parts[i].inputs, &self.settings, max_files);
                    let cut = is_cut(&outcome);
                    outcomes[i] = Some(outcome);
                    if !cut {
                        continue;
                    }
                    // Every part cut so far, this one and those read before
                    // (whose cut the room made may have let go of), read
                    // again when it has more room.
                    let cut: Vec<usize> = (0..outcomes.len())
                        .filter(|&j| outcomes[j].as_ref().is_some_and(is_cut))
                        .collect();
                    for j in self.make_room(&mut slots, &cut, floor) {
                        let again = slots[j].run(&parts[j].inputs, &self.settings, max_files);
                        outcomes[j] = Some(again);
                    }
                }
                let mut outcomes: Vec<Outcome> = outcomes.into_iter().flatten().collect();
                self.use_unused_room(&parts, &mut slots, &mut outcomes, floor, None);
                outcomes
            }
            Some(deadline) => {
                for (spec, slot) in parts.iter().zip(&mut slots) {
                    slot.start(
                        &spec.inputs,
                        &spec.pins,
                        &self.settings,
                        max_files,
                        &self.finished,
                    );
                }
                wait(&self.finished, slots.iter(), deadline);
                let mut outcomes: Vec<Outcome> = slots
                    .iter_mut()
                    .map(|slot| slot.outcome(self.settings.max_late_age))
                    .collect();
                self.read_again_once_known(&parts, &mut slots, &mut outcomes, floor, deadline);
                self.use_unused_room(&parts, &mut slots, &mut outcomes, floor, Some(deadline));
                outcomes
            }
        };
        let mut problems = Vec::new();
        let mut stats = CollectStats::default();
        let mut writers = WriterReport::default();
        let mut ray_logs_unreadable = None;
        let mut combined = Vec::with_capacity(parts.len());
        for ((spec, mut slot), outcome) in parts.into_iter().zip(slots).zip(outcomes) {
            let mut report = PartReport {
                key: spec.key.clone(),
                files: 0,
                series: 0,
                capped: None,
                late: None,
            };
            let families = match outcome {
                Outcome::Fresh(collection) => {
                    let collection = *collection;
                    out.statuses.push(status_of(&spec, &collection));
                    for problem in &collection.problems {
                        if problem.reason.is_directory_reason() {
                            out.unreadable
                                .push((spec.key.clone(), problem.path.clone()));
                        }
                    }
                    report.files = collection.stats.files_listed;
                    add_stats(&mut stats, &collection.stats);
                    writers.add(&collection.writers);
                    problems.extend(
                        collection
                            .problems
                            .into_iter()
                            .map(|p| shown(p, &spec.shown_as)),
                    );
                    out.writer_conflicts.extend(collection.conflicts);
                    log_cut(&spec.name, slot.cut_changed(), floor);
                    ray_logs_unreadable = ray_logs_unreadable.or(collection.ray_logs_unreadable);
                    if self.caps.max_files.is_some_and(|max| report.files > max) {
                        report.capped = Some(Capped::Files(report.files));
                        slot.over_files();
                    }
                    collection.families
                }
                Outcome::Late(late) => {
                    let (served, families) = match late {
                        Late::Last(families) => (LateServed::Last, families),
                        Late::Expired => (LateServed::Expired, Vec::new()),
                        Late::None => (LateServed::None, Vec::new()),
                    };
                    report.late = Some(served);
                    let mut status = status_of(&spec, &Collection::default());
                    status.samples = families.iter().map(|f| f.samples.len()).sum();
                    out.statuses.push(status);
                    families
                }
                Outcome::OverFiles(files) => {
                    report.files = files;
                    report.capped = Some(Capped::Files(files));
                    let mut status = status_of(&spec, &Collection::default());
                    status.files_listed = files;
                    out.statuses.push(status);
                    Vec::new()
                }
            };
            let series: usize = families.iter().map(|f| f.samples.len()).sum();
            if report.capped.is_none() && self.caps.max_series.is_some_and(|max| series > max) {
                report.capped = Some(Capped::Series(series));
            }
            if report.capped.is_none() {
                report.series = series;
                combined.push(LabelledPart {
                    name: spec.name,
                    labels: spec.labels,
                    families,
                });
            }
            out.reports.push(report);
            self.readers.insert(spec.key, slot);
        }
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
    total.parts_panicked += one.parts_panicked;
}

/// The parts read by this collection and cut for the memory budget.
fn cut_and_read(outcomes: &[Outcome]) -> Vec<usize> {
    (0..outcomes.len())
        .filter(|&i| is_cut(&outcomes[i]))
        .collect()
}

/// Whether a part was read by this collection and cut for the memory
/// budget (from what it read: the room made for another part may have let
/// go of what it holds since, and of its cut).
fn is_cut(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Fresh(collection) => collection
            .problems
            .iter()
            .any(|p| matches!(p.reason, SkipReason::OverMemoryBudget { .. })),
        _ => false,
    }
}

/// Logs how a part's read went against its allowance of the memory
/// budget, when that changed (`floor`: its equal share).
fn log_cut(part: &str, change: Option<CutChange>, floor: usize) {
    match change {
        Some(CutChange::Cut(cut)) => tracing::warn!(
            part,
            needed_bytes = cut.needed,
            granted_bytes = cut.granted,
            held_bytes = cut.held,
            floor_bytes = floor,
            files_skipped = cut.files,
            "A part needs more of --memory.budget than it is granted while the parts together need more than the budget: some of its files are left out (multiproc_exporter_files_skipped_total{{reason=\"over_memory_budget\"}}). Every part keeps at least its equal share (the floor); the part furthest over it is cut first."
        ),
        Some(CutChange::Whole) => tracing::info!(
            part,
            "A part cut for --memory.budget is read whole again."
        ),
        None => {}
    }
}

#[cfg(test)]
mod sharing_tests;
#[cfg(test)]
mod tests;
