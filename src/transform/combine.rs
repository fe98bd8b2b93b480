//! Combining the separately merged families of several metric directories
//! into one exposition, each directory's samples told apart by a label.
//! Pure: no I/O.
//!
//! This is what a DaemonSet exporter serving several pods needs
//! (`serve --dir.subdirectories-label NAME`, see [`crate::pipeline::subdirectories`]):
//! every pod's directory is merged on its own, exactly as prometheus_client
//! would merge it, and only then are the pods put side by side. Merging all
//! pods' files as one directory would sum their counters and pick one
//! `mostrecent` gauge for all of them.
//!
//! [`combine`] takes the parts in the order to serve them (the caller sorts
//! them by label value) and:
//!
//! 1. adds the label `NAME="<part's value>"` to every sample (with
//!    [`combine_labelled`], each part's set of labels: a discovered pod's
//!    `namespace`, `pod` and `container`, see
//!    [`crate::pipeline::discovered`]), with
//!    [`crate::transform::with_constant_labels`], so a sample that already has
//!    a label of that name keeps it as `exported_<name>`;
//! 2. puts families of the same name from different parts into one family,
//!    at the position where the name was first seen, with each part's samples
//!    after the previous part's;
//! 3. resolves disagreements between parts about a family of the same name:
//!    the first part's type and help win. A family whose **type** differs
//!    cannot share the name, so that part's family is left out
//!    ([`ConflictReason::TypeMismatch`]); a family whose **help** alone differs
//!    (two versions of an application, say) keeps its samples under the first
//!    help ([`ConflictReason::HelpMismatch`]). Both are reported as
//!    [`Conflict`]s for the log and the self-metrics.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::{Label, MetricFamily};
use crate::transform::with_constant_labels;

/// One directory's merged families and the label value that identifies it.
#[derive(Debug, Clone)]
pub struct Part {
    /// The value of the distinguishing label (the subdirectory's name).
    pub value: Arc<str>,
    /// The directory's families, merged on their own.
    pub families: Vec<MetricFamily>,
}

/// Why a part's family did not combine cleanly with an earlier part's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConflictReason {
    /// The types differ: the later part's family was left out.
    TypeMismatch,
    /// Only the help texts differ: the later part's samples were kept, under
    /// the first part's help.
    HelpMismatch,
}

impl ConflictReason {
    /// Every reason, in a fixed order (for metrics that list them all).
    pub const ALL: [ConflictReason; 2] = [Self::TypeMismatch, Self::HelpMismatch];

    /// A short, stable label for metrics (`reason="..."`).
    pub fn label(self) -> &'static str {
        match self {
            Self::TypeMismatch => "type_mismatch",
            Self::HelpMismatch => "help_mismatch",
        }
    }
}

/// A family of one part that disagreed with the same-named family of an
/// earlier part.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conflict {
    /// The family name.
    pub family: Arc<str>,
    /// The part whose family disagreed (its label value).
    pub part: Arc<str>,
    /// The part whose type and help were kept.
    pub kept_from: Arc<str>,
    /// How they disagreed.
    pub reason: ConflictReason,
}

/// The result of [`combine`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Combined {
    /// The combined families, in first-seen order.
    pub families: Vec<MetricFamily>,
    /// Families that disagreed with an earlier part's, in the order met.
    pub conflicts: Vec<Conflict>,
}

/// One directory's merged families and the labels that identify it (several:
/// a discovered pod's `namespace`, `pod` and `container`).
#[derive(Debug, Clone)]
pub struct LabelledPart {
    /// How conflicts name the part (`namespace/pod/container`, say).
    pub name: Arc<str>,
    /// The labels added to every sample of the part (none may repeat a name).
    pub labels: Vec<Label>,
    /// The directory's families, merged on their own.
    pub families: Vec<MetricFamily>,
}

/// Combines `parts` (in the order given) into one list of families, each
/// sample labelled `label_name="<its part's value>"`.
pub fn combine(label_name: &Arc<str>, parts: Vec<Part>) -> Combined {
    combine_labelled(
        parts
            .into_iter()
            .map(|part| LabelledPart {
                labels: vec![(label_name.clone(), part.value.clone())],
                name: part.value,
                families: part.families,
            })
            .collect(),
    )
}

/// [`combine`] with a set of labels per part: each sample gets its part's
/// labels (as constant labels: one it has already keeps its value as
/// `exported_<name>`), and conflicts name the part by [`LabelledPart::name`].
pub fn combine_labelled(parts: Vec<LabelledPart>) -> Combined {
    let mut families: Vec<MetricFamily> = Vec::new();
    // Family name → (index in `families`, the part it was first seen in).
    let mut seen: HashMap<Arc<str>, (usize, Arc<str>)> = HashMap::new();
    let mut conflicts = Vec::new();
    for part in parts {
        let constant = &part.labels[..];
        for mut family in part.families {
            for sample in &mut family.samples {
                sample.labels = with_constant_labels(&sample.labels, constant);
            }
            match seen.get(&family.name) {
                None => {
                    seen.insert(family.name.clone(), (families.len(), part.name.clone()));
                    families.push(family);
                }
                Some((index, first_part)) => {
                    let first = &mut families[*index];
                    let reason = if first.metric_type != family.metric_type {
                        Some(ConflictReason::TypeMismatch)
                    } else if first.help != family.help {
                        Some(ConflictReason::HelpMismatch)
                    } else {
                        None
                    };
                    if let Some(reason) = reason {
                        conflicts.push(Conflict {
                            family: family.name.clone(),
                            part: part.name.clone(),
                            kept_from: first_part.clone(),
                            reason,
                        });
                    }
                    if reason != Some(ConflictReason::TypeMismatch) {
                        first.samples.append(&mut family.samples);
                    }
                }
            }
        }
    }
    Combined {
        families,
        conflicts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expose::encode::{encode, Escaping, Format};
    use crate::model::{Labels, MetricType, Sample};

    /// Sample name, labels, value.
    type SampleSpec<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

    fn family(name: &str, t: MetricType, help: &str, samples: &[SampleSpec<'_>]) -> MetricFamily {
        MetricFamily {
            name: name.into(),
            help: help.into(),
            metric_type: t,
            samples: samples
                .iter()
                .map(|(n, labels, v)| Sample {
                    name: (*n).into(),
                    labels: Labels::new(labels.iter().map(|(k, v)| ((*k).into(), (*v).into()))),
                    value: *v,
                })
                .collect(),
        }
    }

    fn part(value: &str, families: Vec<MetricFamily>) -> Part {
        Part {
            value: value.into(),
            families,
        }
    }

    fn text(families: &[MetricFamily]) -> String {
        String::from_utf8(encode(families, Format::Text, Escaping::Underscores)).unwrap()
    }

    #[test]
    fn nothing_to_combine() {
        assert_eq!(combine(&"pod".into(), Vec::new()), Combined::default());
        let out = combine(&"pod".into(), vec![part("a", Vec::new())]);
        assert!(out.families.is_empty() && out.conflicts.is_empty());
    }

    #[test]
    fn same_families_are_combined_with_the_label_in_part_order() {
        let a = vec![
            family(
                "requests",
                MetricType::Counter,
                "Requests.",
                &[("requests_total", &[("code", "200")], 3.0)],
            ),
            family("load", MetricType::Gauge, "Load.", &[("load", &[], 0.5)]),
        ];
        let b = vec![
            family("load", MetricType::Gauge, "Load.", &[("load", &[], 0.25)]),
            family("only_b", MetricType::Gauge, "B.", &[("only_b", &[], 1.0)]),
            family(
                "requests",
                MetricType::Counter,
                "Requests.",
                &[("requests_total", &[("code", "200")], 4.0)],
            ),
        ];
        let out = combine(&"pod".into(), vec![part("ns_a", a), part("ns_b", b)]);
        assert!(out.conflicts.is_empty());
        assert_eq!(
            text(&out.families),
            "# HELP requests_total Requests.\n# TYPE requests_total counter\n\
             requests_total{code=\"200\",pod=\"ns_a\"} 3.0\n\
             requests_total{code=\"200\",pod=\"ns_b\"} 4.0\n\
             # HELP load Load.\n# TYPE load gauge\n\
             load{pod=\"ns_a\"} 0.5\nload{pod=\"ns_b\"} 0.25\n\
             # HELP only_b B.\n# TYPE only_b gauge\nonly_b{pod=\"ns_b\"} 1.0\n"
        );
    }

    #[test]
    fn histogram_series_stay_together_per_part() {
        let h = |count: f64| {
            family(
                "latency",
                MetricType::Histogram,
                "L.",
                &[
                    ("latency_bucket", &[("le", "1.0")], count),
                    ("latency_bucket", &[("le", "+Inf")], count),
                    ("latency_count", &[], count),
                    ("latency_sum", &[], 0.5 * count),
                ],
            )
        };
        let out = combine(
            &"pod".into(),
            vec![part("a", vec![h(1.0)]), part("b", vec![h(2.0)])],
        );
        let samples: Vec<(String, String)> = out.families[0]
            .samples
            .iter()
            .map(|s| (s.name.to_string(), s.labels.get("pod").unwrap().to_owned()))
            .collect();
        let expected: Vec<(String, String)> = ["a", "b"]
            .iter()
            .flat_map(|p| {
                [
                    "latency_bucket",
                    "latency_bucket",
                    "latency_count",
                    "latency_sum",
                ]
                .iter()
                .map(move |n| ((*n).to_owned(), (*p).to_owned()))
            })
            .collect();
        assert_eq!(samples, expected);
    }

    #[test]
    fn an_existing_label_of_that_name_is_exported() {
        let a = vec![family(
            "g",
            MetricType::Gauge,
            "G.",
            &[("g", &[("pod", "inner")], 1.0)],
        )];
        let out = combine(&"pod".into(), vec![part("outer", a)]);
        assert_eq!(
            out.families[0].samples[0].labels.as_slice(),
            [
                ("exported_pod".into(), "inner".into()),
                ("pod".into(), "outer".into())
            ]
        );
    }

    #[test]
    fn type_mismatch_keeps_the_first_and_drops_the_later_family() {
        let a = vec![family("x", MetricType::Gauge, "X.", &[("x", &[], 1.0)])];
        let b = vec![
            family("x", MetricType::Counter, "X.", &[("x_total", &[], 2.0)]),
            family("y", MetricType::Gauge, "Y.", &[("y", &[], 3.0)]),
        ];
        let out = combine(&"pod".into(), vec![part("a", a), part("b", b)]);
        assert_eq!(
            text(&out.families),
            "# HELP x X.\n# TYPE x gauge\nx{pod=\"a\"} 1.0\n# HELP y Y.\n# TYPE y gauge\ny{pod=\"b\"} 3.0\n"
        );
        assert_eq!(
            out.conflicts,
            [Conflict {
                family: "x".into(),
                part: "b".into(),
                kept_from: "a".into(),
                reason: ConflictReason::TypeMismatch,
            }]
        );
        assert_eq!(out.conflicts[0].reason.label(), "type_mismatch");
    }

    #[test]
    fn help_mismatch_keeps_the_samples_under_the_first_help() {
        let a = vec![family(
            "x",
            MetricType::Gauge,
            "Old help.",
            &[("x", &[], 1.0)],
        )];
        let b = vec![family(
            "x",
            MetricType::Gauge,
            "New help.",
            &[("x", &[], 2.0)],
        )];
        let c = vec![family(
            "x",
            MetricType::Gauge,
            "New help.",
            &[("x", &[], 3.0)],
        )];
        let out = combine(
            &"pod".into(),
            vec![part("a", a), part("b", b), part("c", c)],
        );
        assert_eq!(
            text(&out.families),
            "# HELP x Old help.\n# TYPE x gauge\nx{pod=\"a\"} 1.0\nx{pod=\"b\"} 2.0\nx{pod=\"c\"} 3.0\n"
        );
        let reported: Vec<(&str, &str, &str)> = out
            .conflicts
            .iter()
            .map(|c| (&*c.part, &*c.kept_from, c.reason.label()))
            .collect();
        assert_eq!(
            reported,
            [("b", "a", "help_mismatch"), ("c", "a", "help_mismatch")]
        );
    }

    #[test]
    fn a_family_without_samples_still_declares_itself_once() {
        // A `mostrecent` gauge that was never set has HELP/TYPE and no sample.
        let unset = || family("g", MetricType::Gauge, "G.", &[]);
        let out = combine(
            &"pod".into(),
            vec![part("a", vec![unset()]), part("b", vec![unset()])],
        );
        assert_eq!(text(&out.families), "# HELP g G.\n# TYPE g gauge\n");
    }

    #[test]
    fn several_labels_per_part() {
        let g = |v: f64| {
            vec![family(
                "g",
                MetricType::Gauge,
                "G.",
                &[("g", &[("pod", "inner")], v)],
            )]
        };
        let labels = |pod: &str| -> Vec<Label> {
            vec![
                ("namespace".into(), "llm".into()),
                ("pod".into(), pod.into()),
                ("container".into(), "vllm".into()),
            ]
        };
        let out = combine_labelled(vec![
            LabelledPart {
                name: "llm/a/vllm".into(),
                labels: labels("a"),
                families: g(1.0),
            },
            LabelledPart {
                name: "llm/b/vllm".into(),
                labels: labels("b"),
                families: vec![family("g", MetricType::Counter, "G.", &[])],
            },
        ]);
        assert_eq!(
            text(&out.families),
            "# HELP g G.\n# TYPE g gauge\n\
             g{container=\"vllm\",exported_pod=\"inner\",namespace=\"llm\",pod=\"a\"} 1.0\n"
        );
        assert_eq!(&*out.conflicts[0].part, "llm/b/vllm");
        assert_eq!(&*out.conflicts[0].kept_from, "llm/a/vllm");
    }
}
