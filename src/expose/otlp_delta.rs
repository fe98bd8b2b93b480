//! Delta temporality (`--push.otlp-temporality=delta`): a collection's
//! monotonic sums and histograms, mapped with their cumulative values
//! ([`Collected`]), become the change since the last values the receiver
//! accepted ([`Deltas`]), so that the change of a push that was dropped or
//! failed is carried into the next one that succeeds and the deltas
//! accepted always add up to the cumulative change since pushing started.
//! As the Collector's `cumulativetodelta` converts otherwise: NaN is
//! skipped; a series present at the first collection only sets the value
//! its deltas start from; a series born later, and a histogram after a
//! reset, is sent whole; a counter after a reset only sets the value; a
//! change of a histogram's buckets sends nothing and sets the value.
//! No I/O and no clock.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, HistogramDataPoint, Metric, NumberDataPoint,
};

use super::{series_key, DELTA, NO_RECORDED_VALUE};

/// The runs of the delta series by series key, shared by the collections
/// that hold the same runs (copied on write), with an estimate of its
/// memory.
#[derive(Debug, Clone, Default)]
pub(super) struct Runs(Arc<RunsMap>);

#[derive(Debug, Clone, Default)]
struct RunsMap {
    map: HashMap<String, Arc<Run>>,
    bytes: usize,
}

/// The estimated memory of one entry of [`Runs`] besides its key (the
/// map's slot, the `Arc`, the run and its initial point).
fn run_bytes(run: &Run) -> usize {
    160 + run
        .initial
        .as_ref()
        .map_or(0, |b| 8 * (b.buckets.len() + b.bounds.len()))
}

impl Runs {
    /// Notes `run` as the run of the series `key` (copying the map only
    /// when it changes and a queued collection shares it).
    pub(super) fn set(&mut self, key: &str, run: &Arc<Run>) {
        if self.0.map.get(key).is_some_and(|r| Arc::ptr_eq(r, run)) {
            return;
        }
        let map = Arc::make_mut(&mut self.0);
        let added = key.len() + run_bytes(run);
        if let Some(old) = map.map.insert(key.to_owned(), run.clone()) {
            map.bytes -= key.len() + run_bytes(&old);
        }
        map.bytes += added;
    }

    /// Forgets the run of the series `key` (it is gone).
    pub(super) fn remove(&mut self, key: &str) {
        if self.0.map.contains_key(key) {
            let map = Arc::make_mut(&mut self.0);
            if let Some(old) = map.map.remove(key) {
                map.bytes -= key.len() + run_bytes(&old);
            }
        }
    }

    fn get(&self, key: &str) -> Option<&Arc<Run>> {
        self.0.map.get(key)
    }
}

/// A [`Collected`] as it waits in a queue: its request's protobuf gzipped
/// (a fraction of the decoded request's memory), and its runs, shared with
/// the collections holding the same.
#[derive(Debug, Clone)]
pub struct Stored {
    body: Arc<[u8]>,
    runs: Runs,
}

impl Stored {
    /// The memory of its compressed request.
    pub fn body_bytes(&self) -> usize {
        self.body.len()
    }

    /// The estimated memory of its runs, and an identity of them: two
    /// stored collections with the same identity share their runs.
    pub fn runs_bytes(&self) -> (usize, *const ()) {
        (self.runs.0.bytes, Arc::as_ptr(&self.runs.0).cast())
    }

    /// The collection back, to be converted.
    pub fn load(&self) -> Result<Collected, String> {
        Ok(Collected {
            request: super::decode(&self.body)?,
            runs: self.runs.clone(),
        })
    }
}

/// One run of a delta series: from its start until a reset or its
/// disappearance.
#[derive(Debug, Clone)]
pub(super) struct Run {
    /// The start of its cumulative points.
    pub(super) start: u64,
    /// Whether its first value is sent whole (it started while the exporter
    /// watched).
    pub(super) whole: bool,
    /// Otherwise, its first point: the value its deltas start from.
    pub(super) initial: Option<Base>,
}

/// Whether a point is a vanished series' `NO_RECORDED_VALUE` (sent as it is).
fn flagged(flags: u32) -> bool {
    flags & NO_RECORDED_VALUE != 0
}

/// A cumulative point deltas are taken from.
#[derive(Debug, Clone)]
pub(super) struct Base {
    /// The start of its run.
    start: u64,
    /// When it was collected.
    time: u64,
    /// A sum's value or a histogram's count.
    value: f64,
    /// A histogram's sum.
    sum: f64,
    /// A histogram's per-bucket counts (empty for zero: a run sent whole).
    buckets: Vec<u64>,
    bounds: Vec<f64>,
}

impl Base {
    /// A sum's point.
    pub(super) fn number(start: u64, time: u64, value: f64) -> Self {
        Self {
            start,
            time,
            value,
            sum: 0.0,
            buckets: Vec::new(),
            bounds: Vec::new(),
        }
    }

    /// A histogram's point.
    pub(super) fn histogram(point: &HistogramDataPoint) -> Self {
        Self {
            start: point.start_time_unix_nano,
            time: point.time_unix_nano,
            value: point.count as f64,
            sum: point.sum.unwrap_or(f64::NAN),
            buckets: point.bucket_counts.clone(),
            bounds: point.explicit_bounds.clone(),
        }
    }

    /// Nothing, at a run's start: its whole value is the first delta.
    fn zero(start: u64) -> Self {
        Self::number(start, start, 0.0)
    }
}

/// One collection, mapped: the request as it is sent with cumulative
/// temporality; with delta temporality, its monotonic sums and histograms
/// (marked delta) still hold their cumulative values, and each series' run
/// is known, for [`Deltas::convert`].
#[derive(Debug, Clone)]
pub struct Collected {
    pub(super) request: ExportMetricsServiceRequest,
    pub(super) runs: Runs,
}

impl Collected {
    /// The request (sent as it is with cumulative temporality).
    pub fn request(&self) -> &ExportMetricsServiceRequest {
        &self.request
    }

    /// The request, for cumulative temporality.
    pub fn into_request(self) -> ExportMetricsServiceRequest {
        self.request
    }

    /// The collection as it waits in a queue (compressed).
    pub fn store(&self) -> Stored {
        Stored {
            body: super::encode(&self.request).into(),
            runs: self.runs.clone(),
        }
    }
}

/// What an OTLP destination's receiver accepted of the delta series: each
/// series' last cumulative point accepted. Owned by the destination's
/// sender, and changed only when the receiver accepts a request
/// ([`Deltas::accept`]; a partial success is an acceptance: the points it
/// rejected are not sent again).
#[derive(Debug, Default)]
pub struct Deltas {
    accepted: HashMap<String, Base>,
}

/// A collection converted to deltas, and what the receiver will have
/// accepted if it accepts it.
#[derive(Debug)]
pub struct Converted {
    request: ExportMetricsServiceRequest,
    next: HashMap<String, Base>,
}

impl Converted {
    /// The request to send.
    pub fn request(&self) -> &ExportMetricsServiceRequest {
        &self.request
    }
}

impl Deltas {
    /// The request for `collected`: its delta series as the change since
    /// the last accepted values (or the start of their run).
    pub fn convert(&self, collected: &Collected) -> Converted {
        let mut request = collected.request.clone();
        let mut next = HashMap::with_capacity(self.accepted.len());
        // Series whose end this collection tells (flagged NO_RECORDED_VALUE).
        let mut ended: HashSet<String> = HashSet::new();
        for resource in &mut request.resource_metrics {
            for scope in &mut resource.scope_metrics {
                scope
                    .metrics
                    .retain_mut(|Metric { name, data, .. }| match data {
                        Some(metric::Data::Sum(sum))
                            if sum.is_monotonic && sum.aggregation_temporality == DELTA =>
                        {
                            sum.data_points.retain_mut(|p| {
                                self.ended(name, p.flags, &p.attributes, &mut ended)
                                    .map(|start| {
                                        p.start_time_unix_nano =
                                            start.unwrap_or(p.start_time_unix_nano)
                                    })
                                    .is_some()
                                    || self.number(
                                        series_key(name, &p.attributes),
                                        p,
                                        collected,
                                        &mut next,
                                    )
                            });
                            !sum.data_points.is_empty()
                        }
                        Some(metric::Data::Histogram(h)) if h.aggregation_temporality == DELTA => {
                            h.data_points.retain_mut(|p| {
                                self.ended(name, p.flags, &p.attributes, &mut ended)
                                    .map(|start| {
                                        p.start_time_unix_nano =
                                            start.unwrap_or(p.start_time_unix_nano)
                                    })
                                    .is_some()
                                    || self.histogram(
                                        series_key(name, &p.attributes),
                                        p,
                                        collected,
                                        &mut next,
                                    )
                            });
                            !h.data_points.is_empty()
                        }
                        _ => true,
                    });
            }
        }
        // A series absent from the collection (its source failed to answer
        // in full) keeps its accepted value: its next point continues from
        // it. Only a series that ended is forgotten.
        for (key, base) in &self.accepted {
            if !next.contains_key(key) && !ended.contains(key) {
                next.insert(key.clone(), base.clone());
            }
        }
        Converted { request, next }
    }

    /// For a point flagged `NO_RECORDED_VALUE` (its series ended), the
    /// start it is sent with: the time of the series' last accepted point
    /// (`None` inside: none accepted, the point keeps its stream's
    /// start); `None` for another point.
    fn ended(
        &self,
        name: &str,
        flags: u32,
        attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue],
        ended: &mut HashSet<String>,
    ) -> Option<Option<u64>> {
        if !flagged(flags) {
            return None;
        }
        let key = series_key(name, attributes);
        let start = self.accepted.get(&key).map(|b| b.time);
        ended.insert(key);
        Some(start)
    }

    /// The receiver accepted `converted`: its values are the new bases (a
    /// series that ended is forgotten).
    pub fn accept(&mut self, converted: Converted) {
        self.accepted = converted.next;
    }

    /// What the receiver accepted once it accepted `converted`.
    pub fn accepted(converted: Converted) -> Self {
        Self {
            accepted: converted.next,
        }
    }

    /// The base of the series `key` whose point starts at `start`: the last
    /// accepted point of the same run, else the run's own start.
    fn base<'a>(
        &'a self,
        key: &str,
        start: u64,
        collected: &'a Collected,
    ) -> Option<Cow<'a, Base>> {
        if let Some(base) = self.accepted.get(key).filter(|b| b.start == start) {
            return Some(Cow::Borrowed(base));
        }
        let run = collected.runs.get(key).filter(|r| r.start == start)?;
        match &run.initial {
            Some(initial) => Some(Cow::Borrowed(initial)),
            None if run.whole => Some(Cow::Owned(Base::zero(start))),
            None => None,
        }
    }

    /// Converts a monotonic sum's point of the series `key`; whether it is
    /// sent.
    fn number(
        &self,
        key: String,
        point: &mut NumberDataPoint,
        collected: &Collected,
        next: &mut HashMap<String, Base>,
    ) -> bool {
        let value = match point.value {
            Some(number_data_point::Value::AsDouble(v)) => v,
            Some(number_data_point::Value::AsInt(v)) => v as f64,
            None => f64::NAN,
        };
        if value.is_nan() {
            if let Some(accepted) = self.accepted.get(&key) {
                next.insert(key, accepted.clone());
            }
            return false;
        }
        let start = point.start_time_unix_nano;
        let time = point.time_unix_nano;
        let sent = match self.base(&key, start, collected) {
            Some(base) if value >= base.value && base.time < time => {
                point.start_time_unix_nano = base.time;
                point.value = Some(number_data_point::Value::AsDouble(value - base.value));
                true
            }
            _ => false,
        };
        next.insert(key, Base::number(start, time, value));
        sent
    }

    /// Converts a histogram's point of the series `key`; whether it is sent.
    fn histogram(
        &self,
        key: String,
        point: &mut HistogramDataPoint,
        collected: &Collected,
        next: &mut HashMap<String, Base>,
    ) -> bool {
        let mut now = Base::histogram(point);
        let base = self.base(&key, point.start_time_unix_nano, collected);
        if now.sum.is_nan() {
            now.sum = base.as_ref().map_or(f64::NAN, |b| b.sum);
        }
        let sent = match base {
            Some(base)
                if now.value >= base.value
                    && base.time < point.time_unix_nano
                    && (base.buckets.is_empty()
                        || (base.buckets.len() == point.bucket_counts.len()
                            && base.bounds == point.explicit_bounds)) =>
            {
                point.count -= base.value as u64;
                point.sum = point
                    .sum
                    .map(|s| if s.is_nan() { 0.0 } else { s - base.sum });
                for (bucket, before) in point.bucket_counts.iter_mut().zip(&base.buckets) {
                    *bucket = bucket.saturating_sub(*before);
                }
                point.start_time_unix_nano = base.time;
                true
            }
            _ => false,
        };
        next.insert(key, now);
        sent
    }
}
