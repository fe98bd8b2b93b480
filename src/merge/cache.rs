//! The incremental plan cache ([`PlanCache`]): a merge is planned again only
//! when the file list or a file's keys changed; otherwise the previous plan
//! is evaluated on the current values.

use super::floors::Floors;
use super::keys::{KeyId, KeyStore};
use super::plan::{plan, Evaluation, MergePlan, Output, PlanInput};
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
    /// The frozen files' contributions, applied once: the positions (in the
    /// plan's files) folded, and the state after them.
    base: Option<(Vec<usize>, Evaluation)>,
    /// How to merge without the files the last merge marked as skipped.
    steady: Option<Steady>,
    /// The files the last merge folded, in order (`None`: no merge yet).
    folded: Option<Vec<FileIdentity>>,
    /// What keeps the monotone series from going down when the files
    /// folded change (see [`super::floors`]).
    floors: Floors,
}

/// Names a file across plans and rebuilds: its device, inode and birth
/// time's bits.
pub type FileIdentity = (u64, u64, u64);

/// What [`PlanCache::merge_steady`] needs: the plan and base of the last
/// [`PlanCache::merge_folding`], seen from the files it did not mark skipped.
#[derive(Debug)]
struct Steady {
    /// The generations of the files not skipped, in order.
    signature: Vec<u64>,
    /// What to do with each of them.
    slots: Vec<SteadySlot>,
    /// Files and records of the skipped files that took part.
    files_merged: usize,
    records: usize,
}

/// What [`PlanCache::merge_steady`] does with a file that was not skipped.
#[derive(Debug, Clone, Copy)]
enum SteadySlot {
    /// Left out of the plan (see [`Merged::excluded`]).
    Excluded,
    /// Folded into the base already.
    Folded,
    /// Applied at this position of the plan.
    Apply(usize),
}

impl PlanCache {
    /// Evaluates `plan` adding first the files at the `folded` positions
    /// (from a cached base: applied once while the plan and `folded` stay
    /// the same), then the others in order; in file order when `folded` is
    /// empty.
    fn evaluate_folded(
        base: &mut Option<(Vec<usize>, Evaluation)>,
        plan: &MergePlan,
        files: &[MergeInput<'_>],
        folded: &[usize],
    ) -> Result<Output, super::ShapeMismatch> {
        if folded.is_empty() {
            let mut state = plan.start();
            for (position, &i) in plan.files().iter().enumerate() {
                plan.apply(&mut state, position, files[i].values)?;
            }
            return Ok(plan.output(state));
        }
        match base {
            Some((positions, _)) if positions == folded => {}
            // Files folded after the base's, in order: the same additions
            // as from the start.
            Some((positions, state)) if folded.starts_with(positions) => {
                let extended = folded[positions.len()..].iter().try_for_each(|&position| {
                    plan.apply(state, position, files[plan.files()[position]].values)
                });
                if let Err(error) = extended {
                    // (Part of the files applied: no base.)
                    *base = None;
                    return Err(error);
                }
                *positions = folded.to_vec();
            }
            _ => {
                let mut state = plan.start();
                for &position in folded {
                    plan.apply(&mut state, position, files[plan.files()[position]].values)?;
                }
                *base = Some((folded.to_vec(), state));
            }
        }
        let Some((_, state)) = base.as_ref() else {
            return Ok(plan.output(plan.start()));
        };
        let mut state = state.clone();
        let mut next_folded = folded.iter().peekable();
        for (position, &i) in plan.files().iter().enumerate() {
            if next_folded.peek() == Some(&&position) {
                next_folded.next();
                continue;
            }
            plan.apply(&mut state, position, files[i].values)?;
        }
        Ok(plan.output(state))
    }

    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the plan and the base (the key store they were made with is
    /// being replaced), keeping what keeps the served totals monotone: the
    /// files the last merge folded and the floors.
    pub fn rebuild(&mut self) {
        let plan = self.plan.take();
        self.floors.detach(plan.as_ref().map(|(_, plan)| plan));
        self.excluded.clear();
        self.base = None;
        self.steady = None;
    }

    /// Merges `files` in order (keys interned in `store`), planning again
    /// only when their structure differs from the last call's.
    pub fn merge(&mut self, store: &mut KeyStore, files: &[MergeInput<'_>]) -> Merged {
        self.merge_folding(store, files, &[], &[], &[])
    }

    /// The last [`Self::merge_folding`] again, given only the files it did not
    /// mark `skipped` (in the same order; the skipped ones are the same,
    /// unchanged, which the caller vouches for): nothing is planned and
    /// nothing of the skipped files is touched. `None` when the files given
    /// are not structured as they were (plan with every file again).
    /// [`Merged::excluded`] indexes `files` and names only them.
    pub fn merge_steady(&mut self, files: &[MergeInput<'_>]) -> Option<Merged> {
        let steady = self.steady.as_ref()?;
        let (_, plan) = self.plan.as_ref()?;
        let (_, base) = self.base.as_ref()?;
        if steady.signature.len() != files.len()
            || steady
                .signature
                .iter()
                .zip(files)
                .any(|(generation, file)| *generation != file.generation)
        {
            return None;
        }
        let mut merged = Merged {
            files_merged: steady.files_merged,
            records: steady.records,
            ..Merged::default()
        };
        let mut state = base.clone();
        for (i, (file, slot)) in files.iter().zip(&steady.slots).enumerate() {
            match *slot {
                SteadySlot::Excluded => {
                    let generation = file.generation;
                    if let Some((_, error)) = self.excluded.iter().find(|(g, _)| *g == generation) {
                        merged.excluded.push((i, error.clone()));
                    }
                    continue;
                }
                SteadySlot::Folded => {}
                SteadySlot::Apply(position) => {
                    plan.apply(&mut state, position, file.values).ok()?
                }
            }
            merged.files_merged += 1;
            merged.records += file.values.len();
        }
        let mut output = plan.output(state);
        self.floors.apply(&mut output.slots);
        merged.families = plan.families_of(output);
        Some(merged)
    }

    /// [`Self::merge`], where the files marked in `frozen` (their values can
    /// no longer change: their writer is dead) are applied once into a
    /// cached base and every later merge only applies the others to it, as
    /// long as the plan and the frozen set stay the same. Their values are
    /// then added before the others' instead of in file order, which can
    /// change the last bits of non-integer sums (integers below 2^53 add
    /// exactly in any order) and which of two equal `mostrecent` timestamps
    /// wins. An empty `frozen` merges exactly in file order.
    ///
    /// When the set of files folded changes (and so the order of the sums),
    /// no counter, histogram or summary series goes below what the old
    /// order gives on the same values (see the private `merge::floors`). `identities`
    /// names each file across plans and [`Self::rebuild`]s (empty: by its
    /// generation).
    ///
    /// The frozen files marked in `skipped` may be left out of the next call,
    /// made with [`Self::merge_steady`].
    pub fn merge_folding(
        &mut self,
        store: &mut KeyStore,
        files: &[MergeInput<'_>],
        frozen: &[bool],
        skipped: &[bool],
        identities: &[FileIdentity],
    ) -> Merged {
        self.steady = None;
        let signature: Vec<u64> = files.iter().map(|f| f.generation).collect();
        let reuse = matches!(&self.plan, Some((previous, _)) if *previous == signature);
        let mut carried = None;
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
            let previous = self.plan.replace((signature.clone(), planned.plan));
            if let Some((_, plan)) = &self.plan {
                let previous = previous.as_ref().map(|(_, plan)| plan);
                self.floors.replanned(previous, plan);
                // The last merge's base, for its order (see below).
                carried = self
                    .base
                    .take()
                    .zip(previous)
                    .map(|((_, state), previous)| plan.carry(previous, &state));
            }
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
        let Some((_, plan)) = &self.plan else {
            return merged;
        };
        for &i in plan.files() {
            merged.files_merged += 1;
            merged.records += files[i].values.len();
        }
        let identity = |i: usize| {
            identities
                .get(i)
                .copied()
                .unwrap_or((u64::MAX, files[i].generation, 0))
        };
        let folded: Vec<usize> = plan
            .files()
            .iter()
            .enumerate()
            .filter(|(_, &i)| frozen.get(i).copied().unwrap_or(false))
            .map(|(position, _)| position)
            .collect();
        let folded_ids: Vec<FileIdentity> =
            folded.iter().map(|&p| identity(plan.files()[p])).collect();
        // The files the last merge folded, at their positions in this plan:
        // if they are not these, the order of the sums changes.
        let mut all_there = true;
        let before = match &self.folded {
            Some(ids) if *ids != folded_ids => {
                let ids: rustc_hash::FxHashSet<FileIdentity> = ids.iter().copied().collect();
                let positions: Vec<usize> = plan
                    .files()
                    .iter()
                    .enumerate()
                    .filter(|(_, &i)| ids.contains(&identity(i)))
                    .map(|(position, _)| position)
                    .collect();
                all_there = positions.len() == ids.len();
                (positions != folded).then_some(positions)
            }
            _ => None,
        };
        let steady = (!folded.is_empty() && skipped.contains(&true))
            .then(|| Steady::new(plan, files, frozen, skipped))
            .flatten();
        let old = before.map(|before| {
            // The old order's base: the cached one (or, planned again, the
            // last one carried to this plan, when every file it folded is
            // still there) holds the values its files had when folded, still
            // theirs while they stay folded; a file thawed since may have
            // counted on or fallen, and then the base is added anew from the
            // current values.
            let stayed = before.iter().all(|p| folded.binary_search(p).is_ok());
            let mut fresh = carried
                .filter(|_| all_there && stayed)
                .map(|state| (before.clone(), state));
            let base = if reuse && stayed {
                &mut self.base
            } else {
                &mut fresh
            };
            Self::evaluate_folded(base, plan, files, &before)
        });
        let new = Self::evaluate_folded(&mut self.base, plan, files, &folded);
        if folded.is_empty() {
            self.base = None;
        }
        merged.families = match (old, new) {
            (Some(Ok(old)), Ok(mut new)) => {
                self.floors.change_order(plan, &old.slots, &mut new.slots);
                plan.families_of(new)
            }
            (_, Ok(mut new)) => {
                self.floors.apply(&mut new.slots);
                plan.families_of(new)
            }
            (_, Err(_)) => Vec::new(),
        };
        self.folded = Some(folded_ids);
        self.steady = steady;
        merged
    }
}

impl Steady {
    /// How to merge `files` without the `skipped` ones on `plan`'s base;
    /// `None` if a skipped file is not folded (it must be applied).
    fn new(
        plan: &MergePlan,
        files: &[MergeInput<'_>],
        frozen: &[bool],
        skipped: &[bool],
    ) -> Option<Steady> {
        let is = |flags: &[bool], i: usize| flags.get(i).copied().unwrap_or(false);
        let mut positions = vec![None; files.len()];
        for (position, &i) in plan.files().iter().enumerate() {
            positions[i] = Some(position);
        }
        let mut steady = Steady {
            signature: Vec::new(),
            slots: Vec::new(),
            files_merged: 0,
            records: 0,
        };
        for (i, file) in files.iter().enumerate() {
            if is(skipped, i) {
                if !is(frozen, i) {
                    return None;
                }
                if positions[i].is_some() {
                    steady.files_merged += 1;
                    steady.records += file.values.len();
                }
                continue;
            }
            steady.signature.push(file.generation);
            steady.slots.push(match positions[i] {
                None => SteadySlot::Excluded,
                Some(_) if is(frozen, i) => SteadySlot::Folded,
                Some(position) => SteadySlot::Apply(position),
            });
        }
        Some(steady)
    }
}
