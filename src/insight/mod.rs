//! vLLM at a glance: the curated set of numbers the status page charts and
//! `/api/v1/summary` serves, kept over the last minutes. Pure: no I/O.
//!
//! At every collection the server takes a [`Point`] of the merged families
//! (vLLM's own names, before the configuration renames them): per
//! `model_name`, the requests running and waiting (summed over engines), the
//! KV-cache usage (the mean over engines), and the totals of the counters and
//! histograms that rates and averages come from. [`History`] keeps the points
//! of the last [`HISTORY_SECONDS`] (at most one a second) and derives, between
//! consecutive points, the prompt and generation throughput (tokens/s), the
//! prefix-cache hit rate and the TTFT and TPOT averages (from the histograms'
//! `_sum` and `_count` deltas).
//!
//! **Reset-safe**: when a total went down between two points (a restarted
//! engine, a wiped directory), that interval is skipped: it contributes
//! neither to a rate's numerator nor to its duration, and a ratio of two
//! totals skips it when either went down. Nothing is ever negative. Values a
//! directory does not have are absent (`null` in JSON), so the page degrades
//! to its generic parts for a directory that is not vLLM's.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use crate::model::MetricFamily;

/// How long the history reaches back, in seconds.
pub const HISTORY_SECONDS: f64 = 15.0 * 60.0;

/// The least time between two points kept, in seconds.
pub const MIN_SPACING_SECONDS: f64 = 1.0;

/// The window of the summary's rates, in seconds.
pub const SUMMARY_WINDOW_SECONDS: f64 = 60.0;

/// The gauges and totals of one model at one collection.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// `vllm:num_requests_running`, summed over engines.
    pub requests_running: Option<f64>,
    /// `vllm:num_requests_waiting`, summed over engines.
    pub requests_waiting: Option<f64>,
    /// `vllm:kv_cache_usage_perc`, the mean over engines (0 to 1).
    pub kv_cache_usage: Option<f64>,
    /// `vllm:prompt_tokens_total`.
    pub prompt_tokens: Option<f64>,
    /// `vllm:generation_tokens_total`.
    pub generation_tokens: Option<f64>,
    /// `vllm:prefix_cache_hits_total`.
    pub prefix_cache_hits: Option<f64>,
    /// `vllm:prefix_cache_queries_total`.
    pub prefix_cache_queries: Option<f64>,
    /// `vllm:time_to_first_token_seconds_sum`.
    pub ttft_sum: Option<f64>,
    /// `vllm:time_to_first_token_seconds_count`.
    pub ttft_count: Option<f64>,
    /// `vllm:request_time_per_output_token_seconds_sum`.
    pub tpot_sum: Option<f64>,
    /// `vllm:request_time_per_output_token_seconds_count`.
    pub tpot_count: Option<f64>,
}

/// Every model's [`Totals`] at one time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Point {
    /// Unix time, seconds.
    pub at: f64,
    /// By `model_name` (`""` for samples without one), or, grouped
    /// ([`Point::grouped`]), by the [`group_key`] of the part's labels and
    /// `model_name`.
    pub models: BTreeMap<String, Totals>,
    /// Grouped: each key's labels (the part's and `model_name`).
    pub groups: BTreeMap<String, BTreeMap<String, String>>,
}

/// The key of a part's model when the numbers are grouped by part: the
/// labels (`group_by`'s the sample has, in that order, then `model_name`)
/// as Prometheus writes a label set, `namespace="ns",pod="p",model_name="m"`.
pub fn group_key(labels: &[(&str, &str)]) -> String {
    let mut key = String::new();
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            key.push(',');
        }
        key.push_str(name);
        key.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => key.push_str("\\\\"),
                '"' => key.push_str("\\\""),
                '\n' => key.push_str("\\n"),
                c => key.push(c),
            }
        }
        key.push('"');
    }
    key
}

impl Point {
    /// The curated numbers of `families` (merged, vLLM's names) at `at`.
    pub fn of(families: &[MetricFamily], at: f64) -> Point {
        Self::grouped(families, at, &[])
    }

    /// [`Point::of`], by part and model when `group_by` names the labels
    /// that tell the parts apart (each pod's own numbers, not their sum);
    /// by model alone when it is empty.
    pub fn grouped(families: &[MetricFamily], at: f64, group_by: &[Arc<str>]) -> Point {
        let mut groups: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut key_of = |labels: &crate::model::Labels| -> String {
            let model = labels.get("model_name").unwrap_or_default();
            if group_by.is_empty() {
                return model.to_string();
            }
            let mut pairs: Vec<(&str, &str)> = group_by
                .iter()
                .filter_map(|name| Some((&**name, labels.get(name)?)))
                .collect();
            pairs.push(("model_name", model));
            let key = group_key(&pairs);
            groups.entry(key.clone()).or_insert_with(|| {
                pairs
                    .iter()
                    .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                    .collect()
            });
            key
        };
        let mut models: BTreeMap<String, Totals> = BTreeMap::new();
        let mut kv: BTreeMap<String, (f64, usize)> = BTreeMap::new();
        for family in families {
            // Most families hold none of the samples wanted: skipped whole.
            if !may_hold_wanted(&family.name) {
                continue;
            }
            for sample in &family.samples {
                if KV_CACHE_USAGE.contains(&&*sample.name) {
                    let model = key_of(&sample.labels);
                    models.entry(model.clone()).or_default();
                    let entry = kv.entry(model).or_default();
                    entry.0 += sample.value;
                    entry.1 += 1;
                    continue;
                }
                let mut slots = slots_of(&sample.name).peekable();
                if slots.peek().is_none() {
                    continue;
                }
                let totals = models.entry(key_of(&sample.labels)).or_default();
                for slot in slots {
                    let field = slot(totals);
                    *field = Some(field.unwrap_or(0.0) + sample.value);
                }
            }
        }
        for (model, (sum, n)) in kv {
            if let Some(totals) = models.get_mut(&model) {
                totals.kv_cache_usage = Some(sum / n as f64);
            }
        }
        Point { at, models, groups }
    }
}

/// The KV-cache usage gauges (averaged over engines or ranks, not summed):
/// vLLM's, and SGLang's `sglang:token_usage` (the share of the KV-cache
/// pool's tokens in use).
const KV_CACHE_USAGE: [&str; 2] = ["vllm:kv_cache_usage_perc", "sglang:token_usage"];

/// The field of [`Totals`] each sample name adds to (the KV-cache gauge,
/// averaged, aside).
const SLOTS: [(&str, Field); 20] = [
    ("vllm:num_requests_running", |t| &mut t.requests_running),
    ("vllm:num_requests_waiting", |t| &mut t.requests_waiting),
    ("vllm:prompt_tokens_total", |t| &mut t.prompt_tokens),
    ("vllm:generation_tokens_total", |t| &mut t.generation_tokens),
    ("vllm:prefix_cache_hits_total", |t| &mut t.prefix_cache_hits),
    ("vllm:prefix_cache_queries_total", |t| {
        &mut t.prefix_cache_queries
    }),
    ("vllm:time_to_first_token_seconds_sum", |t| &mut t.ttft_sum),
    ("vllm:time_to_first_token_seconds_count", |t| {
        &mut t.ttft_count
    }),
    ("vllm:request_time_per_output_token_seconds_sum", |t| {
        &mut t.tpot_sum
    }),
    ("vllm:request_time_per_output_token_seconds_count", |t| {
        &mut t.tpot_count
    }),
    // SGLang's (`python/sglang/srt/observability/metrics_collector.py`,
    // 0.5.23): running and queued requests summed over scheduler ranks; the
    // prefix-cache hit rate as cached prompt tokens over prompt tokens (its
    // `sglang:cache_hit_rate` gauge is the scheduler's last batch only); the
    // inter-token latency stands for the time per output token.
    ("sglang:num_running_reqs", |t| &mut t.requests_running),
    ("sglang:num_queue_reqs", |t| &mut t.requests_waiting),
    ("sglang:prompt_tokens_total", |t| &mut t.prompt_tokens),
    ("sglang:prompt_tokens_total", |t| {
        &mut t.prefix_cache_queries
    }),
    ("sglang:generation_tokens_total", |t| {
        &mut t.generation_tokens
    }),
    ("sglang:cached_tokens_total", |t| &mut t.prefix_cache_hits),
    ("sglang:time_to_first_token_seconds_sum", |t| {
        &mut t.ttft_sum
    }),
    ("sglang:time_to_first_token_seconds_count", |t| {
        &mut t.ttft_count
    }),
    ("sglang:inter_token_latency_seconds_sum", |t| {
        &mut t.tpot_sum
    }),
    ("sglang:inter_token_latency_seconds_count", |t| {
        &mut t.tpot_count
    }),
];

/// A field of [`Totals`].
type Field = fn(&mut Totals) -> &mut Option<f64>;

/// The fields of [`Totals`] a sample adds to, by sample name.
fn slots_of(sample: &str) -> impl Iterator<Item = Field> + '_ {
    SLOTS
        .iter()
        .filter(move |(name, _)| *name == sample)
        .map(|(_, field)| *field)
}

/// Whether a family may hold a sample [`Point::of`] reads (a sample's name
/// starts with its family's).
fn may_hold_wanted(family: &str) -> bool {
    (family.starts_with("vllm:") || family.starts_with("sglang:"))
        && (KV_CACHE_USAGE.iter().any(|name| name.starts_with(family))
            || SLOTS.iter().any(|(name, _)| name.starts_with(family)))
}

/// What the status page charts for one model at one point, and what the
/// summary serves: gauges as they are, rates and averages over an interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Derived {
    /// Requests running, summed over engines.
    pub requests_running: Option<f64>,
    /// Requests waiting, summed over engines.
    pub requests_waiting: Option<f64>,
    /// KV-cache usage, the mean over engines (0 to 1).
    pub kv_cache_usage: Option<f64>,
    /// Prompt tokens per second.
    pub prompt_tokens_per_second: Option<f64>,
    /// Generation tokens per second.
    pub generation_tokens_per_second: Option<f64>,
    /// Prefix-cache hits over queries (0 to 1).
    pub prefix_cache_hit_rate: Option<f64>,
    /// Mean time to first token, seconds.
    pub ttft_seconds: Option<f64>,
    /// Mean time per output token, seconds.
    pub tpot_seconds: Option<f64>,
}

/// The increase of a total over the intervals, skipping those where it went
/// down; with the time those intervals took.
#[derive(Debug, Clone, Copy, Default)]
struct Increase {
    amount: f64,
    seconds: f64,
    seen: bool,
}

/// Sums, over consecutive pairs of `points`, the increase of `total` (and
/// the intervals' durations), skipping a pair where it went down.
fn increase(points: &[&Point], model: &str, total: impl Fn(&Totals) -> Option<f64>) -> Increase {
    let mut out = Increase::default();
    for pair in points.windows(2) {
        let at = |p: &Point| p.models.get(model).and_then(&total);
        if let (Some(before), Some(after)) = (at(pair[0]), at(pair[1])) {
            out.seen = true;
            if after >= before {
                out.amount += after - before;
                out.seconds += pair[1].at - pair[0].at;
            }
        }
    }
    out
}

/// The ratio of two totals' increases over the intervals where neither went
/// down; `None` when the denominator did not increase.
fn ratio(
    points: &[&Point],
    model: &str,
    numerator: impl Fn(&Totals) -> Option<f64>,
    denominator: impl Fn(&Totals) -> Option<f64>,
) -> Option<f64> {
    let (mut num, mut den) = (0.0, 0.0);
    for pair in points.windows(2) {
        let at = |p: &Point, f: &dyn Fn(&Totals) -> Option<f64>| p.models.get(model).and_then(f);
        let (Some(n0), Some(n1), Some(d0), Some(d1)) = (
            at(pair[0], &numerator),
            at(pair[1], &numerator),
            at(pair[0], &denominator),
            at(pair[1], &denominator),
        ) else {
            continue;
        };
        if n1 >= n0 && d1 >= d0 {
            num += n1 - n0;
            den += d1 - d0;
        }
    }
    (den > 0.0).then(|| num / den)
}

/// [`Derived`] for `model` over `points` (oldest first): gauges of the last
/// point, rates and averages over all of them.
fn derive(points: &[&Point], model: &str) -> Derived {
    let last = points.last().and_then(|p| p.models.get(model));
    let rate = |total: fn(&Totals) -> Option<f64>| {
        let inc = increase(points, model, total);
        (inc.seen && inc.seconds > 0.0).then(|| inc.amount / inc.seconds)
    };
    Derived {
        requests_running: last.and_then(|t| t.requests_running),
        requests_waiting: last.and_then(|t| t.requests_waiting),
        kv_cache_usage: last.and_then(|t| t.kv_cache_usage),
        prompt_tokens_per_second: rate(|t| t.prompt_tokens),
        generation_tokens_per_second: rate(|t| t.generation_tokens),
        prefix_cache_hit_rate: ratio(
            points,
            model,
            |t| t.prefix_cache_hits,
            |t| t.prefix_cache_queries,
        ),
        ttft_seconds: ratio(points, model, |t| t.ttft_sum, |t| t.ttft_count),
        tpot_seconds: ratio(points, model, |t| t.tpot_sum, |t| t.tpot_count),
    }
}

/// One point of the charts: every model's [`Derived`] numbers, rates over
/// the interval since the previous point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChartPoint {
    /// Unix time, seconds.
    pub at: f64,
    /// By model.
    pub models: BTreeMap<String, Derived>,
}

/// The summary: the numbers now (rates over the last
/// [`SUMMARY_WINDOW_SECONDS`]) and the chart points of the history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Unix time of the last point, seconds (`null` before the first).
    pub at: Option<f64>,
    /// The rate window, seconds.
    pub window_seconds: f64,
    /// By model.
    pub models: BTreeMap<String, Derived>,
    /// Oldest first.
    pub history: Vec<ChartPoint>,
    /// Grouped by part: each key of `models` with its labels (the part's
    /// and `model_name`); empty when the keys are the models' names.
    pub groups: BTreeMap<String, BTreeMap<String, String>>,
}

/// The points of the last [`HISTORY_SECONDS`], at most one a second.
#[derive(Debug, Clone, Default)]
pub struct History {
    points: VecDeque<Point>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `point` as the newest, and forgets points older than
    /// [`HISTORY_SECONDS`] before it. The previous newest point is dropped
    /// when it is less than [`MIN_SPACING_SECONDS`] after the one before it,
    /// so that points stay about a second apart however often collections
    /// run, and the newest is always the last collection's.
    pub fn record(&mut self, point: Point) {
        if self.points.len() > 1 {
            let before_last = &self.points[self.points.len() - 2];
            if point.at - before_last.at < MIN_SPACING_SECONDS {
                self.points.pop_back();
            }
        }
        while self
            .points
            .front()
            .is_some_and(|p| point.at - p.at > HISTORY_SECONDS)
        {
            self.points.pop_front();
        }
        self.points.push_back(point);
    }

    /// Points kept.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether no point is kept.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The summary of the history.
    pub fn summary(&self) -> Summary {
        let all: Vec<&Point> = self.points.iter().collect();
        let last_at = all.last().map(|p| p.at);
        let models: std::collections::BTreeSet<&String> =
            all.iter().flat_map(|p| p.models.keys()).collect();
        let window: Vec<&Point> = match last_at {
            Some(last) => {
                // From the last point at or before the window's start.
                let start = all
                    .iter()
                    .rposition(|p| last - p.at >= SUMMARY_WINDOW_SECONDS)
                    .unwrap_or(0);
                all[start..].to_vec()
            }
            None => Vec::new(),
        };
        let history = all
            .iter()
            .enumerate()
            .map(|(i, point)| {
                // Since the last point at least a second older (the newest
                // point may be closer to the one before it).
                let from = (0..i)
                    .rev()
                    .find(|&k| point.at - all[k].at >= MIN_SPACING_SECONDS)
                    .unwrap_or(i.saturating_sub(1));
                ChartPoint {
                    at: point.at,
                    models: point
                        .models
                        .keys()
                        .map(|m| (m.clone(), derive(&all[from..=i], m)))
                        .collect(),
                }
            })
            .collect();
        Summary {
            at: last_at,
            window_seconds: SUMMARY_WINDOW_SECONDS,
            groups: {
                let mut groups = BTreeMap::new();
                for (key, labels) in all.iter().rev().flat_map(|p| p.groups.iter()) {
                    if !groups.contains_key(key) {
                        groups.insert(key.clone(), labels.clone());
                    }
                }
                groups
            },
            models: models
                .into_iter()
                .map(|m| (m.clone(), derive(&window, m)))
                .collect(),
            history,
        }
    }
}

#[cfg(test)]
mod tests;
