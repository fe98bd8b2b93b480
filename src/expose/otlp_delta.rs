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
use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, HistogramDataPoint, Metric, NumberDataPoint,
};

use super::{series_key, DELTA, NO_RECORDED_VALUE};

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
    pub(super) runs: HashMap<String, Arc<Run>>,
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
        let mut next = HashMap::with_capacity(collected.runs.len());
        for resource in &mut request.resource_metrics {
            for scope in &mut resource.scope_metrics {
                scope
                    .metrics
                    .retain_mut(|Metric { name, data, .. }| match data {
                        Some(metric::Data::Sum(sum))
                            if sum.is_monotonic && sum.aggregation_temporality == DELTA =>
                        {
                            sum.data_points.retain_mut(|p| {
                                flagged(p.flags)
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
                                flagged(p.flags)
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
        Converted { request, next }
    }

    /// The receiver accepted `converted`: its values are the new bases (a
    /// series it did not hold is forgotten).
    pub fn accept(&mut self, converted: Converted) {
        self.accepted = converted.next;
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
