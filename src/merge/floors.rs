//! Keeping merged totals monotone when the order of their float sum changes
//! ([`Floors`]).
//!
//! A float sum in a fixed order never goes down when one of its terms goes
//! up (each rounded addition is monotone in both of its operands), and a
//! term added or removed as `0.0` changes nothing; prometheus_client's merge,
//! adding the same files in the same order at every scrape, is monotone.
//! Changing the order is not: `(a + b) + c` and `(b + c) + a` can differ in
//! their last bit either way. [`super::PlanCache::merge_folding`] changes
//! the order whenever the set of files it folds into its cached base
//! changes (a writer's values become final, a writer is revived, the
//! policy changes): the folded files are added first, then the others in
//! file order. Left alone, 44 of 300 float counters went down by one ulp
//! when 4 of 6 writers exited (issue 54), which Prometheus takes for a
//! counter reset.
//!
//! So at each such change the plan cache evaluates the merge both ways on
//! the same values, and where a counter's, a histogram bucket's, a `_count`'s
//! or a `_sum`'s new value is below what the old order gives (or below the
//! floor that series already had), the series keeps that value as a floor:
//! it is served as `max(new order's sum, floor)`. The floor goes as soon as
//! the new order's sum reaches it (from then on the sum is in one fixed
//! order again, monotone by itself), or as soon as that sum falls below
//! what it was when the floor was set: a sum in a fixed order only falls
//! when a term fell (a writer's own value went down, a `_sum` of negative
//! observations) or a file was removed, and then the series must fall too.
//!
//! Floors are few (only the series whose last bits the change lowered) and
//! short-lived (until the series next counts); a scrape with none costs
//! nothing, one with some costs one comparison each. They follow their
//! series across plans (by family, sample name and labels), and across a
//! rebuild of the caches ([`Floors::detach`]).

use rustc_hash::FxHashMap;

use super::plan::{MergePlan, SeriesId};

/// The floors of one plan's output series, and those waiting for the next
/// plan (carried over a rebuild).
#[derive(Debug, Default, Clone)]
pub(super) struct Floors {
    /// By output slot of the current plan.
    entries: Vec<Floor>,
    /// Named by series, to be placed at the next plan.
    detached: Vec<(SeriesId, Floor)>,
}

/// One series' floor.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Floor {
    /// Its output slot (in the plan the entry belongs to).
    slot: u32,
    /// Served at least this.
    floor: f64,
    /// The series' value in the order that set the floor, at that time:
    /// below it, a term fell or a file went, and the floor goes.
    reference: f64,
}

impl Floor {
    /// Whether it still holds for the value `value` (its order's sum now).
    fn holds(&self, value: f64) -> bool {
        value < self.floor && value >= self.reference
    }
}

impl Floors {
    /// Whether there is no floor.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.detached.is_empty()
    }

    /// Serves each series at least its floor, and drops the floors that no
    /// longer hold (see [`Floor::holds`]).
    pub(super) fn apply(&mut self, slots: &mut [f64]) {
        self.entries.retain(|f| {
            let value = slots[f.slot as usize];
            let holds = f.holds(value);
            if holds {
                slots[f.slot as usize] = f.floor;
            }
            holds
        });
    }

    /// The order changed: `old` is the merge of the same values in the old
    /// order, `new` in the new one (same plan). Sets the floors that keep
    /// every monotone series of `plan` at or above what the old order
    /// served, and applies them to `new`.
    pub(super) fn change_order(&mut self, plan: &MergePlan, old: &[f64], new: &mut [f64]) {
        // What the old order serves now: its sum, or its floor.
        let mut served: FxHashMap<u32, f64> = FxHashMap::default();
        for f in self.entries.drain(..) {
            if f.holds(old[f.slot as usize]) {
                served.insert(f.slot, f.floor);
            }
        }
        for &slot in plan.monotone_slots() {
            let s = slot as usize;
            let before = served.get(&slot).copied().unwrap_or(old[s]);
            // (NaN compares false: no floor.)
            if new[s] < before {
                self.entries.push(Floor {
                    slot,
                    floor: before,
                    reference: new[s],
                });
                new[s] = before;
            }
        }
    }

    /// The plan changed from `old` (if any) to `new`: each floor follows its
    /// series to its slot in `new` (a series gone takes its floor along),
    /// and so do the detached ones.
    pub(super) fn replanned(&mut self, old: Option<&MergePlan>, new: &MergePlan) {
        if self.is_empty() {
            return;
        }
        let mut named = std::mem::take(&mut self.detached);
        if let Some(old) = old {
            named.extend(Self::named(&mut self.entries, old));
        }
        self.entries.clear();
        if named.is_empty() {
            return;
        }
        let slots: FxHashMap<SeriesId, u32> = new.series_ids().collect();
        for (id, floor) in named {
            if let Some(&slot) = slots.get(&id) {
                self.entries.push(Floor { slot, ..floor });
            }
        }
    }

    /// The caches are rebuilt: the floors of `plan`'s series are kept by
    /// name, to be placed in the next plan ([`Self::replanned`]).
    pub(super) fn detach(&mut self, plan: Option<&MergePlan>) {
        if let Some(plan) = plan {
            let named = Self::named(&mut self.entries, plan);
            self.detached.extend(named);
        }
        self.entries.clear();
    }

    /// `entries` (slots of `plan`) named by their series.
    fn named(entries: &mut Vec<Floor>, plan: &MergePlan) -> Vec<(SeriesId, Floor)> {
        if entries.is_empty() {
            return Vec::new();
        }
        let by_slot: FxHashMap<u32, Floor> = entries.drain(..).map(|f| (f.slot, f)).collect();
        plan.series_ids()
            .filter_map(|(id, slot)| by_slot.get(&slot).map(|f| (id, *f)))
            .collect()
    }
}
