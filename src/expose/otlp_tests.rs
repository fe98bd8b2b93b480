//! Tests of the OTLP mapping: each type as the Collector's Prometheus
//! receiver maps it, start times, staleness, the body's encoding.

use super::*;
use crate::model::Labels;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use std::sync::Arc;

fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        name: name.into(),
        labels: Labels::new(labels.iter().map(|&(n, v)| (Arc::from(n), Arc::from(v)))),
        value,
    }
}

fn family(name: &str, metric_type: MetricType, samples: Vec<Sample>) -> MetricFamily {
    MetricFamily {
        name: name.into(),
        help: format!("{name} help").into(),
        metric_type,
        samples,
    }
}

fn attrs(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| {
            let Some(any_value::Value::StringValue(v)) =
                kv.value.as_ref().and_then(|v| v.value.clone())
            else {
                panic!("{kv:?}")
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn pairs(kvs: &[(&str, &str)]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn metrics(request: &ExportMetricsServiceRequest) -> &[Metric] {
    &request.resource_metrics[0].scope_metrics[0].metrics
}

fn double(point: &NumberDataPoint) -> f64 {
    match point.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        ref other => panic!("{other:?}"),
    }
}

const T0: u64 = 1_000_000_000_000_000_000;
const T1: u64 = T0 + 15_000_000_000;
const T2: u64 = T1 + 15_000_000_000;

fn served() -> Vec<MetricFamily> {
    vec![
        family(
            "vllm:prompt_tokens",
            MetricType::Counter,
            vec![
                sample(
                    "vllm:prompt_tokens_total",
                    &[("model_name", "m"), ("empty", "")],
                    10.0,
                ),
                sample("vllm:prompt_tokens_total", &[("model_name", "n")], 3.0),
                sample(
                    "vllm:prompt_tokens_created",
                    &[("model_name", "n")],
                    1_700_000_000.5,
                ),
            ],
        ),
        family(
            "vllm:num_requests_running",
            MetricType::Gauge,
            vec![sample(
                "vllm:num_requests_running",
                &[("model_name", "m")],
                f64::NAN,
            )],
        ),
        family(
            "latency",
            MetricType::Histogram,
            vec![
                sample("latency_bucket", &[("le", "0.1"), ("model_name", "m")], 1.0),
                sample("latency_bucket", &[("le", "1.0"), ("model_name", "m")], 3.0),
                sample(
                    "latency_bucket",
                    &[("le", "+Inf"), ("model_name", "m")],
                    4.0,
                ),
                sample("latency_count", &[("model_name", "m")], 4.0),
                sample("latency_sum", &[("model_name", "m")], 2.5),
                // Decreasing buckets: dropped, as the receiver drops it.
                sample(
                    "latency_bucket",
                    &[("le", "0.1"), ("model_name", "bad")],
                    3.0,
                ),
                sample(
                    "latency_bucket",
                    &[("le", "1.0"), ("model_name", "bad")],
                    1.0,
                ),
                sample(
                    "latency_bucket",
                    &[("le", "+Inf"), ("model_name", "bad")],
                    3.0,
                ),
                sample("latency_count", &[("model_name", "bad")], 3.0),
                sample("latency_sum", &[("model_name", "bad")], 1.0),
            ],
        ),
        family(
            "rpc",
            MetricType::Summary,
            vec![
                sample("rpc", &[("quantile", "0.9")], 0.4),
                sample("rpc", &[("quantile", "0.5")], 0.2),
                sample("rpc_count", &[], 7.0),
                sample("rpc_sum", &[], 1.5),
                // No _count: dropped.
                sample("rpc_sum", &[("x", "1")], 1.0),
            ],
        ),
        family(
            "build",
            MetricType::Info,
            vec![sample("build_info", &[("version", "1")], 1.0)],
        ),
        family(
            "state",
            MetricType::StateSet,
            vec![
                sample("state", &[("state", "a")], 1.0),
                sample("state", &[("state", "b")], 0.0),
            ],
        ),
        family(
            "untyped",
            MetricType::Unknown,
            vec![sample("untyped", &[], f64::NEG_INFINITY)],
        ),
        family(
            "gh",
            MetricType::GaugeHistogram,
            vec![
                sample("gh_bucket", &[("le", "+Inf")], 1.0),
                sample("gh_gcount", &[], 1.0),
            ],
        ),
    ]
}

#[test]
fn every_type_maps_as_the_prometheus_receiver_maps_it() {
    let mut starts = StartTimes::new(T0, Temporality::Cumulative);
    let resource = pairs(&[
        ("job", "vllm"),
        ("instance", "pod-1:8000"),
        ("pod", "pod-1"),
        ("empty", ""),
    ]);
    let request = export_request(&served(), T1, &resource, &mut starts);
    let resource_attributes = attrs(
        &request.resource_metrics[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes,
    );
    assert_eq!(
        resource_attributes,
        pairs(&[
            ("service.name", "vllm"),
            ("service.instance.id", "pod-1:8000"),
            ("pod", "pod-1")
        ])
    );
    let scope = request.resource_metrics[0].scope_metrics[0]
        .scope
        .as_ref()
        .unwrap();
    assert_eq!(scope.name, "multiproc-exporter");
    let m = metrics(&request);
    let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "vllm:prompt_tokens_total",
            "vllm:num_requests_running",
            "latency",
            "rpc",
            "build",
            "state",
            "untyped"
        ]
    );
    let types: Vec<(String, String)> = m.iter().map(|m| attrs(&m.metadata)[0].clone()).collect();
    assert_eq!(
        types.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
        [
            "counter",
            "gauge",
            "histogram",
            "summary",
            "info",
            "stateset",
            "unknown"
        ]
    );
    assert!(types.iter().all(|(k, _)| k == "prometheus.type"));
    assert_eq!(m[0].description, "vllm:prompt_tokens help");

    // Counter: cumulative monotonic sum; start from _created, else pushing's start.
    let Some(Data::Sum(sum)) = &m[0].data else {
        panic!("{:?}", m[0])
    };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, CUMULATIVE);
    assert_eq!(sum.data_points.len(), 2);
    assert_eq!(
        attrs(&sum.data_points[0].attributes),
        pairs(&[("model_name", "m")])
    );
    assert_eq!(double(&sum.data_points[0]), 10.0);
    // No `_created`: the first point starts at its own time (OTLP's
    // unknown start), never at when pushing started.
    assert_eq!(sum.data_points[0].start_time_unix_nano, T1);
    assert_eq!(sum.data_points[0].time_unix_nano, T1);
    assert_eq!(
        sum.data_points[1].start_time_unix_nano,
        1_700_000_000_500_000_000
    );

    // Gauge: NaN is sent as NaN (not flagged: it is a value, not staleness).
    let Some(Data::Gauge(gauge)) = &m[1].data else {
        panic!()
    };
    assert!(double(&gauge.data_points[0]).is_nan());
    assert_eq!(gauge.data_points[0].flags, 0);
    assert_eq!(gauge.data_points[0].start_time_unix_nano, 0);

    // Histogram: bounds without +Inf, per-bucket counts; the bad one dropped.
    let Some(Data::Histogram(h)) = &m[2].data else {
        panic!()
    };
    assert_eq!(h.aggregation_temporality, CUMULATIVE);
    assert_eq!(h.data_points.len(), 1);
    let p = &h.data_points[0];
    assert_eq!(attrs(&p.attributes), pairs(&[("model_name", "m")]));
    assert_eq!(p.explicit_bounds, [0.1, 1.0]);
    assert_eq!(p.bucket_counts, [1, 2, 1]);
    assert_eq!((p.count, p.sum), (4, Some(2.5)));
    assert_eq!(p.start_time_unix_nano, T1);

    // Summary: quantiles sorted; the one without _count dropped.
    let Some(Data::Summary(s)) = &m[3].data else {
        panic!()
    };
    assert_eq!(s.data_points.len(), 1);
    let p = &s.data_points[0];
    assert_eq!((p.count, p.sum), (7, 1.5));
    let q: Vec<(f64, f64)> = p
        .quantile_values
        .iter()
        .map(|q| (q.quantile, q.value))
        .collect();
    assert_eq!(q, [(0.5, 0.2), (0.9, 0.4)]);

    // Info and stateset: non-monotonic cumulative sums named as the family.
    for (metric, n) in [(&m[4], 1), (&m[5], 2)] {
        let Some(Data::Sum(sum)) = &metric.data else {
            panic!()
        };
        assert!(!sum.is_monotonic);
        assert_eq!(sum.aggregation_temporality, CUMULATIVE);
        assert_eq!(sum.data_points.len(), n);
    }
    let Some(Data::Sum(state)) = &m[5].data else {
        panic!()
    };
    assert_eq!(
        attrs(&state.data_points[1].attributes),
        pairs(&[("state", "b")])
    );

    // Unknown: a gauge; -Inf as it is.
    let Some(Data::Gauge(gauge)) = &m[6].data else {
        panic!()
    };
    assert_eq!(double(&gauge.data_points[0]), f64::NEG_INFINITY);
    assert_eq!(data_points(&request), 2 + 1 + 1 + 1 + 1 + 2 + 1);
}

#[test]
fn start_times_stay_until_a_reset_and_vanished_series_are_flagged_once() {
    let mut starts = StartTimes::new(T0, Temporality::Cumulative);
    let first = export_request(&served(), T1, &[], &mut starts);
    let Some(Data::Sum(sum)) = &metrics(&first)[0].data else {
        panic!()
    };
    assert_eq!(sum.data_points[0].start_time_unix_nano, T1);

    // Next collection: the counter of model m went down (a reset), the
    // gauge and the summary are gone.
    let mut next = served();
    next[0].samples[0].value = 2.0;
    next.remove(3);
    next.remove(1);
    let second = export_request(&next, T2, &[], &mut starts);
    let m = metrics(&second);
    let Some(Data::Sum(sum)) = &m[0].data else {
        panic!()
    };
    // Issue 54 (found by the push model): the reset's start was the
    // previous collection's time, the very start it had (a series of the
    // first collection starts at its first point): a backend saw no reset.
    assert_eq!(
        sum.data_points[0].start_time_unix_nano,
        T1 + 1,
        "reset: starts just after the previous collection"
    );
    assert_eq!(
        sum.data_points[1].start_time_unix_nano,
        1_700_000_000_500_000_000
    );
    let Some(Data::Histogram(h)) = &m[1].data else {
        panic!()
    };
    assert_eq!(
        h.data_points[0].start_time_unix_nano, T1,
        "later points keep the first point's start"
    );
    // The vanished series, last, flagged NO_RECORDED_VALUE without a value.
    let stale: Vec<&Metric> = m
        .iter()
        .filter(|m| m.name == "rpc" || m.name == "vllm:num_requests_running")
        .collect();
    assert_eq!(stale.len(), 2);
    let Some(Data::Gauge(g)) = &stale.iter().find(|m| m.name != "rpc").unwrap().data else {
        panic!()
    };
    assert_eq!(g.data_points[0].flags, NO_RECORDED_VALUE);
    assert_eq!(g.data_points[0].value, None);
    assert_eq!(g.data_points[0].time_unix_nano, T2);
    assert_eq!(
        attrs(&g.data_points[0].attributes),
        pairs(&[("model_name", "m")])
    );
    let Some(Data::Summary(s)) = &stale.iter().find(|m| m.name == "rpc").unwrap().data else {
        panic!()
    };
    assert_eq!(s.data_points[0].flags, NO_RECORDED_VALUE);
    assert_eq!(s.data_points[0].count, 0);

    // Flagged once: the collection after that has neither.
    let third = export_request(&next, T2 + 1, &[], &mut starts);
    assert!(!metrics(&third).iter().any(|m| m.name == "rpc"));
    let Some(Data::Sum(sum)) = &metrics(&third)[0].data else {
        panic!()
    };
    assert_eq!(sum.data_points[0].start_time_unix_nano, T1 + 1);

    // The summary comes back with a lower count (its writer started over):
    // a reset, so it starts at the collection before; unflagged again.
    let mut back = served();
    back[3].samples[2].value = 1.0;
    let fourth = export_request(&back, T2 + 2, &[], &mut starts);
    let rpc = metrics(&fourth).iter().find(|m| m.name == "rpc").unwrap();
    let Some(Data::Summary(s)) = &rpc.data else {
        panic!()
    };
    assert_eq!((s.data_points[0].count, s.data_points[0].flags), (1, 0));
    assert_eq!(s.data_points[0].start_time_unix_nano, T2 + 1);
}

#[test]
fn the_body_is_gzipped_protobuf_and_partial_success_is_read() {
    let mut starts = StartTimes::new(T0, Temporality::Cumulative);
    let request = export_request(&served(), T1, &pairs(&[("pod", "p")]), &mut starts);
    let body = encode(&request);
    assert_eq!(&body[..2], [0x1f, 0x8b]);
    let decoded = decode(&body).unwrap();
    // (NaN makes the requests unequal; their bytes compare.)
    assert_eq!(
        prost::Message::encode_to_vec(&decoded),
        prost::Message::encode_to_vec(&request)
    );
    assert!(decode(b"not gzip").is_err());

    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;
    let answer = |rejected, message: &str| {
        prost::Message::encode_to_vec(&ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: rejected,
                error_message: message.into(),
            }),
        })
    };
    assert_eq!(partial_success(&answer(3, "bad")), Some((3, "bad".into())));
    assert_eq!(partial_success(&answer(0, "")), None);
    assert_eq!(partial_success(b""), None);
    assert_eq!(partial_success(b"{}\n"), None);
}

/// Issue 41: info and stateset are non-monotonic sums; a decrease was
/// taken for a reset and moved their start.
#[test]
fn a_decrease_of_a_stateset_or_info_series_is_a_change_not_a_reset() {
    let state = |a: f64| {
        vec![family(
            "state",
            MetricType::StateSet,
            vec![sample("state", &[("state", "a")], a)],
        )]
    };
    let mut starts = StartTimes::new(T0, Temporality::Cumulative);
    export_request(&state(1.0), T1, &[], &mut starts);
    let second = export_request(&state(0.0), T2, &[], &mut starts);
    let Some(Data::Sum(sum)) = &metrics(&second)[0].data else {
        panic!()
    };
    assert!(!sum.is_monotonic);
    assert_eq!(sum.data_points[0].start_time_unix_nano, T1);
}

fn counter_and_histogram(
    total: f64,
    created: Option<f64>,
    buckets: [f64; 2],
    sum: f64,
) -> Vec<MetricFamily> {
    let mut counter = vec![sample("c_total", &[], total)];
    if let Some(created) = created {
        counter.push(sample("c_created", &[], created));
    }
    vec![
        family("c", MetricType::Counter, counter),
        family(
            "h",
            MetricType::Histogram,
            vec![
                sample("h_bucket", &[("le", "1.0")], buckets[0]),
                sample("h_bucket", &[("le", "+Inf")], buckets[1]),
                sample("h_count", &[], buckets[1]),
                sample("h_sum", &[], sum),
            ],
        ),
    ]
}

/// One push with delta temporality: the request sent, and, when the
/// receiver `accepted` it, its values become the bases.
fn delta_push(
    starts: &mut StartTimes,
    deltas: &mut Deltas,
    families: &[MetricFamily],
    time: u64,
    accepted: bool,
) -> ExportMetricsServiceRequest {
    let collected = collect(families, time, &[], starts);
    let converted = deltas.convert(&collected);
    let request = converted.request().clone();
    if accepted {
        deltas.accept(converted);
    }
    request
}

/// The delta sum `name`'s points as (attributes, start, time, value).
fn sum_points(request: &ExportMetricsServiceRequest, name: &str) -> Vec<(String, u64, u64, f64)> {
    metrics(request)
        .iter()
        .filter(|m| m.name == name)
        .flat_map(|m| match &m.data {
            Some(Data::Sum(s)) => {
                assert_eq!(s.aggregation_temporality, DELTA, "{m:?}");
                s.data_points
                    .iter()
                    .filter(|p| p.flags == 0)
                    .map(|p| {
                        (
                            format!("{:?}", attrs(&p.attributes)),
                            p.start_time_unix_nano,
                            p.time_unix_nano,
                            double(p),
                        )
                    })
                    .collect::<Vec<_>>()
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

/// Issue 41: `--push.otlp-temporality=delta`, as the Collector's
/// `cumulativetodelta` converts: the first point of a series that started
/// before pushing is not sent; later points are the change since the
/// previous push, starting at its time; a reset sends nothing, for
/// counters and histograms alike; gauges, summaries and non-monotonic
/// sums stay as they are.
#[test]
fn delta_pushes_are_the_changes_since_the_previous_push() {
    let mut starts = StartTimes::new(T0, Temporality::Delta);
    let mut deltas = Deltas::default();
    let mut push = |families: &[MetricFamily], time: u64| {
        delta_push(&mut starts, &mut deltas, families, time, true)
    };
    let first = push(&counter_and_histogram(10.0, None, [1.0, 2.0], 3.0), T1);
    assert!(metrics(&first).is_empty(), "{first:?}");
    let second = push(&counter_and_histogram(15.0, None, [2.0, 5.0], 7.5), T2);
    let m = metrics(&second);
    let Some(Data::Sum(sum)) = &m[0].data else {
        panic!()
    };
    assert_eq!(sum.aggregation_temporality, DELTA);
    assert!(sum.is_monotonic);
    assert_eq!(double(&sum.data_points[0]), 5.0);
    assert_eq!(
        (
            sum.data_points[0].start_time_unix_nano,
            sum.data_points[0].time_unix_nano
        ),
        (T1, T2)
    );
    let Some(Data::Histogram(h)) = &m[1].data else {
        panic!()
    };
    assert_eq!(h.aggregation_temporality, DELTA);
    let p = &h.data_points[0];
    assert_eq!(
        (p.count, p.sum, p.bucket_counts.clone()),
        (3, Some(4.5), vec![1, 2])
    );
    assert_eq!(p.start_time_unix_nano, T1);

    // A reset (a writer's files removed from a merged series): the counter
    // and the histogram alike send nothing this time (issue 54: the
    // histogram was sent whole); the next push takes its change from there.
    let t3 = T2 + 15_000_000_000;
    let third = push(&counter_and_histogram(2.0, None, [1.0, 1.0], 0.5), t3);
    assert!(metrics(&third).is_empty(), "{third:?}");
    let t4 = t3 + 15_000_000_000;
    let fourth = push(&counter_and_histogram(6.0, None, [1.0, 1.0], 0.5), t4);
    assert_eq!(sum_points(&fourth, "c_total"), [("[]".into(), t3, t4, 4.0)]);

    // A series created after pushing started: its first value is sent.
    let mut starts = StartTimes::new(T0, Temporality::Delta);
    let created = (T0 as f64 / 1e9) + 5.0;
    let first = delta_push(
        &mut starts,
        &mut Deltas::default(),
        &counter_and_histogram(10.0, Some(created), [1.0, 2.0], 3.0),
        T1,
        true,
    );
    assert_eq!(
        sum_points(&first, "c_total"),
        [("[]".into(), T0 + 5_000_000_000, T1, 10.0)]
    );

    // Gauges, summaries and stateset stay cumulative in delta mode.
    let mut starts = StartTimes::new(T0, Temporality::Delta);
    let request = delta_push(&mut starts, &mut Deltas::default(), &served(), T1, true);
    for metric in metrics(&request) {
        match &metric.data {
            Some(Data::Sum(s)) if !s.is_monotonic => {
                assert_eq!(s.aggregation_temporality, CUMULATIVE)
            }
            Some(Data::Gauge(_)) | Some(Data::Summary(_)) | Some(Data::Sum(_)) => {}
            other => panic!("{other:?}"),
        }
    }
}

/// A counter `c_total` with one series per `(route, value)`.
fn routes(values: &[(&str, f64)]) -> Vec<MetricFamily> {
    vec![family(
        "c",
        MetricType::Counter,
        values
            .iter()
            .map(|&(route, v)| sample("c_total", &[("route", route)], v))
            .collect(),
    )]
}

/// Issue 48: a series first seen after the first collection (every series
/// of multiprocess files has no `_created`, and a vLLM pod's series are
/// born after the exporter started) lost its first interval with delta
/// temporality, and claimed no start with cumulative. It now starts at the
/// previous collection's time in both, and its first delta is its whole
/// value; a series that disappears and comes back is born again.
#[test]
fn a_series_born_after_pushing_started_starts_at_the_previous_collection() {
    let t = |n: u64| T0 + n * 1_000_000_000;
    // Cumulative.
    let mut starts = StartTimes::new(T0, Temporality::Cumulative);
    export_request(&routes(&[("/a", 1.0)]), t(1), &[], &mut starts);
    let second = export_request(&routes(&[("/a", 2.0), ("/b", 5.0)]), t(2), &[], &mut starts);
    let Some(Data::Sum(sum)) = &metrics(&second)[0].data else {
        panic!()
    };
    let starts_of: Vec<(u64, f64)> = sum
        .data_points
        .iter()
        .map(|p| (p.start_time_unix_nano, double(p)))
        .collect();
    assert_eq!(starts_of, [(t(1), 2.0), (t(1), 5.0)]);
    // /b disappears at t(3) and comes back at t(5): born again at t(4).
    export_request(&routes(&[("/a", 2.0)]), t(3), &[], &mut starts);
    export_request(&routes(&[("/a", 2.0)]), t(4), &[], &mut starts);
    let back = export_request(&routes(&[("/a", 2.0), ("/b", 7.0)]), t(5), &[], &mut starts);
    let Some(Data::Sum(sum)) = &metrics(&back)[0].data else {
        panic!()
    };
    assert_eq!(sum.data_points[0].start_time_unix_nano, t(1));
    assert_eq!(sum.data_points[1].start_time_unix_nano, t(4));

    // Delta: the born series' first point is sent whole, from the previous
    // collection; every point starts where the previous one ended.
    let mut starts = StartTimes::new(T0, Temporality::Delta);
    let mut deltas = Deltas::default();
    let mut push = |values: &[(&str, f64)], n: u64| {
        sum_points(
            &delta_push(&mut starts, &mut deltas, &routes(values), t(n), true),
            "c_total",
        )
    };
    let a = format!("{:?}", pairs(&[("route", "/a")]));
    let b = format!("{:?}", pairs(&[("route", "/b")]));
    assert_eq!(push(&[("/a", 1.0)], 1), []);
    assert_eq!(
        push(&[("/a", 2.0), ("/b", 5.0)], 2),
        [(a.clone(), t(1), t(2), 1.0), (b.clone(), t(1), t(2), 5.0)]
    );
    assert_eq!(
        push(&[("/a", 2.0), ("/b", 6.0)], 3),
        [(a.clone(), t(2), t(3), 0.0), (b.clone(), t(2), t(3), 1.0)]
    );
    // Gone (flagged), then back with 3: born again, 3 sent whole.
    push(&[("/a", 2.0)], 4);
    assert_eq!(
        push(&[("/a", 2.0), ("/b", 3.0)], 5),
        [(a.clone(), t(4), t(5), 0.0), (b.clone(), t(4), t(5), 3.0)]
    );
    // A series born later that comes with the first collection's series
    // of another family: histograms too.
    let histogram = |count: f64| {
        vec![family(
            "h",
            MetricType::Histogram,
            vec![
                sample("h_bucket", &[("le", "1.0")], count),
                sample("h_bucket", &[("le", "+Inf")], count),
                sample("h_count", &[], count),
                sample("h_sum", &[], count / 2.0),
            ],
        )]
    };
    let request = delta_push(&mut starts, &mut deltas, &histogram(4.0), t(6), true);
    let h = metrics(&request)
        .iter()
        .find(|m| m.name == "h")
        .expect("the born histogram is sent");
    let Some(Data::Histogram(h)) = &h.data else {
        panic!()
    };
    let p = &h.data_points[0];
    assert_eq!(
        (
            p.start_time_unix_nano,
            p.count,
            p.sum,
            p.bucket_counts.clone()
        ),
        (t(5), 4, Some(2.0), vec![4, 0])
    );
}

/// Issue 48: a delta push that was dropped (rejected, or given up) lost
/// its interval's change for good. Deltas are now taken from what the
/// receiver accepted: the next accepted push carries the change, so the
/// deltas accepted add up to the cumulative change, for series present at
/// the first collection (whose first push failed) and born later alike.
#[test]
fn the_change_of_a_dropped_delta_push_is_carried_into_the_next_one() {
    let t = |n: u64| T0 + n * 1_000_000_000;
    let mut starts = StartTimes::new(T0, Temporality::Delta);
    let mut deltas = Deltas::default();
    let mut totals: HashMap<String, f64> = HashMap::new();
    let mut last_time: HashMap<String, u64> = HashMap::new();
    let history: [(&[(&str, f64)], bool); 7] = [
        (&[("/a", 10.0)], false),
        (&[("/a", 12.0)], false),
        (&[("/a", 15.0), ("/b", 4.0)], true),
        (&[("/a", 16.0), ("/b", 6.0), ("/c", 1.0)], false),
        (&[("/a", 20.0), ("/b", 6.0), ("/c", 3.0)], false),
        (&[("/a", 21.0), ("/b", 9.0), ("/c", 3.0)], true),
        (&[("/a", 21.0), ("/b", 9.0), ("/c", 8.0)], true),
    ];
    for (n, (values, accepted)) in history.iter().enumerate() {
        let sent = sum_points(
            &delta_push(
                &mut starts,
                &mut deltas,
                &routes(values),
                t(n as u64),
                *accepted,
            ),
            "c_total",
        );
        if !accepted {
            continue;
        }
        for (series, start, time, value) in sent {
            if let Some(&previous) = last_time.get(&series) {
                assert_eq!(start, previous, "{series} at {n}");
            }
            last_time.insert(series.clone(), time);
            *totals.entry(series).or_default() += value;
        }
    }
    let get = |route: &str| totals[&format!("{:?}", pairs(&[("route", route)]))];
    // /a: 21 − 10 (its value at the first collection, the base); /b and
    // /c, born later: their whole values.
    assert_eq!((get("/a"), get("/b"), get("/c")), (11.0, 9.0, 8.0));
}
