//! Collecting: read the inputs ([`crate::source`]), then merge them
//! ([`crate::merge`]), keeping both stages' caches between collections.

use super::compaction::{Candidate, CompactionReport, Compactor};
use super::lifecycle::{sort_out, SkippedShare, WriterReport};
use super::per_writer::PerWriter;
use crate::merge::{FileIdentity, KeyStore, MergeInput, Merged, PlanCache};
use crate::model::MetricFamily;
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::evidence::Evidence;
use crate::source::writers::{Visibility, WriterPolicy, Writers};
use crate::source::{
    release_free_heap, Input, MemoryBudget, Problem, ReadFile, Reader, SkipReason, SkipToken,
    Skipped,
};
use crate::transform::combine::Conflict;
use crate::transform::config::PerWriter as PerWriterConfig;
use crate::transform::views::SourceFilter;

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
    /// Frozen files of dead writers not even looked up, their directory
    /// being unchanged (their values are folded into a cached base).
    pub files_skipped: usize,
    /// Records merged.
    pub records: usize,
    /// Bytes read from files.
    pub bytes_read: u64,
    /// Keys decoded in this collection (0 when nothing was appended).
    pub keys_decoded: usize,
    /// Whether the merge had to be re-planned.
    pub replanned: bool,
    /// Parts (subdirectories, pods) whose read panicked (a bug), served
    /// without their metrics this time.
    pub parts_panicked: usize,
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
    /// The writers: states, pending files, process values.
    pub writers: WriterReport,
    /// With `per_writer`: families two writers disagree about.
    pub conflicts: Vec<Conflict>,
    /// With `per_writer.ray_logs`: the directory and why it cannot be read
    /// (writers keep their pids meanwhile).
    pub ray_logs_unreadable: Option<(std::path::PathBuf, String)>,
    /// Identifies the merge that made `families`: two collections with the
    /// same id merged the same inputs into the same families.
    pub merged_id: u64,
    /// The merge was skipped: its inputs were those of the merge the caller
    /// holds the families of ([`Collector::collect_since`]). `families` is
    /// then empty, and the caller's families of merge `merged_id` stand.
    pub unchanged: bool,
}

/// Reads and merges a set of inputs incrementally; keep one per set of
/// inputs. An unchanged directory decodes no key and plans nothing again.
#[derive(Debug)]
pub struct Collector {
    reader: Reader,
    writers: Writers,
    /// Files whose writer was dead at the last collection: their values
    /// loaded since are final, so they can be frozen and folded.
    dead_before: rustc_hash::FxHashSet<(u64, u64, u64)>,
    /// The share in the report of the files the reader skipped, for the set
    /// it was worked out for.
    skipped_share: Option<(SkipToken, SkippedShare)>,
    /// Compaction of dead writers' files, when the policy asks for it.
    compactor: Compactor,
    /// The merge's caches.
    merging: Merging,
    /// The key store's size right after it was last built from scratch.
    fresh_store_bytes: Option<usize>,
    /// Build the caches from scratch at the next collection.
    rebuild: bool,
    /// Times the caches were rebuilt.
    rebuilds: u64,
    /// Give freed heap back to the system before the next collection.
    trim: bool,
    /// The last merge, if it can stand for a later one with the same inputs.
    last_merge: Option<LastMerge>,
}

/// The merge stage's state, kept between collections.
#[derive(Debug, Default)]
struct Merging {
    /// Every key, label set and pid seen (the reader interns into it).
    store: KeyStore,
    plans: PlanCache,
    /// Each writer merged on its own (`per_writer` in the configuration).
    per_writer: Option<PerWriter>,
    /// The set of skipped files the plan cache can merge without
    /// ([`PlanCache::merge_steady`]), and their problems.
    steady: Option<(SkipToken, Vec<(usize, Problem)>)>,
}

/// What a merge was made of: equal inputs, equal merged families. The files
/// skipped are named by their token (they are unchanged while it is); each
/// file merged by its place, its structure, its values' version and whether
/// it was folded.
#[derive(Debug, PartialEq, Eq)]
struct MergeInputs {
    skipped: Option<SkipToken>,
    files: Vec<(usize, u64, u64, bool)>,
    /// The reading of the writers' `process_*` values appended (0: none).
    process: u64,
}

/// The last merge and what a collection that skips it reports again.
#[derive(Debug)]
struct LastMerge {
    id: u64,
    inputs: MergeInputs,
    /// The files the merge left out.
    problems: Vec<(usize, Problem)>,
    files_merged: usize,
    records: usize,
}

/// The key store keeps every key, label set and pid it has seen, so that an
/// unchanged directory costs nothing; when writers come and go (every
/// recycled worker brings a new pid) it grows. When it has grown past one and
/// a half times its size right after a rebuild plus this many bytes, the
/// caches are rebuilt from the files present (one full read), which releases
/// what vanished files left behind.
const REBUILD_SLACK_BYTES: usize = 1 << 20;

impl Default for Collector {
    fn default() -> Self {
        Self {
            reader: Reader::default(),
            writers: Writers::new(WriterPolicy::exact()),
            dead_before: Default::default(),
            skipped_share: None,
            compactor: Compactor::default(),
            merging: Merging::default(),
            fresh_store_bytes: None,
            rebuild: false,
            rebuilds: 0,
            trim: false,
            last_merge: None,
        }
    }
}

impl Collector {
    /// A collector with nothing cached, treating writers as prometheus_client
    /// does ([`WriterPolicy::exact`]) until [`Self::set_writer_policy`].
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

    /// Decides the writers' liveness from `evidence` from the next
    /// collection on (see [`crate::source::writers::evidence`]); nothing
    /// changes when it is the evidence they have.
    pub fn set_evidence(&mut self, evidence: std::sync::Arc<dyn Evidence>) {
        let current = std::sync::Arc::as_ptr(self.writers.evidence());
        if std::ptr::addr_eq(current, std::sync::Arc::as_ptr(&evidence)) {
            return;
        }
        let policy = self.writers.policy();
        self.writers = Writers::with_evidence(policy, evidence);
        self.rebuild = true;
    }

    /// Applies `policy` to the writers from the next collection on.
    pub fn set_writer_policy(&mut self, policy: WriterPolicy) {
        if self.writers.policy() != policy {
            self.writers = Writers::with_evidence(policy, self.writers.evidence().clone());
            // Files frozen under the old policy: read everything again.
            self.rebuild = true;
        }
    }

    /// Merges each writer's files on its own, as `config` says (see
    /// [`crate::pipeline::per_writer`]), or all of them together (`None`,
    /// prometheus_client's merge), from the next collection on.
    pub fn set_per_writer(&mut self, config: Option<&PerWriterConfig>) {
        if self.merging.per_writer.as_ref().map(PerWriter::config) != config {
            self.merging.per_writer = config.map(PerWriter::new);
            self.merging.steady = None;
        }
    }

    /// Reads, merges and serves only the records of the families `filter`
    /// keeps (a view's), or every record (`None`), from the next collection
    /// on (a change rebuilds the caches).
    pub fn set_key_filter(&mut self, filter: Option<SourceFilter>) {
        if self.reader.set_key_filter(filter) {
            self.rebuild = true;
        }
    }

    /// Shares `budget` with this collector's reader.
    pub fn set_memory_budget(&mut self, budget: Option<std::sync::Arc<MemoryBudget>>) {
        self.reader.set_memory_budget(budget);
    }

    /// Withdraws this collector's charge from the budget.
    pub fn release_budget(&mut self) {
        self.reader.release_budget();
    }

    /// Bytes this collector's reader charges to the budget now.
    pub fn charged(&self) -> usize {
        self.reader.charged()
    }

    /// Times the caches were rebuilt from scratch to release what vanished
    /// writers left in them.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Number of distinct record keys decoded so far.
    pub fn keys_decoded(&self) -> usize {
        self.merging.store.len()
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
        self.collect_since(inputs, None)
    }

    /// [`Self::collect`], for a caller that holds the families of merge
    /// `held` (a [`Collection::merged_id`] it was given with them): when
    /// every file to merge is the same and holds the same values as in that
    /// merge, the merge is skipped and the collection says so
    /// ([`Collection::unchanged`], with no families). Everything else (the
    /// listing, the writers, the problems, the counters) is collected anew.
    ///
    /// Only without `per_writer`. The writers' `process_*` families count as
    /// an input: they are read again at most once a second
    /// ([`crate::source::writers::PROCESS_SAMPLE_INTERVAL`]), and a new
    /// reading means a new merge.
    pub fn collect_since(&mut self, inputs: &[Input], held: Option<u64>) -> Collection {
        let mut compaction = self.prepare(inputs);
        let policy = self.writers.policy();
        // Step 1: read.
        let keys_before = self.merging.store.len();
        let read = self.reader.read(inputs, &mut self.merging.store);
        let mut problems = read.problems;
        let token = read.skipped.token();
        let files_skipped = read.skipped.len();
        let share = skipped_share(&mut self.skipped_share, policy, &token, &read.skipped);
        // Step 2: which files take part, from their writers' states.
        let sorted = sort_out(&mut self.writers, &read.files, share, &mut problems);
        let mut writers = sorted.report;
        let compact = policy.compact_dead
            && self.compactor.due()
            && matches!(
                self.writers.visibility(),
                Visibility::Confirmed | Visibility::Assumed
            );
        let Taking {
            kept,
            freeze,
            thaw,
            mut compactable,
            dead_now,
        } = Taking::sort(
            &read.files,
            &sorted.keep,
            &sorted.dead,
            &self.dead_before,
            policy,
            compact,
        );
        self.dead_before = dead_now;
        // Step 3: what changed since the merge the caller holds.
        let merge_inputs = self
            .merging
            .per_writer
            .is_none()
            .then(|| MergeInputs::of(&token, &kept, writers.process_version));
        let reused = self
            .last_merge
            .as_ref()
            .filter(|last| held == Some(last.id) && merge_inputs.as_ref() == Some(&last.inputs));
        // Step 4: merge anew, or reuse the held merge.
        let merge_problems = problems.len();
        let (merged, conflicts) = match reused {
            Some(last) => {
                problems.extend(last.problems.iter().cloned());
                let merged = Merged {
                    files_merged: last.files_merged,
                    records: last.records,
                    ..Merged::default()
                };
                (merged, Vec::new())
            }
            None => {
                let round = Round {
                    kept: &kept,
                    skipped: &read.skipped,
                    share,
                    token: &token,
                };
                self.merging.merge(&round, &mut problems)
            }
        };
        let unchanged = reused.is_some();
        let merged_id = match reused {
            Some(last) => last.id,
            None => {
                let id = next_merge_id();
                self.last_merge = merge_inputs.map(|inputs| LastMerge {
                    id,
                    inputs,
                    problems: problems[merge_problems..].to_vec(),
                    files_merged: merged.files_merged,
                    records: merged.records,
                });
                id
            }
        };
        problems.sort_by_key(|(position, _)| *position);
        if compact {
            // The skipped files are frozen: dead at two collections at least.
            compactable.extend(read.skipped.files().iter().filter_map(|file| {
                Candidate::of(&file.path, file.identity).map(|c| (file.position, c))
            }));
            compactable.sort_by_key(|(position, _)| *position);
        }
        let read_stats = read.stats;
        // Step 5: what the next collection starts from.
        self.settle(freeze, thaw, compactable, &mut compaction);
        // The merge grew the key store (plans, output labels): charged now,
        // not at the next read.
        self.reader.recharge(&self.merging.store);
        writers.compaction = compaction;
        self.trim = read_stats.files_forgotten > 0 || merged.replanned;
        let stats = CollectStats {
            directories_present: read_stats.directories_present,
            directories_missing: read_stats.directories_missing,
            directories_unreadable: read_stats.directories_unreadable,
            files_listed: read_stats.files_listed,
            files_merged: merged.files_merged,
            files_skipped,
            records: merged.records,
            bytes_read: read_stats.bytes_read,
            keys_decoded: self.merging.store.len() - keys_before,
            replanned: merged.replanned,
            parts_panicked: 0,
        };
        let families = self
            .merging
            .with_process_families(merged.families, &writers);
        Collection {
            families,
            problems: problems.into_iter().map(|(_, p)| p).collect(),
            stats,
            writers,
            conflicts,
            ray_logs_unreadable: self
                .merging
                .per_writer
                .as_ref()
                .and_then(PerWriter::ray_logs_error)
                .map(|(path, error)| (path.to_path_buf(), error.to_owned())),
            merged_id,
            unchanged,
        }
    }

    /// Before reading: rebuilds the caches when asked, gives freed heap
    /// back, thaws revived writers' files, and finishes or undoes an
    /// interrupted compaction.
    fn prepare(&mut self, inputs: &[Input]) -> CompactionReport {
        if std::mem::take(&mut self.rebuild) {
            self.merging.store = KeyStore::new();
            // (What keeps the served totals monotone stays.)
            self.merging.plans.rebuild();
            self.last_merge = None;
            self.reader.forget_files();
            self.fresh_store_bytes = None;
            self.rebuilds += 1;
            self.trim = true;
        }
        if std::mem::take(&mut self.trim) {
            // What vanished writers left (their files' state, the last
            // scrape's plan and body) is free now; without this the
            // allocator's per-thread arenas keep it resident.
            release_free_heap();
        }
        // A dead writer's pid that holds its file again: not final.
        for pid in self.writers.revived() {
            self.reader.thaw_writer(pid);
        }
        let mut compaction = CompactionReport::default();
        if self.writers.policy().compact_dead {
            let dirs: Vec<&std::path::Path> = inputs
                .iter()
                .filter_map(|i| match i {
                    Input::Directory(dir) => Some(dir.as_path()),
                    Input::File(_) => None,
                })
                .collect();
            self.compactor.before_reading(&dirs, &mut compaction);
        }
        compaction
    }

    /// After merging: freezes the files whose values are final, rechecks
    /// those whose writer is back, compacts, and decides whether the caches
    /// are rebuilt next time.
    fn settle(
        &mut self,
        freeze: Vec<(std::path::PathBuf, (u64, u64))>,
        thaw: Vec<std::path::PathBuf>,
        compactable: Vec<(usize, Candidate)>,
        compaction: &mut CompactionReport,
    ) {
        // Dead writers' files cannot change: not loaded again.
        for (path, identity) in freeze {
            self.reader.freeze(&path, identity);
        }
        for path in thaw {
            self.reader.recheck(&path);
        }
        if !compactable.is_empty() {
            // Never a file whose pid a running process has now (it might be
            // about to open it again).
            let candidates: Vec<Candidate> = compactable
                .into_iter()
                .map(|(_, c)| c)
                .filter(|c| {
                    c.path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(crate::format::file_name::writer_pid)
                        .is_none_or(|pid| !self.writers.pid_in_use(pid))
                })
                .collect();
            self.compactor.round(&candidates, compaction);
        }
        let store_bytes = self.merging.store.approx_bytes();
        match self.fresh_store_bytes {
            None => self.fresh_store_bytes = Some(store_bytes),
            Some(fresh) => {
                self.rebuild = store_bytes > fresh + fresh / 2 + REBUILD_SLACK_BYTES;
            }
        }
    }
}

/// The share in the report of the files the reader skipped: worked out once
/// for each set of them (`token`), kept in `known`.
fn skipped_share<'k>(
    known: &'k mut Option<(SkipToken, SkippedShare)>,
    policy: WriterPolicy,
    token: &Option<SkipToken>,
    skipped: &Skipped<'_>,
) -> Option<&'k SkippedShare> {
    let token = token.as_ref()?;
    if known.as_ref().is_none_or(|(t, _)| t != token) {
        *known = Some((token.clone(), SkippedShare::new(policy, &skipped.files())));
    }
    known.as_ref().map(|(_, share)| share)
}

/// The files a collection merges, and what their writers' states ask of the
/// reader and the compactor afterwards.
struct Taking<'r, 'f> {
    /// The files merged, in listing order.
    kept: Vec<Kept<'r, 'f>>,
    /// Files whose values are final now, to freeze.
    freeze: Vec<(std::path::PathBuf, (u64, u64))>,
    /// Frozen files whose writer holds them again.
    thaw: Vec<std::path::PathBuf>,
    /// Files a compaction round may fold into an archive.
    compactable: Vec<(usize, Candidate)>,
    /// Every file whose writer is dead now (device, inode, creation time).
    dead_now: rustc_hash::FxHashSet<(u64, u64, u64)>,
}

/// A file merged: whether its values are final and folded, and whether its
/// writer is dead.
#[derive(Clone, Copy)]
struct Kept<'r, 'f> {
    file: &'r ReadFile<'f>,
    fold: bool,
    dead: bool,
}

impl<'r, 'f> Taking<'r, 'f> {
    /// Sorts `files` by what their writers' states (`keep`, `dead`) and the
    /// last collection's dead set make of them.
    fn sort(
        files: &'r [ReadFile<'f>],
        keep: &[bool],
        dead: &[bool],
        dead_before: &rustc_hash::FxHashSet<(u64, u64, u64)>,
        policy: WriterPolicy,
        compact: bool,
    ) -> Self {
        let mut taking = Self {
            kept: Vec::with_capacity(files.len()),
            freeze: Vec::new(),
            thaw: Vec::new(),
            compactable: Vec::new(),
            dead_now: Default::default(),
        };
        for ((file, keep), dead) in files.iter().zip(keep).zip(dead) {
            // Device, inode and creation time: inode numbers are reused.
            let key = (file.identity.0, file.identity.1, file.born.to_bits());
            if *dead {
                taking.dead_now.insert(key);
            } else if file.frozen {
                // Its pid holds the file again: not final after all.
                taking.thaw.push(file.path.clone());
            }
            // Dead already at the last collection: the values loaded now
            // were written before the process exited, and are final.
            let final_values = *dead && (file.frozen || dead_before.contains(&key));
            if compact && final_values {
                taking
                    .compactable
                    .extend(Candidate::of(&file.path, file.identity).map(|c| (file.position, c)));
            }
            let fold = policy.fold_dead && final_values;
            if fold && !file.frozen {
                taking.freeze.push((file.path.clone(), file.identity));
            }
            if *keep {
                taking.kept.push(Kept {
                    file,
                    fold,
                    dead: *dead,
                });
            }
        }
        taking
    }
}

impl MergeInputs {
    /// What a merge of `kept` with the skipped files of `token`, followed
    /// by the writers' `process_*` values of reading `process`, is made of.
    fn of(token: &Option<SkipToken>, kept: &[Kept<'_, '_>], process: u64) -> Self {
        Self {
            process,
            skipped: token.clone(),
            files: kept
                .iter()
                .map(|k| {
                    let f = k.file;
                    (f.position, f.merge.generation, f.values_version, k.fold)
                })
                .collect(),
        }
    }
}

/// What one merge takes: the files read and kept, and the files the reader
/// skipped (those `share` keeps take part), named by `token`.
struct Round<'a, 'r, 'f> {
    kept: &'a [Kept<'r, 'f>],
    skipped: &'a Skipped<'f>,
    share: Option<&'a SkippedShare>,
    token: &'a Option<SkipToken>,
}

impl Round<'_, '_, '_> {
    /// Which of the skipped files take part (one flag each).
    fn skipped_kept(&self) -> &[bool] {
        self.share.map_or(&[][..], |s| &s.keep[..])
    }
}

impl Merging {
    /// Merges the `round`'s files anew: each writer on its own with
    /// `per_writer`, else only the files read when the skipped set is the
    /// steady one, else all of them in listing order. The files the merge
    /// leaves out join `problems`.
    fn merge(
        &mut self,
        round: &Round<'_, '_, '_>,
        problems: &mut Vec<(usize, Problem)>,
    ) -> (Merged, Vec<Conflict>) {
        let (kept, token) = (round.kept, round.token);
        if self.per_writer.is_some() {
            self.steady = None;
            return self.merge_per_writer(round, problems);
        }
        let steady = token.is_some() && self.steady.as_ref().map(|(t, _)| t) == token.as_ref();
        if steady {
            let inputs: Vec<MergeInput<'_>> = kept.iter().map(|k| k.file.merge).collect();
            if let Some(merged) = self.plans.merge_steady(&inputs) {
                for (i, error) in merged.excluded.iter() {
                    problems.push(problem(kept[*i].file, error.clone()));
                }
                if let Some((_, skipped_problems)) = &self.steady {
                    problems.extend(skipped_problems.iter().cloned());
                }
                return (merged, Vec::new());
            }
        }
        (self.merge_all(round, problems), Vec::new())
    }

    /// Every file, the skipped ones in their places, merged together as
    /// prometheus_client merges them; remembers the skipped files' problems
    /// for the steady merges that follow.
    fn merge_all(
        &mut self,
        round: &Round<'_, '_, '_>,
        problems: &mut Vec<(usize, Problem)>,
    ) -> Merged {
        let kept = round.kept;
        let skipped = round.skipped.files();
        let keep = round.skipped_kept();
        let mut all: Vec<(&ReadFile<'_>, bool, bool)> =
            Vec::with_capacity(kept.len() + skipped.len());
        let mut visited = kept.iter().peekable();
        for (file, _) in skipped.iter().zip(keep).filter(|(_, keep)| **keep) {
            while let Some(k) = visited.next_if(|k| k.file.position < file.position) {
                all.push((k.file, k.fold, false));
            }
            all.push((file, true, true));
        }
        all.extend(visited.map(|k| (k.file, k.fold, false)));
        let inputs: Vec<MergeInput<'_>> = all.iter().map(|(f, _, _)| f.merge).collect();
        let frozen: Vec<bool> = all.iter().map(|(_, fold, _)| *fold).collect();
        let is_skipped: Vec<bool> = all.iter().map(|(_, _, s)| *s).collect();
        let identities: Vec<FileIdentity> = all
            .iter()
            .map(|(f, _, _)| (f.identity.0, f.identity.1, f.born.to_bits()))
            .collect();
        let merged =
            self.plans
                .merge_folding(&mut self.store, &inputs, &frozen, &is_skipped, &identities);
        let mut skipped_problems = Vec::new();
        for (i, error) in merged.excluded.iter() {
            let (file, _, skipped) = all[*i];
            let problem = problem(file, error.clone());
            if skipped {
                skipped_problems.push(problem.clone());
            }
            problems.push(problem);
        }
        self.steady = round.token.clone().map(|token| (token, skipped_problems));
        merged
    }

    /// Every file, the skipped ones in their places, each writer merged on
    /// its own (`per_writer`): each writer's plan cache keeps the work
    /// small. A dead writer's gauges are not its own series any more (Ray's
    /// agent forgets a worker's gauges once it stops reporting); its totals
    /// stay.
    fn merge_per_writer(
        &mut self,
        round: &Round<'_, '_, '_>,
        problems: &mut Vec<(usize, Problem)>,
    ) -> (Merged, Vec<Conflict>) {
        let Some(per_writer) = &mut self.per_writer else {
            return (Merged::default(), Vec::new());
        };
        let skipped = round.skipped.files();
        let keep = round.skipped_kept();
        let mut all: Vec<&ReadFile<'_>> = round
            .kept
            .iter()
            .filter(|k| !(k.dead && k.file.merge.name.is_gauge()))
            .map(|k| k.file)
            .chain(
                skipped
                    .iter()
                    .zip(keep)
                    .filter(|(f, keep)| **keep && !f.merge.name.is_gauge())
                    .map(|(f, _)| f),
            )
            .collect();
        all.sort_by_key(|f| f.position);
        let names: Vec<std::borrow::Cow<'_, str>> = all
            .iter()
            .map(|f| f.path.file_name().unwrap_or_default().to_string_lossy())
            .collect();
        let inputs: Vec<(&str, MergeInput<'_>)> = names
            .iter()
            .zip(&all)
            .map(|(name, f)| (&**name, f.merge))
            .collect();
        let out = per_writer.merge(&mut self.store, &inputs);
        for (i, error) in out.merged.excluded.iter() {
            problems.push(problem(all[*i], error.clone()));
        }
        (out.merged, out.conflicts)
    }

    /// The merged `families`, then the writers' `process_*` families whose
    /// names the directory does not take.
    fn with_process_families(
        &mut self,
        mut families: Vec<MetricFamily>,
        writers: &WriterReport,
    ) -> Vec<MetricFamily> {
        for family in &writers.process_families {
            // A family of the directory's own comes first.
            if !families.iter().any(|f| f.name == family.name) {
                families.push(match &mut self.per_writer {
                    Some(per_writer) => per_writer.process_family(family),
                    None => family.clone(),
                });
            }
        }
        families
    }
}

/// A new [`Collection::merged_id`], never given before in this process (by
/// any collector: a caller holding another collector's merge cannot be
/// told it is unchanged).
fn next_merge_id() -> u64 {
    static LAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    LAST.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
}

/// The problem of a file the merge left out.
fn problem(file: &ReadFile<'_>, error: crate::merge::MergeError) -> (usize, Problem) {
    (
        file.position,
        Problem {
            path: file.path.clone(),
            reason: SkipReason::Merge(error),
        },
    )
}
