//! The catalogue the simulation and the benchmarks' fixture draw from: every
//! metric family vLLM 0.33.0 (with prometheus-fastapi-instrumentator) and
//! LMCache 0.5.6 define, as data extracted from their own code by
//! `scripts/vllm-catalogue.py` (`vllm-0.33.0-stat-logger.json`,
//! `lmcache-0.5.6-prometheus-logger.json` beside this file): name, type, help,
//! label names, histogram bounds, gauge multiprocess mode, whether the family
//! is written at start-up or only after traffic, and the label values seen.
//! The few behavioural constants the data cannot hold (how requests finish,
//! speculative acceptance, scheduler limits) follow it.
//!
//! `sglang-0.5.23-metrics-collector.json` beside them is SGLang 0.5.23's
//! families (name, type, help, label names, bounds, gauge mode, the collector
//! and so the process writing it), extracted from its source by
//! `scripts/sglang-catalogue.py`; `super::sglang` (`demo --demo.engine
//! sglang`) and the tests' SGLang-like server
//! (`tests/python/temporary_dir_server.py`) write them.

use std::collections::BTreeMap;
use std::io;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::format::writer::{Counter, Gauge, GaugeMode, Histogram, ProcessWriter, Summary};

/// A family's type, as prometheus_client names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FamilyType {
    /// `prometheus_client.Counter`.
    Counter,
    /// `prometheus_client.Gauge`.
    Gauge,
    /// `prometheus_client.Histogram`.
    Histogram,
    /// `prometheus_client.Summary`.
    Summary,
}

/// One metric family as the library defines it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyDef {
    /// The family name (a counter's without `_total`).
    pub name: String,
    /// Counter, gauge, histogram or summary.
    #[serde(rename = "type")]
    pub kind: FamilyType,
    /// The help text.
    pub help: String,
    /// Label names, in declaration order.
    pub labels: Vec<String>,
    /// Written to the multiprocess directory at start-up (it has a child then).
    pub written: bool,
    /// Written once the deployment served traffic (every start-up family is too).
    pub after_traffic: bool,
    /// Histogram upper bounds without `+Inf`; empty for the other types.
    #[serde(default)]
    pub buckets: Vec<f64>,
    /// A gauge's `multiprocess_mode` (`mostrecent`, `livesum`, ...).
    #[serde(default)]
    pub mode: Option<String>,
    /// The values each label took in the extraction run, in order of first
    /// appearance (only for families written after traffic).
    #[serde(default)]
    pub label_values: BTreeMap<String, Vec<String>>,
}

impl FamilyDef {
    /// A gauge's multiprocess mode (`mostrecent` if the data names none).
    pub fn gauge_mode(&self) -> GaugeMode {
        self.mode
            .as_deref()
            .and_then(GaugeMode::from_name)
            .unwrap_or(GaugeMode::MostRecent)
    }

    /// The values `label` took in the extraction run (empty if it took none).
    pub fn values_of(&self, label: &str) -> Vec<&str> {
        self.label_values
            .get(label)
            .map(|values| values.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

/// The families of one library, sorted by name.
#[derive(Debug)]
pub struct Catalogue {
    families: Vec<FamilyDef>,
}

impl Catalogue {
    fn parse(json: &str) -> Catalogue {
        let mut families: Vec<FamilyDef> = serde_json::from_str(json)
            .expect("the catalogue data is valid (a unit test checks it)");
        families.sort_by(|a, b| a.name.cmp(&b.name));
        Catalogue { families }
    }

    /// Every family, sorted by name.
    pub fn families(&self) -> &[FamilyDef] {
        &self.families
    }

    /// The family called `name` (a counter may be named with its `_total`).
    pub fn get(&self, name: &str) -> Option<&FamilyDef> {
        let find = |n: &str| {
            self.families
                .binary_search_by(|f| f.name.as_str().cmp(n))
                .ok()
                .map(|i| &self.families[i])
        };
        find(name).or_else(|| name.strip_suffix("_total").and_then(find))
    }
}

/// vLLM 0.33.0's families: `PrometheusStatLogger` for 2 engines with
/// speculative decoding, NIXL and CPU offloading, LoRA, watermarking and NaN
/// counting, plus the API server's own and the HTTP instrumentator's.
pub fn vllm() -> &'static Catalogue {
    static VLLM: OnceLock<Catalogue> = OnceLock::new();
    VLLM.get_or_init(|| Catalogue::parse(include_str!("vllm-0.33.0-stat-logger.json")))
}

/// LMCache 0.5.6's `PrometheusLogger` families for one worker.
pub fn lmcache() -> &'static Catalogue {
    static LMCACHE: OnceLock<Catalogue> = OnceLock::new();
    LMCACHE.get_or_init(|| Catalogue::parse(include_str!("lmcache-0.5.6-prometheus-logger.json")))
}

/// The family called `name` in either catalogue.
///
/// # Panics
/// Panics for a family neither library defines: the simulation writes only
/// real families, and its tests fail on a typo.
pub fn family(name: &str) -> &'static FamilyDef {
    vllm()
        .get(name)
        .or_else(|| lmcache().get(name))
        .unwrap_or_else(|| panic!("{name} is in neither vLLM's nor LMCache's catalogue"))
}

/// The help text of `family` (a counter may be named with its `_total`).
///
/// # Panics
/// Like [`family`].
pub fn help(name: &str) -> &'static str {
    &family(name).help
}

/// The histogram bounds (without `+Inf`) of `family`.
///
/// # Panics
/// Like [`family`].
pub fn buckets(name: &str) -> &'static [f64] {
    &family(name).buckets
}

/// The values `label` of `family` took in the extraction run.
///
/// # Panics
/// Like [`family`].
pub fn label_values(name: &str, label: &str) -> Vec<&'static str> {
    family(name).values_of(label)
}

/// `FinishReason` values and the share of requests finishing that way.
pub(super) const FINISH_REASONS: [(&str, f64); 5] = [
    ("stop", 0.78),
    ("length", 0.15),
    ("abort", 0.05),
    ("error", 0.01),
    ("repetition", 0.01),
];
/// Speculative decoding: `num_speculative_tokens` and the acceptance rate per position.
pub(super) const SPEC_ACCEPT: [f64; 3] = [0.78, 0.56, 0.39];
/// Requests one engine runs at most (`max_num_seqs`).
pub(super) const MAX_NUM_SEQS: u64 = 64;
/// KV-cache block size (tokens).
pub(super) const BLOCK_SIZE: u64 = 16;

/// `vllm.v1.metrics.loggers.build_1_2_5_buckets(max_value)`: the request-token
/// bucket sets follow `max_model_len` (the data holds them for 8192).
pub fn build_1_2_5_buckets(max_value: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut scale: u64 = 1;
    loop {
        for m in [1u64, 2, 5] {
            let Some(v) = m.checked_mul(scale) else {
                return out;
            };
            if v > max_value {
                return out;
            }
            out.push(v as f64);
        }
        let Some(next) = scale.checked_mul(10) else {
            return out;
        };
        scale = next;
    }
}

/// [`ProcessWriter`]'s constructors with the definition (help, buckets, gauge
/// mode) taken from the catalogue, so the simulation names only the family
/// and the label values.
pub trait CatalogueWriter {
    /// A counter child of `name` (with or without `_total`).
    fn known_counter(&mut self, name: &str, labels: &[(&str, &str)]) -> io::Result<Counter>;
    /// A gauge child of `name`, with the family's multiprocess mode.
    fn known_gauge(&mut self, name: &str, labels: &[(&str, &str)]) -> io::Result<Gauge>;
    /// A histogram child of `name`, with the family's bounds.
    fn known_histogram(&mut self, name: &str, labels: &[(&str, &str)]) -> io::Result<Histogram>;
    /// A histogram child of `name` with other bounds than the extraction's
    /// (the request-token families follow `max_model_len`).
    fn known_histogram_with(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        buckets: &[f64],
    ) -> io::Result<Histogram>;
    /// A summary child of `name`.
    fn known_summary(&mut self, name: &str, labels: &[(&str, &str)]) -> io::Result<Summary>;
}

impl CatalogueWriter for ProcessWriter {
    fn known_counter(&mut self, name: &str, labels: &[(&str, &str)]) -> io::Result<Counter> {
        self.counter(name, help(name), labels)
    }

    fn known_gauge(&mut self, name: &str, labels: &[(&str, &str)]) -> io::Result<Gauge> {
        let def = family(name);
        self.gauge(name, &def.help, labels, def.gauge_mode())
    }

    fn known_histogram(&mut self, name: &str, labels: &[(&str, &str)]) -> io::Result<Histogram> {
        self.histogram(name, help(name), labels, buckets(name))
    }

    fn known_histogram_with(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        buckets: &[f64],
    ) -> io::Result<Histogram> {
        self.histogram(name, help(name), labels, buckets)
    }

    fn known_summary(&mut self, name: &str, labels: &[(&str, &str)]) -> io::Result<Summary> {
        self.summary(name, help(name), labels)
    }
}
