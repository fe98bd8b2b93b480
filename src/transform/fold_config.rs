//! The views' `fold` and the built-in view's settings as the configuration
//! file writes them, and their validation into a
//! [`crate::transform::fold::Fold`]. Pure: no I/O. [`crate::transform::config`]
//! holds them in its `views` and `endpoint_picker` keys.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use crate::model::names::{is_legacy_metric_name, label_name_problem};
use crate::transform::fold::{Fold, FoldFunction, FoldRule};

/// The `endpoint_picker` section: the built-in view's settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointPickerSection {
    /// Fold vLLM's `engine` label away (default `true`): one series per
    /// family and model for the whole pod, as
    /// [`crate::transform::view::endpoint_picker_rules`] computes it
    /// (queues summed, the KV-cache fraction weighted by each engine's
    /// blocks). `false` serves the per-engine series exactly as `/metrics`
    /// does.
    #[serde(default = "default_true")]
    pub fold: bool,
}

impl Default for EndpointPickerSection {
    fn default() -> Self {
        Self { fold: true }
    }
}

fn default_true() -> bool {
    true
}

/// One entry of `views`: a list of families, or a map with `families` and
/// `fold`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewSection {
    /// The families, served as `/metrics` serves them.
    Families(Vec<String>),
    /// Families and how their labels are folded.
    Folded(FoldedViewSection),
}

impl ViewSection {
    /// The families it lists.
    pub fn families(&self) -> &[String] {
        match self {
            Self::Families(families) => families,
            Self::Folded(section) => &section.families,
        }
    }
}

impl<'de> Deserialize<'de> for ViewSection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ViewSection;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of families, or a map with `families` and `fold`")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<ViewSection, A::Error> {
                Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(ViewSection::Families)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ViewSection, A::Error> {
                FoldedViewSection::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(ViewSection::Folded)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// A view with folded labels.
///
/// ```yaml
/// views:
///   epp:
///     families: [vllm:num_requests_waiting, vllm:kv_cache_usage_perc, vllm:cache_config_info]
///     fold:
///       labels: [engine]
///       rules:
///         vllm:num_requests_waiting: sum
///         vllm:kv_cache_usage_perc:
///           weighted_mean: {family: vllm:cache_config_info, label: num_gpu_blocks}
///         vllm:cache_config_info: {sum_labels: [num_gpu_blocks]}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoldedViewSection {
    /// The families, as in the list form.
    pub families: Vec<String>,
    /// How labels are folded away; absent: not at all.
    #[serde(default)]
    pub fold: Option<FoldSection>,
}

/// A view's `fold` ([`crate::transform::fold`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoldSection {
    /// The labels folded away (legacy label names), e.g. `[engine]`.
    pub labels: Vec<String>,
    /// A function per family of the view (named as the view names it); a
    /// family without one is served unchanged.
    pub rules: BTreeMap<String, FoldFunctionSection>,
}

/// A fold function as written: `sum`, `max`, `min`, `mean`, or a map of
/// one key, `weighted_mean`, `sum_labels` or `newest_union`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoldFunctionSection {
    /// The sum of the series' values.
    Sum,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
    /// The mean.
    Mean,
    /// The mean weighted by another family (its label, or its value).
    WeightedMean(WeightSection),
    /// The largest value, these labels' values summed (info gauges).
    SumLabels(Vec<String>),
    /// The newest series' value, these labels' items united over the
    /// newest series of every rank.
    NewestUnion(NewestUnionSection),
}

impl FoldFunctionSection {
    const NAMES: &'static [&'static str] = &[
        "sum",
        "max",
        "min",
        "mean",
        "weighted_mean",
        "sum_labels",
        "newest_union",
    ];
}

impl<'de> Deserialize<'de> for FoldFunctionSection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = FoldFunctionSection;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("sum, max, min, mean, or a map of one key: weighted_mean, sum_labels or newest_union")
            }
            fn visit_str<E: Error>(self, name: &str) -> Result<FoldFunctionSection, E> {
                match name {
                    "sum" => Ok(FoldFunctionSection::Sum),
                    "max" => Ok(FoldFunctionSection::Max),
                    "min" => Ok(FoldFunctionSection::Min),
                    "mean" => Ok(FoldFunctionSection::Mean),
                    _ => Err(E::unknown_variant(name, FoldFunctionSection::NAMES)),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<FoldFunctionSection, A::Error> {
                let Some(name) = map.next_key::<String>()? else {
                    return Err(A::Error::custom("an empty map names no fold function"));
                };
                let function = match name.as_str() {
                    "weighted_mean" => FoldFunctionSection::WeightedMean(map.next_value()?),
                    "sum_labels" => FoldFunctionSection::SumLabels(map.next_value()?),
                    "newest_union" => FoldFunctionSection::NewestUnion(map.next_value()?),
                    _ => return Err(A::Error::unknown_variant(&name, FoldFunctionSection::NAMES)),
                };
                if let Some(more) = map.next_key::<String>()? {
                    return Err(A::Error::custom(format!(
                        "a fold function is a map of one key (`{more}` follows `{name}`)"
                    )));
                }
                Ok(function)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `weighted_mean`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightSection {
    /// The family the weights come from (named as `/metrics` names it).
    pub family: String,
    /// The label holding the weight; absent: the sample's value.
    #[serde(default)]
    pub label: Option<String>,
}

/// `newest_union`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewestUnionSection {
    /// The labels of comma-separated items to unite.
    pub labels: Vec<String>,
    /// The family whose distinct values of the folded labels count the
    /// ranks (1 without it).
    #[serde(default)]
    pub ranks: Option<String>,
}

/// A view's validated `fold`: legacy label and metric names, rules for
/// families of the view only, no label both folded and merged.
pub(crate) fn validate_fold(section: &FoldSection, families: &[String]) -> Result<Fold, String> {
    let label = |name: &String| -> Result<Arc<str>, String> {
        match label_name_problem(name) {
            Some(reason) => Err(format!("invalid label name {name:?} in `fold`: {reason}")),
            None => Ok(Arc::from(name.as_str())),
        }
    };
    let metric = |name: &String| -> Result<Arc<str>, String> {
        if is_legacy_metric_name(name) {
            Ok(Arc::from(name.as_str()))
        } else {
            Err(format!(
                "{name:?} in `fold` is not a metric name matching [a-zA-Z_:][a-zA-Z0-9_:]*"
            ))
        }
    };
    if section.labels.is_empty() {
        return Err("`fold.labels` lists at least one label".to_owned());
    }
    let mut labels = section
        .labels
        .iter()
        .map(label)
        .collect::<Result<Vec<_>, _>>()?;
    labels.sort_unstable();
    labels.dedup();
    let mut rules = Vec::with_capacity(section.rules.len());
    for (family, function) in &section.rules {
        if !families.contains(family) {
            return Err(format!(
                "`fold.rules` names {family:?}, which is not one of the view's families"
            ));
        }
        let merged = |names: &[String]| -> Result<Vec<Arc<str>>, String> {
            if names.is_empty() {
                return Err(format!("the rule of {family:?} lists no label"));
            }
            let names = names.iter().map(label).collect::<Result<Vec<_>, _>>()?;
            match names.iter().find(|n| labels.contains(n)) {
                Some(n) => Err(format!(
                    "the rule of {family:?} merges {n:?}, which `fold.labels` folds away"
                )),
                None => Ok(names),
            }
        };
        let function = match function {
            FoldFunctionSection::Sum => FoldFunction::Sum,
            FoldFunctionSection::Max => FoldFunction::Max,
            FoldFunctionSection::Min => FoldFunction::Min,
            FoldFunctionSection::Mean => FoldFunction::Mean,
            FoldFunctionSection::WeightedMean(weight) => FoldFunction::WeightedMean {
                family: metric(&weight.family)?,
                label: weight.label.as_ref().map(label).transpose()?,
            },
            FoldFunctionSection::SumLabels(names) => FoldFunction::SumLabels {
                labels: merged(names)?,
            },
            FoldFunctionSection::NewestUnion(union) => FoldFunction::NewestUnion {
                labels: merged(&union.labels)?,
                ranks: union.ranks.as_ref().map(metric).transpose()?,
            },
        };
        rules.push(FoldRule {
            family: Arc::from(family.as_str()),
            function,
        });
    }
    Ok(Fold { labels, rules })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Fold, String> {
        let views: BTreeMap<String, ViewSection> =
            serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
        let section = &views["v"];
        match section {
            ViewSection::Folded(FoldedViewSection {
                fold: Some(fold),
                families,
            }) => validate_fold(fold, families),
            _ => Err("no fold".to_owned()),
        }
    }

    #[test]
    fn a_fold_is_a_label_list_and_a_rule_per_family() {
        let fold = parse(
            r#"
v:
  families: [q, kv, cache, lora, other]
  fold:
    labels: [engine, engine]
    rules:
      q: sum
      kv: {weighted_mean: {family: cache, label: num_gpu_blocks}}
      cache: {sum_labels: [num_gpu_blocks]}
      lora: {newest_union: {labels: [running_lora_adapters], ranks: cache}}
      other: mean
"#,
        )
        .unwrap();
        assert_eq!(fold.labels, vec![Arc::<str>::from("engine")]);
        let rule = |name: &str| {
            fold.rules
                .iter()
                .find(|r| &*r.family == name)
                .map(|r| r.function.clone())
                .unwrap()
        };
        assert_eq!(rule("q"), FoldFunction::Sum);
        assert_eq!(rule("other"), FoldFunction::Mean);
        assert_eq!(
            rule("kv"),
            FoldFunction::WeightedMean {
                family: "cache".into(),
                label: Some("num_gpu_blocks".into())
            }
        );
        assert_eq!(
            rule("cache"),
            FoldFunction::SumLabels {
                labels: vec!["num_gpu_blocks".into()]
            }
        );
        assert_eq!(
            rule("lora"),
            FoldFunction::NewestUnion {
                labels: vec!["running_lora_adapters".into()],
                ranks: Some("cache".into())
            }
        );
        let list: BTreeMap<String, ViewSection> = serde_yaml::from_str("v: [a, b]").unwrap();
        assert_eq!(
            list["v"],
            ViewSection::Families(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn a_bad_fold_is_refused_with_its_reason() {
        for (text, wanted) in [
            ("v: {families: [q], fold: {labels: [], rules: {}}}", "lists at least one label"),
            ("v: {families: [q], fold: {labels: [engine], rules: {x: sum}}}", "not one of the view's families"),
            ("v: {families: [q], fold: {labels: [\"a b\"], rules: {}}}", "invalid label name"),
            ("v: {families: [q], fold: {labels: [engine], rules: {q: {sum_labels: [engine]}}}}", "which `fold.labels` folds away"),
            ("v: {families: [q], fold: {labels: [engine], rules: {q: {sum_labels: []}}}}", "lists no label"),
            ("v: {families: [q], fold: {labels: [engine], rules: {q: median}}}", "unknown variant `median`"),
            ("v: {families: [q], fold: {labels: [engine], rules: {q: {sum: 1}}}}", "unknown variant `sum`"),
            ("v: {families: [q], fold: {labels: [engine], rules: {q: {weighted_mean: {family: x}, sum_labels: [a]}}}}", "a map of one key"),
            ("v: {families: [q], fold: {labels: [engine], rules: {q: {weighted_mean: {family: \"a b\"}}}}}", "is not a metric name"),
            ("v: {families: [q], fold: {labels: [engine], rules: {q: {weighted_mean: {family: x, by: y}}}}}", "unknown field `by`"),
            ("v: {families: [q], folds: {}}", "unknown field `folds`"),
            ("v: 3", "a list of families, or a map"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted), "{text}: {e}");
        }
    }
}
