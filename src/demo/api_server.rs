//! A simulated vLLM API-server process: vLLM's PrometheusStatLogger, the
//! frontend-local metrics and the HTTP instrumentator's metrics.

#[allow(unused_imports)]
use super::*;

/// Creates one child per engine with labels `model_name, engine` plus `extra`.
pub(super) struct Maker<'a> {
    pub(super) model: &'a str,
    pub(super) engines: usize,
}

impl Maker<'_> {
    pub(super) fn labels<'b>(
        &'b self,
        engine: &'b str,
        extra: &[(&'b str, &'b str)],
    ) -> Vec<(&'b str, &'b str)> {
        let mut l = vec![("model_name", self.model), ("engine", engine)];
        l.extend_from_slice(extra);
        l
    }

    pub(super) fn counters(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<Vec<Counter>> {
        (0..self.engines)
            .map(|e| w.known_counter(name, &self.labels(&e.to_string(), extra)))
            .collect()
    }

    /// vLLM's `for value in values: for idx in engines: base.labels(model, idx, value)`,
    /// over the values `label` takes in the catalogue.
    pub(super) fn counters_by(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        label: &str,
    ) -> io::Result<Vec<Vec<Counter>>> {
        self.counters_for(w, name, label, &label_values(name, label))
    }

    /// [`Self::counters_by`] over given values (their order is the simulation's index).
    pub(super) fn counters_for(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        label: &str,
        values: &[&str],
    ) -> io::Result<Vec<Vec<Counter>>> {
        values
            .iter()
            .map(|v| self.counters(w, name, &[(label, v)]))
            .collect()
    }

    pub(super) fn gauges(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<Vec<Gauge>> {
        (0..self.engines)
            .map(|e| w.known_gauge(name, &self.labels(&e.to_string(), extra)))
            .collect()
    }

    /// Like [`Self::counters_by`].
    pub(super) fn gauges_by(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        label: &str,
    ) -> io::Result<Vec<Vec<Gauge>>> {
        label_values(name, label)
            .iter()
            .map(|v| self.gauges(w, name, &[(label, v)]))
            .collect()
    }

    pub(super) fn histograms(
        &self,
        w: &mut ProcessWriter,
        name: &str,
    ) -> io::Result<Vec<Histogram>> {
        self.histograms_with(w, name, buckets(name))
    }

    /// Histograms with other bounds than the catalogue's (`max_model_len`).
    pub(super) fn histograms_with(
        &self,
        w: &mut ProcessWriter,
        name: &str,
        bounds: &[f64],
    ) -> io::Result<Vec<Histogram>> {
        (0..self.engines)
            .map(|e| w.known_histogram_with(name, &self.labels(&e.to_string(), &[]), bounds))
            .collect()
    }
}

/// Per-engine metric children of one API server (`Vec`s are indexed by engine; `[value][engine]`
/// for the extra-label families, in vLLM's creation order).
pub(super) struct EngineMetrics {
    pub(super) running: Vec<Gauge>,
    pub(super) waiting: Vec<Gauge>,
    pub(super) waiting_by_reason: Vec<Vec<Gauge>>,
    pub(super) kv_fetch_by_stage: Vec<Vec<Gauge>>,
    pub(super) sleep_state: Vec<Vec<Gauge>>,
    pub(super) kv_usage: Vec<Gauge>,
    /// `vllm:corrupted_requests` (with `VLLM_COMPUTE_NANS_IN_LOGITS`) and
    /// `vllm:watermark_requests` by status (with a watermark configuration):
    /// written at start-up, never incremented here.
    pub(super) _optional_features: (Vec<Counter>, Vec<Vec<Counter>>),
    pub(super) prefix_queries: Vec<Counter>,
    pub(super) prefix_hits: Vec<Counter>,
    pub(super) external_queries: Vec<Counter>,
    pub(super) external_hits: Vec<Counter>,
    /// `vllm:mm_cache_queries` and `vllm:mm_cache_hits`: created (so written)
    /// by every vLLM, never incremented for a text-only model.
    pub(super) _mm_cache: [Vec<Counter>; 2],
    pub(super) preemptions: Vec<Counter>,
    pub(super) prompt_tokens: Vec<Counter>,
    pub(super) prompt_by_source: Vec<Vec<Counter>>,
    pub(super) prompt_cached: Vec<Counter>,
    pub(super) cached_by_source: Vec<Vec<Counter>>,
    pub(super) generation_tokens: Vec<Counter>,
    pub(super) success: Vec<Vec<Counter>>,
    pub(super) admission: Vec<Counter>,
    pub(super) h_prompt_tokens: Vec<Histogram>,
    pub(super) h_generation_tokens: Vec<Histogram>,
    pub(super) h_iteration_tokens: Vec<Histogram>,
    pub(super) h_max_generation_tokens: Vec<Histogram>,
    pub(super) h_params_n: Vec<Histogram>,
    pub(super) h_params_max_tokens: Vec<Histogram>,
    pub(super) h_ttft: Vec<Histogram>,
    pub(super) h_itl: Vec<Histogram>,
    pub(super) h_tpot: Vec<Histogram>,
    pub(super) h_e2e: Vec<Histogram>,
    pub(super) h_queue: Vec<Histogram>,
    pub(super) h_inference: Vec<Histogram>,
    pub(super) h_prefill: Vec<Histogram>,
    pub(super) h_decode: Vec<Histogram>,
    pub(super) h_num_preemptions: Vec<Histogram>,
    pub(super) h_prefill_kv_computed: Vec<Histogram>,
    pub(super) h_kv_lifetime: Vec<Histogram>,
    pub(super) h_kv_idle: Vec<Histogram>,
    pub(super) h_kv_reuse_gap: Vec<Histogram>,
    pub(super) spec_drafts: Vec<Counter>,
    pub(super) spec_draft_tokens: Vec<Counter>,
    pub(super) spec_accepted: Vec<Counter>,
    pub(super) spec_accepted_per_pos: Vec<Vec<Counter>>,
    pub(super) mfu_flops: Vec<Counter>,
    pub(super) mfu_read: Vec<Counter>,
    pub(super) mfu_write: Vec<Counter>,
    pub(super) nixl_xfer: Vec<Histogram>,
    pub(super) nixl_post: Vec<Histogram>,
    pub(super) nixl_bytes: Vec<Histogram>,
    pub(super) nixl_descriptors: Vec<Histogram>,
    pub(super) nixl_failed_transfers: Vec<Counter>,
    pub(super) nixl_failed_notifications: Vec<Counter>,
    pub(super) nixl_expired: Vec<Counter>,
    pub(super) nixl_after_expiry: Vec<Counter>,
}

/// One request as the instrumentator sees it (`Info`).
pub(super) struct HttpRequest {
    pub(super) method: &'static str,
    pub(super) status: &'static str,
    pub(super) handler: &'static str,
    pub(super) request_bytes: f64,
    pub(super) response_bytes: f64,
    pub(super) duration: f64,
}

/// HTTP metrics of prometheus-fastapi-instrumentator's `metrics.default()`; labelled children
/// are created lazily on first use, like `.labels(...)`.
pub(super) struct HttpMetrics {
    pub(super) highr: Histogram,
    pub(super) requests: Vec<((&'static str, &'static str, &'static str), Counter)>,
    pub(super) request_size: Vec<(&'static str, Summary)>,
    pub(super) response_size: Vec<(&'static str, Summary)>,
    pub(super) lowr: Vec<((&'static str, &'static str), Histogram)>,
}

impl HttpMetrics {
    /// The instrumentator's families (modelled here, not by `Traffic`).
    pub(super) const FAMILIES: [&'static str; 5] = [
        "http_request_duration_highr_seconds",
        "http_requests",
        "http_request_size_bytes",
        "http_response_size_bytes",
        "http_request_duration_seconds",
    ];

    pub(super) fn new(w: &mut ProcessWriter) -> io::Result<HttpMetrics> {
        Ok(HttpMetrics {
            highr: w.known_histogram("http_request_duration_highr_seconds", &[])?,
            requests: Vec::new(),
            request_size: Vec::new(),
            response_size: Vec::new(),
            lowr: Vec::new(),
        })
    }

    /// The instrumentator's `instrumentation(info)` for one request.
    pub(super) fn record(&mut self, w: &mut ProcessWriter, r: HttpRequest) -> io::Result<()> {
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
                let c = w.known_counter(
                    "http_requests_total",
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
                let s = w.known_summary("http_request_size_bytes", &[("handler", handler)])?;
                self.request_size.push((handler, s));
                s
            }
        };
        in_size.observe(w, request_bytes)?;
        let out_size = match self.response_size.iter().find(|(h, _)| *h == handler) {
            Some((_, s)) => *s,
            None => {
                let s = w.known_summary("http_response_size_bytes", &[("handler", handler)])?;
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
                let h = w.known_histogram(
                    "http_request_duration_seconds",
                    &[("method", method), ("handler", handler)],
                )?;
                self.lowr.push((lkey, h));
                self.lowr.len() - 1
            }
        };
        self.lowr[idx].1.observe(w, duration)
    }
}

pub(super) struct ApiServer {
    pub(super) w: ProcessWriter,
    pub(super) m: EngineMetrics,
    pub(super) http: HttpMetrics,
    pub(super) ws_active: Gauge,
    pub(super) ws_total: Counter,
    pub(super) ws_duration: Histogram,
    /// Offloading, LoRA, sleep-mode and weight-update families.
    pub(super) traffic: Traffic,
}

impl ApiServer {
    pub(super) fn new(cfg: &DemoConfig, pid: u64, now: f64) -> io::Result<ApiServer> {
        let mut w = ProcessWriter::new(&cfg.dir, pid);
        // Module-level metrics created at import time
        // (vllm/entrypoints/speech_to_text/realtime/metrics.py).
        let ws_active = w.known_gauge("vllm:websocket_connections_active", &[])?;
        let ws_total = w.known_counter("vllm:websocket_connections_total", &[])?;
        let ws_duration = w.known_histogram("vllm:websocket_connection_duration_seconds", &[])?;
        // init_parser_metrics(): every (mode, outcome, request type) child.
        let parser = "vllm:tool_call_parser_invocations_total";
        for mode in label_values(parser, "mode") {
            for outcome in label_values(parser, "outcome") {
                for request_type in label_values(parser, "request_type") {
                    w.known_counter(
                        parser,
                        &[
                            ("model_name", &cfg.model_name),
                            ("mode", mode),
                            ("outcome", outcome),
                            ("request_type", request_type),
                        ],
                    )?;
                }
            }
        }

        let mk = Maker {
            model: &cfg.model_name,
            engines: cfg.engines,
        };
        let request_tokens = build_1_2_5_buckets(cfg.max_model_len);
        let ww = &mut w;
        let m = EngineMetrics {
            running: mk.gauges(ww, "vllm:num_requests_running", &[])?,
            waiting: mk.gauges(ww, "vllm:num_requests_waiting", &[])?,
            waiting_by_reason: mk.gauges_by(ww, "vllm:num_requests_waiting_by_reason", "reason")?,
            kv_fetch_by_stage: mk.gauges_by(ww, "vllm:num_requests_kv_fetch_by_stage", "stage")?,
            sleep_state: mk.gauges_by(ww, "vllm:engine_sleep_state", "sleep_state")?,
            kv_usage: mk.gauges(ww, "vllm:kv_cache_usage_perc", &[])?,
            _optional_features: (
                mk.counters(ww, "vllm:corrupted_requests", &[])?,
                mk.counters_by(ww, "vllm:watermark_requests", "status")?,
            ),
            prefix_queries: mk.counters(ww, "vllm:prefix_cache_queries", &[])?,
            prefix_hits: mk.counters(ww, "vllm:prefix_cache_hits", &[])?,
            external_queries: mk.counters(ww, "vllm:external_prefix_cache_queries", &[])?,
            external_hits: mk.counters(ww, "vllm:external_prefix_cache_hits", &[])?,
            _mm_cache: [
                mk.counters(ww, "vllm:mm_cache_queries", &[])?,
                mk.counters(ww, "vllm:mm_cache_hits", &[])?,
            ],
            preemptions: mk.counters(ww, "vllm:num_preemptions", &[])?,
            prompt_tokens: mk.counters(ww, "vllm:prompt_tokens", &[])?,
            prompt_by_source: mk.counters_by(ww, "vllm:prompt_tokens_by_source", "source")?,
            prompt_cached: mk.counters(ww, "vllm:prompt_tokens_cached", &[])?,
            cached_by_source: mk.counters_by(
                ww,
                "vllm:prompt_tokens_cached_by_source",
                "source",
            )?,
            generation_tokens: mk.counters(ww, "vllm:generation_tokens", &[])?,
            success: mk.counters_for(
                ww,
                "vllm:request_success",
                "finished_reason",
                &FINISH_REASONS.map(|(r, _)| r),
            )?,
            admission: label_values("vllm:admission_rejections", "reason")
                .iter()
                .map(|r| {
                    ww.known_counter(
                        "vllm:admission_rejections",
                        &[("model_name", mk.model), ("reason", r)],
                    )
                })
                .collect::<io::Result<_>>()?,
            h_prompt_tokens: mk.histograms_with(
                ww,
                "vllm:request_prompt_tokens",
                &request_tokens,
            )?,
            h_generation_tokens: mk.histograms_with(
                ww,
                "vllm:request_generation_tokens",
                &request_tokens,
            )?,
            h_iteration_tokens: mk.histograms(ww, "vllm:iteration_tokens_total")?,
            h_max_generation_tokens: mk.histograms_with(
                ww,
                "vllm:request_max_num_generation_tokens",
                &request_tokens,
            )?,
            h_params_n: mk.histograms(ww, "vllm:request_params_n")?,
            h_params_max_tokens: mk.histograms_with(
                ww,
                "vllm:request_params_max_tokens",
                &request_tokens,
            )?,
            h_ttft: mk.histograms(ww, "vllm:time_to_first_token_seconds")?,
            h_itl: mk.histograms(ww, "vllm:inter_token_latency_seconds")?,
            h_tpot: mk.histograms(ww, "vllm:request_time_per_output_token_seconds")?,
            h_e2e: mk.histograms(ww, "vllm:e2e_request_latency_seconds")?,
            h_queue: mk.histograms(ww, "vllm:request_queue_time_seconds")?,
            h_inference: mk.histograms(ww, "vllm:request_inference_time_seconds")?,
            h_prefill: mk.histograms(ww, "vllm:request_prefill_time_seconds")?,
            h_decode: mk.histograms(ww, "vllm:request_decode_time_seconds")?,
            h_num_preemptions: mk.histograms(ww, "vllm:request_num_preemptions")?,
            h_prefill_kv_computed: mk.histograms_with(
                ww,
                "vllm:request_prefill_kv_computed_tokens",
                &request_tokens,
            )?,
            h_kv_lifetime: mk.histograms(ww, "vllm:kv_block_lifetime_seconds")?,
            h_kv_idle: mk.histograms(ww, "vllm:kv_block_idle_before_evict_seconds")?,
            h_kv_reuse_gap: mk.histograms(ww, "vllm:kv_block_reuse_gap_seconds")?,
            spec_drafts: mk.counters(ww, "vllm:spec_decode_num_drafts", &[])?,
            spec_draft_tokens: mk.counters(ww, "vllm:spec_decode_num_draft_tokens", &[])?,
            spec_accepted: mk.counters(ww, "vllm:spec_decode_num_accepted_tokens", &[])?,
            spec_accepted_per_pos: (0..SPEC_ACCEPT.len())
                .map(|p| {
                    mk.counters(
                        ww,
                        "vllm:spec_decode_num_accepted_tokens_per_pos",
                        &[("position", &p.to_string())],
                    )
                })
                .collect::<io::Result<_>>()?,
            mfu_flops: mk.counters(ww, "vllm:estimated_flops_per_gpu_total", &[])?,
            mfu_read: mk.counters(ww, "vllm:estimated_read_bytes_per_gpu_total", &[])?,
            mfu_write: mk.counters(ww, "vllm:estimated_write_bytes_per_gpu_total", &[])?,
            nixl_xfer: mk.histograms(ww, "vllm:nixl_xfer_time_seconds")?,
            nixl_post: mk.histograms(ww, "vllm:nixl_post_time_seconds")?,
            nixl_bytes: mk.histograms(ww, "vllm:nixl_bytes_transferred")?,
            nixl_descriptors: mk.histograms(ww, "vllm:nixl_num_descriptors")?,
            nixl_failed_transfers: mk.counters(ww, "vllm:nixl_num_failed_transfers", &[])?,
            nixl_failed_notifications: mk.counters(
                ww,
                "vllm:nixl_num_failed_notifications",
                &[],
            )?,
            nixl_expired: mk.counters(ww, "vllm:nixl_num_kv_expired_reqs", &[])?,
            nixl_after_expiry: mk.counters(ww, "vllm:nixl_num_notifications_after_expiry", &[])?,
        };

        // The CPU offloading connector's deprecated families, created with a
        // child per engine and transfer direction (the others appear once
        // something was offloaded: `Traffic`).
        for e in 0..cfg.engines {
            let engine = e.to_string();
            for direction in label_values("vllm:kv_offload_size", "transfer_type") {
                let labels = mk.labels(&engine, &[("transfer_type", direction)]);
                ww.known_histogram("vllm:kv_offload_size", &labels)?;
                for name in ["vllm:kv_offload_total_bytes", "vllm:kv_offload_total_time"] {
                    ww.known_counter(name, &labels)?;
                }
            }
        }

        // log_engine_initialized(): the CacheConfig info gauge (labels: every CacheConfig
        // field as str(), plus engine; no model_name), and the initial sleep state.
        for e in 0..cfg.engines {
            let engine = e.to_string();
            let info_family = family("vllm:cache_config_info");
            let mut info_labels: Vec<(&str, &str)> = info_family
                .labels
                .iter()
                .filter(|label| *label != "engine")
                .map(|label| {
                    (
                        label.as_str(),
                        info_family.values_of(label).first().copied().unwrap_or(""),
                    )
                })
                .collect();
            info_labels.push(("engine", &engine));
            let info = w.known_gauge("vllm:cache_config_info", &info_labels)?;
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
            ws_duration,
            traffic: Traffic::new(
                vllm(),
                &HttpMetrics::FAMILIES,
                vec![("model_name", cfg.model_name.clone())],
                cfg.engines,
            ),
        })
    }
}
