//! Collecting: read the inputs ([`crate::source`]), then merge them
//! ([`crate::merge`]), keeping both stages' caches between collections.

use super::compaction::{Candidate, CompactionReport, Compactor};
use super::lifecycle::{sort_out, SkippedShare, WriterReport};
use super::per_writer::PerWriter;
use crate::merge::{KeyStore, MergeInput, Merged, PlanCache};
use crate::model::MetricFamily;
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::{Visibility, WriterPolicy, Writers};
use crate::source::{
    release_free_heap, Input, MemoryBudget, Problem, ReadFile, Reader, SkipReason, SkipToken,
};
use crate::transform::combine::Conflict;
use crate::transform::config::PerWriter as PerWriterConfig;

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
    /// The set of skipped files the plan cache can merge without
    /// ([`PlanCache::merge_steady`]), and their problems.
    steady: Option<(SkipToken, Vec<(usize, Problem)>)>,
    /// Compaction of dead writers' files, when the policy asks for it.
    compactor: Compactor,
    /// Each writer merged on its own (`per_writer` in the configuration).
    per_writer: Option<PerWriter>,
    store: KeyStore,
    plans: PlanCache,
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

/// What a merge was made of: equal inputs, equal merged families. The files
/// skipped are named by their token (they are unchanged while it is); each
/// file merged by its place, its structure, its values' version and whether
/// it was folded.
#[derive(Debug, PartialEq, Eq)]
struct MergeInputs {
    skipped: Option<SkipToken>,
    files: Vec<(usize, u64, u64, bool)>,
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
            steady: None,
            compactor: Compactor::default(),
            per_writer: None,
            store: KeyStore::default(),
            plans: PlanCache::default(),
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

    /// Applies `policy` to the writers from the next collection on.
    pub fn set_writer_policy(&mut self, policy: WriterPolicy) {
        if self.writers.policy() != policy {
            self.writers = Writers::new(policy);
            // Files frozen under the old policy: read everything again.
            self.rebuild = true;
        }
    }

    /// Merges each writer's files on its own, as `config` says (see
    /// [`crate::pipeline::per_writer`]), or all of them together (`None`,
    /// prometheus_client's merge), from the next collection on.
    pub fn set_per_writer(&mut self, config: Option<&PerWriterConfig>) {
        if self.per_writer.as_ref().map(PerWriter::config) != config {
            self.per_writer = config.map(PerWriter::new);
            self.steady = None;
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

    /// Times the caches were rebuilt from scratch to release what vanished
    /// writers left in them.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
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
        self.collect_since(inputs, None)
    }

    /// [`Self::collect`], for a caller that holds the families of merge
    /// `held` (a [`Collection::merged_id`] it was given with them): when
    /// every file to merge is the same and holds the same values as in that
    /// merge, the merge is skipped and the collection says so
    /// ([`Collection::unchanged`], with no families). Everything else (the
    /// listing, the writers, the problems, the counters) is collected anew.
    ///
    /// Only without `per_writer` and without writers' `process_*` families
    /// (which change with time, not with the files).
    pub fn collect_since(&mut self, inputs: &[Input], held: Option<u64>) -> Collection {
        if std::mem::take(&mut self.rebuild) {
            self.store = KeyStore::new();
            self.plans = PlanCache::new();
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
        let policy = self.writers.policy();
        let mut compaction = CompactionReport::default();
        if policy.compact_dead {
            let dirs: Vec<&std::path::Path> = inputs
                .iter()
                .filter_map(|i| match i {
                    Input::Directory(dir) => Some(dir.as_path()),
                    Input::File(_) => None,
                })
                .collect();
            self.compactor.before_reading(&dirs, &mut compaction);
        }
        let keys_before = self.store.len();
        let read = self.reader.read(inputs, &mut self.store);
        let mut problems = read.problems;
        // The skipped files (frozen, unchanged): their share is worked out
        // once for each set of them.
        let token = read.skipped.token();
        let files_skipped = read.skipped.len();
        let share = match (&token, &self.skipped_share) {
            (None, _) => None,
            (Some(token), Some((known, share))) if known == token => Some(share),
            (Some(token), _) => {
                let share = SkippedShare::new(policy, &read.skipped.files());
                self.skipped_share = Some((token.clone(), share));
                self.skipped_share.as_ref().map(|(_, share)| share)
            }
        };
        let sorted = sort_out(&mut self.writers, &read.files, share, &mut problems);
        let mut writers = sorted.report;
        let compact = policy.compact_dead
            && self.compactor.due()
            && matches!(
                self.writers.visibility(),
                Visibility::Confirmed | Visibility::Assumed
            );
        let mut compactable: Vec<(usize, Candidate)> = Vec::new();
        let mut kept: Vec<&ReadFile<'_>> = Vec::with_capacity(read.files.len());
        let mut folded: Vec<bool> = Vec::new();
        let mut kept_dead: Vec<bool> = Vec::new();
        let mut freeze: Vec<(std::path::PathBuf, (u64, u64))> = Vec::new();
        let mut thaw: Vec<std::path::PathBuf> = Vec::new();
        let mut dead_now = rustc_hash::FxHashSet::default();
        for ((file, keep), dead) in read.files.iter().zip(&sorted.keep).zip(&sorted.dead) {
            // Device, inode and creation time: inode numbers are reused.
            let key = (file.identity.0, file.identity.1, file.born.to_bits());
            if *dead {
                dead_now.insert(key);
            } else if file.frozen {
                // Its pid holds the file again: not final after all.
                thaw.push(file.path.clone());
            }
            // Dead already at the last collection: the values loaded now
            // were written before the process exited, and are final.
            let final_values = *dead && (file.frozen || self.dead_before.contains(&key));
            if compact && final_values {
                compactable
                    .extend(Candidate::of(&file.path, file.identity).map(|c| (file.position, c)));
            }
            let fold = policy.fold_dead && final_values;
            if fold && !file.frozen {
                freeze.push((file.path.clone(), file.identity));
            }
            if *keep {
                kept.push(file);
                folded.push(fold);
                kept_dead.push(*dead);
            }
        }
        self.dead_before = dead_now;
        let merge_inputs =
            (self.per_writer.is_none() && writers.process_families.is_empty()).then(|| {
                MergeInputs {
                    skipped: token.clone(),
                    files: kept
                        .iter()
                        .zip(&folded)
                        .map(|(f, fold)| (f.position, f.merge.generation, f.values_version, *fold))
                        .collect(),
                }
            });
        let reused = self
            .last_merge
            .as_ref()
            .filter(|last| held == Some(last.id) && merge_inputs.as_ref() == Some(&last.inputs));
        let mut conflicts = Vec::new();
        let merge_problems = problems.len();
        let merged = if let Some(last) = reused {
            problems.extend(last.problems.iter().cloned());
            Merged {
                files_merged: last.files_merged,
                records: last.records,
                ..Merged::default()
            }
        } else {
            let steady = token.is_some()
                && self.per_writer.is_none()
                && self.steady.as_ref().map(|(t, _)| t) == token.as_ref();
            let per_writer_merged = if let Some(per_writer) = &mut self.per_writer {
                // Every file, the skipped ones in their places: each writer's
                // plan cache keeps the work small. A dead writer's gauges are
                // not its own series any more (Ray's agent forgets a worker's
                // gauges once it stops reporting); its totals stay.
                let skipped = read.skipped.files();
                let keep = share.map_or(&[][..], |s| &s.keep[..]);
                let mut all: Vec<&ReadFile<'_>> = kept
                    .iter()
                    .zip(&kept_dead)
                    .filter(|(f, dead)| !(**dead && f.merge.name.is_gauge()))
                    .map(|(f, _)| *f)
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
                self.steady = None;
                conflicts = out.conflicts;
                Some(out.merged)
            } else {
                None
            };
            let merged = if per_writer_merged.is_some() {
                None
            } else if steady {
                let inputs: Vec<MergeInput<'_>> = kept.iter().map(|f| f.merge).collect();
                self.plans.merge_steady(&inputs)
            } else {
                None
            };
            let merged = match (per_writer_merged, merged) {
                (Some(merged), _) => merged,
                (None, Some(merged)) => {
                    for (i, error) in merged.excluded.iter() {
                        problems.push(problem(kept[*i], error.clone()));
                    }
                    if let Some((_, skipped_problems)) = &self.steady {
                        problems.extend(skipped_problems.iter().cloned());
                    }
                    merged
                }
                (None, None) => {
                    // Every file, the skipped ones in their places.
                    let skipped = read.skipped.files();
                    let keep = share.map_or(&[][..], |s| &s.keep[..]);
                    let mut all: Vec<(&ReadFile<'_>, bool, bool)> =
                        Vec::with_capacity(kept.len() + skipped.len());
                    let mut visited = kept.iter().zip(&folded).peekable();
                    for (file, _) in skipped.iter().zip(keep).filter(|(_, keep)| **keep) {
                        while let Some((read_file, fold)) =
                            visited.next_if(|(f, _)| f.position < file.position)
                        {
                            all.push((read_file, *fold, false));
                        }
                        all.push((file, true, true));
                    }
                    all.extend(visited.map(|(f, fold)| (*f, *fold, false)));
                    let inputs: Vec<MergeInput<'_>> = all.iter().map(|(f, _, _)| f.merge).collect();
                    let frozen: Vec<bool> = all.iter().map(|(_, fold, _)| *fold).collect();
                    let is_skipped: Vec<bool> = all.iter().map(|(_, _, s)| *s).collect();
                    let merged =
                        self.plans
                            .merge_folding(&mut self.store, &inputs, &frozen, &is_skipped);
                    let mut skipped_problems = Vec::new();
                    for (i, error) in merged.excluded.iter() {
                        let (file, _, skipped) = all[*i];
                        let problem = problem(file, error.clone());
                        if skipped {
                            skipped_problems.push(problem.clone());
                        }
                        problems.push(problem);
                    }
                    self.steady = token.map(|token| (token, skipped_problems));
                    merged
                }
            };
            merged
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
        let merged_replanned = merged.replanned;
        problems.sort_by_key(|(position, _)| *position);
        if compact {
            // The skipped files are frozen: dead at two collections at least.
            compactable.extend(read.skipped.files().iter().filter_map(|file| {
                Candidate::of(&file.path, file.identity).map(|c| (file.position, c))
            }));
            compactable.sort_by_key(|(position, _)| *position);
        }
        let read_stats = read.stats;
        // Dead writers' files cannot change: not loaded again.
        for (path, identity) in freeze {
            self.reader.freeze(&path, identity);
        }
        for path in thaw {
            self.reader.recheck(&path);
        }
        if compact && !compactable.is_empty() {
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
            self.compactor.round(&candidates, &mut compaction);
        }
        writers.compaction = compaction;
        self.trim = read_stats.files_forgotten > 0 || merged_replanned;
        let store_bytes = self.store.approx_bytes();
        match self.fresh_store_bytes {
            None => self.fresh_store_bytes = Some(store_bytes),
            Some(fresh) => {
                self.rebuild = store_bytes > fresh + fresh / 2 + REBUILD_SLACK_BYTES;
            }
        }
        let stats = CollectStats {
            directories_present: read_stats.directories_present,
            directories_missing: read_stats.directories_missing,
            directories_unreadable: read_stats.directories_unreadable,
            files_listed: read_stats.files_listed,
            files_merged: merged.files_merged,
            files_skipped,
            records: merged.records,
            bytes_read: read_stats.bytes_read,
            keys_decoded: self.store.len() - keys_before,
            replanned: merged.replanned,
        };
        let mut families = merged.families;
        for family in &writers.process_families {
            // A family of the directory's own comes first.
            if !families.iter().any(|f| f.name == family.name) {
                families.push(match &mut self.per_writer {
                    Some(per_writer) => per_writer.process_family(family),
                    None => family.clone(),
                });
            }
        }
        Collection {
            families,
            problems: problems.into_iter().map(|(_, p)| p).collect(),
            stats,
            writers,
            conflicts,
            ray_logs_unreadable: self
                .per_writer
                .as_ref()
                .and_then(PerWriter::ray_logs_error)
                .map(|(path, error)| (path.to_path_buf(), error.to_owned())),
            merged_id,
            unchanged,
        }
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
