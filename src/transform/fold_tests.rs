//! Tests of [`super`]: each function's formula on hand-made families.

use super::*;
use crate::model::MetricType;
use proptest::prelude::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::new(pairs.iter().map(|(n, v)| (Arc::from(*n), Arc::from(*v))))
}

fn gauge(name: &str, series: &[(&[(&str, &str)], f64)]) -> MetricFamily {
    MetricFamily {
        name: name.into(),
        help: "h".into(),
        metric_type: MetricType::Gauge,
        samples: series
            .iter()
            .map(|(l, v)| Sample {
                name: name.into(),
                labels: labels(l),
                value: *v,
            })
            .collect(),
    }
}

fn fold(rules: Vec<(&str, FoldFunction)>) -> Fold {
    Fold {
        labels: vec!["engine".into()],
        rules: rules
            .into_iter()
            .map(|(family, function)| FoldRule {
                family: family.into(),
                function,
            })
            .collect(),
    }
}

fn blocks() -> MetricFamily {
    gauge(
        "cache",
        &[
            (
                &[
                    ("engine", "0"),
                    ("num_gpu_blocks", "1000"),
                    ("block_size", "16"),
                ],
                1.0,
            ),
            (
                &[
                    ("engine", "1"),
                    ("num_gpu_blocks", "3000"),
                    ("block_size", "16"),
                ],
                1.0,
            ),
        ],
    )
}

#[test]
fn sum_max_min_and_mean_fold_the_engines_of_each_model() {
    let family = gauge(
        "q",
        &[
            (&[("engine", "0"), ("model_name", "a")], 1.0),
            (&[("engine", "1"), ("model_name", "a")], 2.5),
            (&[("engine", "0"), ("model_name", "b")], 4.0),
        ],
    );
    for (function, a, b) in [
        (FoldFunction::Sum, 3.5, 4.0),
        (FoldFunction::Max, 2.5, 4.0),
        (FoldFunction::Min, 1.0, 4.0),
        (FoldFunction::Mean, 1.75, 4.0),
    ] {
        let out = fold(vec![("q", function.clone())]).apply(vec![family.clone()], &[]);
        assert_eq!(
            out[0].samples,
            vec![
                Sample {
                    name: "q".into(),
                    labels: labels(&[("model_name", "a")]),
                    value: a
                },
                Sample {
                    name: "q".into(),
                    labels: labels(&[("model_name", "b")]),
                    value: b
                },
            ],
            "{function:?}"
        );
    }
}

#[test]
fn the_kv_cache_fraction_is_weighted_by_each_engines_blocks() {
    let usage = gauge(
        "kv",
        &[
            (&[("engine", "0"), ("model_name", "m")], 0.5),
            (&[("engine", "1"), ("model_name", "m")], 0.1),
        ],
    );
    let all = vec![usage.clone(), blocks()];
    let rule = FoldFunction::WeightedMean {
        family: "cache".into(),
        label: Some("num_gpu_blocks".into()),
    };
    let out = fold(vec![("kv", rule.clone())]).apply(vec![usage.clone()], &all);
    assert_eq!(out[0].samples.len(), 1);
    assert_eq!(
        out[0].samples[0].value,
        (1000.0 * 0.5 + 3000.0 * 0.1) / (1000.0 + 3000.0)
    );
    // Without the weights' family (or with an engine it lacks): the mean.
    let out = fold(vec![("kv", rule)]).apply(vec![usage.clone()], &[usage]);
    assert_eq!(out[0].samples[0].value, (0.5 + 0.1) / 2.0);
}

#[test]
fn one_engine_keeps_its_value_exactly() {
    let usage = gauge("kv", &[(&[("engine", "0"), ("model_name", "m")], 0.1)]);
    let weights = gauge(
        "cache",
        &[(&[("engine", "0"), ("num_gpu_blocks", "27000")], 1.0)],
    );
    let out = fold(vec![(
        "kv",
        FoldFunction::WeightedMean {
            family: "cache".into(),
            label: Some("num_gpu_blocks".into()),
        },
    )])
    .apply(vec![usage.clone()], &[usage, weights]);
    assert_eq!(out[0].samples[0].value, 0.1);
    assert_eq!(out[0].samples[0].labels, labels(&[("model_name", "m")]));
}

#[test]
fn the_cache_config_becomes_one_series_with_the_pods_blocks() {
    let out = fold(vec![(
        "cache",
        FoldFunction::SumLabels {
            labels: vec!["num_gpu_blocks".into(), "absent".into()],
        },
    )])
    .apply(vec![blocks()], &[]);
    assert_eq!(
        out[0].samples,
        vec![Sample {
            name: "cache".into(),
            labels: labels(&[("block_size", "16"), ("num_gpu_blocks", "4000")]),
            value: 1.0,
        }]
    );
    let odd = gauge(
        "c",
        &[
            (&[("engine", "0"), ("x", "0.1"), ("y", "None")], 1.0),
            (&[("engine", "1"), ("x", "0.2"), ("y", "None")], 1.0),
        ],
    );
    let out = fold(vec![(
        "c",
        FoldFunction::SumLabels {
            labels: vec!["x".into(), "y".into()],
        },
    )])
    .apply(vec![odd], &[]);
    assert_eq!(
        out[0].samples[0].labels,
        labels(&[("x", "0.30000000000000004"), ("y", "None")])
    );
}

fn lora(series: &[(&str, &str, f64)]) -> MetricFamily {
    MetricFamily {
        name: "lora".into(),
        help: "h".into(),
        metric_type: MetricType::Gauge,
        samples: series
            .iter()
            .map(|(running, waiting, t)| Sample {
                name: "lora".into(),
                labels: labels(&[
                    ("max_lora", "4"),
                    ("running_lora_adapters", running),
                    ("waiting_lora_adapters", waiting),
                ]),
                value: *t,
            })
            .collect(),
    }
}

fn lora_rule() -> Fold {
    fold(vec![(
        "lora",
        FoldFunction::NewestUnion {
            labels: vec![
                "running_lora_adapters".into(),
                "waiting_lora_adapters".into(),
            ],
            ranks: Some("cache".into()),
        },
    )])
}

#[test]
fn lora_unites_the_newest_combination_of_every_rank() {
    // Two ranks (engines 0 and 1 in `cache`); "old" is a stale combination.
    let family = lora(&[
        ("old", "", 10.0),
        ("a,b", "", 100.0),
        ("", "", 120.0),
        ("c", "d", 90.0),
    ]);
    let out = lora_rule().apply(vec![family], &[blocks()]);
    assert_eq!(
        out[0].samples,
        vec![Sample {
            name: "lora".into(),
            labels: labels(&[
                ("max_lora", "4"),
                ("running_lora_adapters", "a,b,c"),
                ("waiting_lora_adapters", "d"),
            ]),
            value: 100.0,
        }]
    );
}

#[test]
fn lora_with_one_rank_is_the_series_the_endpoint_picker_picks() {
    let family = lora(&[("x", "", 50.0), ("y", "z", 70.0), ("", "", 90.0)]);
    let one = gauge("cache", &[(&[("engine", "0")], 1.0)]);
    let out = lora_rule().apply(vec![family.clone()], &[one]);
    assert_eq!(out[0].samples, vec![family.samples[1].clone()]);
    // No adapters at all: the newest series.
    let idle = lora(&[("", "", 5.0), ("", "", 7.0)]);
    let out = lora_rule().apply(vec![idle.clone()], &[]);
    assert_eq!(out[0].samples, vec![idle.samples[1].clone()]);
}

#[test]
fn families_without_a_rule_and_views_without_fold_are_unchanged() {
    let other = gauge(
        "other",
        &[(&[("engine", "0")], 1.0), (&[("engine", "1")], 2.0)],
    );
    let out = fold(vec![("q", FoldFunction::Sum)]).apply(vec![other.clone()], &[]);
    assert_eq!(out, vec![other.clone()]);
    let none = Fold::default();
    assert_eq!(none.apply(vec![other.clone()], &[]), vec![other]);
}

#[test]
fn nan_propagates_through_every_function() {
    let family = gauge(
        "q",
        &[(&[("engine", "0")], f64::NAN), (&[("engine", "1")], 1.0)],
    );
    for function in [
        FoldFunction::Sum,
        FoldFunction::Max,
        FoldFunction::Min,
        FoldFunction::Mean,
    ] {
        let out = fold(vec![("q", function)]).apply(vec![family.clone()], &[]);
        assert!(out[0].samples[0].value.is_nan());
    }
}

proptest! {
    /// The sum of a fold equals the sum of `/metrics`'s series (the same
    /// additions, in order), and every series is counted in one group.
    #[test]
    fn folding_keeps_the_total_and_each_model(
        series in proptest::collection::vec((0u8..3, 0u8..4, -1e6f64..1e6), 0..24)
    ) {
        let family = MetricFamily {
            name: "q".into(),
            help: "h".into(),
            metric_type: MetricType::Gauge,
            samples: series.iter().map(|(model, engine, v)| Sample {
                name: "q".into(),
                labels: labels(&[("engine", &engine.to_string()), ("model_name", &model.to_string())]),
                value: *v,
            }).collect(),
        };
        let out = fold(vec![("q", FoldFunction::Sum)]).apply(vec![family.clone()], &[]);
        for model in 0u8..3 {
            let name = model.to_string();
            let expected: Vec<f64> = family.samples.iter()
                .filter(|s| s.labels.get("model_name") == Some(&name))
                .map(|s| s.value).collect();
            let got: Vec<&Sample> = out[0].samples.iter()
                .filter(|s| s.labels.get("model_name") == Some(&name)).collect();
            if expected.is_empty() {
                prop_assert!(got.is_empty());
            } else {
                prop_assert_eq!(got.len(), 1);
                prop_assert_eq!(got[0].value, expected.iter().fold(0.0, |t, v| t + v));
                prop_assert!(got[0].labels.get("engine").is_none());
            }
        }
        // Max, min and mean stay within the values they fold.
        for function in [FoldFunction::Max, FoldFunction::Min, FoldFunction::Mean] {
            let out = fold(vec![("q", function)]).apply(vec![family.clone()], &[]);
            let max = family.samples.iter().map(|s| s.value).fold(f64::NEG_INFINITY, f64::max);
            let min = family.samples.iter().map(|s| s.value).fold(f64::INFINITY, f64::min);
            for s in &out[0].samples {
                prop_assert!(s.value >= min - 1e-6 && s.value <= max + 1e-6, "{} not in [{min}, {max}]", s.value);
            }
        }
    }
}

/// Issue 43: SGLang's scheduler gauges, one series per data-parallel rank
/// that logs, are one series per pod in the built-in view: the queues
/// summed, the token usage the fullest rank's.
#[test]
fn the_built_in_view_folds_sglangs_scheduler_ranks() {
    let view = crate::transform::view::endpoint_picker(|name| name.into(), true);
    let fold = view.fold.expect("the built-in view folds");
    let rank = |dp: &'static str| -> [(&'static str, &'static str); 5] {
        [
            ("dp_rank", dp),
            ("engine_type", "unified"),
            ("model_name", "m"),
            ("pp_rank", "0"),
            ("tp_rank", if dp == "0" { "0" } else { "4" }),
        ]
    };
    let (r0, r1) = (rank("0"), rank("1"));
    let families = vec![
        gauge("sglang:num_queue_reqs", &[(&r0, 3.0), (&r1, 4.0)]),
        gauge("sglang:num_running_reqs", &[(&r0, 10.0), (&r1, 12.0)]),
        gauge("sglang:token_usage", &[(&r0, 0.25), (&r1, 0.75)]),
    ];
    let folded = fold.apply(families.clone(), &families);
    let values: Vec<(String, f64, Vec<String>)> = folded
        .iter()
        .flat_map(|f| &f.samples)
        .map(|s| {
            (
                s.name.to_string(),
                s.value,
                s.labels.iter().map(|(n, _)| n.to_string()).collect(),
            )
        })
        .collect();
    let kept = vec!["engine_type".to_owned(), "model_name".to_owned()];
    assert_eq!(
        values,
        [
            ("sglang:num_queue_reqs".to_owned(), 7.0, kept.clone()),
            ("sglang:num_running_reqs".to_owned(), 22.0, kept.clone()),
            ("sglang:token_usage".to_owned(), 0.75, kept),
        ]
    );
}
