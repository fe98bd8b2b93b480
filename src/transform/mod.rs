//! Applying a [`Config`] to merged families: filtering, renaming and
//! constant labels. Pure: no I/O.
//!
//! The families come from the directory, and from the configuration's
//! upstreams merged after them by the rule of [`sources`]. The steps, in
//! order:
//!
//! 0. **Aliases** ([`aliases`]): a family is copied under an old name it
//!    had, right after it.
//! 1. **Filter** whole families by their original name (see
//!    [`crate::transform::config::FilterSection`]); never individual samples, so a
//!    histogram's `_bucket`, `_sum` and `_count` stay together.
//! 2. **Rename** family and sample names with the configured
//!    [`Naming`]. Ray naming maps every character outside `[a-zA-Z0-9_]` to
//!    `_` and prefixes `ray_`, exactly like vLLM's `RayPrometheusStatLogger`
//!    plus Ray's `ray_` namespace. Suffixes survive because they are made of
//!    legal characters: counters keep `_total`, histograms
//!    `_bucket`/`_sum`/`_count`. Histogram bounds are written as Ray writes
//!    them, Python's `repr` (`le="1000000.0"`, where prometheus_client's
//!    `floatToGoString` writes `1e+06`). Two families that end up with the same name
//!    cannot both be served (the exposition would declare the name twice):
//!    the first keeps it and the later one is dropped and reported as a
//!    [`Collision`].
//! 3. **Constant labels** are added to every sample, and `ReplicaId` (the
//!    configuration's `ray.replica_id`) to the samples of `vllm:` families. A sample that already has
//!    a label of that name keeps its value under `exported_<name>` (or
//!    `exported_exported_<name>`, and so on, until the name is free), which is
//!    what Prometheus does with target labels under `honor_labels: false`.
//!
//! Every result stays valid in both exposition formats: renamed names are
//! legacy-valid, and constant label names are validated legacy label names.

pub mod aliases;
pub mod combine;
pub mod config;
pub mod fold;
pub mod fold_config;
pub mod sources;
pub mod view;
pub mod views;

use std::collections::HashSet;
use std::sync::Arc;

use crate::model::float::python_repr_string;
use crate::model::{Label, Labels, MetricFamily, MetricType};
use crate::transform::config::{Config, Naming, REPLICA_ID_LABEL, VLLM_PREFIX};

/// A family dropped because its new name was already taken.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Collision {
    /// The dropped family's original name.
    pub original: Arc<str>,
    /// The name it would have had (which an earlier family already has).
    pub renamed: Arc<str>,
}

/// The result of [`apply`].
#[derive(Debug, Clone, Default)]
pub struct Transformed {
    /// The families to serve, in their original order.
    pub families: Vec<MetricFamily>,
    /// Families dropped because of a name collision after renaming.
    pub collisions: Vec<Collision>,
}

/// Applies `config` to `families`.
pub fn apply(config: &Config, families: Vec<MetricFamily>) -> Transformed {
    if config.is_identity() {
        return Transformed {
            families,
            collisions: Vec::new(),
        };
    }
    let families = aliases::add_aliases(families, &config.aliases);
    let mut out = Vec::with_capacity(families.len());
    let mut collisions = Vec::new();
    let mut taken: HashSet<Arc<str>> = HashSet::new();
    // `vllm:` families also get `ReplicaId`, as vLLM's Ray wrappers add it.
    let with_replica: Option<Vec<Label>> = config.replica_id.as_ref().map(|value| {
        let mut labels = config.labels.clone();
        labels.push((REPLICA_ID_LABEL.into(), value.clone()));
        labels
    });
    for family in families {
        if !keep(config, &family) {
            continue;
        }
        let original = family.name.clone();
        let constant = match &with_replica {
            Some(labels) if original.starts_with(VLLM_PREFIX) => labels,
            _ => &config.labels,
        };
        let family = rename(config.naming, family);
        if config.naming != Naming::Prometheus && !taken.insert(family.name.clone()) {
            collisions.push(Collision {
                original,
                renamed: family.name.clone(),
            });
            continue;
        }
        out.push(add_labels(constant, family));
    }
    Transformed {
        families: out,
        collisions,
    }
}

/// Whether the family passes the filters.
pub fn keep(config: &Config, family: &MetricFamily) -> bool {
    let matches = |prefixes: &[String]| {
        prefixes
            .iter()
            .any(|p| family.name.starts_with(p.as_str()) || text_name_starts_with(family, p))
    };
    (config.include_prefixes.is_empty() || matches(&config.include_prefixes))
        && !matches(&config.exclude_prefixes)
}

/// Whether the name the text format declares for `family` (`<name>_total`
/// for counters, `<name>_info` for info) starts with `prefix`.
fn text_name_starts_with(family: &MetricFamily, prefix: &str) -> bool {
    let suffix = match family.metric_type {
        MetricType::Counter => "_total",
        MetricType::Info => "_info",
        _ => return false,
    };
    let name = &*family.name;
    if prefix.len() <= name.len() {
        return false; // already decided by the family name itself
    }
    prefix.starts_with(name) && suffix.starts_with(&prefix[name.len()..])
}

/// `ray_` + the name with every character outside `[a-zA-Z0-9_]` replaced by `_`.
pub fn ray_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    out.push_str("ray_");
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

fn rename(naming: Naming, mut family: MetricFamily) -> MetricFamily {
    match naming {
        Naming::Prometheus => family,
        Naming::Ray => {
            family.name = ray_name(&family.name).into();
            let bucketed = matches!(
                family.metric_type,
                MetricType::Histogram | MetricType::GaugeHistogram
            );
            let mut last: Option<(Arc<str>, Arc<str>)> = None;
            for sample in &mut family.samples {
                // Samples of one series share their name; convert each name once.
                let renamed = match &last {
                    Some((from, to)) if *from == sample.name => to.clone(),
                    _ => {
                        let to: Arc<str> = ray_name(&sample.name).into();
                        last = Some((sample.name.clone(), to.clone()));
                        to
                    }
                };
                sample.name = renamed;
                if bucketed {
                    sample.labels = ray_bounds(&sample.labels);
                }
            }
            family
        }
    }
}

/// `labels` with the `le` bound written as Ray's agent writes it (Python's
/// `repr`: `1000000.0` where prometheus_client writes `1e+06`); only bounds
/// of seven to sixteen integer digits differ.
fn ray_bounds(labels: &Labels) -> Labels {
    let Some(le) = labels.get("le") else {
        return labels.clone();
    };
    if !le.contains("e+") {
        return labels.clone();
    }
    let Ok(bound) = le.parse::<f64>() else {
        return labels.clone();
    };
    let ray: Arc<str> = python_repr_string(bound).into();
    Labels::new(labels.iter().map(|(name, value)| {
        if &**name == "le" {
            (name.clone(), ray.clone())
        } else {
            (name.clone(), value.clone())
        }
    }))
}

fn add_labels(constant: &[Label], mut family: MetricFamily) -> MetricFamily {
    if constant.is_empty() {
        return family;
    }
    for sample in &mut family.samples {
        sample.labels = with_constant_labels(&sample.labels, constant);
    }
    family
}

/// `labels` plus `constant`; a clashing label of `labels` is kept as
/// `exported_<name>` (prefixed again while that name is taken too).
pub fn with_constant_labels(labels: &Labels, constant: &[Label]) -> Labels {
    let clashes = labels
        .iter()
        .any(|(name, _)| constant.iter().any(|(c, _)| c == name));
    let mut pairs: Vec<Label> = Vec::with_capacity(labels.len() + constant.len());
    if clashes {
        let taken = |name: &str, pairs: &[Label]| {
            labels.get(name).is_some()
                || constant.iter().any(|(c, _)| &**c == name)
                || pairs.iter().any(|(p, _)| &**p == name)
        };
        for (name, value) in labels.iter() {
            if constant.iter().any(|(c, _)| c == name) {
                let mut new_name = format!("exported_{name}");
                while taken(&new_name, &pairs) {
                    new_name.insert_str(0, "exported_");
                }
                pairs.push((new_name.into(), value.clone()));
            } else {
                pairs.push((name.clone(), value.clone()));
            }
        }
    } else {
        pairs.extend(labels.iter().cloned());
    }
    pairs.extend(constant.iter().cloned());
    Labels::new(pairs)
}

/// Restricts families to the samples named in `names`, as prometheus_client's
/// `restricted_registry` does for `?name[]=` (families left empty disappear).
pub fn restrict(families: &[MetricFamily], names: &[String]) -> Vec<MetricFamily> {
    families
        .iter()
        .filter_map(|f| f.restricted(names))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expose::encode::{encode, Escaping, Format};
    use crate::model::Sample;
    use crate::transform::config::Config;

    fn l(n: &str, v: &str) -> Label {
        (n.into(), v.into())
    }

    type SampleSpec<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

    fn family(name: &str, t: MetricType, samples: &[SampleSpec<'_>]) -> MetricFamily {
        MetricFamily {
            name: name.into(),
            help: "h".into(),
            metric_type: t,
            samples: samples
                .iter()
                .map(|(n, labels, v)| Sample {
                    name: (*n).into(),
                    labels: Labels::new(labels.iter().map(|(k, v)| l(k, v))),
                    value: *v,
                })
                .collect(),
        }
    }

    fn vllm_families() -> Vec<MetricFamily> {
        vec![
            family(
                "vllm:prompt_tokens",
                MetricType::Counter,
                &[("vllm:prompt_tokens_total", &[("model_name", "m")], 3.0)],
            ),
            family(
                "http_requests",
                MetricType::Counter,
                &[("http_requests_total", &[], 1.0)],
            ),
            family(
                "vllm:e2e_request_latency_seconds",
                MetricType::Histogram,
                &[
                    (
                        "vllm:e2e_request_latency_seconds_bucket",
                        &[("le", "1.0")],
                        1.0,
                    ),
                    (
                        "vllm:e2e_request_latency_seconds_bucket",
                        &[("le", "+Inf")],
                        2.0,
                    ),
                    ("vllm:e2e_request_latency_seconds_count", &[], 2.0),
                    ("vllm:e2e_request_latency_seconds_sum", &[], 3.5),
                ],
            ),
            family(
                "lmcache:hit_rate",
                MetricType::Gauge,
                &[("lmcache:hit_rate", &[("pid", "7")], 0.5)],
            ),
        ]
    }

    fn names(families: &[MetricFamily]) -> Vec<&str> {
        families.iter().map(|f| &*f.name).collect()
    }

    #[test]
    fn sglangs_families_are_filtered_and_renamed_as_vllms_are() {
        let sglang = || {
            vec![
                family(
                    "sglang:num_queue_reqs",
                    MetricType::Gauge,
                    &[("sglang:num_queue_reqs", &[("tp_rank", "0")], 2.0)],
                ),
                family(
                    "http_requests",
                    MetricType::Counter,
                    &[("http_requests_total", &[], 1.0)],
                ),
                family(
                    "sglang:prompt_tokens",
                    MetricType::Counter,
                    &[("sglang:prompt_tokens_total", &[], 3.0)],
                ),
            ]
        };
        let config = Config::from_yaml("filter: {include_prefixes: [\"sglang:\"]}").unwrap();
        let out = apply(&config, sglang());
        assert_eq!(
            names(&out.families),
            ["sglang:num_queue_reqs", "sglang:prompt_tokens"]
        );
        let config = Config::from_yaml("naming: ray").unwrap();
        let out = apply(&config, sglang());
        assert_eq!(
            names(&out.families),
            [
                "ray_sglang_num_queue_reqs",
                "ray_http_requests",
                "ray_sglang_prompt_tokens"
            ]
        );
        assert_eq!(
            &*out.families[2].samples[0].name,
            "ray_sglang_prompt_tokens_total"
        );
    }

    #[test]
    fn identity_changes_nothing() {
        let out = apply(&Config::default(), vllm_families());
        assert_eq!(out.families, vllm_families());
    }

    #[test]
    fn include_and_exclude_whole_families() {
        let config =
            Config::from_yaml("filter: {include_prefixes: [\"vllm:\", \"lmcache:\"]}").unwrap();
        let out = apply(&config, vllm_families());
        assert_eq!(
            names(&out.families),
            [
                "vllm:prompt_tokens",
                "vllm:e2e_request_latency_seconds",
                "lmcache:hit_rate"
            ]
        );
        assert_eq!(out.families[1].samples.len(), 4);

        let config = Config::from_yaml(
            "filter: {include_prefixes: [\"vllm:\"], exclude_prefixes: [\"vllm:e2e\"]}",
        )
        .unwrap();
        assert_eq!(
            names(&apply(&config, vllm_families()).families),
            ["vllm:prompt_tokens"]
        );
    }

    #[test]
    fn prefixes_match_the_text_format_name_too() {
        let config =
            Config::from_yaml("filter: {exclude_prefixes: [\"http_requests_total\"]}").unwrap();
        assert_eq!(apply(&config, vllm_families()).families.len(), 3);
        let config =
            Config::from_yaml("filter: {exclude_prefixes: [\"http_requests_totals\"]}").unwrap();
        assert_eq!(apply(&config, vllm_families()).families.len(), 4);
        // A sample suffix is not a family name: `_bucket` does not select the histogram.
        let config = Config::from_yaml(
            "filter: {include_prefixes: [\"vllm:e2e_request_latency_seconds_bucket\"]}",
        )
        .unwrap();
        assert!(apply(&config, vllm_families()).families.is_empty());
    }

    #[test]
    fn ray_names() {
        assert_eq!(
            ray_name("vllm:kv_cache_usage_perc"),
            "ray_vllm_kv_cache_usage_perc"
        );
        assert_eq!(ray_name("a.b-c:d/é9"), "ray_a_b_c_d__9");
        let config = Config::from_yaml("naming: ray").unwrap();
        let out = apply(&config, vllm_families());
        assert_eq!(
            names(&out.families),
            [
                "ray_vllm_prompt_tokens",
                "ray_http_requests",
                "ray_vllm_e2e_request_latency_seconds",
                "ray_lmcache_hit_rate"
            ]
        );
        let samples: Vec<&str> = out
            .families
            .iter()
            .flat_map(|f| f.samples.iter().map(|s| &*s.name))
            .collect();
        assert_eq!(
            samples,
            [
                "ray_vllm_prompt_tokens_total",
                "ray_http_requests_total",
                "ray_vllm_e2e_request_latency_seconds_bucket",
                "ray_vllm_e2e_request_latency_seconds_bucket",
                "ray_vllm_e2e_request_latency_seconds_count",
                "ray_vllm_e2e_request_latency_seconds_sum",
                "ray_lmcache_hit_rate"
            ]
        );
    }

    #[test]
    fn ray_bounds_are_written_as_ray_writes_them() {
        let families = vec![family(
            "vllm:kv_offload_size",
            MetricType::Histogram,
            &[
                ("vllm:kv_offload_size_bucket", &[("le", "1e+06")], 1.0),
                ("vllm:kv_offload_size_bucket", &[("le", "1.5e+08")], 1.0),
                ("vllm:kv_offload_size_bucket", &[("le", "1e+16")], 1.0),
                ("vllm:kv_offload_size_bucket", &[("le", "0.5")], 1.0),
                ("vllm:kv_offload_size_bucket", &[("le", "+Inf")], 1.0),
                ("vllm:kv_offload_size_sum", &[], 1.0),
            ],
        )];
        let bounds = |config: &str| -> Vec<String> {
            apply(&Config::from_yaml(config).unwrap(), families.clone()).families[0]
                .samples
                .iter()
                .filter_map(|s| s.labels.get("le").map(|v| v.to_string()))
                .collect()
        };
        assert_eq!(
            bounds("naming: ray"),
            ["1000000.0", "150000000.0", "1e+16", "0.5", "+Inf"]
        );
        assert_eq!(
            bounds("labels: {a: b}"),
            ["1e+06", "1.5e+08", "1e+16", "0.5", "+Inf"]
        );
    }

    #[test]
    fn ray_collisions_keep_the_first_family() {
        let families = vec![
            family("a:b", MetricType::Gauge, &[("a:b", &[], 1.0)]),
            family("a_b", MetricType::Gauge, &[("a_b", &[], 2.0)]),
        ];
        let out = apply(&Config::from_yaml("naming: ray").unwrap(), families);
        assert_eq!(names(&out.families), ["ray_a_b"]);
        assert_eq!(out.families[0].samples[0].value, 1.0);
        assert_eq!(
            out.collisions,
            [Collision {
                original: "a_b".into(),
                renamed: "ray_a_b".into()
            }]
        );
    }

    #[test]
    fn constant_labels_are_added_and_clashes_exported() {
        let config = Config::from_yaml("labels: {ReplicaId: \"\", pid: node-1}").unwrap();
        let out = apply(&config, vllm_families());
        let gauge = &out.families[3].samples[0];
        assert_eq!(
            gauge.labels.as_slice(),
            [
                l("ReplicaId", ""),
                l("exported_pid", "7"),
                l("pid", "node-1")
            ]
        );
        let bucket = &out.families[2].samples[0];
        assert_eq!(
            bucket.labels.as_slice(),
            [l("ReplicaId", ""), l("le", "1.0"), l("pid", "node-1")]
        );

        let labels = Labels::new([l("a", "1"), l("exported_a", "2")]);
        let merged = with_constant_labels(&labels, &[l("a", "c")]);
        assert_eq!(
            merged.as_slice(),
            [
                l("a", "c"),
                l("exported_a", "2"),
                l("exported_exported_a", "1")
            ]
        );
    }

    #[test]
    fn output_stays_valid_in_every_format() {
        let config = Config::from_yaml("naming: ray\nlabels: {ReplicaId: \"\"}").unwrap();
        let out = apply(&config, vllm_families());
        let text =
            String::from_utf8(encode(&out.families, Format::Text, Escaping::Underscores)).unwrap();
        assert!(text.contains(
            "# HELP ray_vllm_prompt_tokens_total h\n# TYPE ray_vllm_prompt_tokens_total counter\n\
             ray_vllm_prompt_tokens_total{ReplicaId=\"\",model_name=\"m\"} 3.0\n"
        ));
        for format in [Format::Text, Format::OpenMetrics] {
            for escaping in [Escaping::Underscores, Escaping::AllowUtf8] {
                let a = encode(&out.families, format, escaping);
                let b = encode(&out.families, format, Escaping::Underscores);
                // Every name is legacy-valid, so escaping cannot matter.
                assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn replica_id_goes_to_vllm_families_only() {
        let config =
            Config::from_yaml("naming: ray\nray: {replica_id: r1}\nlabels: {Version: \"2.60.0\"}")
                .unwrap();
        let out = apply(&config, vllm_families());
        let labels = |i: usize| out.families[i].samples[0].labels.as_slice().to_vec();
        assert_eq!(
            labels(0),
            [
                l("ReplicaId", "r1"),
                l("Version", "2.60.0"),
                l("model_name", "m")
            ]
        );
        assert_eq!(labels(1), [l("Version", "2.60.0")]);
        assert_eq!(labels(3), [l("Version", "2.60.0"), l("pid", "7")]);
    }

    #[test]
    fn restrict_by_sample_names() {
        let names = vec!["vllm:prompt_tokens_total".to_string()];
        let out = restrict(&vllm_families(), &names);
        assert_eq!(out.len(), 1);
        assert_eq!(&*out[0].name, "vllm:prompt_tokens");
    }
}
