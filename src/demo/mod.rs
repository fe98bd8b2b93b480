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
    mark_process_dead, now_timestamp, Counter, Gauge, Histogram, ProcessWriter, Summary,
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

mod api_server;
mod catalogue;
mod rng;
pub mod sglang;
#[cfg(test)]
mod tests;
mod traffic;
mod worker;

use api_server::*;
pub use catalogue::*;
pub use rng::Rng;
use traffic::Traffic;
use worker::*;

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
            workers.push(Worker::new(&cfg, i, next_pid, now)?);
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
        self.maybe_restart_workers(now)?;
        let mut total_admitted = 0.0;
        for e in 0..self.engines.len() {
            total_admitted += self.step_engine(e, now, dt)?;
        }
        self.step_frontend_misc(dt)?;
        for a in &mut self.api {
            a.traffic.step(&mut a.w, &mut self.rng, now)?;
        }
        let per_worker_load = 1.0 + total_admitted / dt / self.workers.len().max(1) as f64;
        for wk in &mut self.workers {
            wk.step(&mut self.rng, now, dt, per_worker_load)?;
        }
        Ok(())
    }

    fn maybe_restart_workers(&mut self, now: f64) -> io::Result<()> {
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
                self.workers[i] = Worker::new(&self.cfg, id, self.next_pid, now)?;
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
                m.admission[rng.below(m.admission.len())].inc(w, 1.0)?;
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
                let duration = self.rng.lognormal(30.0, 1.0);
                s.ws_duration.observe(&mut s.w, duration)?;
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
