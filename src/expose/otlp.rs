//! Families → an OTLP `ExportMetricsServiceRequest` (protobuf, gzip), as
//! `--push.otlp-url` sends them, mapped as the OpenTelemetry Collector's
//! Prometheus receiver maps a scrape of `/metrics` (its `metricfamily.go`,
//! and the specification's "Prometheus and OpenMetrics Compatibility"), so
//! that switching from scraping to pushing changes nothing downstream.
//! No I/O and no clock: the times come in as arguments.
//!
//! * counter → cumulative monotonic `Sum` named as the sample (`<name>_total`:
//!   the receiver keeps the suffix), start time from `<name>_created` where
//!   served, else from [`StartTimes`];
//! * gauge and unknown → `Gauge`;
//! * histogram → cumulative explicit-bucket `Histogram` named as the family,
//!   the `le` bounds without `+Inf`, per-bucket (not cumulative) counts, the
//!   `_count` and `_sum`; a point with a NaN or decreasing bucket, or a
//!   `_count` below its last bucket, is dropped, as the receiver drops it;
//! * summary → `Summary` (quantiles sorted, `_count`, `_sum`), dropped
//!   without `_count`;
//! * info (`<name>_info`) and stateset → cumulative non-monotonic `Sum` named
//!   as the family (the receiver trims `_info`);
//! * gaugehistogram → dropped (the specification: "MUST be dropped").
//!
//! Every metric carries the `prometheus.type` metadata the receiver adds.
//! Attributes are the sample's labels without `le`/`quantile` and without
//! empty values. Names are kept as they are (`vllm:` included): a
//! receiver built on Prometheus 3 asks for OpenMetrics with
//! `escaping=allow-utf-8`, which `/metrics` answers with the names unchanged. NaN and ±Inf values are sent
//! as they are; a series that disappears gets one point flagged
//! `NO_RECORDED_VALUE`, as the receiver sends for Prometheus's staleness
//! marker.
//!
//! The messages are `opentelemetry-proto`'s, generated from the official
//! `.proto` files (prost only).

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, summary_data_point::ValueAtQuantile, AggregationTemporality,
    DataPointFlags, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::model::{MetricFamily, MetricType, Sample};

const CUMULATIVE: i32 = AggregationTemporality::Cumulative as i32;
const DELTA: i32 = AggregationTemporality::Delta as i32;
const NO_RECORDED_VALUE: u32 = DataPointFlags::NoRecordedValueMask as u32;

/// Start times of the cumulative series across collections, as OTLP's
/// data model says for an unknown start: `_created` where served; else a
/// series present at the first collection (or first seen before any
/// complete collection: [`collect_partial`]) has start = time on its first
/// point (it claims nothing before it was seen: a restart of the exporter
/// never puts a counter's whole value in one interval); a series born
/// later (first seen after a complete collection, or back after it was
/// absent from one) starts at the last complete collection's time (all of
/// its value was counted since then); later points keep that start until a
/// reset (a decrease of a monotonic sum or of a histogram's or summary's
/// count in a complete collection; a decrease of an info or stateset
/// series is a change, not a reset), whose point starts just after the
/// previous collection (1 ns after its time). A series missing from an incomplete collection is
/// not gone, and one that went down in it is missing a part (its point is
/// left out).
/// With [`Temporality::Delta`], monotonic sums and histograms are
/// collected with their cumulative values and each series' run (its start,
/// whether its first value is sent whole, else the value the deltas start
/// from), and [`Deltas`] converts them when they are sent, against what
/// the receiver accepted (docs/sources.md, "Push (OTLP)").
/// Remembers each series' last point to flag it `NO_RECORDED_VALUE` once
/// when it disappears.
#[derive(Debug)]
pub struct StartTimes {
    /// When pushing started (Unix nanoseconds): a series whose `_created`
    /// is later started while the exporter watched it.
    started: u64,
    temporality: Temporality,
    previous_time: u64,
    /// The time of the last complete collection, if any: a series first
    /// seen after it was born since (absent from it), while the exporter
    /// watched; a series first seen before any complete one may have been
    /// missing from the incomplete ones, and claims nothing before it.
    complete_time: Option<u64>,
    series: HashMap<String, Track>,
    /// The runs of the delta series, shared with the collections queued
    /// (copied on write: a collection with no new run shares the previous
    /// one's map).
    runs: Runs,
    /// Whether the collection being made is complete (every source
    /// answered in full): see [`collect_partial`].
    complete: bool,
}

/// How monotonic sums and histograms are sent (`--push.otlp-temporality`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Temporality {
    /// Their cumulative values (the Prometheus receiver's mapping).
    #[default]
    Cumulative,
    /// The change since the last values the receiver accepted, as the
    /// Collector's `cumulativetodelta` processor converts them (except
    /// that a dropped push's change is carried into the next one).
    Delta,
}

#[derive(Debug)]
struct Track {
    start: u64,
    last: f64,
    /// The last point, flagged and emptied, with its metric's frame.
    stale: Stale,
    seen: bool,
    /// Flagged `NO_RECORDED_VALUE` already (absent from the previous
    /// collection): if it comes back, it is born again.
    gone: bool,
    /// With delta temporality: the series' current run (shared with the
    /// collections queued).
    run: Option<Arc<Run>>,
}

/// Why a series' point has its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Present at the first collection: its value includes what came
    /// before pushing started.
    First,
    /// Born after the first collection (or back after an absence).
    Born,
    /// Its cumulative value went down.
    Reset,
    /// Its cumulative value went down in an incomplete collection: a part
    /// of it is missing; its point is left out.
    Partial,
    /// As at the previous collection.
    Same,
}

/// Vanished series remembered beyond the live ones before they are
/// forgotten (a series that comes back after that starts afresh).
const GONE_KEPT: usize = 10_000;

#[derive(Debug, Clone)]
struct Stale {
    name: String,
    description: String,
    prometheus_type: &'static str,
    point: StalePoint,
    /// Its metric's aggregation temporality (sums and histograms).
    temporality: i32,
}

#[derive(Debug, Clone)]
enum StalePoint {
    Gauge(NumberDataPoint),
    Sum(NumberDataPoint, bool),
    Histogram(HistogramDataPoint),
    Summary(SummaryDataPoint),
}

impl StartTimes {
    /// Start times of a push that started at `started` (Unix nanoseconds),
    /// sending monotonic sums and histograms with `temporality`.
    pub fn new(started: u64, temporality: Temporality) -> Self {
        Self {
            started,
            temporality,
            previous_time: started,
            complete_time: None,
            series: HashMap::new(),
            runs: Runs::default(),
            complete: true,
        }
    }

    /// The start of the series `key` whose cumulative value (a histogram's
    /// or summary's count) is `value` at `time`, and why; a decrease is a
    /// reset only when the series is `monotonic`.
    fn start(
        &mut self,
        key: &str,
        value: f64,
        time: u64,
        monotonic: bool,
        stale: impl FnOnce() -> Stale,
    ) -> (u64, Origin) {
        match self.series.get_mut(key) {
            Some(track) => {
                let origin = if track.gone {
                    Origin::Born
                } else if monotonic && value < track.last {
                    if !self.complete {
                        // A part of it is missing (a source that failed to
                        // answer in full): not a reset; the point is left
                        // out and the series keeps its state.
                        track.seen = true;
                        return (track.start, Origin::Partial);
                    }
                    Origin::Reset
                } else {
                    Origin::Same
                };
                match origin {
                    Origin::Born => track.start = self.complete_time.unwrap_or(self.previous_time),
                    // Just after the previous collection: a start of its
                    // own even when the old one was that collection's time
                    // (a series present at the first collection starts at
                    // its first point's time).
                    Origin::Reset => track.start = self.previous_time + 1,
                    _ => {}
                }
                track.last = value;
                track.seen = true;
                (track.start, origin)
            }
            None => {
                let (start, origin) = match self.complete_time {
                    Some(complete) => (complete, Origin::Born),
                    None => (time, Origin::First),
                };
                self.series.insert(
                    key.to_owned(),
                    Track {
                        start,
                        last: value,
                        stale: stale(),
                        seen: true,
                        gone: false,
                        run: None,
                    },
                );
                (start, origin)
            }
        }
    }

    /// Whether monotonic sums and histograms are sent as deltas.
    fn delta(&self) -> bool {
        self.temporality == Temporality::Delta
    }

    /// The aggregation temporality of monotonic sums and histograms.
    fn temporality(&self) -> i32 {
        match self.temporality {
            Temporality::Cumulative => CUMULATIVE,
            Temporality::Delta => DELTA,
        }
    }

    /// Whether a delta series' run that starts here is sent whole (its
    /// first value as its first delta), rather than only setting the value
    /// the deltas start from: when it started while the exporter watched
    /// (its `_created` is after pushing started; without one, it was born
    /// after the first collection). A reset (in multiprocess mode, a
    /// writer's files removed from a merged series), counters and
    /// histograms alike, and a series present at the first collection only
    /// set the value: a reset never re-sends the rest of the series' value
    /// (docs/sources.md, "A merged series losing a writer").
    fn whole(&self, origin: Origin, created: u64) -> bool {
        if created != 0 {
            return created >= self.started;
        }
        origin == Origin::Born
    }

    /// Notes the run of the delta series `key` whose point starts at
    /// `start`: a new run when the start changed (`whole`, or from `base`).
    fn run(&mut self, key: &str, start: u64, whole: bool, base: impl FnOnce() -> Base) {
        let Some(track) = self.series.get_mut(key) else {
            return;
        };
        if track.run.as_ref().map(|r| r.start) != Some(start) {
            track.run = Some(Arc::new(Run {
                start,
                whole,
                initial: (!whole).then(base),
            }));
        }
        if let Some(run) = &track.run {
            self.runs.set(key, run);
        }
    }

    /// Notes a series that has no start of its own (a gauge), for staleness.
    fn seen(&mut self, key: &str, stale: impl FnOnce() -> Stale) {
        match self.series.get_mut(key) {
            Some(track) => track.seen = true,
            None => {
                self.series.insert(
                    key.to_owned(),
                    Track {
                        start: 0,
                        last: f64::NAN,
                        stale: stale(),
                        seen: true,
                        gone: false,
                        run: None,
                    },
                );
            }
        }
    }

    /// The stale points of the series not seen since the last call (once
    /// per disappearance), at `time`.
    /// A series absent from an incomplete collection is not gone: it keeps
    /// its state (start, run), and its next point continues from it.
    fn finish(&mut self, time: u64) -> Vec<Stale> {
        let mut gone = Vec::new();
        let mut kept_gone = 0;
        // Missing series are kept within a bound, as vanished ones are: a
        // source that never answers in full (a pod always capped) cannot
        // make the state grow with every series that went away meanwhile.
        let missing = self.series.values().filter(|t| !t.seen && !t.gone).count();
        let keep_missing = !self.complete && missing <= GONE_KEPT + self.series.len() / 2;
        for (key, track) in self.series.iter_mut() {
            if std::mem::take(&mut track.seen) {
                track.gone = false;
            } else if keep_missing && !track.gone {
                // Missing, not gone: its source did not answer in full.
            } else if !track.gone {
                track.gone = true;
                track.run = None;
                self.runs.remove(key);
                let mut stale = track.stale.clone();
                // The stream's start (a cumulative point's; a delta point's
                // is the last accepted point's time, set when converted).
                match &mut stale.point {
                    StalePoint::Gauge(p) => p.time_unix_nano = time,
                    StalePoint::Sum(p, _) => {
                        p.time_unix_nano = time;
                        p.start_time_unix_nano = track.start.min(time);
                    }
                    StalePoint::Histogram(p) => {
                        p.time_unix_nano = time;
                        p.start_time_unix_nano = track.start.min(time);
                    }
                    StalePoint::Summary(p) => {
                        p.time_unix_nano = time;
                        p.start_time_unix_nano = track.start.min(time);
                    }
                }
                gone.push(stale);
            } else {
                kept_gone += 1;
            }
        }
        if kept_gone > GONE_KEPT + self.series.len() / 2 {
            self.series.retain(|_, track| !track.gone);
        }
        gone.sort_by(|a, b| a.name.cmp(&b.name));
        self.previous_time = time;
        if self.complete {
            self.complete_time = Some(time);
        }
        gone
    }
}

/// The request for `families` collected at `time` (Unix nanoseconds), with
/// `resource` as the resource's attributes (`--push.label`; `job` becomes
/// `service.name` and `instance` `service.instance.id`, as the receiver
/// names them). `starts` carries the start times from one collection to the
/// next. With delta temporality, the monotonic sums and histograms still
/// hold their cumulative values: [`collect`] and [`Deltas::convert`] make
/// the request sent.
pub fn export_request(
    families: &[MetricFamily],
    time: u64,
    resource: &[(String, String)],
    starts: &mut StartTimes,
) -> ExportMetricsServiceRequest {
    collect(families, time, resource, starts).request
}

/// The collection of `families` at `time`, as [`export_request`] maps it,
/// with the runs of its delta series.
pub fn collect(
    families: &[MetricFamily],
    time: u64,
    resource: &[(String, String)],
    starts: &mut StartTimes,
) -> Collected {
    collect_partial(families, time, resource, starts, true)
}

/// [`collect`], telling whether the collection is `complete`: when a
/// source failed to answer in full (an upstream's error or timeout, a file
/// that failed to read, a late, capped or budget-cut part), a series
/// absent from it is missing, not gone (no `NO_RECORDED_VALUE`; it keeps
/// its start, and with delta temporality its accepted value), and a
/// monotonic series that went down is missing a part: its point is left
/// out rather than taken for a reset.
pub fn collect_partial(
    families: &[MetricFamily],
    time: u64,
    resource: &[(String, String)],
    starts: &mut StartTimes,
    complete: bool,
) -> Collected {
    starts.complete = complete;
    let mut metrics = Vec::with_capacity(families.len());
    for family in families {
        map_family(family, time, starts, &mut metrics);
    }
    for stale in starts.finish(time) {
        let data = match stale.point {
            StalePoint::Gauge(p) => metric::Data::Gauge(Gauge {
                data_points: vec![p],
            }),
            StalePoint::Sum(p, is_monotonic) => metric::Data::Sum(Sum {
                data_points: vec![p],
                aggregation_temporality: stale.temporality,
                is_monotonic,
            }),
            StalePoint::Histogram(p) => metric::Data::Histogram(Histogram {
                data_points: vec![p],
                aggregation_temporality: stale.temporality,
            }),
            StalePoint::Summary(p) => metric::Data::Summary(Summary {
                data_points: vec![p],
            }),
        };
        metrics.push(frame(
            &stale.name,
            &stale.description,
            stale.prometheus_type,
            data,
        ));
    }
    let attributes = resource
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| {
            let key = match k.as_str() {
                "job" => "service.name",
                "instance" => "service.instance.id",
                other => other,
            };
            key_value(key, v)
        })
        .collect();
    let request = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "multiproc-exporter".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..Default::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    Collected {
        request,
        runs: starts.runs.clone(),
    }
}

/// The number of data points in `request` (what `multiproc_exporter_push_samples_*` count for OTLP).
pub fn data_points(request: &ExportMetricsServiceRequest) -> usize {
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            Some(metric::Data::Summary(s)) => s.data_points.len(),
            Some(metric::Data::ExponentialHistogram(h)) => h.data_points.len(),
            None => 0,
        })
        .sum()
}

/// The request's protobuf bytes compressed with gzip: the body of an
/// OTLP/HTTP POST with `Content-Encoding: gzip`.
pub fn encode(request: &ExportMetricsServiceRequest) -> Vec<u8> {
    let bytes = prost::Message::encode_to_vec(request);
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4 + 64),
        flate2::Compression::fast(),
    );
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&bytes);
    gz.finish().unwrap_or_default()
}

/// Decodes a body made by [`encode`] (tests and tools).
pub fn decode(body: &[u8]) -> Result<ExportMetricsServiceRequest, String> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(body), &mut bytes)
        .map_err(|e| format!("not gzip: {e}"))?;
    <ExportMetricsServiceRequest as prost::Message>::decode(&bytes[..])
        .map_err(|e| format!("not an ExportMetricsServiceRequest: {e}"))
}

/// A receiver's protobuf answer to a successful export: the points it
/// rejected (partial success) with its message, if any. An empty or
/// undecodable answer is a full success.
pub fn partial_success(answer: &[u8]) -> Option<(i64, String)> {
    let response = <ExportMetricsServiceResponse as prost::Message>::decode(answer).ok()?;
    let partial = response.partial_success?;
    (partial.rejected_data_points != 0 || !partial.error_message.is_empty())
        .then_some((partial.rejected_data_points, partial.error_message))
}

fn key_value(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

fn frame(name: &str, description: &str, prometheus_type: &str, data: metric::Data) -> Metric {
    Metric {
        name: name.to_owned(),
        description: description.to_owned(),
        unit: String::new(),
        metadata: vec![key_value("prometheus.type", prometheus_type)],
        data: Some(data),
    }
}

/// A sample's attributes: its labels without `skip` and empty values.
fn attributes(sample: &Sample, skip: &str) -> Vec<KeyValue> {
    sample
        .labels
        .iter()
        .filter(|(n, v)| !v.is_empty() && &**n != skip)
        .map(|(n, v)| key_value(n, v))
        .collect()
}

/// The identity of a series for [`StartTimes`].
fn series_key(name: &str, attributes: &[KeyValue]) -> String {
    let mut key = String::with_capacity(64);
    key.push_str(name);
    for kv in attributes {
        key.push('\u{0}');
        key.push_str(&kv.key);
        key.push('\u{1}');
        if let Some(any_value::Value::StringValue(v)) =
            kv.value.as_ref().and_then(|v| v.value.as_ref())
        {
            key.push_str(v);
        }
    }
    key
}

/// Seconds since the epoch (a `_created` value) → nanoseconds, 0 for none.
fn nanos(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1e9) as u64
    } else {
        0
    }
}

fn number_point(attributes: Vec<KeyValue>, start: u64, time: u64, value: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    }
}

fn map_family(family: &MetricFamily, time: u64, starts: &mut StartTimes, out: &mut Vec<Metric>) {
    let family_name = family.name.to_string();
    let help = &*family.help;
    match family.metric_type {
        MetricType::Gauge | MetricType::Unknown => {
            let prometheus_type = if family.metric_type == MetricType::Gauge {
                "gauge"
            } else {
                "unknown"
            };
            // One metric per sample name, in order of appearance.
            let mut by_name: Vec<(String, Vec<NumberDataPoint>)> = Vec::new();
            for sample in &family.samples {
                let name = sample.name.to_string();
                let attrs = attributes(sample, "");
                let key = series_key(&name, &attrs);
                let point = number_point(attrs, 0, time, sample.value);
                starts.seen(&key, || Stale {
                    name: name.clone(),
                    description: help.to_owned(),
                    prometheus_type,
                    point: StalePoint::Gauge(flagged_number(&point)),
                    temporality: CUMULATIVE,
                });
                match by_name.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, points)) => points.push(point),
                    None => by_name.push((name, vec![point])),
                }
            }
            for (name, data_points) in by_name {
                out.push(frame(
                    &name,
                    help,
                    prometheus_type,
                    metric::Data::Gauge(Gauge { data_points }),
                ));
            }
        }
        MetricType::Counter | MetricType::Info | MetricType::StateSet => {
            let (name, prometheus_type, is_monotonic, sample_name) = match family.metric_type {
                MetricType::Counter => (
                    format!("{family_name}_total"),
                    "counter",
                    true,
                    format!("{}_total", family.name),
                ),
                MetricType::Info => (
                    family_name.clone(),
                    "info",
                    false,
                    format!("{}_info", family.name),
                ),
                _ => (
                    family_name.clone(),
                    "stateset",
                    false,
                    family.name.to_string(),
                ),
            };
            let created_name = format!("{}_created", family.name);
            let created: HashMap<&crate::model::Labels, f64> = family
                .samples
                .iter()
                .filter(|s| *s.name == *created_name)
                .map(|s| (&s.labels, s.value))
                .collect();
            // Monotonic sums as deltas when asked; info and stateset stay
            // cumulative (non-monotonic sums are not converted).
            let delta = is_monotonic && starts.delta();
            let temporality = if delta {
                starts.temporality()
            } else {
                CUMULATIVE
            };
            let mut data_points = Vec::new();
            for sample in family.samples.iter().filter(|s| *s.name == *sample_name) {
                let attrs = attributes(sample, "");
                let key = series_key(&name, &attrs);
                let from_created = created.get(&sample.labels).map_or(0, |&c| nanos(c));
                let mut point = number_point(attrs, 0, time, sample.value);
                let (tracked, origin) =
                    starts.start(&key, sample.value, time, is_monotonic, || Stale {
                        name: name.clone(),
                        description: help.to_owned(),
                        prometheus_type,
                        point: StalePoint::Sum(flagged_number(&point), is_monotonic),
                        temporality,
                    });
                if origin == Origin::Partial {
                    continue;
                }
                let start = if from_created != 0 {
                    from_created
                } else {
                    tracked
                };
                point.start_time_unix_nano = start;
                if delta {
                    // Converted when sent (`Deltas`).
                    let whole = starts.whole(origin, from_created);
                    starts.run(&key, start, whole, || {
                        Base::number(start, time, sample.value)
                    });
                }
                data_points.push(point);
            }
            if !data_points.is_empty() {
                out.push(frame(
                    &name,
                    help,
                    prometheus_type,
                    metric::Data::Sum(Sum {
                        data_points,
                        aggregation_temporality: temporality,
                        is_monotonic,
                    }),
                ));
            }
        }
        MetricType::Histogram => {
            let data_points: Vec<HistogramDataPoint> = groups(family, "le", "_bucket")
                .into_iter()
                .filter_map(|g| histogram_point(&family_name, help, g, time, starts))
                .collect();
            if !data_points.is_empty() {
                out.push(frame(
                    &family_name,
                    help,
                    "histogram",
                    metric::Data::Histogram(Histogram {
                        data_points,
                        aggregation_temporality: starts.temporality(),
                    }),
                ));
            }
        }
        MetricType::Summary => {
            let data_points: Vec<SummaryDataPoint> = groups(family, "quantile", "")
                .into_iter()
                .filter_map(|g| summary_point(&family_name, help, g, time, starts))
                .collect();
            if !data_points.is_empty() {
                out.push(frame(
                    &family_name,
                    help,
                    "summary",
                    metric::Data::Summary(Summary { data_points }),
                ));
            }
        }
        // The specification drops them; prometheus_client's multiprocess
        // mode never writes one.
        MetricType::GaugeHistogram => {}
    }
}

fn flagged_number(point: &NumberDataPoint) -> NumberDataPoint {
    NumberDataPoint {
        attributes: point.attributes.clone(),
        flags: NO_RECORDED_VALUE,
        ..Default::default()
    }
}

/// The samples of one histogram or summary series (labels without the
/// boundary label).
#[derive(Default)]
struct Group<'a> {
    first: Option<&'a Sample>,
    /// (boundary, value)
    points: Vec<(f64, f64)>,
    count: Option<f64>,
    sum: Option<f64>,
    created: f64,
}

fn groups<'a>(family: &'a MetricFamily, boundary: &str, points_suffix: &str) -> Vec<Group<'a>> {
    let points_name = format!("{}{points_suffix}", family.name);
    let (count, sum, created) = (
        format!("{}_count", family.name),
        format!("{}_sum", family.name),
        format!("{}_created", family.name),
    );
    let mut groups: Vec<Group<'a>> = Vec::new();
    let mut index: HashMap<Vec<(&'a str, &'a str)>, usize> = HashMap::new();
    for sample in &family.samples {
        let key: Vec<(&str, &str)> = sample
            .labels
            .iter()
            .filter(|(n, _)| &**n != boundary)
            .map(|(n, v)| (&**n, &**v))
            .collect();
        let i = *index.entry(key).or_insert_with(|| {
            groups.push(Group {
                first: Some(sample),
                ..Default::default()
            });
            groups.len() - 1
        });
        let group = &mut groups[i];
        let name = &*sample.name;
        if name == count {
            group.count = Some(sample.value);
        } else if name == sum {
            group.sum = Some(sample.value);
        } else if name == created {
            group.created = sample.value;
        } else if name == points_name {
            // Go's ParseFloat and Rust's agree on "+Inf", "1e-05", "NaN".
            let Some(bound) = sample
                .labels
                .get(boundary)
                .and_then(|b| b.parse::<f64>().ok())
            else {
                continue;
            };
            group.points.push((bound, sample.value));
        }
    }
    groups
}

fn histogram_point(
    name: &str,
    help: &str,
    mut group: Group<'_>,
    time: u64,
    starts: &mut StartTimes,
) -> Option<HistogramDataPoint> {
    let count = group.count?;
    let first = group.first?;
    group.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    if group.points.last().is_some_and(|p| p.0 == f64::INFINITY) {
        group.points.pop();
    }
    let mut previous = 0.0;
    let mut bucket_counts = Vec::with_capacity(group.points.len() + 1);
    for &(_, value) in &group.points {
        if value.is_nan() || value < previous {
            return None;
        }
        bucket_counts.push((value - previous) as u64);
        previous = value;
    }
    if count.is_nan() || count < previous {
        return None;
    }
    bucket_counts.push((count - previous) as u64);
    let attrs = attributes(first, "le");
    let key = series_key(name, &attrs);
    let mut point = HistogramDataPoint {
        attributes: attrs,
        time_unix_nano: time,
        count: count as u64,
        sum: group.sum,
        bucket_counts,
        explicit_bounds: group.points.iter().map(|p| p.0).collect(),
        ..Default::default()
    };
    let temporality = starts.temporality();
    let (tracked, origin) = starts.start(&key, count, time, true, || Stale {
        name: name.to_owned(),
        description: help.to_owned(),
        prometheus_type: "histogram",
        point: StalePoint::Histogram(HistogramDataPoint {
            attributes: point.attributes.clone(),
            bucket_counts: vec![0; point.bucket_counts.len()],
            explicit_bounds: point.explicit_bounds.clone(),
            flags: NO_RECORDED_VALUE,
            ..Default::default()
        }),
        temporality,
    });
    if origin == Origin::Partial {
        return None;
    }
    let created = nanos(group.created);
    point.start_time_unix_nano = match created {
        0 => tracked,
        created => created,
    };
    if starts.delta() {
        // Converted when sent (`Deltas`).
        let whole = starts.whole(origin, created);
        let start = point.start_time_unix_nano;
        starts.run(&key, start, whole, || Base::histogram(&point));
    }
    Some(point)
}

fn summary_point(
    name: &str,
    help: &str,
    mut group: Group<'_>,
    time: u64,
    starts: &mut StartTimes,
) -> Option<SummaryDataPoint> {
    let count = group.count?;
    let first = group.first?;
    group.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let attrs = attributes(first, "quantile");
    let key = series_key(name, &attrs);
    let mut point = SummaryDataPoint {
        attributes: attrs,
        time_unix_nano: time,
        count: count as u64,
        sum: group.sum.unwrap_or(0.0),
        quantile_values: group
            .points
            .iter()
            .map(|&(quantile, value)| ValueAtQuantile { quantile, value })
            .collect(),
        ..Default::default()
    };
    let (tracked, origin) = starts.start(&key, count, time, true, || Stale {
        name: name.to_owned(),
        description: help.to_owned(),
        prometheus_type: "summary",
        point: StalePoint::Summary(SummaryDataPoint {
            attributes: point.attributes.clone(),
            quantile_values: point
                .quantile_values
                .iter()
                .map(|q| ValueAtQuantile {
                    quantile: q.quantile,
                    value: 0.0,
                })
                .collect(),
            flags: NO_RECORDED_VALUE,
            ..Default::default()
        }),
        temporality: CUMULATIVE,
    });
    if origin == Origin::Partial {
        return None;
    }
    point.start_time_unix_nano = match nanos(group.created) {
        0 => tracked,
        created => created,
    };
    Some(point)
}

#[path = "otlp_delta.rs"]
mod delta;
use delta::{Base, Run, Runs};
pub use delta::{Collected, Converted, Deltas, Stored};

#[cfg(test)]
#[path = "otlp_tests.rs"]
mod tests;
