//! A simulated GPU worker process: LMCache's PrometheusLogger.

#[allow(unused_imports)]
use super::*;

pub(super) struct Worker {
    pub(super) w: ProcessWriter,
    pub(super) id: usize,
    pub(super) retrieve_requests: Counter,
    pub(super) store_requests: Counter,
    pub(super) lookup_requests: Counter,
    pub(super) requested_tokens: Counter,
    pub(super) hit_tokens: Counter,
    pub(super) stored_tokens: Counter,
    pub(super) lookup_tokens: Counter,
    pub(super) lookup_hits: Counter,
    pub(super) vllm_hit_tokens: Counter,
    pub(super) prompt_tokens: Counter,
    pub(super) evict_count: Counter,
    pub(super) evict_keys_count: Counter,
    pub(super) lookup_0_hit: Counter,
    pub(super) retrieve_hit_rate: Gauge,
    pub(super) lookup_hit_rate: Gauge,
    pub(super) local_cache_usage: Gauge,
    pub(super) remote_cache_usage: Gauge,
    pub(super) local_storage_usage: Gauge,
    pub(super) active_objs: Gauge,
    pub(super) pinned_objs: Gauge,
    pub(super) time_to_retrieve: Histogram,
    pub(super) time_to_store: Histogram,
    pub(super) time_to_lookup: Histogram,
    pub(super) retrieve_speed: Histogram,
    pub(super) store_speed: Histogram,
    /// Simulated local CPU cache occupancy (bytes).
    pub(super) cache_bytes: f64,
    /// LMCache's remote, P2P, pinning and other families.
    pub(super) traffic: Traffic,
}

/// LMCache's local CPU cache size in the simulation (bytes).
pub(super) const LMCACHE_CPU_CAPACITY: f64 = 20e9;
/// Bytes of KV cache per token (Llama-3.1-8B, bf16).
pub(super) const KV_BYTES_PER_TOKEN: f64 = 131_072.0;

impl Worker {
    /// A worker that starts at `now` (UNIX seconds; the timestamp of its
    /// first gauge values).
    pub(super) fn new(cfg: &DemoConfig, id: usize, pid: u64, now: f64) -> io::Result<Worker> {
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
        // The families modelled here; `Traffic` moves LMCache's others.
        let mut simulated: Vec<&'static str> = Vec::new();
        let mut c = |name: &'static str| {
            simulated.push(name);
            ww.known_counter(name, l)
        };
        let retrieve_requests = c("lmcache:num_retrieve_requests")?;
        let store_requests = c("lmcache:num_store_requests")?;
        let lookup_requests = c("lmcache:num_lookup_requests")?;
        let requested_tokens = c("lmcache:num_requested_tokens")?;
        let hit_tokens = c("lmcache:num_hit_tokens")?;
        let stored_tokens = c("lmcache:num_stored_tokens")?;
        let lookup_tokens = c("lmcache:num_lookup_tokens")?;
        let lookup_hits = c("lmcache:num_lookup_hits")?;
        let vllm_hit_tokens = c("lmcache:num_vllm_hit_tokens")?;
        let prompt_tokens = c("lmcache:num_prompt_tokens")?;
        let evict_count = c("lmcache:local_cpu_evict_count")?;
        let evict_keys_count = c("lmcache:local_cpu_evict_keys_count")?;
        let lookup_0_hit = c("lmcache:lookup_0_hit_requests")?;
        let mut g = |name: &'static str| {
            simulated.push(name);
            w.known_gauge(name, l)
        };
        let retrieve_hit_rate = g("lmcache:retrieve_hit_rate")?;
        let lookup_hit_rate = g("lmcache:lookup_hit_rate")?;
        let local_cache_usage = g("lmcache:local_cache_usage")?;
        let remote_cache_usage = g("lmcache:remote_cache_usage")?;
        let local_storage_usage = g("lmcache:local_storage_usage")?;
        let active_objs = g("lmcache:active_memory_objs_count")?;
        let pinned_objs = g("lmcache:pinned_memory_objs_count")?;
        // The gauges LMCache creates at start-up, as its periodic collector
        // first sets them: healthy, nothing queued, chunk statistics off.
        let startup_gauges = lmcache()
            .families()
            .iter()
            .filter(|f| f.written && f.kind == FamilyType::Gauge);
        for def in startup_gauges {
            let name = def.name.as_str();
            let gauge = w.known_gauge(name, l)?;
            let value = if name == "lmcache:lmcache_is_healthy" {
                1.0
            } else {
                0.0
            };
            gauge.set_at(&mut w, value, now)?;
        }
        let mut h = |name: &'static str| {
            simulated.push(name);
            w.known_histogram(name, l)
        };
        let time_to_retrieve = h("lmcache:time_to_retrieve")?;
        let time_to_store = h("lmcache:time_to_store")?;
        let time_to_lookup = h("lmcache:time_to_lookup")?;
        let retrieve_speed = h("lmcache:retrieve_speed")?;
        let store_speed = h("lmcache:store_speed")?;
        let fixed = labels
            .map(|(name, value)| (name, value.to_owned()))
            .to_vec();
        let traffic = Traffic::new(lmcache(), &simulated, fixed, 0);
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
            traffic,
        })
    }

    /// One LMCache stats push (LMCache logs aggregated stats periodically).
    pub(super) fn step(&mut self, rng: &mut Rng, now: f64, dt: f64, load: f64) -> io::Result<()> {
        self.traffic.step(&mut self.w, rng, now)?;
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
