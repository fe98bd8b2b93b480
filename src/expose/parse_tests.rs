//! Unit tests of the exposition parser: both formats parse back what the
//! encoders write (byte-identical round trips), and malformed bodies are
//! errors.

use super::*;
use crate::expose::encode::{encode, Escaping, Format};

fn text(body: &str) -> Vec<MetricFamily> {
    parse(body.as_bytes(), ExpositionFormat::Text).unwrap()
}

fn om(body: &str) -> Vec<MetricFamily> {
    parse(body.as_bytes(), ExpositionFormat::OpenMetrics).unwrap()
}

fn round_trip(body: &str, format: ExpositionFormat) {
    let families = parse(body.as_bytes(), format).unwrap();
    let encoded = match format {
        ExpositionFormat::Text => encode(&families, Format::Text, Escaping::AllowUtf8),
        ExpositionFormat::OpenMetrics => {
            encode(&families, Format::OpenMetrics, Escaping::AllowUtf8)
        }
    };
    assert_eq!(String::from_utf8(encoded).unwrap(), body);
}

/// What prometheus_client 0.26.0's `generate_latest` writes for a counter,
/// a gauge, a histogram, a summary and an info metric.
const PYTHON_TEXT: &str = r#"# HELP requests_total Requests "served" \\ with a\nnewline.
# TYPE requests_total counter
requests_total{path="/a\"b\\c\nd"} 3.0
requests_total{path="/"} 1.5e+20
# HELP requests_created Requests "served" \\ with a\nnewline.
# TYPE requests_created gauge
requests_created{path="/a\"b\\c\nd"} 1.7e+09
requests_created{path="/"} 1.7e+09
# HELP temperature Temperature.
# TYPE temperature gauge
temperature NaN
temperature{room="a"} -Inf
temperature{room="b"} 0.1
# HELP latency_seconds Latency.
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.5"} 1.0
latency_seconds_bucket{le="+Inf"} 2.0
latency_seconds_count 2.0
latency_seconds_sum 1.2000000000000002
# HELP size Size.
# TYPE size summary
size{quantile="0.5"} 4.0
size_count 1.0
size_sum 4.0
# HELP build_info Build.
# TYPE build_info gauge
build_info{version="1"} 1.0
# HELP anything Untyped.
# TYPE anything untyped
anything 7.0
"#;

#[test]
fn python_text_round_trips_byte_for_byte() {
    round_trip(PYTHON_TEXT, ExpositionFormat::Text);
    let families = text(PYTHON_TEXT);
    assert_eq!(&*families[0].name, "requests");
    assert_eq!(families[0].metric_type, MetricType::Counter);
    assert_eq!(
        &*families[0].help,
        "Requests \"served\" \\ with a\nnewline."
    );
    assert_eq!(
        families[0].samples[0].labels.get("path"),
        Some("/a\"b\\c\nd")
    );
    assert_eq!(families[0].samples[1].value, 1.5e20);
    assert!(families[2].samples[0].value.is_nan());
    assert_eq!(families[3].metric_type, MetricType::Histogram);
    assert_eq!(families[4].metric_type, MetricType::Summary);
    assert_eq!(families[6].metric_type, MetricType::Unknown);
}

/// What the Rust `prometheus-client` crate (vLLM's Rust frontend) and
/// prometheus_client's OpenMetrics encoder write, every type.
const OPENMETRICS: &str = r#"# HELP requests Requests \"served\".
# TYPE requests counter
requests_total{path="/"} 3.0
requests_created{path="/"} 1.7e+09
# HELP latency_seconds Latency.
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.5"} 1.0
latency_seconds_bucket{le="+Inf"} 2.0
latency_seconds_count 2.0
latency_seconds_sum 1.2000000000000002
# HELP queue Queue.
# TYPE queue gaugehistogram
queue_bucket{le="+Inf"} 2.0
queue_gcount 2.0
queue_gsum 3.0
# HELP build Build.
# TYPE build info
build_info{version="1"} 1.0
# HELP state State.
# TYPE state stateset
state{state="a"} 1.0
state{state="b"} 0.0
# HELP other Other.
# TYPE other unknown
other 1e-05
# EOF
"#;

#[test]
fn openmetrics_round_trips_byte_for_byte() {
    round_trip(OPENMETRICS, ExpositionFormat::OpenMetrics);
    let families = om(OPENMETRICS);
    let types: Vec<MetricType> = families.iter().map(|f| f.metric_type).collect();
    assert_eq!(
        types,
        [
            MetricType::Counter,
            MetricType::Histogram,
            MetricType::GaugeHistogram,
            MetricType::Info,
            MetricType::StateSet,
            MetricType::Unknown
        ]
    );
}

#[test]
fn openmetrics_to_text_is_what_python_writes() {
    let families = om(OPENMETRICS);
    let text = String::from_utf8(encode(&families, Format::Text, Escaping::AllowUtf8)).unwrap();
    assert!(text.starts_with(
        "# HELP requests_total Requests \"served\".\n# TYPE requests_total counter\nrequests_total{path=\"/\"} 3.0\n# HELP requests_created Requests \"served\".\n# TYPE requests_created gauge\n"
    ));
    assert!(text.contains("# TYPE build_info gauge\nbuild_info{version=\"1\"} 1.0\n"));
}

#[test]
fn timestamps_units_and_exemplars_are_dropped() {
    // A trailing blank is a separator with nothing after: an error.
    assert!(parse(
        b"# TYPE a counter\na_created 1700000000 \n# EOF\n",
        ExpositionFormat::OpenMetrics
    )
    .is_err());
    let families = om(concat!(
        "# TYPE a counter\n# UNIT a seconds\n# HELP a A.\n",
        "a_total{x=\"1\"} 5 1700000000.5 # {trace_id=\"abc\"} 1.0 1700000000\n",
        "a_total{x=\"2\"} 6 # {} 1\n",
        "# EOF"
    ));
    assert_eq!(families.len(), 1);
    assert_eq!(families[0].samples.len(), 2);
    assert_eq!(families[0].samples[0].value, 5.0);
    let families = text("# TYPE b gauge\nb 1 1700000000000\n\n# a comment\nb{x=\"y\",} 2\n");
    assert_eq!(families[0].samples.len(), 2);
}

#[test]
fn counters_without_total_and_stray_samples() {
    let families = text("# TYPE c counter\nc 1\nstray_bucket{le=\"1\"} 2\n");
    assert_eq!(&*families[0].name, "c");
    assert_eq!(families[0].metric_type, MetricType::Unknown);
    assert_eq!(&*families[1].name, "stray_bucket");
    assert_eq!(families[1].metric_type, MetricType::Unknown);
    // `_total` alone is no counter with an empty name.
    let families = text("# TYPE _total counter\n_total 1\n");
    assert_eq!(&*families[0].name, "_total");
    assert_eq!(families[0].metric_type, MetricType::Unknown);
}

#[test]
fn malformed_bodies_are_errors() {
    for (body, format) in [
        (
            "# TYPE a counter\na_total 1\n",
            ExpositionFormat::OpenMetrics,
        ),
        ("a 1\n# EOF\nb 1\n", ExpositionFormat::OpenMetrics),
        ("a 1\n\n# EOF\n", ExpositionFormat::OpenMetrics),
        ("a{x=\"1\",x=\"2\"} 1\n", ExpositionFormat::Text),
        ("a{x=\"1\"} 1\na{x=\"1\"} 2\n", ExpositionFormat::Text),
        ("a 1\nb 1\na 2\n", ExpositionFormat::Text),
        ("a one\n", ExpositionFormat::Text),
        ("a{x=\"\\t\"} 1\n", ExpositionFormat::Text),
        ("a{x=\"1} 1\n", ExpositionFormat::Text),
        ("# TYPE a wrong\n", ExpositionFormat::Text),
        ("# TYPE a gauge\n# TYPE a gauge\n", ExpositionFormat::Text),
        ("# TYPE a info\n", ExpositionFormat::Text),
        ("a 1 # {x=\"1\"} 1\n", ExpositionFormat::Text),
        ("<html>", ExpositionFormat::Text),
        ("{a=\"1\"} 1\n", ExpositionFormat::Text),
        ("a\u{0} 1\n", ExpositionFormat::Text),
        ("a{__x=\"1\"} 1\n", ExpositionFormat::Text),
    ] {
        assert!(
            parse(body.as_bytes(), format).is_err(),
            "{body:?} parsed as {format:?}"
        );
    }
    let error = parse(b"a 1\n\xff\n", ExpositionFormat::Text).unwrap_err();
    assert_eq!(error.line, 2);
}

#[test]
fn values_parse_to_the_nearest_float() {
    let families = text("a 0.1\nb 1e3\nc +Inf\nd -inf\ne 9007199254740993\n");
    let values: Vec<f64> = families.iter().map(|f| f.samples[0].value).collect();
    assert_eq!(
        values,
        [
            0.1,
            1000.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            9007199254740992.0
        ]
    );
}

#[test]
fn content_types_name_the_format() {
    use ExpositionFormat::*;
    assert_eq!(
        ExpositionFormat::of_content_type(Some(
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        )),
        OpenMetrics
    );
    assert_eq!(
        ExpositionFormat::of_content_type(Some("text/plain; version=0.0.4")),
        Text
    );
    assert_eq!(ExpositionFormat::of_content_type(None), Text);
}
