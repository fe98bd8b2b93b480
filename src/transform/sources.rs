//! Merging the families of several sources (the directory, then each
//! upstream in configuration order) into one list, never summing and never
//! serving two series of the same identity. Pure: no I/O.
//!
//! The rule, for a family of a later source:
//!
//! 1. **A new name** (no earlier family has it, and none of its names — the
//!    family name, the name the text format declares it under (`<name>_total`
//!    for a counter, `<name>_info` for an info), its sample names — is a name
//!    of another earlier family) is appended after the earlier sources'
//!    families.
//! 2. **The name of an earlier family of the same type**: its samples join
//!    that family (after the earlier samples) when **none of its series**
//!    (sample name and labels) is already there, so that sources told apart
//!    by their labels (`instance`, `engine`, `model_name`) are served side by
//!    side. A help text that differs keeps the earlier one
//!    ([`SourceConflictReason::HelpMismatch`], reported).
//! 3. Otherwise the whole family is **left out** and reported:
//!    [`SourceConflictReason::TypeMismatch`] (another type),
//!    [`SourceConflictReason::DuplicateSeries`] (a series the earlier source
//!    has: which value is right cannot be known, and a sum would be wrong),
//!    [`SourceConflictReason::NameClash`] (one of its names is another
//!    family's, which would make the exposition ambiguous).
//!
//! The directory's own families are never changed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::model::{Labels, MetricFamily, MetricType};

/// One source's families and its name.
#[derive(Debug, Clone)]
pub struct SourceFamilies {
    /// The source's name (an upstream's `name`).
    pub name: Arc<str>,
    /// Its families, in its order.
    pub families: Vec<MetricFamily>,
}

/// Why a source's family did not merge cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceConflictReason {
    /// An earlier family of the same name has another type: left out.
    TypeMismatch,
    /// One of its series is already served by an earlier source: left out.
    DuplicateSeries,
    /// One of its names is the name of another earlier family: left out.
    NameClash,
    /// Only the help text differs: merged, under the earlier help.
    HelpMismatch,
}

impl SourceConflictReason {
    /// Every reason, in a fixed order (for metrics that list them all).
    pub const ALL: [Self; 4] = [
        Self::TypeMismatch,
        Self::DuplicateSeries,
        Self::NameClash,
        Self::HelpMismatch,
    ];

    /// A short, stable label for metrics (`reason="..."`).
    pub fn label(self) -> &'static str {
        match self {
            Self::TypeMismatch => "type_mismatch",
            Self::DuplicateSeries => "duplicate_series",
            Self::NameClash => "name_clash",
            Self::HelpMismatch => "help_mismatch",
        }
    }

    /// Whether the family was left out.
    pub fn left_out(self) -> bool {
        self != Self::HelpMismatch
    }
}

/// A family of a source that disagreed with an earlier source's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceConflict {
    /// The family name.
    pub family: Arc<str>,
    /// The source whose family disagreed.
    pub source: Arc<str>,
    /// The earlier source whose family was kept.
    pub kept_from: Arc<str>,
    /// How they disagreed.
    pub reason: SourceConflictReason,
}

/// The names a family occupies in an exposition: its name, the name the
/// text format declares (`_total`, `_info`) and its sample names.
fn occupied_names(family: &MetricFamily) -> impl Iterator<Item = Arc<str>> + '_ {
    let declared = match family.metric_type {
        MetricType::Counter => Some(format!("{}_total", family.name)),
        MetricType::Info => Some(format!("{}_info", family.name)),
        _ => None,
    };
    std::iter::once(family.name.clone())
        .chain(declared.map(Arc::from))
        .chain(family.samples.iter().map(|s| s.name.clone()))
}

/// The families of `first` (named `first_name`, the directory), then each
/// source's, merged by the rule of this module; with the conflicts, in
/// order.
pub fn merge_sources(
    first_name: &Arc<str>,
    first: Vec<MetricFamily>,
    sources: Vec<SourceFamilies>,
) -> (Vec<MetricFamily>, Vec<SourceConflict>) {
    let mut merged = first;
    let mut conflicts = Vec::new();
    if sources.iter().all(|s| s.families.is_empty()) {
        return (merged, conflicts);
    }
    // Family name → (index in `merged`, source that brought it).
    let mut by_name: HashMap<Arc<str>, (usize, Arc<str>)> = HashMap::new();
    // Every occupied name → the index of the family occupying it.
    let mut names: HashMap<Arc<str>, usize> = HashMap::new();
    for (i, family) in merged.iter().enumerate() {
        by_name
            .entry(family.name.clone())
            .or_insert((i, first_name.clone()));
        for name in occupied_names(family) {
            names.entry(name).or_insert(i);
        }
    }
    for source in sources {
        for family in source.families {
            let existing = by_name.get(&family.name).cloned();
            let clash = occupied_names(&family).find_map(|name| {
                let &other = names.get(&name)?;
                (merged[other].name != family.name).then_some(other)
            });
            let conflict = |reason, kept_from: &Arc<str>| SourceConflict {
                family: family.name.clone(),
                source: source.name.clone(),
                kept_from: kept_from.clone(),
                reason,
            };
            if let Some(other) = clash {
                let kept_from = by_name
                    .get(&merged[other].name)
                    .map_or_else(|| first_name.clone(), |(_, s)| s.clone());
                conflicts.push(conflict(SourceConflictReason::NameClash, &kept_from));
                continue;
            }
            let Some((index, kept_from)) = existing else {
                let index = merged.len();
                for name in occupied_names(&family) {
                    names.entry(name).or_insert(index);
                }
                by_name.insert(family.name.clone(), (index, source.name.clone()));
                merged.push(family);
                continue;
            };
            let earlier = &merged[index];
            if earlier.metric_type != family.metric_type {
                conflicts.push(conflict(SourceConflictReason::TypeMismatch, &kept_from));
                continue;
            }
            let series: HashSet<(&str, &Labels)> = earlier
                .samples
                .iter()
                .map(|s| (&*s.name, &s.labels))
                .collect();
            if family
                .samples
                .iter()
                .any(|s| series.contains(&(&*s.name, &s.labels)))
            {
                conflicts.push(conflict(SourceConflictReason::DuplicateSeries, &kept_from));
                continue;
            }
            if earlier.help != family.help {
                conflicts.push(conflict(SourceConflictReason::HelpMismatch, &kept_from));
            }
            for name in occupied_names(&family) {
                names.entry(name).or_insert(index);
            }
            merged[index].samples.extend(family.samples);
        }
    }
    (merged, conflicts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Sample;

    fn family(
        name: &str,
        metric_type: MetricType,
        help: &str,
        samples: &[(&str, &str)],
    ) -> MetricFamily {
        MetricFamily {
            name: name.into(),
            help: help.into(),
            metric_type,
            samples: samples
                .iter()
                .map(|&(sample, engine)| Sample {
                    name: sample.into(),
                    labels: Labels::new([(Arc::from("engine"), Arc::from(engine))]),
                    value: 1.0,
                })
                .collect(),
        }
    }

    fn source(name: &str, families: Vec<MetricFamily>) -> SourceFamilies {
        SourceFamilies {
            name: name.into(),
            families,
        }
    }

    #[test]
    fn series_told_apart_by_labels_merge_and_nothing_is_summed() {
        let dir: Arc<str> = "directory".into();
        let directory = vec![family("c", MetricType::Counter, "h", &[("c_total", "0")])];
        let upstream = source(
            "front",
            vec![
                family("c", MetricType::Counter, "other", &[("c_total", "1")]),
                family("g", MetricType::Gauge, "g", &[("g", "1")]),
            ],
        );
        let twin = source(
            "twin",
            vec![
                family("c", MetricType::Counter, "h", &[("c_total", "1")]),
                family("g", MetricType::Counter, "g", &[("g_total", "2")]),
                family("c_total", MetricType::Gauge, "h", &[("c_total", "3")]),
                family("new", MetricType::Gauge, "n", &[("new", "3")]),
            ],
        );
        let (merged, conflicts) = merge_sources(&dir, directory, vec![upstream, twin]);
        let names: Vec<&str> = merged.iter().map(|f| &*f.name).collect();
        assert_eq!(names, ["c", "g", "new"]);
        assert_eq!(merged[0].samples.len(), 2);
        assert_eq!(&*merged[0].help, "h");
        assert!(merged[0].samples.iter().all(|s| s.value == 1.0));
        let reasons: Vec<(&str, &str, &str, SourceConflictReason)> = conflicts
            .iter()
            .map(|c| (&*c.family, &*c.source, &*c.kept_from, c.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    "c",
                    "front",
                    "directory",
                    SourceConflictReason::HelpMismatch
                ),
                (
                    "c",
                    "twin",
                    "directory",
                    SourceConflictReason::DuplicateSeries
                ),
                ("g", "twin", "front", SourceConflictReason::TypeMismatch),
                (
                    "c_total",
                    "twin",
                    "directory",
                    SourceConflictReason::NameClash
                ),
            ]
        );
    }

    #[test]
    fn no_sources_leave_the_directory_alone() {
        let directory = vec![family("c", MetricType::Counter, "h", &[("c_total", "0")])];
        let (merged, conflicts) = merge_sources(&"d".into(), directory.clone(), vec![]);
        assert_eq!(merged, directory);
        assert!(conflicts.is_empty());
    }
}
