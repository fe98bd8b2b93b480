//! The curated numbers by hand: known totals, a counter reset, gauges summed
//! and averaged.

use super::*;
use crate::model::{Labels, MetricFamily, MetricType, Sample};

/// Sample name, labels, value.
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
                labels: Labels::new(labels.iter().map(|(k, v)| ((*k).into(), (*v).into()))),
                value: *v,
            })
            .collect(),
    }
}

/// Two engines of model `m`: prompt tokens `p0 + p1`, queries and hits,
/// TTFT sum and count, running 3 + 4, KV usage 0.2 and 0.6.
fn families(prompt: (f64, f64), hits: f64, queries: f64, ttft: (f64, f64)) -> Vec<MetricFamily> {
    let e0: &[(&str, &str)] = &[("engine", "0"), ("model_name", "m")];
    let e1: &[(&str, &str)] = &[("engine", "1"), ("model_name", "m")];
    vec![
        family(
            "vllm:num_requests_running",
            MetricType::Gauge,
            &[
                ("vllm:num_requests_running", e0, 3.0),
                ("vllm:num_requests_running", e1, 4.0),
            ],
        ),
        family(
            "vllm:kv_cache_usage_perc",
            MetricType::Gauge,
            &[
                ("vllm:kv_cache_usage_perc", e0, 0.2),
                ("vllm:kv_cache_usage_perc", e1, 0.6),
            ],
        ),
        family(
            "vllm:prompt_tokens",
            MetricType::Counter,
            &[
                ("vllm:prompt_tokens_total", e0, prompt.0),
                ("vllm:prompt_tokens_total", e1, prompt.1),
            ],
        ),
        family(
            "vllm:prefix_cache_hits",
            MetricType::Counter,
            &[("vllm:prefix_cache_hits_total", e0, hits)],
        ),
        family(
            "vllm:prefix_cache_queries",
            MetricType::Counter,
            &[("vllm:prefix_cache_queries_total", e0, queries)],
        ),
        family(
            "vllm:time_to_first_token_seconds",
            MetricType::Histogram,
            &[
                ("vllm:time_to_first_token_seconds_sum", e0, ttft.0),
                ("vllm:time_to_first_token_seconds_count", e0, ttft.1),
            ],
        ),
        family(
            "http_requests",
            MetricType::Counter,
            &[("http_requests_total", &[], 5.0)],
        ),
    ]
}

#[test]
fn a_point_sums_and_averages_per_model() {
    let point = Point::of(&families((10.0, 20.0), 1.0, 4.0, (0.5, 2.0)), 100.0);
    assert_eq!(point.models.len(), 1);
    let m = &point.models["m"];
    assert_eq!(m.requests_running, Some(7.0));
    assert_eq!(m.requests_waiting, None);
    assert_eq!(m.kv_cache_usage, Some(0.4));
    assert_eq!(m.prompt_tokens, Some(30.0));
    assert_eq!(m.ttft_count, Some(2.0));
    assert!(
        Point::of(&families((0.0, 0.0), 0.0, 0.0, (0.0, 0.0))[6..], 1.0)
            .models
            .is_empty()
    );
}

#[test]
fn rates_and_ratios_skip_a_counter_reset() {
    let mut history = History::new();
    // t=0: 30 prompt tokens; t=10: 130 (+100); t=20: the engines restarted,
    // 20 (a reset: skipped); t=30: 80 (+60).
    history.record(Point::of(
        &families((10.0, 20.0), 1.0, 4.0, (0.5, 2.0)),
        0.0,
    ));
    history.record(Point::of(
        &families((60.0, 70.0), 6.0, 14.0, (2.5, 6.0)),
        10.0,
    ));
    history.record(Point::of(
        &families((10.0, 10.0), 0.0, 1.0, (0.1, 1.0)),
        20.0,
    ));
    history.record(Point::of(
        &families((40.0, 40.0), 3.0, 11.0, (1.1, 3.0)),
        30.0,
    ));
    let summary = history.summary();
    assert_eq!(summary.at, Some(30.0));
    let m = &summary.models["m"];
    // (100 + 60) tokens over the 20 s of the two intervals without a reset.
    assert_eq!(m.prompt_tokens_per_second, Some(160.0 / 20.0));
    // Hits (5 + 3) over queries (10 + 10).
    assert_eq!(m.prefix_cache_hit_rate, Some(8.0 / 20.0));
    // TTFT: (2.0 + 1.0) s over (4 + 2) requests.
    assert_eq!(m.ttft_seconds, Some(3.0 / 6.0));
    assert_eq!(m.tpot_seconds, None);
    assert_eq!(m.requests_running, Some(7.0));
    assert_eq!(m.kv_cache_usage, Some(0.4));
    // The chart: the reset interval has no rate, never a negative one.
    let rates: Vec<Option<f64>> = summary
        .history
        .iter()
        .map(|p| p.models["m"].prompt_tokens_per_second)
        .collect();
    assert_eq!(rates, [None, Some(10.0), None, Some(6.0)]);
}

#[test]
fn the_history_is_bounded_and_spaced() {
    let mut history = History::new();
    let empty = |at| Point {
        at,
        ..Point::default()
    };
    for i in 0..2000 {
        history.record(empty(f64::from(i)));
    }
    assert_eq!(history.len(), 901);
    // Many collections within a second keep one point for them.
    let mut history = History::new();
    for i in 0..100 {
        history.record(empty(f64::from(i) * 0.01));
    }
    assert_eq!(history.len(), 2);
    assert!(History::new().summary().at.is_none());
}

#[test]
fn a_family_of_other_samples_adds_nothing() {
    // A family no wanted name starts with is skipped whole, even if it has
    // `vllm:` samples of other names; the wanted families are not.
    let families = vec![family(
        "vllm:iteration_tokens_total",
        MetricType::Histogram,
        &[(
            "vllm:iteration_tokens_total_sum",
            &[("model_name", "m")],
            5.0,
        )],
    )];
    assert!(Point::of(&families, 1.0).models.is_empty());
    // Each sample read, in a family named as prometheus_client names it.
    for (sample, field) in SLOTS {
        let family_name = ["_total", "_sum", "_count"]
            .iter()
            .find_map(|suffix| sample.strip_suffix(suffix))
            .unwrap_or(sample);
        let families = vec![family(
            family_name,
            MetricType::Gauge,
            &[(sample, &[("model_name", "m")], 3.0)],
        )];
        let mut point = Point::of(&families, 1.0);
        let totals = point.models.get_mut("m").expect(sample);
        assert_eq!(*field(totals), Some(3.0), "{sample}");
    }
}

#[test]
fn grouped_by_pod_two_pods_of_one_model_are_two_keys() {
    let pod = |name: &str, value: f64| Sample {
        name: "vllm:num_requests_running".into(),
        labels: Labels::new([
            ("model_name".into(), "m".into()),
            ("namespace".into(), "ns".into()),
            ("pod".into(), name.into()),
        ]),
        value,
    };
    let families = vec![MetricFamily {
        name: "vllm:num_requests_running".into(),
        help: "h".into(),
        metric_type: MetricType::Gauge,
        samples: vec![pod("a", 3.0), pod("b", 4.0)],
    }];
    let by: Vec<Arc<str>> = ["namespace", "pod", "container"].map(Arc::from).to_vec();
    let point = Point::grouped(&families, 1.0, &by);
    let a = group_key(&[("namespace", "ns"), ("pod", "a"), ("model_name", "m")]);
    assert_eq!(a, "namespace=\"ns\",pod=\"a\",model_name=\"m\"");
    assert_eq!(point.models.len(), 2);
    assert_eq!(point.models[&a].requests_running, Some(3.0));
    assert_eq!(point.groups[&a]["pod"], "a");
    let mut history = History::new();
    history.record(point);
    let summary = history.summary();
    assert_eq!(summary.groups.len(), 2);
    assert_eq!(summary.models[&a].requests_running, Some(3.0));
    // Not grouped: one model, the pods summed.
    let point = Point::of(&families, 1.0);
    assert_eq!(point.models["m"].requests_running, Some(7.0));
    assert!(point.groups.is_empty());
}

/// SGLang's families at one time: two scheduler ranks (running 2 + 3,
/// queued 1 + 0, token usage 0.25 and 0.75) and the tokenizer's totals.
fn sglang_families(prompt: f64, cached: f64, itl: (f64, f64)) -> Vec<MetricFamily> {
    let r0: &[(&str, &str)] = &[("model_name", "m"), ("tp_rank", "0")];
    let r1: &[(&str, &str)] = &[("model_name", "m"), ("tp_rank", "1")];
    let m: &[(&str, &str)] = &[("model_name", "m")];
    let gauge = |name: &str, a: f64, b: f64| {
        family(name, MetricType::Gauge, &[(name, r0, a), (name, r1, b)])
    };
    vec![
        gauge("sglang:num_running_reqs", 2.0, 3.0),
        gauge("sglang:num_queue_reqs", 1.0, 0.0),
        gauge("sglang:token_usage", 0.25, 0.75),
        family(
            "sglang:prompt_tokens",
            MetricType::Counter,
            &[("sglang:prompt_tokens_total", m, prompt)],
        ),
        family(
            "sglang:cached_tokens",
            MetricType::Counter,
            &[("sglang:cached_tokens_total", m, cached)],
        ),
        family(
            "sglang:inter_token_latency_seconds",
            MetricType::Histogram,
            &[
                ("sglang:inter_token_latency_seconds_sum", m, itl.0),
                ("sglang:inter_token_latency_seconds_count", m, itl.1),
            ],
        ),
    ]
}

#[test]
fn sglangs_families_give_the_same_curated_numbers_as_vllms() {
    let mut history = History::new();
    history.record(Point::of(&sglang_families(100.0, 20.0, (1.0, 50.0)), 0.0));
    history.record(Point::of(
        &sglang_families(300.0, 120.0, (3.0, 150.0)),
        10.0,
    ));
    let summary = history.summary();
    let m = &summary.models["m"];
    assert_eq!(m.requests_running, Some(5.0), "summed over ranks");
    assert_eq!(m.requests_waiting, Some(1.0));
    assert_eq!(m.kv_cache_usage, Some(0.5), "the mean over ranks");
    assert_eq!(m.prompt_tokens_per_second, Some(20.0));
    // Cached prompt tokens (+100) over prompt tokens (+200).
    assert_eq!(m.prefix_cache_hit_rate, Some(0.5));
    // Inter-token latency: 2 s over 100 tokens.
    assert_eq!(m.tpot_seconds, Some(0.02));
}
