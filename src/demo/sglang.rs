//! A live, SGLang-like `PROMETHEUS_MULTIPROC_DIR` (`demo --demo.engine sglang`).
//!
//! [`SglangDemo`] simulates `python -m sglang.launch_server --enable-metrics`
//! with two scheduler ranks and the tokenizer manager, and writes every family
//! of SGLang 0.5.23's catalogue (`catalogue/sglang-0.5.23-metrics-collector.json`,
//! extracted from SGLang's source by `scripts/sglang-catalogue.py`) in the
//! process that writes it in SGLang: the `SchedulerMetricsCollector`'s in each
//! scheduler process (labels `model_name`, `engine_type`, `tp_rank`, `pp_rank`,
//! `moe_ep_rank`), the `TokenizerMetricsCollector`'s in the tokenizer manager.
//! Names, types, label names, bucket bounds and gauge modes are SGLang's; the
//! six histograms whose bounds SGLang computes at run time are not written.
//!
//! What the simulation keeps consistent: counters only increase; running and
//! queued requests move by small steps; token usage follows the running
//! requests within `[0, 1]`; cached prompt tokens never exceed prompt tokens;
//! every finished request adds one observation to the time-to-first-token
//! histogram. Deterministic for a seed, but for the `mostrecent` timestamps.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::catalogue::FamilyType;
use super::rng::Rng;
use crate::format::file_name::GaugeMode;
use crate::format::writer::{Counter, Gauge, Histogram, ProcessWriter, Summary};

/// One family of SGLang's catalogue, as `scripts/sglang-catalogue.py`
/// writes it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SglangFamily {
    /// The family name (a counter's without `_total`).
    pub name: String,
    /// Counter, gauge, histogram or summary.
    #[serde(rename = "type")]
    pub kind: FamilyType,
    /// The help text.
    pub help: String,
    /// Label names, in declaration order (`None`: computed at run time).
    pub labels: Option<Vec<String>>,
    /// The collector class defining it (which process writes it).
    pub collector: String,
    /// A histogram's bounds without `+Inf` (`None`: computed at run time).
    #[serde(default)]
    pub buckets: Option<Vec<f64>>,
    /// A gauge's `multiprocess_mode`.
    #[serde(default)]
    pub mode: Option<String>,
}

impl SglangFamily {
    /// Whether the demo writes it: its labels and bounds are known.
    pub fn written(&self) -> bool {
        self.labels.is_some() && (self.kind != FamilyType::Histogram || self.buckets.is_some())
    }
}

/// SGLang 0.5.23's families (scheduler and tokenizer manager), sorted by name.
pub fn catalogue() -> &'static [SglangFamily] {
    static SGLANG: OnceLock<Vec<SglangFamily>> = OnceLock::new();
    SGLANG.get_or_init(|| {
        serde_json::from_str(include_str!(
            "catalogue/sglang-0.5.23-metrics-collector.json"
        ))
        .expect("the SGLang catalogue is valid JSON")
    })
}

/// The collector of the scheduler processes.
const SCHEDULER: &str = "SchedulerMetricsCollector";
/// The collector of the tokenizer manager.
const TOKENIZER: &str = "TokenizerMetricsCollector";
/// The served model's name.
const MODEL: &str = "Qwen/Qwen3-0.6B";
/// Requests a scheduler rank runs at most.
const MAX_RUNNING: f64 = 64.0;

/// A metric handle of one family.
#[derive(Debug)]
enum Handle {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
    Summary(Summary),
}

/// One simulated process and the families it writes.
#[derive(Debug)]
struct Process {
    w: ProcessWriter,
    metrics: Vec<(&'static SglangFamily, Handle)>,
}

impl Process {
    /// The process `pid` writing `collector`'s families with `values` for
    /// their labels (`""` for any other label).
    fn new(
        dir: &PathBuf,
        pid: u64,
        collector: &str,
        values: &[(&str, String)],
    ) -> io::Result<Self> {
        let mut w = ProcessWriter::new(dir, pid);
        let mut metrics = Vec::new();
        for family in catalogue()
            .iter()
            .filter(|f| f.collector == collector && f.written())
        {
            let names = family.labels.as_deref().unwrap_or_default();
            let labels: Vec<(&str, &str)> = names
                .iter()
                .map(|n| {
                    let value = values.iter().find(|(k, _)| k == n).map_or("", |(_, v)| v);
                    (n.as_str(), value)
                })
                .collect();
            let (name, help) = (family.name.as_str(), family.help.as_str());
            let handle = match family.kind {
                FamilyType::Counter => Handle::Counter(w.counter(name, help, &labels)?),
                FamilyType::Gauge => {
                    let mode = family
                        .mode
                        .as_deref()
                        .and_then(GaugeMode::from_name)
                        .unwrap_or(GaugeMode::All);
                    Handle::Gauge(w.gauge(name, help, &labels, mode)?)
                }
                FamilyType::Histogram => {
                    let buckets = family.buckets.as_deref().unwrap_or_default();
                    Handle::Histogram(w.histogram(name, help, &labels, buckets)?)
                }
                FamilyType::Summary => Handle::Summary(w.summary(name, help, &labels)?),
            };
            metrics.push((family, handle));
        }
        Ok(Self { w, metrics })
    }
}

/// The simulated server.
#[derive(Debug)]
pub struct SglangDemo {
    schedulers: Vec<Process>,
    tokenizer: Process,
    rng: Rng,
    /// Running and queued requests of each rank.
    load: Vec<(f64, f64)>,
}

impl SglangDemo {
    /// A server of `ranks` scheduler ranks writing into `dir` (created if
    /// missing).
    pub fn new(dir: impl Into<PathBuf>, ranks: usize, seed: u64) -> io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        let mut rng = Rng(seed);
        let base = 1000 + rng.below(50_000) as u64;
        let common = |rank: usize| {
            vec![
                ("model_name", MODEL.to_owned()),
                ("engine_type", "unified".to_owned()),
                ("tp_rank", rank.to_string()),
                ("pp_rank", "0".to_owned()),
                ("moe_ep_rank", "0".to_owned()),
                ("is_streaming", "true".to_owned()),
            ]
        };
        let tokenizer = Process::new(&dir, base, TOKENIZER, &common(0))?;
        let schedulers = (0..ranks)
            .map(|rank| Process::new(&dir, base + 1 + rank as u64, SCHEDULER, &common(rank)))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Self {
            schedulers,
            tokenizer,
            rng,
            load: vec![(0.0, 0.0); ranks],
        })
    }

    /// One second of traffic.
    pub fn step(&mut self) -> io::Result<()> {
        let mut finished = 0.0;
        for (rank, process) in self.schedulers.iter_mut().enumerate() {
            let (running, queued) = &mut self.load[rank];
            *running = (*running + self.rng.uniform(-4.0, 5.0))
                .clamp(0.0, MAX_RUNNING)
                .round();
            *queued = (*queued + self.rng.uniform(-2.0, 2.0))
                .clamp(0.0, 20.0)
                .round();
            finished += (*running / 8.0).round();
            let (running, queued) = (*running, *queued);
            for (family, handle) in &process.metrics {
                let value = match family.name.as_str() {
                    "sglang:num_running_reqs" => running,
                    "sglang:num_queue_reqs" => queued,
                    "sglang:token_usage" | "sglang:full_token_usage" => running / MAX_RUNNING * 0.9,
                    "sglang:gen_throughput" => running * 30.0,
                    "sglang:cache_hit_rate" => self.rng.uniform(0.3, 0.6),
                    _ => self.rng.unit(),
                };
                write(&mut process.w, handle, family, value, &mut self.rng)?;
            }
        }
        for (family, handle) in &self.tokenizer.metrics {
            let prompt = finished * 500.0;
            let value = match family.name.as_str() {
                "sglang:prompt_tokens" => prompt,
                "sglang:cached_tokens" => (prompt * self.rng.uniform(0.2, 0.6)).round(),
                "sglang:generation_tokens" => finished * 120.0,
                "sglang:time_to_first_token_seconds" => self.rng.uniform(0.1, 1.5),
                "sglang:inter_token_latency_seconds" => self.rng.uniform(0.01, 0.05),
                "sglang:e2e_request_latency_seconds" => self.rng.uniform(1.0, 8.0),
                _ => self.rng.unit(),
            };
            write(&mut self.tokenizer.w, handle, family, value, &mut self.rng)?;
        }
        Ok(())
    }
}

/// Writes one step's `value` of a family: a counter adds it (whole units for
/// the families the simulation does not know), a gauge takes it, a histogram
/// or summary observes it.
fn write(
    w: &mut ProcessWriter,
    handle: &Handle,
    family: &SglangFamily,
    value: f64,
    rng: &mut Rng,
) -> io::Result<()> {
    match handle {
        Handle::Counter(c) => {
            let known = family.name.ends_with("_tokens");
            c.inc(w, if known { value } else { rng.below(3) as f64 })
        }
        Handle::Gauge(g) => g.set(w, value),
        Handle::Histogram(h) => {
            let buckets = family.buckets.as_deref().unwrap_or_default();
            let observed = if family.name.ends_with("_seconds") {
                value
            } else {
                // Other histograms (token counts, ...): within their bounds.
                let top = buckets.last().copied().unwrap_or(1.0);
                (value * top).round()
            };
            h.observe(w, observed)
        }
        Handle::Summary(s) => s.observe(w, value),
    }
}

/// Runs an [`SglangDemo`] of `ranks` scheduler ranks in `dir`, one step per
/// `tick`, until `stop` is set.
pub fn run_sglang_demo(
    dir: PathBuf,
    ranks: usize,
    tick: Duration,
    seed: u64,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut demo = SglangDemo::new(dir, ranks, seed)?;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        demo.step()?;
        while !stop.load(Ordering::Relaxed) && started.elapsed() < tick {
            std::thread::sleep(
                (tick - started.elapsed().min(tick)).min(Duration::from_millis(100)),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sglang_catalogue_holds_the_endpoint_pickers_families_as_sglang_defines_them() {
        let family = |name: &str| catalogue().iter().find(|f| f.name == name).unwrap();
        for name in [
            "sglang:num_queue_reqs",
            "sglang:num_running_reqs",
            "sglang:token_usage",
        ] {
            let f = family(name);
            assert_eq!(f.kind, FamilyType::Gauge, "{name}");
            assert_eq!(f.mode.as_deref(), Some("mostrecent"), "{name}");
            assert_eq!(f.collector, SCHEDULER, "{name}");
        }
        let ttft = family("sglang:time_to_first_token_seconds");
        assert_eq!(ttft.collector, TOKENIZER);
        assert_eq!(ttft.buckets.as_ref().unwrap().first(), Some(&0.1));
        assert_eq!(
            family("sglang:prompt_tokens").labels.as_deref().unwrap(),
            ["model_name", "engine_type", "is_streaming"]
        );
        assert_eq!(catalogue().iter().filter(|f| f.written()).count(), 119);
    }
}
