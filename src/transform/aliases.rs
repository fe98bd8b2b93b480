//! Aliases: a family served a second time under an old name it had (`aliases`
//! and `vllm_aliases` in the configuration). Pure: no I/O.
//!
//! vLLM renamed metrics that dashboards and routers still query
//! (production-stack's router reads `vllm:gpu_cache_usage_perc`, which vLLM
//! 0.9.2 renamed `vllm:kv_cache_usage_perc` and later stopped writing). An
//! alias `old: new` serves, right after the family `new`, a copy of it named
//! `old`: every sample name that starts with `new` starts with `old` instead
//! (`new_total` becomes `old_total`, `new_bucket` becomes `old_bucket`), the
//! values and labels are the same, and the help says which family it copies.
//! An alias whose old name the directory still has itself is not added (the
//! original wins), nor one whose family is absent.

use std::collections::HashSet;
use std::sync::Arc;

use crate::model::MetricFamily;

/// vLLM's renames that consumers still query, served with `vllm_aliases: true`:
/// `(old name, new name, the vLLM version that renamed it)`.
pub const VLLM_ALIASES: [(&str, &str, &str); 4] = [
    (
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
        "0.9.2",
    ),
    (
        "vllm:gpu_prefix_cache_queries",
        "vllm:prefix_cache_queries",
        "0.9.2",
    ),
    (
        "vllm:gpu_prefix_cache_hits",
        "vllm:prefix_cache_hits",
        "0.9.2",
    ),
    (
        "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
        "0.11",
    ),
];

/// `families` with a copy of each aliased family, named by its alias, right
/// after it. `aliases` is `(old, new)` pairs.
pub fn add_aliases(
    families: Vec<MetricFamily>,
    aliases: &[(Arc<str>, Arc<str>)],
) -> Vec<MetricFamily> {
    if aliases.is_empty() {
        return families;
    }
    let present: HashSet<Arc<str>> = families.iter().map(|f| f.name.clone()).collect();
    let mut out = Vec::with_capacity(families.len() + aliases.len());
    for family in families {
        let copies: Vec<MetricFamily> = aliases
            .iter()
            .filter(|(old, new)| *new == family.name && !present.contains(old))
            .map(|(old, _)| alias_of(&family, old))
            .collect();
        out.push(family);
        out.extend(copies);
    }
    out
}

/// A copy of `family` named `old`.
fn alias_of(family: &MetricFamily, old: &Arc<str>) -> MetricFamily {
    let mut copy = family.clone();
    copy.name = old.clone();
    copy.help = format!(
        "Alias of {} (its former name): {}",
        family.name, family.help
    )
    .into();
    for sample in &mut copy.samples {
        if let Some(suffix) = sample.name.strip_prefix(&*family.name) {
            sample.name = format!("{old}{suffix}").into();
        }
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Labels, MetricType, Sample};

    fn family(name: &str, t: MetricType, samples: &[&str]) -> MetricFamily {
        MetricFamily {
            name: name.into(),
            help: "Help.".into(),
            metric_type: t,
            samples: samples
                .iter()
                .map(|n| Sample {
                    name: (*n).into(),
                    labels: Labels::new([("model_name".into(), "m".into())]),
                    value: 1.0,
                })
                .collect(),
        }
    }

    fn aliases(pairs: &[(&str, &str)]) -> Vec<(Arc<str>, Arc<str>)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).into(), (*b).into()))
            .collect()
    }

    #[test]
    fn an_alias_follows_its_family() {
        let families = vec![
            family(
                "vllm:prefix_cache_queries",
                MetricType::Counter,
                &["vllm:prefix_cache_queries_total"],
            ),
            family(
                "vllm:kv_cache_usage_perc",
                MetricType::Gauge,
                &["vllm:kv_cache_usage_perc"],
            ),
        ];
        let out = add_aliases(
            families,
            &aliases(&[
                ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"),
                ("vllm:gpu_prefix_cache_queries", "vllm:prefix_cache_queries"),
                ("absent:old", "absent:new"),
            ]),
        );
        let names: Vec<&str> = out.iter().map(|f| &*f.name).collect();
        assert_eq!(
            names,
            [
                "vllm:prefix_cache_queries",
                "vllm:gpu_prefix_cache_queries",
                "vllm:kv_cache_usage_perc",
                "vllm:gpu_cache_usage_perc"
            ]
        );
        assert_eq!(
            &*out[1].samples[0].name,
            "vllm:gpu_prefix_cache_queries_total"
        );
        assert_eq!(
            &*out[3].help,
            "Alias of vllm:kv_cache_usage_perc (its former name): Help."
        );
        assert_eq!(out[3].samples[0].labels, out[2].samples[0].labels);
    }

    #[test]
    fn an_old_name_still_written_wins() {
        let families = vec![
            family("new", MetricType::Gauge, &["new"]),
            family("old", MetricType::Gauge, &["old"]),
        ];
        let out = add_aliases(families.clone(), &aliases(&[("old", "new")]));
        assert_eq!(out, families);
    }
}
