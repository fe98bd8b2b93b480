//! A live, continuously changing vLLM-like `PROMETHEUS_MULTIPROC_DIR`.
//!
//! [`Demo`] simulates a vLLM deployment with several API-server processes (data-parallel
//! internal load balancing: every API server has children for every engine) and several GPU
//! worker processes running LMCache, and writes their metrics with [`crate::format::writer`] in the
//! exact `prometheus_client` 0.26.0 file format. The metric catalogue follows vLLM 0.33.0
//! (`vllm/v1/metrics/loggers.py`, spec decoding, MFU, the NIXL KV connector), the
//! prometheus-fastapi-instrumentator HTTP metrics and LMCache's `PrometheusLogger`: names,
//! types, labels, gauge multiprocess modes and bucket sets are the real ones.
//!
//! What the simulation keeps consistent:
//!
//! * counters only increase; a finished request adds to `vllm:request_success_total`,
//!   `vllm:prompt_tokens_total`, `vllm:generation_tokens_total` **and** one observation to
//!   every per-request histogram, in the API-server process that owns the request (so e.g.
//!   summed `vllm:prompt_tokens_total` equals summed `vllm:request_prompt_tokens_sum`);
//! * each engine step's scheduler stats go to exactly one API server, which sets the
//!   `mostrecent` gauges with the current timestamp (as vLLM does);
//!   `vllm:kv_cache_usage_perc` stays within `[0, 1]`;
//! * occasionally a worker process "restarts" under a new pid: its `gauge_live*` files are
//!   removed (`mark_process_dead`) and a fresh set of files appears, while its counter,
//!   histogram and `gauge_sum` files stay behind, as they do in real deployments.
//!
//! Everything is deterministic for a given seed; only the `mostrecent` timestamps come from the
//! wall clock, unless [`DemoConfig::start_time`] asks for a simulated clock.
//!
//! Drive it with [`run_demo`] from a thread (or `tokio::task::spawn_blocking`), or call
//! [`Demo::step`] yourself. A step writes a few hundred values with positioned writes.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::format::writer::{
    mark_process_dead, now_timestamp, Counter, Gauge, GaugeMode, Histogram, ProcessWriter, Summary,
};

/// Settings of a [`Demo`].
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// The multiprocess directory to write into (created if missing; existing files with the
    /// same names are continued, like a Python process with a recycled pid would).
    pub dir: PathBuf,
    /// Number of API-server processes (vLLM `--api-server-count`). Default 2.
    pub api_servers: usize,
    /// Number of GPU worker processes writing `lmcache:` metrics. Default 2.
    pub workers: usize,
    /// Number of data-parallel engines (the `engine` label values). Default 2.
    pub engines: usize,
    /// Time between steps in [`run_demo`]; also the simulated time a step represents. Default 1 s.
    pub tick: Duration,
    /// Seed of the pseudo-random generator. Default 0.
    pub seed: u64,
    /// The `model_name` label value. Default `meta-llama/Llama-3.1-8B-Instruct`.
    pub model_name: String,
    /// `max_model_len`, which decides the `request_tokens` bucket set. Default 8192.
    pub max_model_len: u64,
    /// Mean number of steps between restarts of each worker process; 0 disables restarts.
    /// Default 600.
    pub worker_restart_ticks: u64,
    /// If set, `mostrecent` timestamps come from a simulated clock that starts at this UNIX time
    /// and advances by `tick` per step, which makes the whole directory reproducible byte for
    /// byte. If `None` (the default), [`Demo::step`] uses the wall clock.
    pub start_time: Option<f64>,
}

impl DemoConfig {
    /// The default settings, writing into `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> DemoConfig {
        DemoConfig {
            dir: dir.into(),
            api_servers: 2,
            workers: 2,
            engines: 2,
            tick: Duration::from_secs(1),
            seed: 0,
            model_name: "meta-llama/Llama-3.1-8B-Instruct".to_owned(),
            max_model_len: 8192,
            worker_restart_ticks: 600,
            start_time: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Catalogue constants (vLLM 0.33.0, prometheus-fastapi-instrumentator 8.1.0, LMCache 0.5.x)
// ---------------------------------------------------------------------------------------------

/// `vllm/v1/metrics/buckets.py` `request_latency`.
pub const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// `time_to_first_token`.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// `inter_token_latency`.
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// `iteration_tokens`.
pub const ITERATION_TOKENS_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// `request_params_n`.
pub const PARAMS_N_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
/// `request_num_preemptions`.
pub const NUM_PREEMPTIONS_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];
/// `kv_cache_residency`.
pub const KV_RESIDENCY_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1200.0, 1800.0,
];
/// NIXL `vllm:nixl_post_time_seconds`; `vllm:nixl_xfer_time_seconds` uses `[1..]`.
const NIXL_TIME_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
];
/// NIXL `vllm:nixl_num_descriptors`.
const NIXL_DESCRIPTOR_BUCKETS: &[f64] = &[
    10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0, 4000.0, 10000.0, 20000.0,
    50000.0,
];
/// Instrumentator `http_request_duration_highr_seconds`.
const HTTP_HIGHR_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    7.5, 10.0, 30.0, 60.0,
];
/// Instrumentator `http_request_duration_seconds`.
const HTTP_LOWR_BUCKETS: &[f64] = &[0.1, 0.5, 1.0];
/// LMCache `time_to_retrieve` / `time_to_store`.
const LMCACHE_TIME_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// LMCache `retrieve_speed` / `store_speed`.
const LMCACHE_SPEED_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
    32768.0, 65536.0,
];

/// `FinishReason` values and the share of requests finishing that way.
const FINISH_REASONS: [(&str, f64); 5] = [
    ("stop", 0.78),
    ("length", 0.15),
    ("abort", 0.05),
    ("error", 0.01),
    ("repetition", 0.01),
];
const WAITING_REASONS: [&str; 2] = ["capacity", "deferred"];
const KV_FETCH_STAGES: [&str; 3] = ["waiting_to_start", "in_progress", "completed_waiting"];
const SLEEP_STATES: [&str; 3] = ["awake", "weights_offloaded", "discard_all"];
const PROMPT_SOURCES: [&str; 3] = ["local_compute", "local_cache_hit", "external_kv_transfer"];
const CACHED_SOURCES: [&str; 5] = ["device", "host", "p2p", "disk", "external_unspecified"];
const ADMISSION_REASONS: [&str; 2] = ["max_num_queued_reqs", "max_num_queued_tokens"];
/// Speculative decoding: `num_speculative_tokens` and the acceptance rate per position.
const SPEC_ACCEPT: [f64; 3] = [0.78, 0.56, 0.39];
/// Requests one engine runs at most (`max_num_seqs`).
const MAX_NUM_SEQS: u64 = 64;
/// KV-cache block size (tokens).
const BLOCK_SIZE: u64 = 16;

/// `vllm.v1.metrics.loggers.build_1_2_5_buckets(max_value)`.
fn build_1_2_5_buckets(max_value: u64) -> Vec<f64> {
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

/// LMCache's `[0.00001 * 2**i for i in range(20)]` (multiplying by a power of two is exact, so
/// these are the same doubles Python computes).
fn lmcache_lookup_buckets() -> Vec<f64> {
    (0..20).map(|i| 0.00001 * f64::from(1u32 << i)).collect()
}

/// NIXL `vllm:nixl_bytes_transferred`: `[2 ** (10 + i) for i in range(1, 25, 2)]`.
fn nixl_bytes_buckets() -> Vec<f64> {
    (1..25)
        .step_by(2)
        .map(|i| (1u64 << (10 + i)) as f64)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Pseudo-random numbers (splitmix64; no dependency)
// ---------------------------------------------------------------------------------------------

/// A small deterministic pseudo-random generator (SplitMix64), also used by
/// the benchmark fixtures.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (0 if `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    fn poisson(&mut self, lambda: f64) -> u64 {
        if lambda <= 0.0 {
            return 0;
        }
        if lambda > 30.0 {
            return (lambda + lambda.sqrt() * self.normal()).round().max(0.0) as u64;
        }
        let limit = (-lambda).exp();
        let mut k = 0;
        let mut p = self.unit();
        while p > limit {
            k += 1;
            p *= self.unit();
        }
        k
    }

    fn pick_weighted(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len().saturating_sub(1)
    }
}

// ---------------------------------------------------------------------------------------------
// API-server process: vLLM PrometheusStatLogger + frontend-local + HTTP instrumentator metrics
// ---------------------------------------------------------------------------------------------

/// Creates one child per engine with labels `model_name, engine` plus `extra`.
struct Maker<'a> {
    model: &'a str,
    engines: usize,
}

impl Maker<'_> {
    fn labels<'b>(
        &'b self,
        engine: &'b str,
        extra: &[(&'b str, &'b str)],
    ) -> Vec<(&'b str, &'b str)> {
        let mut l = vec![("model_name", self.model), ("engine", engine)];
        l.extend_from_slice(extra);
        l
    }

    fn counters(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        help: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<Vec<Counter>> {
        (0..self.engines)
            .map(|e| w.counter(name, help, &self.labels(&e.to_string(), extra)))
            .collect()
    }

    /// vLLM's `for value in values: for idx in engines: base.labels(model, idx, value)`.
    fn counters_by(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        help: &str,
        label: &str,
        values: &[&str],
    ) -> io::Result<Vec<Vec<Counter>>> {
        values
            .iter()
            .map(|v| self.counters(w, name, help, &[(label, v)]))
            .collect()
    }

    fn gauges(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        help: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<Vec<Gauge>> {
        (0..self.engines)
            .map(|e| {
                w.gauge(
                    name,
                    help,
                    &self.labels(&e.to_string(), extra),
                    GaugeMode::MostRecent,
                )
            })
            .collect()
    }

    fn gauges_by(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        help: &str,
        label: &str,
        values: &[&str],
    ) -> io::Result<Vec<Vec<Gauge>>> {
        values
            .iter()
            .map(|v| self.gauges(w, name, help, &[(label, v)]))
            .collect()
    }

    fn histograms(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        help: &str,
        buckets: &[f64],
    ) -> io::Result<Vec<Histogram>> {
        (0..self.engines)
            .map(|e| w.histogram(name, help, &self.labels(&e.to_string(), &[]), buckets))
            .collect()
    }
}

/// Per-engine metric children of one API server (`Vec`s are indexed by engine; `[value][engine]`
/// for the extra-label families, in vLLM's creation order).
struct EngineMetrics {
    running: Vec<Gauge>,
    waiting: Vec<Gauge>,
    waiting_by_reason: Vec<Vec<Gauge>>,
    kv_fetch_by_stage: Vec<Vec<Gauge>>,
    sleep_state: Vec<Vec<Gauge>>,
    kv_usage: Vec<Gauge>,
    prefix_queries: Vec<Counter>,
    prefix_hits: Vec<Counter>,
    external_queries: Vec<Counter>,
    external_hits: Vec<Counter>,
    preemptions: Vec<Counter>,
    prompt_tokens: Vec<Counter>,
    prompt_by_source: Vec<Vec<Counter>>,
    prompt_cached: Vec<Counter>,
    cached_by_source: Vec<Vec<Counter>>,
    generation_tokens: Vec<Counter>,
    success: Vec<Vec<Counter>>,
    admission: Vec<Counter>,
    h_prompt_tokens: Vec<Histogram>,
    h_generation_tokens: Vec<Histogram>,
    h_iteration_tokens: Vec<Histogram>,
    h_max_generation_tokens: Vec<Histogram>,
    h_params_n: Vec<Histogram>,
    h_params_max_tokens: Vec<Histogram>,
    h_ttft: Vec<Histogram>,
    h_itl: Vec<Histogram>,
    h_tpot: Vec<Histogram>,
    h_e2e: Vec<Histogram>,
    h_queue: Vec<Histogram>,
    h_inference: Vec<Histogram>,
    h_prefill: Vec<Histogram>,
    h_decode: Vec<Histogram>,
    h_num_preemptions: Vec<Histogram>,
    h_prefill_kv_computed: Vec<Histogram>,
    h_kv_lifetime: Vec<Histogram>,
    h_kv_idle: Vec<Histogram>,
    h_kv_reuse_gap: Vec<Histogram>,
    spec_drafts: Vec<Counter>,
    spec_draft_tokens: Vec<Counter>,
    spec_accepted: Vec<Counter>,
    spec_accepted_per_pos: Vec<Vec<Counter>>,
    mfu_flops: Vec<Counter>,
    mfu_read: Vec<Counter>,
    mfu_write: Vec<Counter>,
    nixl_xfer: Vec<Histogram>,
    nixl_post: Vec<Histogram>,
    nixl_bytes: Vec<Histogram>,
    nixl_descriptors: Vec<Histogram>,
    nixl_failed_transfers: Vec<Counter>,
    nixl_failed_notifications: Vec<Counter>,
    nixl_expired: Vec<Counter>,
    nixl_after_expiry: Vec<Counter>,
}

/// One request as the instrumentator sees it (`Info`).
struct HttpRequest {
    method: &'static str,
    status: &'static str,
    handler: &'static str,
    request_bytes: f64,
    response_bytes: f64,
    duration: f64,
}

/// HTTP metrics of prometheus-fastapi-instrumentator's `metrics.default()`; labelled children
/// are created lazily on first use, like `.labels(...)`.
struct HttpMetrics {
    highr: Histogram,
    requests: Vec<((&'static str, &'static str, &'static str), Counter)>,
    request_size: Vec<(&'static str, Summary)>,
    response_size: Vec<(&'static str, Summary)>,
    lowr: Vec<((&'static str, &'static str), Histogram)>,
}

const HTTP_TOTAL_HELP: &str = "Total number of requests by method, status and handler.";
const HTTP_REQ_SIZE_HELP: &str = "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ";
const HTTP_RESP_SIZE_HELP: &str = "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ";
const HTTP_HIGHR_HELP: &str =
    "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ";
const HTTP_LOWR_HELP: &str =
    "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ";

impl HttpMetrics {
    fn new(w: &mut ProcessWriter) -> io::Result<HttpMetrics> {
        Ok(HttpMetrics {
            highr: w.histogram(
                "http_request_duration_highr_seconds",
                HTTP_HIGHR_HELP,
                &[],
                HTTP_HIGHR_BUCKETS,
            )?,
            requests: Vec::new(),
            request_size: Vec::new(),
            response_size: Vec::new(),
            lowr: Vec::new(),
        })
    }

    /// The instrumentator's `instrumentation(info)` for one request.
    fn record(&mut self, w: &mut ProcessWriter, r: HttpRequest) -> io::Result<()> {
        let HttpRequest {
            method,
            status,
            handler,
            request_bytes,
            response_bytes,
            duration,
        } = r;
        let key = (method, status, handler);
        let total = match self.requests.iter().find(|(k, _)| *k == key) {
            Some((_, c)) => *c,
            None => {
                let c = w.counter(
                    "http_requests_total",
                    HTTP_TOTAL_HELP,
                    &[("method", method), ("status", status), ("handler", handler)],
                )?;
                self.requests.push((key, c));
                c
            }
        };
        total.inc(w, 1.0)?;
        let in_size = match self.request_size.iter().find(|(h, _)| *h == handler) {
            Some((_, s)) => *s,
            None => {
                let s = w.summary(
                    "http_request_size_bytes",
                    HTTP_REQ_SIZE_HELP,
                    &[("handler", handler)],
                )?;
                self.request_size.push((handler, s));
                s
            }
        };
        in_size.observe(w, request_bytes)?;
        let out_size = match self.response_size.iter().find(|(h, _)| *h == handler) {
            Some((_, s)) => *s,
            None => {
                let s = w.summary(
                    "http_response_size_bytes",
                    HTTP_RESP_SIZE_HELP,
                    &[("handler", handler)],
                )?;
                self.response_size.push((handler, s));
                s
            }
        };
        out_size.observe(w, response_bytes)?;
        self.highr.observe(w, duration)?;
        let lkey = (method, handler);
        let idx = match self.lowr.iter().position(|(k, _)| *k == lkey) {
            Some(i) => i,
            None => {
                let h = w.histogram(
                    "http_request_duration_seconds",
                    HTTP_LOWR_HELP,
                    &[("method", method), ("handler", handler)],
                    HTTP_LOWR_BUCKETS,
                )?;
                self.lowr.push((lkey, h));
                self.lowr.len() - 1
            }
        };
        self.lowr[idx].1.observe(w, duration)
    }
}

struct ApiServer {
    w: ProcessWriter,
    m: EngineMetrics,
    http: HttpMetrics,
    ws_active: Gauge,
    ws_total: Counter,
}

impl ApiServer {
    fn new(cfg: &DemoConfig, pid: u64, now: f64) -> io::Result<ApiServer> {
        let mut w = ProcessWriter::new(&cfg.dir, pid);
        // Module-level metrics created at import time
        // (vllm/entrypoints/speech_to_text/realtime/metrics.py).
        let ws_active = w.gauge(
            "vllm:websocket_connections_active",
            "Number of active WebSocket connections.",
            &[],
            GaugeMode::LiveSum,
        )?;
        let ws_total = w.counter(
            "vllm:websocket_connections_total",
            "Total number of WebSocket connections.",
            &[],
        )?;

        let mk = Maker {
            model: &cfg.model_name,
            engines: cfg.engines,
        };
        let request_tokens = build_1_2_5_buckets(cfg.max_model_len);
        let ww = &mut w;
        let m = EngineMetrics {
            running: mk.gauges(ww, "vllm:num_requests_running", "Number of requests in model execution batches.", &[])?,
            waiting: mk.gauges(ww, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", &[])?,
            waiting_by_reason: mk.gauges_by(
                ww,
                "vllm:num_requests_waiting_by_reason",
                "Number of requests waiting to be processed, by reason.",
                "reason",
                &WAITING_REASONS,
            )?,
            kv_fetch_by_stage: mk.gauges_by(
                ww,
                "vllm:num_requests_kv_fetch_by_stage",
                "Number of requests fetching KV cache from a remote instance, by stage.",
                "stage",
                &KV_FETCH_STAGES,
            )?,
            sleep_state: mk.gauges_by(
                ww,
                "vllm:engine_sleep_state",
                "Engine sleep state; 1 for the current state, 0 otherwise.",
                "sleep_state",
                &SLEEP_STATES,
            )?,
            kv_usage: mk.gauges(ww, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", &[])?,
            prefix_queries: mk.counters(
                ww,
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                &[],
            )?,
            prefix_hits: mk.counters(ww, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", &[])?,
            external_queries: mk.counters(
                ww,
                "vllm:external_prefix_cache_queries",
                "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
                &[],
            )?,
            external_hits: mk.counters(
                ww,
                "vllm:external_prefix_cache_hits",
                "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
                &[],
            )?,
            preemptions: mk.counters(ww, "vllm:num_preemptions", "Cumulative number of preemption from the engine.", &[])?,
            prompt_tokens: mk.counters(ww, "vllm:prompt_tokens", "Number of prefill tokens processed.", &[])?,
            prompt_by_source: mk.counters_by(
                ww,
                "vllm:prompt_tokens_by_source",
                "Number of prompt tokens by source.",
                "source",
                &PROMPT_SOURCES,
            )?,
            prompt_cached: mk.counters(ww, "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", &[])?,
            cached_by_source: mk.counters_by(
                ww,
                "vllm:prompt_tokens_cached_by_source",
                "Number of cached prompt tokens by cache hit source.",
                "source",
                &CACHED_SOURCES,
            )?,
            generation_tokens: mk.counters(ww, "vllm:generation_tokens", "Number of generation tokens processed.", &[])?,
            success: mk.counters_by(
                ww,
                "vllm:request_success",
                "Count of successfully processed requests.",
                "finished_reason",
                &FINISH_REASONS.map(|(r, _)| r),
            )?,
            admission: ADMISSION_REASONS
                .iter()
                .map(|r| {
                    ww.counter(
                        "vllm:admission_rejections",
                        "Number of requests rejected at admission, by reason.",
                        &[("model_name", mk.model), ("reason", r)],
                    )
                })
                .collect::<io::Result<_>>()?,
            h_prompt_tokens: mk.histograms(ww, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", &request_tokens)?,
            h_generation_tokens: mk.histograms(
                ww,
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                &request_tokens,
            )?,
            h_iteration_tokens: mk.histograms(
                ww,
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                ITERATION_TOKENS_BUCKETS,
            )?,
            h_max_generation_tokens: mk.histograms(
                ww,
                "vllm:request_max_num_generation_tokens",
                "Histogram of maximum number of requested generation tokens.",
                &request_tokens,
            )?,
            h_params_n: mk.histograms(ww, "vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS)?,
            h_params_max_tokens: mk.histograms(
                ww,
                "vllm:request_params_max_tokens",
                "Histogram of the max_tokens request parameter.",
                &request_tokens,
            )?,
            h_ttft: mk.histograms(ww, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS)?,
            h_itl: mk.histograms(ww, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS)?,
            h_tpot: mk.histograms(
                ww,
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                ITL_BUCKETS,
            )?,
            h_e2e: mk.histograms(
                ww,
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_queue: mk.histograms(
                ww,
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_inference: mk.histograms(
                ww,
                "vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_prefill: mk.histograms(
                ww,
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_decode: mk.histograms(
                ww,
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_num_preemptions: mk.histograms(
                ww,
                "vllm:request_num_preemptions",
                "Number of preemptions per request.",
                NUM_PREEMPTIONS_BUCKETS,
            )?,
            h_prefill_kv_computed: mk.histograms(
                ww,
                "vllm:request_prefill_kv_computed_tokens",
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                &request_tokens,
            )?,
            h_kv_lifetime: mk.histograms(
                ww,
                "vllm:kv_block_lifetime_seconds",
                "KV cache block lifetime from allocation to eviction. Sampled metrics (controlled by --kv-cache-metrics-sample).",
                KV_RESIDENCY_BUCKETS,
            )?,
            h_kv_idle: mk.histograms(
                ww,
                "vllm:kv_block_idle_before_evict_seconds",
                "Idle time before KV cache block eviction. Sampled metrics (controlled by --kv-cache-metrics-sample).",
                KV_RESIDENCY_BUCKETS,
            )?,
            h_kv_reuse_gap: mk.histograms(
                ww,
                "vllm:kv_block_reuse_gap_seconds",
                "Time gaps between consecutive KV cache block accesses. Sampled metrics (controlled by --kv-cache-metrics-sample).",
                KV_RESIDENCY_BUCKETS,
            )?,
            spec_drafts: mk.counters(ww, "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", &[])?,
            spec_draft_tokens: mk.counters(ww, "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", &[])?,
            spec_accepted: mk.counters(ww, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", &[])?,
            spec_accepted_per_pos: (0..SPEC_ACCEPT.len())
                .map(|p| {
                    mk.counters(
                        ww,
                        "vllm:spec_decode_num_accepted_tokens_per_pos",
                        "Accepted tokens per draft position.",
                        &[("position", &p.to_string())],
                    )
                })
                .collect::<io::Result<_>>()?,
            mfu_flops: mk.counters(
                ww,
                "vllm:estimated_flops_per_gpu_total",
                "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).",
                &[],
            )?,
            mfu_read: mk.counters(
                ww,
                "vllm:estimated_read_bytes_per_gpu_total",
                "Estimated number of bytes read from memory per GPU (for Model Bandwidth Utilization calculations).",
                &[],
            )?,
            mfu_write: mk.counters(
                ww,
                "vllm:estimated_write_bytes_per_gpu_total",
                "Estimated number of bytes written to memory per GPU (for Model Bandwidth Utilization calculations).",
                &[],
            )?,
            nixl_xfer: mk.histograms(
                ww,
                "vllm:nixl_xfer_time_seconds",
                "Histogram of transfer duration for NIXL KV Cache transfers.",
                &NIXL_TIME_BUCKETS[1..],
            )?,
            nixl_post: mk.histograms(
                ww,
                "vllm:nixl_post_time_seconds",
                "Histogram of transfer post time for NIXL KV Cache transfers.",
                NIXL_TIME_BUCKETS,
            )?,
            nixl_bytes: mk.histograms(
                ww,
                "vllm:nixl_bytes_transferred",
                "Histogram of bytes transferred per NIXL KV Cache transfers.",
                &nixl_bytes_buckets(),
            )?,
            nixl_descriptors: mk.histograms(
                ww,
                "vllm:nixl_num_descriptors",
                "Histogram of number of descriptors per NIXL  KV Cache transfers.",
                NIXL_DESCRIPTOR_BUCKETS,
            )?,
            nixl_failed_transfers: mk.counters(ww, "vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers.", &[])?,
            nixl_failed_notifications: mk.counters(
                ww,
                "vllm:nixl_num_failed_notifications",
                "Number of failed NIXL KV Cache notifications.",
                &[],
            )?,
            nixl_expired: mk.counters(
                ww,
                "vllm:nixl_num_kv_expired_reqs",
                "Number of requests that had their KV expire. NOTE: This metric is tracked on the P instance.",
                &[],
            )?,
            nixl_after_expiry: mk.counters(
                ww,
                "vllm:nixl_num_notifications_after_expiry",
                "Number of notifications received for requests whose KV had already expired.",
                &[],
            )?,
        };

        // log_engine_initialized(): the CacheConfig info gauge (labels: every CacheConfig
        // field as str(), plus engine; no model_name), and the initial sleep state.
        for e in 0..cfg.engines {
            let engine = e.to_string();
            let info = w.gauge(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                &[
                    ("block_size", "16"),
                    ("cache_dtype", "auto"),
                    ("calculate_kv_scales", "False"),
                    ("cpu_offload_gb", "0"),
                    ("enable_prefix_caching", "True"),
                    ("engine", &engine),
                    ("gpu_memory_utilization", "0.9"),
                    ("is_attention_free", "False"),
                    ("kv_sharing_fast_prefill", "False"),
                    ("mamba_cache_dtype", "auto"),
                    ("num_cpu_blocks", "None"),
                    ("num_gpu_blocks", "27616"),
                    ("num_gpu_blocks_override", "None"),
                    ("prefix_caching_hash_algo", "sha256"),
                    ("sliding_window", "None"),
                    ("swap_space", "4"),
                ],
                GaugeMode::MostRecent,
            )?;
            info.set_at(&mut w, 1.0, now)?;
            for (s, state) in m.sleep_state.iter().enumerate() {
                state[e].set_at(&mut w, if s == 0 { 1.0 } else { 0.0 }, now)?;
            }
        }

        let http = HttpMetrics::new(&mut w)?;
        Ok(ApiServer {
            w,
            m,
            http,
            ws_active,
            ws_total,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// GPU worker process: LMCache PrometheusLogger
// ---------------------------------------------------------------------------------------------

struct Worker {
    w: ProcessWriter,
    id: usize,
    retrieve_requests: Counter,
    store_requests: Counter,
    lookup_requests: Counter,
    requested_tokens: Counter,
    hit_tokens: Counter,
    stored_tokens: Counter,
    lookup_tokens: Counter,
    lookup_hits: Counter,
    vllm_hit_tokens: Counter,
    prompt_tokens: Counter,
    evict_count: Counter,
    evict_keys_count: Counter,
    lookup_0_hit: Counter,
    retrieve_hit_rate: Gauge,
    lookup_hit_rate: Gauge,
    local_cache_usage: Gauge,
    remote_cache_usage: Gauge,
    local_storage_usage: Gauge,
    active_objs: Gauge,
    pinned_objs: Gauge,
    time_to_retrieve: Histogram,
    time_to_store: Histogram,
    time_to_lookup: Histogram,
    retrieve_speed: Histogram,
    store_speed: Histogram,
    /// Simulated local CPU cache occupancy (bytes).
    cache_bytes: f64,
}

/// LMCache's local CPU cache size in the simulation (bytes).
const LMCACHE_CPU_CAPACITY: f64 = 20e9;
/// Bytes of KV cache per token (Llama-3.1-8B, bf16).
const KV_BYTES_PER_TOKEN: f64 = 131_072.0;

impl Worker {
    fn new(cfg: &DemoConfig, id: usize, pid: u64) -> io::Result<Worker> {
        let mut w = ProcessWriter::new(&cfg.dir, pid);
        let wid = id.to_string();
        let labels: [(&str, &str); 4] = [
            ("model_name", &cfg.model_name),
            ("worker_id", &wid),
            ("role", "worker"),
            ("served_model_name", &cfg.model_name),
        ];
        let l = &labels[..];
        let ww = &mut w;
        let mut c = |name: &str, help: &str| ww.counter(name, help, l);
        let retrieve_requests = c(
            "lmcache:num_retrieve_requests",
            "Total number of retrieve requests sent to lmcache",
        )?;
        let store_requests = c(
            "lmcache:num_store_requests",
            "Total number of store requests sent to lmcache",
        )?;
        let lookup_requests = c(
            "lmcache:num_lookup_requests",
            "Total number of lookup requests sent to lmcache",
        )?;
        let requested_tokens = c(
            "lmcache:num_requested_tokens",
            "Total number of tokens requested from lmcache",
        )?;
        let hit_tokens = c(
            "lmcache:num_hit_tokens",
            "Total number of tokens hit in lmcache",
        )?;
        let stored_tokens = c(
            "lmcache:num_stored_tokens",
            "Total number of tokens stored in lmcache including evicted ones",
        )?;
        let lookup_tokens = c(
            "lmcache:num_lookup_tokens",
            "Total number of tokens requested in lookup from lmcache",
        )?;
        let lookup_hits = c(
            "lmcache:num_lookup_hits",
            "Total number of tokens hit in lookup from lmcache",
        )?;
        let vllm_hit_tokens = c(
            "lmcache:num_vllm_hit_tokens",
            "Number of hit tokens in vllm",
        )?;
        let prompt_tokens = c(
            "lmcache:num_prompt_tokens",
            "Number of prompt tokens in lmcache",
        )?;
        let evict_count = c(
            "lmcache:local_cpu_evict_count",
            "Total number of evict in local cpu backend",
        )?;
        let evict_keys_count = c(
            "lmcache:local_cpu_evict_keys_count",
            "Total number of evict keys in local cpu backend",
        )?;
        let lookup_0_hit = c(
            "lmcache:lookup_0_hit_requests",
            "Total number of 0 hit lookup requests",
        )?;
        let mut g = |name: &str, help: &str, mode: GaugeMode| w.gauge(name, help, l, mode);
        let retrieve_hit_rate = g(
            "lmcache:retrieve_hit_rate",
            "Hit rate of lmcache retrieve requests since last log",
            GaugeMode::LiveMostRecent,
        )?;
        let lookup_hit_rate = g(
            "lmcache:lookup_hit_rate",
            "Hit rate of lmcache lookup requests since last log",
            GaugeMode::LiveMostRecent,
        )?;
        let local_cache_usage = g(
            "lmcache:local_cache_usage",
            "Local cache usage (bytes) of lmcache",
            GaugeMode::Sum,
        )?;
        let remote_cache_usage = g(
            "lmcache:remote_cache_usage",
            "Remote cache usage (bytes) of lmcache",
            GaugeMode::Sum,
        )?;
        let local_storage_usage = g(
            "lmcache:local_storage_usage",
            "Local storage usage (bytes) of lmcache",
            GaugeMode::Sum,
        )?;
        let active_objs = g(
            "lmcache:active_memory_objs_count",
            "The number of active memory objects",
            GaugeMode::Sum,
        )?;
        let pinned_objs = g(
            "lmcache:pinned_memory_objs_count",
            "The number of pinned memory objects",
            GaugeMode::Sum,
        )?;
        let mut h = |name: &str, help: &str, b: &[f64]| w.histogram(name, help, l, b);
        let time_to_retrieve = h(
            "lmcache:time_to_retrieve",
            "Time to retrieve from lmcache (seconds)",
            LMCACHE_TIME_BUCKETS,
        )?;
        let time_to_store = h(
            "lmcache:time_to_store",
            "Time to store to lmcache (seconds)",
            LMCACHE_TIME_BUCKETS,
        )?;
        let time_to_lookup = h(
            "lmcache:time_to_lookup",
            "Time to lookup in lmcache (seconds)",
            &lmcache_lookup_buckets(),
        )?;
        let retrieve_speed = h(
            "lmcache:retrieve_speed",
            "Retrieve speed of lmcache (tokens per second)",
            LMCACHE_SPEED_BUCKETS,
        )?;
        let store_speed = h(
            "lmcache:store_speed",
            "Store speed of lmcache (tokens per second)",
            LMCACHE_SPEED_BUCKETS,
        )?;
        Ok(Worker {
            w,
            id,
            retrieve_requests,
            store_requests,
            lookup_requests,
            requested_tokens,
            hit_tokens,
            stored_tokens,
            lookup_tokens,
            lookup_hits,
            vllm_hit_tokens,
            prompt_tokens,
            evict_count,
            evict_keys_count,
            lookup_0_hit,
            retrieve_hit_rate,
            lookup_hit_rate,
            local_cache_usage,
            remote_cache_usage,
            local_storage_usage,
            active_objs,
            pinned_objs,
            time_to_retrieve,
            time_to_store,
            time_to_lookup,
            retrieve_speed,
            store_speed,
            cache_bytes: 0.0,
        })
    }

    /// One LMCache stats push (LMCache logs aggregated stats periodically).
    fn step(&mut self, rng: &mut Rng, now: f64, dt: f64, load: f64) -> io::Result<()> {
        let w = &mut self.w;
        let lookups = rng.poisson(load * dt);
        let mut lookup_tokens = 0.0;
        let mut hit_tokens = 0.0;
        let mut zero_hit = 0.0;
        let mut retrieves = 0.0;
        for i in 0..lookups {
            let tokens = (rng.lognormal(700.0, 0.9).clamp(16.0, 32768.0) / 256.0).ceil() * 256.0;
            let frac = if rng.chance(0.3) {
                0.0
            } else {
                (rng.uniform(0.2, 1.0) * 4.0).floor() / 4.0
            };
            let hit = (tokens * frac / 256.0).floor() * 256.0;
            lookup_tokens += tokens;
            hit_tokens += hit;
            if hit == 0.0 {
                zero_hit += 1.0;
            } else {
                retrieves += 1.0;
                if i < 4 {
                    let t = rng.lognormal(0.004 + hit / 400_000.0, 0.4);
                    self.time_to_retrieve.observe(w, t)?;
                    self.retrieve_speed.observe(w, hit / t)?;
                }
            }
            if i < 4 {
                self.time_to_lookup.observe(w, rng.lognormal(0.0004, 0.7))?;
            }
        }
        self.lookup_requests.inc(w, lookups as f64)?;
        self.lookup_tokens.inc(w, lookup_tokens)?;
        self.lookup_hits.inc(w, hit_tokens)?;
        self.lookup_0_hit.inc(w, zero_hit)?;
        self.retrieve_requests.inc(w, retrieves)?;
        self.requested_tokens.inc(w, lookup_tokens)?;
        self.hit_tokens.inc(w, hit_tokens)?;
        self.vllm_hit_tokens
            .inc(w, (hit_tokens * rng.uniform(0.0, 0.3)).floor())?;
        self.prompt_tokens.inc(w, lookup_tokens)?;

        let stores = rng.poisson(load * dt * 0.7);
        let mut stored = 0.0;
        for i in 0..stores {
            let tokens = (rng.lognormal(600.0, 0.8).clamp(256.0, 32768.0) / 256.0).floor() * 256.0;
            stored += tokens;
            if i < 4 {
                let t = rng.lognormal(0.003 + tokens / 500_000.0, 0.4);
                self.time_to_store.observe(w, t)?;
                self.store_speed.observe(w, tokens / t)?;
            }
        }
        self.store_requests.inc(w, stores as f64)?;
        self.stored_tokens.inc(w, stored)?;
        self.cache_bytes += stored * KV_BYTES_PER_TOKEN;
        if self.cache_bytes > LMCACHE_CPU_CAPACITY {
            let evict_bytes = self.cache_bytes - 0.9 * LMCACHE_CPU_CAPACITY;
            let keys = (evict_bytes / (256.0 * KV_BYTES_PER_TOKEN)).ceil();
            self.evict_count.inc(w, 1.0)?;
            self.evict_keys_count.inc(w, keys)?;
            self.cache_bytes -= evict_bytes;
        }

        if lookup_tokens > 0.0 {
            let rate = hit_tokens / lookup_tokens;
            self.retrieve_hit_rate.set_at(w, rate, now)?;
            self.lookup_hit_rate.set_at(w, rate, now)?;
        }
        self.local_cache_usage.set(w, self.cache_bytes.floor())?;
        self.remote_cache_usage.set(w, 0.0)?;
        self.local_storage_usage.set(w, 0.0)?;
        let objs = (self.cache_bytes / (256.0 * KV_BYTES_PER_TOKEN)).floor();
        self.active_objs.set(w, objs)?;
        self.pinned_objs.set(w, rng.below(8) as f64)?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The simulation
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct EngineState {
    running: u64,
    waiting: u64,
    kv_usage: f64,
    phase: f64,
}

/// A running vLLM-like simulation writing a multiprocess directory.
pub struct Demo {
    cfg: DemoConfig,
    rng: Rng,
    api: Vec<ApiServer>,
    workers: Vec<Worker>,
    engines: Vec<EngineState>,
    ticks: u64,
    next_pid: u64,
}

impl std::fmt::Debug for Demo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Demo")
            .field("cfg", &self.cfg)
            .field("ticks", &self.ticks)
            .field("pids", &self.pids())
            .finish()
    }
}

impl Demo {
    /// Creates the directory if needed and "starts" the processes: every API server creates
    /// its vLLM, frontend and HTTP metrics (records with zero values, the cache-config info
    /// gauge and the initial sleep state), and every worker its LMCache metrics.
    pub fn new(cfg: DemoConfig) -> io::Result<Demo> {
        if cfg.api_servers == 0 || cfg.engines == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the demo needs at least one API server and one engine",
            ));
        }
        std::fs::create_dir_all(&cfg.dir)?;
        let mut rng = Rng(cfg.seed ^ 0x005e_ed0f_d3e0);
        let mut next_pid = 1000 + rng.below(50_000) as u64;
        let now = cfg.start_time.unwrap_or_else(now_timestamp);
        let mut api = Vec::with_capacity(cfg.api_servers);
        for _ in 0..cfg.api_servers {
            api.push(ApiServer::new(&cfg, next_pid, now)?);
            next_pid += 1;
        }
        // Engine cores and their workers start after the API servers.
        next_pid += 3 + cfg.engines as u64;
        let mut workers = Vec::with_capacity(cfg.workers);
        for i in 0..cfg.workers {
            workers.push(Worker::new(&cfg, i, next_pid)?);
            next_pid += 2;
        }
        let engines = (0..cfg.engines)
            .map(|_| EngineState {
                running: 0,
                waiting: 0,
                kv_usage: 0.0,
                phase: rng.uniform(0.0, std::f64::consts::TAU),
            })
            .collect();
        Ok(Demo {
            cfg,
            rng,
            api,
            workers,
            engines,
            ticks: 0,
            next_pid,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DemoConfig {
        &self.cfg
    }

    /// Number of steps taken so far.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// The pids of the live processes: API servers first, then workers.
    pub fn pids(&self) -> Vec<String> {
        self.api
            .iter()
            .map(|a| a.w.pid().to_owned())
            .chain(self.workers.iter().map(|w| w.w.pid().to_owned()))
            .collect()
    }

    /// Advances the simulation by one tick. `mostrecent` timestamps are the wall clock, or the
    /// simulated clock if [`DemoConfig::start_time`] is set.
    pub fn step(&mut self) -> io::Result<()> {
        let now = match self.cfg.start_time {
            Some(t0) => t0 + (self.ticks + 1) as f64 * self.cfg.tick.as_secs_f64(),
            None => now_timestamp(),
        };
        self.step_at(now)
    }

    /// Advances the simulation by one tick, using `now` (UNIX seconds) as the timestamp of the
    /// `mostrecent` gauges written in this step.
    pub fn step_at(&mut self, now: f64) -> io::Result<()> {
        self.ticks += 1;
        let dt = self.cfg.tick.as_secs_f64().clamp(1e-3, 3600.0);
        self.maybe_restart_workers()?;
        let mut total_admitted = 0.0;
        for e in 0..self.engines.len() {
            total_admitted += self.step_engine(e, now, dt)?;
        }
        self.step_frontend_misc(dt)?;
        let per_worker_load = 1.0 + total_admitted / dt / self.workers.len().max(1) as f64;
        for wk in &mut self.workers {
            wk.step(&mut self.rng, now, dt, per_worker_load)?;
        }
        Ok(())
    }

    fn maybe_restart_workers(&mut self) -> io::Result<()> {
        if self.cfg.worker_restart_ticks == 0 {
            return Ok(());
        }
        let p = 1.0 / self.cfg.worker_restart_ticks as f64;
        for i in 0..self.workers.len() {
            if self.rng.chance(p) {
                let old_pid = self.workers[i].w.pid().to_owned();
                // The dead process's live gauges go away (mark_process_dead); everything else
                // stays, as in a real directory that nobody wipes.
                mark_process_dead(&self.cfg.dir, &old_pid)?;
                self.next_pid += 1 + self.rng.below(40) as u64;
                let id = self.workers[i].id;
                self.workers[i] = Worker::new(&self.cfg, id, self.next_pid)?;
            }
        }
        Ok(())
    }

    /// One engine's tick: queueing model, scheduler stats to one API server, finished requests
    /// to their owning API servers. Returns the number of requests admitted.
    fn step_engine(&mut self, e: usize, now: f64, dt: f64) -> io::Result<f64> {
        let rng = &mut self.rng;
        let st = &mut self.engines[e];
        // Load varies over a ~5 minute cycle.
        let cycle = (self.ticks as f64 * dt / 300.0) * std::f64::consts::TAU + st.phase;
        let rate = (4.0 * (1.0 + 0.8 * cycle.sin()) * rng.lognormal(1.0, 0.15)).max(0.05);
        let arrivals = rng.poisson(rate * dt);
        let finished = rng.poisson(st.running as f64 * dt / 9.0).min(st.running);
        let after_finish = st.running - finished;
        let kv_room = if st.kv_usage > 0.92 {
            0
        } else {
            MAX_NUM_SEQS - after_finish
        };
        let admitted = (st.waiting + arrivals).min(kv_room);
        let preempted = if st.kv_usage > 0.9 {
            rng.poisson(0.8 * dt).min(after_finish + admitted)
        } else {
            0
        };
        st.running = after_finish + admitted - preempted;
        st.waiting = st.waiting + arrivals + preempted - admitted;
        let target = st.running as f64 / MAX_NUM_SEQS as f64 * 0.97;
        st.kv_usage = (0.6 * st.kv_usage + 0.4 * target + 0.015 * rng.normal()).clamp(0.0, 1.0);
        let (running, waiting, kv_usage) = (st.running, st.waiting, st.kv_usage);

        // Scheduler stats of this step go to exactly one API server.
        let sched = rng.below(self.api.len());
        let deferred = if waiting > 0 && rng.chance(0.2) { 1 } else { 0 };
        {
            let a = &mut self.api[sched];
            let (w, m) = (&mut a.w, &a.m);
            m.running[e].set_at(w, running as f64, now)?;
            m.waiting[e].set_at(w, waiting as f64, now)?;
            m.waiting_by_reason[0][e].set_at(w, (waiting - deferred) as f64, now)?;
            m.waiting_by_reason[1][e].set_at(w, deferred as f64, now)?;
            let fetching = rng.below(3) as f64;
            m.kv_fetch_by_stage[0][e].set_at(w, rng.below(2) as f64, now)?;
            m.kv_fetch_by_stage[1][e].set_at(w, fetching, now)?;
            m.kv_fetch_by_stage[2][e].set_at(w, 0.0, now)?;
            m.kv_usage[e].set_at(w, kv_usage, now)?;

            // Prefix cache over the admitted prompts.
            let mut queried = 0.0;
            let mut hits = 0.0;
            for _ in 0..admitted {
                let p = rng
                    .lognormal(650.0, 0.9)
                    .clamp(1.0, self.cfg.max_model_len as f64 / 2.0)
                    .round();
                queried += p;
                hits += (p * rng.uniform(0.0, 0.7) / BLOCK_SIZE as f64).floor() * BLOCK_SIZE as f64;
            }
            m.prefix_queries[e].inc(w, queried)?;
            m.prefix_hits[e].inc(w, hits)?;
            let ext_q = (queried - hits).max(0.0);
            m.external_queries[e].inc(w, ext_q)?;
            m.external_hits[e].inc(w, (ext_q * rng.uniform(0.0, 0.3) / 256.0).floor() * 256.0)?;
            m.preemptions[e].inc(w, preempted as f64)?;
            if waiting > 200 && rng.chance(0.5) {
                m.admission[rng.below(ADMISSION_REASONS.len())].inc(w, 1.0)?;
            }

            // A few engine iterations: tokens per step.
            let decode_tokens = running as f64;
            for _ in 0..3 {
                let prefill_chunk = if admitted > 0 {
                    rng.uniform(0.0, 2048.0).floor()
                } else {
                    0.0
                };
                m.h_iteration_tokens[e].observe(w, (decode_tokens + prefill_chunk).max(1.0))?;
            }

            // Speculative decoding (3 speculative tokens).
            let drafts = rng.poisson(running as f64 * dt * 6.0);
            m.spec_drafts[e].inc(w, drafts as f64)?;
            m.spec_draft_tokens[e].inc(w, (drafts * SPEC_ACCEPT.len() as u64) as f64)?;
            let mut accepted = 0.0;
            for (pos, rate) in SPEC_ACCEPT.iter().enumerate() {
                let acc = (drafts as f64 * rate * rng.uniform(0.9, 1.1))
                    .floor()
                    .min(drafts as f64);
                accepted += acc;
                m.spec_accepted_per_pos[pos][e].inc(w, acc)?;
            }
            m.spec_accepted[e].inc(w, accepted)?;

            // MFU estimates for an 8B model.
            let step_tokens = decode_tokens * dt * 40.0 + queried;
            m.mfu_flops[e].inc(w, step_tokens * 2.0 * 8.03e9)?;
            m.mfu_read[e].inc(w, (dt * 40.0).floor() * 16.06e9)?;
            m.mfu_write[e].inc(w, step_tokens * KV_BYTES_PER_TOKEN)?;

            // KV block residency (sampled).
            for _ in 0..rng.poisson(2.0) {
                m.h_kv_lifetime[e].observe(w, rng.lognormal(25.0, 1.2))?;
                m.h_kv_idle[e].observe(w, rng.lognormal(6.0, 1.3))?;
                m.h_kv_reuse_gap[e].observe(w, rng.lognormal(2.0, 1.5))?;
            }

            // NIXL KV transfers.
            for _ in 0..rng.poisson(admitted as f64 * 0.5) {
                let blocks = rng.lognormal(40.0, 0.9).ceil();
                let bytes = blocks * BLOCK_SIZE as f64 * KV_BYTES_PER_TOKEN;
                m.nixl_xfer[e].observe(w, rng.lognormal(0.002 + bytes / 20e9, 0.4))?;
                m.nixl_post[e].observe(w, rng.lognormal(0.0015, 0.5))?;
                m.nixl_bytes[e].observe(w, bytes)?;
                m.nixl_descriptors[e].observe(w, blocks * 32.0)?;
                if rng.chance(0.005) {
                    m.nixl_failed_transfers[e].inc(w, 1.0)?;
                }
            }
            if rng.chance(0.002) {
                m.nixl_failed_notifications[e].inc(w, 1.0)?;
            }
            if rng.chance(0.004) {
                m.nixl_expired[e].inc(w, 1.0)?;
                m.nixl_after_expiry[e].inc(w, rng.below(2) as f64)?;
            }
        }

        // Finished requests, each owned by one API server.
        for _ in 0..finished {
            let owner = self.rng.below(self.api.len());
            self.finish_request(owner, e, running)?;
        }
        Ok(admitted as f64)
    }

    /// Records one finished request in its owner's files: per-request counters, every
    /// per-request histogram, and the HTTP instrumentator metrics.
    fn finish_request(&mut self, owner: usize, e: usize, running: u64) -> io::Result<()> {
        let rng = &mut self.rng;
        let max_len = self.cfg.max_model_len as f64;
        let reason = rng.pick_weighted(&FINISH_REASONS.map(|(_, w)| w));
        let prompt = rng.lognormal(650.0, 0.9).clamp(1.0, max_len / 2.0).round();
        let max_tokens = [256.0_f64, 512.0, 1024.0, 2048.0][rng.below(4)]
            .min(max_len - prompt)
            .max(1.0);
        let generated = match FINISH_REASONS[reason].0 {
            "length" => max_tokens,
            _ => rng.lognormal(180.0, 0.8).round().clamp(1.0, max_tokens),
        };
        let cached =
            (prompt * rng.uniform(0.0, 0.7) / BLOCK_SIZE as f64).floor() * BLOCK_SIZE as f64;
        let computed = prompt - cached;
        let n = if rng.chance(0.95) {
            1.0
        } else {
            (2 + rng.below(3)) as f64
        };
        let queue = rng.exponential(0.02 + 0.004 * running as f64);
        let prefill = rng.lognormal(0.01 + computed / 9000.0, 0.3);
        let tpot = rng.lognormal(0.012 + 0.00035 * running as f64, 0.25);
        let decode = (generated - 1.0) * tpot;
        let ttft = queue + prefill + rng.uniform(0.001, 0.006);
        let inference = prefill + decode;
        let e2e = queue + inference + rng.uniform(0.002, 0.02);
        let itl: Vec<f64> = (0..(generated as usize).saturating_sub(1).min(4))
            .map(|_| tpot * rng.lognormal(1.0, 0.2))
            .collect();
        let streaming = rng.chance(0.6);
        let chat = rng.chance(0.7);
        let request_bytes = (300.0 + prompt * 4.2 * rng.uniform(0.8, 1.2)).floor();
        let response_bytes = if streaming {
            0.0
        } else {
            (250.0_f64 + generated * 4.5).floor()
        };

        let a = &mut self.api[owner];
        let (w, m) = (&mut a.w, &a.m);
        m.prompt_tokens[e].inc(w, prompt)?;
        m.generation_tokens[e].inc(w, generated)?;
        m.prompt_by_source[0][e].inc(w, computed)?;
        m.prompt_by_source[1][e].inc(w, cached)?;
        m.prompt_cached[e].inc(w, cached)?;
        m.cached_by_source[0][e].inc(w, cached)?;
        m.success[reason][e].inc(w, 1.0)?;

        m.h_prompt_tokens[e].observe(w, prompt)?;
        m.h_generation_tokens[e].observe(w, generated)?;
        m.h_max_generation_tokens[e].observe(w, max_tokens)?;
        m.h_params_n[e].observe(w, n)?;
        m.h_params_max_tokens[e].observe(w, max_tokens)?;
        m.h_ttft[e].observe(w, ttft)?;
        for x in itl {
            m.h_itl[e].observe(w, x)?;
        }
        if generated > 1.0 {
            m.h_tpot[e].observe(w, decode / (generated - 1.0))?;
        }
        m.h_e2e[e].observe(w, e2e)?;
        m.h_queue[e].observe(w, queue)?;
        m.h_inference[e].observe(w, inference)?;
        m.h_prefill[e].observe(w, prefill)?;
        m.h_decode[e].observe(w, decode)?;
        m.h_num_preemptions[e].observe(w, 0.0)?;
        m.h_prefill_kv_computed[e].observe(w, computed)?;

        let handler = if chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        let status = if FINISH_REASONS[reason].0 == "error" {
            "5xx"
        } else {
            "2xx"
        };
        a.http.record(
            w,
            HttpRequest {
                method: "POST",
                status,
                handler,
                request_bytes,
                response_bytes,
                duration: e2e,
            },
        )
    }

    /// Frontend traffic that is not a generation request: model listing, the occasional bad
    /// request, WebSocket connections.
    fn step_frontend_misc(&mut self, dt: f64) -> io::Result<()> {
        for _ in 0..self.rng.poisson(0.3 * dt) {
            let a = self.rng.below(self.api.len());
            let d = self.rng.lognormal(0.002, 0.3);
            let s = &mut self.api[a];
            let r = HttpRequest {
                method: "GET",
                status: "2xx",
                handler: "/v1/models",
                request_bytes: 0.0,
                response_bytes: 512.0,
                duration: d,
            };
            s.http.record(&mut s.w, r)?;
        }
        if self.rng.chance(0.05 * dt) {
            let a = self.rng.below(self.api.len());
            let d = self.rng.lognormal(0.003, 0.3);
            let s = &mut self.api[a];
            let r = HttpRequest {
                method: "POST",
                status: "4xx",
                handler: "/v1/chat/completions",
                request_bytes: 180.0,
                response_bytes: 96.0,
                duration: d,
            };
            s.http.record(&mut s.w, r)?;
        }
        if self.rng.chance(0.1 * dt) {
            let a = self.rng.below(self.api.len());
            let s = &mut self.api[a];
            if s.ws_active.get(&s.w)? > 0.0 && self.rng.chance(0.5) {
                s.ws_active.dec(&mut s.w, 1.0)?;
            } else {
                s.ws_active.inc(&mut s.w, 1.0)?;
                s.ws_total.inc(&mut s.w, 1.0)?;
            }
        }
        Ok(())
    }
}

/// Runs a [`Demo`] until `stop` becomes true: one step immediately, then one every
/// `cfg.tick` (sleeping in slices of at most 100 ms so that `stop` is noticed quickly).
pub fn run_demo(cfg: DemoConfig, stop: &AtomicBool) -> io::Result<()> {
    let tick = cfg.tick;
    let mut demo = Demo::new(cfg)?;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        demo.step()?;
        while !stop.load(Ordering::Relaxed) {
            let elapsed = started.elapsed();
            if elapsed >= tick {
                break;
            }
            std::thread::sleep((tick - elapsed).min(Duration::from_millis(100)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::writer::read_records;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn cfg(dir: &Path) -> DemoConfig {
        let mut c = DemoConfig::new(dir);
        c.seed = 42;
        c.start_time = Some(1_750_000_000.0);
        c
    }

    /// Every record of every file: file name → key → (value, timestamp).
    fn snapshot(dir: &Path) -> BTreeMap<String, BTreeMap<String, (f64, f64)>> {
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let recs = read_records(&entry.path()).unwrap();
            out.insert(
                name,
                recs.into_iter()
                    .map(|r| (r.key, (r.value, r.timestamp)))
                    .collect(),
            );
        }
        out
    }

    /// Sum over all files of the records whose key starts with `prefix`.
    fn total(snap: &BTreeMap<String, BTreeMap<String, (f64, f64)>>, prefix: &str) -> f64 {
        snap.values()
            .flat_map(|f| f.iter())
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.0)
            .sum()
    }

    #[test]
    fn demo_is_send() {
        fn assert_send<T: Send + 'static>() {}
        assert_send::<Demo>();
        assert_send::<DemoConfig>();
    }

    #[test]
    fn build_1_2_5() {
        assert_eq!(
            build_1_2_5_buckets(100),
            [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(build_1_2_5_buckets(8192).last(), Some(&5000.0));
        assert_eq!(nixl_bytes_buckets().first(), Some(&2048.0));
        assert_eq!(nixl_bytes_buckets().last(), Some(&8589934592.0));
        assert_eq!(nixl_bytes_buckets().len(), 12);
        assert_eq!(lmcache_lookup_buckets().len(), 20);
    }

    #[test]
    fn files_names_and_monotonic_counters() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg(dir.path());
        c.worker_restart_ticks = 8;
        let mut demo = Demo::new(c).unwrap();
        let initial_pids = demo.pids();
        assert_eq!(initial_pids.len(), 4);

        let mut prev = snapshot(dir.path());
        for _ in 0..40 {
            demo.step().unwrap();
            let snap = snapshot(dir.path());
            for (file, recs) in &snap {
                let counterish = file.starts_with("counter_")
                    || file.starts_with("histogram_")
                    || file.starts_with("summary_");
                if !counterish {
                    continue;
                }
                let before = prev.get(file);
                for (key, (v, ts)) in recs {
                    assert_eq!(*ts, 0.0, "{file} {key}");
                    assert!(v.is_finite() && *v >= 0.0, "{file} {key} {v}");
                    if let Some((old, _)) = before.and_then(|b| b.get(key)) {
                        assert!(v >= old, "{file} {key}: {old} -> {v}");
                    }
                }
                // Files never lose records.
                if let Some(b) = before {
                    assert!(
                        b.keys().all(|k| recs.contains_key(k)),
                        "{file} lost records"
                    );
                }
            }
            for (file, recs) in &snap {
                for (key, (v, _)) in recs {
                    if key.starts_with(r#"["vllm:kv_cache_usage_perc""#) {
                        assert!((0.0..=1.0).contains(v), "{file} {key} {v}");
                    }
                }
            }
            prev = snap;
        }

        let snap = prev;
        let pids = demo.pids();
        for pid in &pids[..2] {
            for f in [
                "counter",
                "histogram",
                "summary",
                "gauge_mostrecent",
                "gauge_livesum",
            ] {
                assert!(
                    snap.contains_key(&format!("{f}_{pid}.db")),
                    "missing {f}_{pid}.db in {:?}",
                    snap.keys()
                );
            }
        }
        for pid in &pids[2..] {
            for f in ["counter", "histogram", "gauge_livemostrecent", "gauge_sum"] {
                assert!(
                    snap.contains_key(&format!("{f}_{pid}.db")),
                    "missing {f}_{pid}.db"
                );
            }
        }
        // Workers restarted: the old pids' live gauge files are gone, the rest stays.
        let dead: Vec<&String> = initial_pids[2..]
            .iter()
            .filter(|p| !pids.contains(p))
            .collect();
        assert!(
            !dead.is_empty(),
            "expected a restart with worker_restart_ticks = 8 over 40 steps"
        );
        for pid in dead {
            assert!(!snap.contains_key(&format!("gauge_livemostrecent_{pid}.db")));
            assert!(snap.contains_key(&format!("counter_{pid}.db")));
            assert!(snap.contains_key(&format!("gauge_sum_{pid}.db")));
        }
        // Every file name is one prometheus_client would produce.
        for name in snap.keys() {
            let stem = name.strip_suffix(".db").unwrap();
            let parts: Vec<&str> = stem.split('_').collect();
            match parts.as_slice() {
                ["counter" | "histogram" | "summary", pid] => assert!(pid.parse::<u64>().is_ok()),
                ["gauge", mode, pid] => {
                    assert!(GaugeMode::from_name(mode).is_some());
                    assert!(pid.parse::<u64>().is_ok());
                }
                _ => panic!("unexpected file {name}"),
            }
        }

        // Cross-metric consistency, summed over processes.
        let requests = total(
            &snap,
            r#"["vllm:request_success", "vllm:request_success_total""#,
        );
        assert!(requests > 20.0, "only {requests} requests finished");
        let prompt_buckets = total(
            &snap,
            r#"["vllm:request_prompt_tokens", "vllm:request_prompt_tokens_bucket""#,
        );
        assert_eq!(requests, prompt_buckets);
        let e2e_buckets = total(
            &snap,
            r#"["vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_bucket""#,
        );
        assert_eq!(requests, e2e_buckets);
        let prompt_total = total(
            &snap,
            r#"["vllm:prompt_tokens", "vllm:prompt_tokens_total""#,
        );
        let prompt_sum = total(
            &snap,
            r#"["vllm:request_prompt_tokens", "vllm:request_prompt_tokens_sum""#,
        );
        assert_eq!(prompt_total, prompt_sum);
        let gen_total = total(
            &snap,
            r#"["vllm:generation_tokens", "vllm:generation_tokens_total""#,
        );
        let gen_sum = total(
            &snap,
            r#"["vllm:request_generation_tokens", "vllm:request_generation_tokens_sum""#,
        );
        assert_eq!(gen_total, gen_sum);
        let http_posts: f64 = snap
            .values()
            .flat_map(|f| f.iter())
            .filter(|(k, _)| {
                k.starts_with(r#"["http_requests", "http_requests_total""#)
                    && k.contains(r#""method": "POST""#)
            })
            .filter(|(k, _)| !k.contains(r#""status": "4xx""#))
            .map(|(_, v)| v.0)
            .sum();
        assert_eq!(http_posts, requests);
    }

    #[test]
    fn deterministic_for_a_seed() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for d in [a.path(), b.path()] {
            let mut c = cfg(d);
            c.worker_restart_ticks = 5;
            let mut demo = Demo::new(c).unwrap();
            for _ in 0..15 {
                demo.step().unwrap();
            }
        }
        let names = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(a.path()), names(b.path()));
        for n in names(a.path()) {
            assert_eq!(
                std::fs::read(a.path().join(&n)).unwrap(),
                std::fs::read(b.path().join(&n)).unwrap(),
                "{n}"
            );
        }
    }

    #[test]
    fn run_demo_stops() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = DemoConfig::new(dir.path());
        c.tick = Duration::from_millis(10);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let h = s.spawn(|| run_demo(c, &stop));
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Relaxed);
            h.join().unwrap().unwrap();
        });
        assert!(std::fs::read_dir(dir.path()).unwrap().count() >= 10);
    }
}
