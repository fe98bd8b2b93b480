//! Folding labels away in a view: one series per family and remaining
//! labels, standing for every value of the folded labels (vLLM's `engine`,
//! an SGLang rank). Pure: merged families in, folded families out, no I/O.
//!
//! A [`Fold`] names the labels it folds away and a [`FoldFunction`] per
//! family; families without a rule pass unchanged. Within a family, the
//! samples that differ only in the folded labels (and in the labels a rule
//! merges, [`FoldFunction::SumLabels`], [`FoldFunction::NewestUnion`]) make a
//! group, and each group becomes one sample: the first member's name and
//! labels without the folded ones, at the place of the first member. The
//! values are computed in `f64`, members in the order the family lists them
//! (as `/metrics` serves them), from the same collection's families:
//!
//! | function | value of a group `v_1 … v_n` |
//! |---|---|
//! | `sum` | `((v_1 + v_2) + …) + v_n` |
//! | `max`, `min` | the largest, smallest (NaN if one is NaN) |
//! | `mean` | `sum / n` |
//! | `weighted_mean` | `(w_1·v_1 + … + w_n·v_n) / (w_1 + … + w_n)`, `w_i` from another family; `mean` when a weight is missing, not a finite number ≥ 0, or all are 0 |
//! | `sum_labels` | the largest value; each listed label's values summed (integers stay integers) |
//! | `newest_union` | the largest value; the listed labels' comma-separated items united over the `k` newest members with an item |
//!
//! A group of one member keeps its value exactly (a pod with one engine is
//! served the values `/metrics` has).

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::float::python_repr_string;
use crate::model::{Label, Labels, MetricFamily, Sample};

/// Labels folded away in a view, and how each family is folded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Fold {
    /// The labels folded away, sorted, without repeats.
    pub labels: Vec<Arc<str>>,
    /// One rule per family; a family without one is served unchanged.
    pub rules: Vec<FoldRule>,
}

/// How one family is folded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FoldRule {
    /// The family, as `/metrics` names it (or the name the text format
    /// declares for it, `<name>_total` for a counter).
    pub family: Arc<str>,
    /// The function giving a group's value.
    pub function: FoldFunction,
}

/// What a group of samples folds into (the table of [the module](self)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FoldFunction {
    /// The sum of the values.
    Sum,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
    /// The mean of the values.
    Mean,
    /// The mean weighted by another family: the weight of a sample is taken
    /// from the first sample of `family` with the same values of the folded
    /// labels (only those are compared), its label `label` read as a number,
    /// or its value without `label`.
    WeightedMean {
        /// The family the weights come from.
        family: Arc<str>,
        /// The label holding the weight; `None`: the sample's value.
        label: Option<Arc<str>>,
    },
    /// For info-like gauges (value 1): the largest value, and each of
    /// `labels` the sum of its values read as numbers (vLLM's
    /// `num_gpu_blocks`: the pod's blocks); integers are summed exactly,
    /// other numbers in `f64` written as Python's `repr`; where a value is
    /// no number, the first member's value stays.
    SumLabels {
        /// The labels summed.
        labels: Vec<Arc<str>>,
    },
    /// For timestamped state (vLLM's `lora_requests_info`, whose value is
    /// the time its label combination was last current): of the members
    /// where one of `labels` is not empty, the `k` with the largest values
    /// (all those equal to the `k`-th too), `k` the number of distinct
    /// values of the folded labels in `ranks` (1 without it); each of
    /// `labels` becomes the union of their comma-separated items (newest
    /// first, repeats and empty items left out), the value the largest.
    /// Without such a member, the group's newest member.
    NewestUnion {
        /// The labels holding comma-separated items.
        labels: Vec<Arc<str>>,
        /// The family whose distinct values of the folded labels count the
        /// ranks.
        ranks: Option<Arc<str>>,
    },
}

impl FoldFunction {
    /// The labels this function merges rather than groups by.
    fn merged_labels(&self) -> &[Arc<str>] {
        match self {
            Self::SumLabels { labels } => labels,
            Self::NewestUnion { labels, .. } => labels,
            _ => &[],
        }
    }

    /// The other family it reads, if any.
    pub fn referenced_family(&self) -> Option<&Arc<str>> {
        match self {
            Self::WeightedMean { family, .. } => Some(family),
            Self::NewestUnion { ranks, .. } => ranks.as_ref(),
            _ => None,
        }
    }
}

impl Fold {
    /// The families its rules read besides their own (weights, ranks): a
    /// view that folds must read them too.
    pub fn referenced_families(&self) -> impl Iterator<Item = &Arc<str>> {
        self.rules
            .iter()
            .filter_map(|rule| rule.function.referenced_family())
    }

    /// `families` (a view's, in its order) with the families that have a
    /// rule folded; `all` is the collection they were cut from (for the
    /// families a rule reads).
    pub fn apply(&self, families: Vec<MetricFamily>, all: &[MetricFamily]) -> Vec<MetricFamily> {
        if self.labels.is_empty() || self.rules.is_empty() {
            return families;
        }
        families
            .into_iter()
            .map(|family| match self.rule_for(&family) {
                Some(rule) => self.fold_family(family, &rule.function, all),
                None => family,
            })
            .collect()
    }

    fn rule_for(&self, family: &MetricFamily) -> Option<&FoldRule> {
        self.rules
            .iter()
            .find(|rule| *rule.family == *family.name || family.declares(&rule.family))
    }

    fn fold_family(
        &self,
        family: MetricFamily,
        function: &FoldFunction,
        all: &[MetricFamily],
    ) -> MetricFamily {
        let merged = function.merged_labels();
        let mut index: HashMap<(Arc<str>, Labels), usize> = HashMap::new();
        let mut groups: Vec<Vec<&Sample>> = Vec::new();
        for sample in &family.samples {
            let key = Labels::new(
                sample
                    .labels
                    .iter()
                    .filter(|(name, _)| !self.labels.contains(name) && !merged.contains(name))
                    .cloned(),
            );
            match index.get(&(sample.name.clone(), key.clone())) {
                Some(&at) => groups[at].push(sample),
                None => {
                    index.insert((sample.name.clone(), key), groups.len());
                    groups.push(vec![sample]);
                }
            }
        }
        let context = Context {
            folded: &self.labels,
            all,
        };
        let samples = groups
            .iter()
            .map(|members| context.fold_group(members, function))
            .collect();
        MetricFamily { samples, ..family }
    }
}

/// What a group's fold reads besides its members.
struct Context<'a> {
    folded: &'a [Arc<str>],
    all: &'a [MetricFamily],
}

impl Context<'_> {
    fn fold_group(&self, members: &[&Sample], function: &FoldFunction) -> Sample {
        let first = members[0];
        let values = || members.iter().map(|s| s.value);
        let (value, replaced): (f64, Vec<Label>) = match function {
            _ if members.len() == 1 && !matches!(function, FoldFunction::NewestUnion { .. }) => {
                (first.value, Vec::new())
            }
            FoldFunction::Sum => (sum(values()), Vec::new()),
            FoldFunction::Max => (extreme(values(), f64::max), Vec::new()),
            FoldFunction::Min => (extreme(values(), f64::min), Vec::new()),
            FoldFunction::Mean => (mean(members), Vec::new()),
            FoldFunction::WeightedMean { family, label } => (
                self.weighted_mean(members, family, label.as_deref()),
                Vec::new(),
            ),
            FoldFunction::SumLabels { labels } => (
                extreme(values(), f64::max),
                labels
                    .iter()
                    .map(|label| (label.clone(), sum_label(members, label)))
                    .collect(),
            ),
            FoldFunction::NewestUnion { labels, ranks } => {
                return self.newest_union(members, labels, ranks.as_deref());
            }
        };
        Sample {
            name: first.name.clone(),
            labels: self.relabelled(first, &replaced),
            value,
        }
    }

    /// `sample`'s labels without the folded ones, `replaced` set.
    fn relabelled(&self, sample: &Sample, replaced: &[Label]) -> Labels {
        Labels::new(
            sample
                .labels
                .iter()
                .filter(|(name, _)| !self.folded.contains(name))
                .map(|(name, value)| {
                    replaced
                        .iter()
                        .find(|(n, _)| n == name)
                        .cloned()
                        .unwrap_or_else(|| (name.clone(), value.clone()))
                }),
        )
    }

    /// The values of the folded labels of `sample`.
    fn folded_values<'s>(&self, sample: &'s Sample) -> Vec<Option<&'s str>> {
        self.folded.iter().map(|l| sample.labels.get(l)).collect()
    }

    fn family(&self, name: &str) -> Option<&MetricFamily> {
        self.all
            .iter()
            .find(|f| *f.name == *name || f.declares(name))
    }

    fn weighted_mean(&self, members: &[&Sample], family: &str, label: Option<&str>) -> f64 {
        let Some(weights_family) = self.family(family) else {
            return mean(members);
        };
        let mut weights = Vec::with_capacity(members.len());
        for member in members {
            let key = self.folded_values(member);
            let weight = weights_family
                .samples
                .iter()
                .find(|w| self.folded_values(w) == key)
                .and_then(|w| match label {
                    Some(label) => w
                        .labels
                        .get(label)
                        .and_then(|v| v.trim().parse::<f64>().ok()),
                    None => Some(w.value),
                });
            match weight {
                Some(w) if w.is_finite() && w >= 0.0 => weights.push(w),
                _ => return mean(members),
            }
        }
        let total = sum(weights.iter().copied());
        if total <= 0.0 || !total.is_finite() {
            return mean(members);
        }
        let weighted = sum(members.iter().zip(&weights).map(|(s, w)| w * s.value));
        weighted / total
    }

    fn ranks(&self, family: Option<&str>) -> usize {
        let Some(family) = family.and_then(|f| self.family(f)) else {
            return 1;
        };
        let mut seen: Vec<Vec<Option<&str>>> = Vec::new();
        for sample in &family.samples {
            let key = self.folded_values(sample);
            if !seen.contains(&key) {
                seen.push(key);
            }
        }
        seen.len().max(1)
    }

    fn newest_union(
        &self,
        members: &[&Sample],
        labels: &[Arc<str>],
        ranks: Option<&str>,
    ) -> Sample {
        let newest_first = |list: &mut Vec<&Sample>| {
            list.sort_by(|a, b| order_key(b.value).total_cmp(&order_key(a.value)));
        };
        let mut with_items: Vec<&Sample> = members
            .iter()
            .copied()
            .filter(|s| {
                labels
                    .iter()
                    .any(|l| s.labels.get(l).is_some_and(|v| !v.is_empty()))
            })
            .collect();
        if with_items.is_empty() {
            let mut all = members.to_vec();
            newest_first(&mut all);
            let newest = all[0];
            return Sample {
                name: newest.name.clone(),
                labels: self.relabelled(newest, &[]),
                value: newest.value,
            };
        }
        newest_first(&mut with_items);
        let k = self.ranks(ranks).min(with_items.len());
        let bound = order_key(with_items[k - 1].value);
        let chosen: Vec<&Sample> = with_items
            .iter()
            .copied()
            .filter(|s| order_key(s.value) >= bound)
            .collect();
        let united: Vec<Label> = labels
            .iter()
            .map(|label| {
                let mut items: Vec<&str> = Vec::new();
                for sample in &chosen {
                    for item in sample.labels.get(label).unwrap_or("").split(',') {
                        if !item.is_empty() && !items.contains(&item) {
                            items.push(item);
                        }
                    }
                }
                (label.clone(), Arc::from(items.join(",")))
            })
            .collect();
        let newest = chosen[0];
        let mut replaced = united;
        // A listed label the newest member lacks is added.
        let mut labels = self.relabelled(newest, &replaced).as_slice().to_vec();
        replaced.retain(|(name, _)| newest.labels.get(name).is_none());
        labels.extend(replaced);
        Sample {
            name: newest.name.clone(),
            labels: Labels::new(labels),
            value: newest.value,
        }
    }
}

/// NaN sorts below every number.
fn order_key(value: f64) -> f64 {
    if value.is_nan() {
        f64::NEG_INFINITY
    } else {
        value
    }
}

/// Left to right, as Python's `sum` adds.
fn sum(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(0.0, |total, v| total + v)
}

fn mean(members: &[&Sample]) -> f64 {
    sum(members.iter().map(|s| s.value)) / members.len() as f64
}

/// The largest or smallest by `pick`; NaN if a value is NaN.
fn extreme(mut values: impl Iterator<Item = f64>, pick: fn(f64, f64) -> f64) -> f64 {
    let first = values.next().unwrap_or(f64::NAN);
    values.fold(first, |acc, v| {
        if acc.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            pick(acc, v)
        }
    })
}

/// The members' values of `label` summed (see [`FoldFunction::SumLabels`]).
fn sum_label(members: &[&Sample], label: &str) -> Arc<str> {
    let texts: Vec<&str> = members
        .iter()
        .map(|s| s.labels.get(label).unwrap_or(""))
        .collect();
    let first = || Arc::from(texts[0]);
    let integers: Option<Vec<i128>> = texts.iter().map(|t| t.parse::<i128>().ok()).collect();
    if let Some(integers) = integers {
        return integers
            .iter()
            .try_fold(0i128, |total, v| total.checked_add(*v))
            .map_or_else(first, |total| Arc::from(total.to_string()));
    }
    let floats: Option<Vec<f64>> = texts.iter().map(|t| t.parse::<f64>().ok()).collect();
    match floats {
        Some(floats) => Arc::from(python_repr_string(sum(floats.into_iter()))),
        None => first(),
    }
}

#[cfg(test)]
#[path = "fold_tests.rs"]
mod tests;
