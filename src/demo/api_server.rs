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
        help: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<Vec<Counter>> {
        (0..self.engines)
            .map(|e| w.counter(name, help, &self.labels(&e.to_string(), extra)))
            .collect()
    }

    /// vLLM's `for value in values: for idx in engines: base.labels(model, idx, value)`.
    pub(super) fn counters_by(
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

    pub(super) fn gauges(
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

    pub(super) fn gauges_by(
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

    pub(super) fn histograms(
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
    pub(super) fn new(w: &mut ProcessWriter) -> io::Result<HttpMetrics> {
        Ok(HttpMetrics {
            highr: w.histogram(
                "http_request_duration_highr_seconds",
                help("http_request_duration_highr_seconds"),
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
                let c = w.counter(
                    "http_requests_total",
                    help("http_requests"),
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
                    help("http_request_size_bytes"),
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
                    help("http_response_size_bytes"),
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
                    help("http_request_duration_seconds"),
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

pub(super) struct ApiServer {
    pub(super) w: ProcessWriter,
    pub(super) m: EngineMetrics,
    pub(super) http: HttpMetrics,
    pub(super) ws_active: Gauge,
    pub(super) ws_total: Counter,
    pub(super) ws_duration: Histogram,
}

impl ApiServer {
    pub(super) fn new(cfg: &DemoConfig, pid: u64, now: f64) -> io::Result<ApiServer> {
        let mut w = ProcessWriter::new(&cfg.dir, pid);
        // Module-level metrics created at import time
        // (vllm/entrypoints/speech_to_text/realtime/metrics.py).
        let ws_active = w.gauge(
            "vllm:websocket_connections_active",
            help("vllm:websocket_connections_active"),
            &[],
            GaugeMode::LiveSum,
        )?;
        let ws_total = w.counter(
            "vllm:websocket_connections_total",
            help("vllm:websocket_connections_total"),
            &[],
        )?;
        let ws_duration = w.histogram(
            "vllm:websocket_connection_duration_seconds",
            help("vllm:websocket_connection_duration_seconds"),
            &[],
            WEBSOCKET_DURATION_BUCKETS,
        )?;
        // init_parser_metrics(): every (mode, outcome, request type) child.
        for mode in TOOL_PARSER_MODES {
            for outcome in TOOL_PARSER_OUTCOMES {
                for request_type in TOOL_PARSER_REQUEST_TYPES {
                    w.counter(
                        "vllm:tool_call_parser_invocations_total",
                        help("vllm:tool_call_parser_invocations"),
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
            running: mk.gauges(
                ww,
                "vllm:num_requests_running",
                help("vllm:num_requests_running"),
                &[],
            )?,
            waiting: mk.gauges(
                ww,
                "vllm:num_requests_waiting",
                help("vllm:num_requests_waiting"),
                &[],
            )?,
            waiting_by_reason: mk.gauges_by(
                ww,
                "vllm:num_requests_waiting_by_reason",
                help("vllm:num_requests_waiting_by_reason"),
                "reason",
                &WAITING_REASONS,
            )?,
            kv_fetch_by_stage: mk.gauges_by(
                ww,
                "vllm:num_requests_kv_fetch_by_stage",
                help("vllm:num_requests_kv_fetch_by_stage"),
                "stage",
                &KV_FETCH_STAGES,
            )?,
            sleep_state: mk.gauges_by(
                ww,
                "vllm:engine_sleep_state",
                help("vllm:engine_sleep_state"),
                "sleep_state",
                &SLEEP_STATES,
            )?,
            kv_usage: mk.gauges(
                ww,
                "vllm:kv_cache_usage_perc",
                help("vllm:kv_cache_usage_perc"),
                &[],
            )?,
            _optional_features: (
                mk.counters(
                    ww,
                    "vllm:corrupted_requests",
                    help("vllm:corrupted_requests"),
                    &[],
                )?,
                mk.counters_by(
                    ww,
                    "vllm:watermark_requests",
                    help("vllm:watermark_requests"),
                    "status",
                    WATERMARK_STATUSES,
                )?,
            ),
            prefix_queries: mk.counters(
                ww,
                "vllm:prefix_cache_queries",
                help("vllm:prefix_cache_queries"),
                &[],
            )?,
            prefix_hits: mk.counters(
                ww,
                "vllm:prefix_cache_hits",
                help("vllm:prefix_cache_hits"),
                &[],
            )?,
            external_queries: mk.counters(
                ww,
                "vllm:external_prefix_cache_queries",
                help("vllm:external_prefix_cache_queries"),
                &[],
            )?,
            external_hits: mk.counters(
                ww,
                "vllm:external_prefix_cache_hits",
                help("vllm:external_prefix_cache_hits"),
                &[],
            )?,
            _mm_cache: [
                mk.counters(
                    ww,
                    "vllm:mm_cache_queries",
                    help("vllm:mm_cache_queries"),
                    &[],
                )?,
                mk.counters(ww, "vllm:mm_cache_hits", help("vllm:mm_cache_hits"), &[])?,
            ],
            preemptions: mk.counters(
                ww,
                "vllm:num_preemptions",
                help("vllm:num_preemptions"),
                &[],
            )?,
            prompt_tokens: mk.counters(
                ww,
                "vllm:prompt_tokens",
                help("vllm:prompt_tokens"),
                &[],
            )?,
            prompt_by_source: mk.counters_by(
                ww,
                "vllm:prompt_tokens_by_source",
                help("vllm:prompt_tokens_by_source"),
                "source",
                &PROMPT_SOURCES,
            )?,
            prompt_cached: mk.counters(
                ww,
                "vllm:prompt_tokens_cached",
                help("vllm:prompt_tokens_cached"),
                &[],
            )?,
            cached_by_source: mk.counters_by(
                ww,
                "vllm:prompt_tokens_cached_by_source",
                help("vllm:prompt_tokens_cached_by_source"),
                "source",
                &CACHED_SOURCES,
            )?,
            generation_tokens: mk.counters(
                ww,
                "vllm:generation_tokens",
                help("vllm:generation_tokens"),
                &[],
            )?,
            success: mk.counters_by(
                ww,
                "vllm:request_success",
                help("vllm:request_success"),
                "finished_reason",
                &FINISH_REASONS.map(|(r, _)| r),
            )?,
            admission: ADMISSION_REASONS
                .iter()
                .map(|r| {
                    ww.counter(
                        "vllm:admission_rejections",
                        help("vllm:admission_rejections"),
                        &[("model_name", mk.model), ("reason", r)],
                    )
                })
                .collect::<io::Result<_>>()?,
            h_prompt_tokens: mk.histograms(
                ww,
                "vllm:request_prompt_tokens",
                help("vllm:request_prompt_tokens"),
                &request_tokens,
            )?,
            h_generation_tokens: mk.histograms(
                ww,
                "vllm:request_generation_tokens",
                help("vllm:request_generation_tokens"),
                &request_tokens,
            )?,
            h_iteration_tokens: mk.histograms(
                ww,
                "vllm:iteration_tokens_total",
                help("vllm:iteration_tokens_total"),
                ITERATION_TOKENS_BUCKETS,
            )?,
            h_max_generation_tokens: mk.histograms(
                ww,
                "vllm:request_max_num_generation_tokens",
                help("vllm:request_max_num_generation_tokens"),
                &request_tokens,
            )?,
            h_params_n: mk.histograms(
                ww,
                "vllm:request_params_n",
                help("vllm:request_params_n"),
                PARAMS_N_BUCKETS,
            )?,
            h_params_max_tokens: mk.histograms(
                ww,
                "vllm:request_params_max_tokens",
                help("vllm:request_params_max_tokens"),
                &request_tokens,
            )?,
            h_ttft: mk.histograms(
                ww,
                "vllm:time_to_first_token_seconds",
                help("vllm:time_to_first_token_seconds"),
                TTFT_BUCKETS,
            )?,
            h_itl: mk.histograms(
                ww,
                "vllm:inter_token_latency_seconds",
                help("vllm:inter_token_latency_seconds"),
                ITL_BUCKETS,
            )?,
            h_tpot: mk.histograms(
                ww,
                "vllm:request_time_per_output_token_seconds",
                help("vllm:request_time_per_output_token_seconds"),
                ITL_BUCKETS,
            )?,
            h_e2e: mk.histograms(
                ww,
                "vllm:e2e_request_latency_seconds",
                help("vllm:e2e_request_latency_seconds"),
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_queue: mk.histograms(
                ww,
                "vllm:request_queue_time_seconds",
                help("vllm:request_queue_time_seconds"),
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_inference: mk.histograms(
                ww,
                "vllm:request_inference_time_seconds",
                help("vllm:request_inference_time_seconds"),
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_prefill: mk.histograms(
                ww,
                "vllm:request_prefill_time_seconds",
                help("vllm:request_prefill_time_seconds"),
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_decode: mk.histograms(
                ww,
                "vllm:request_decode_time_seconds",
                help("vllm:request_decode_time_seconds"),
                REQUEST_LATENCY_BUCKETS,
            )?,
            h_num_preemptions: mk.histograms(
                ww,
                "vllm:request_num_preemptions",
                help("vllm:request_num_preemptions"),
                NUM_PREEMPTIONS_BUCKETS,
            )?,
            h_prefill_kv_computed: mk.histograms(
                ww,
                "vllm:request_prefill_kv_computed_tokens",
                help("vllm:request_prefill_kv_computed_tokens"),
                &request_tokens,
            )?,
            h_kv_lifetime: mk.histograms(
                ww,
                "vllm:kv_block_lifetime_seconds",
                help("vllm:kv_block_lifetime_seconds"),
                KV_RESIDENCY_BUCKETS,
            )?,
            h_kv_idle: mk.histograms(
                ww,
                "vllm:kv_block_idle_before_evict_seconds",
                help("vllm:kv_block_idle_before_evict_seconds"),
                KV_RESIDENCY_BUCKETS,
            )?,
            h_kv_reuse_gap: mk.histograms(
                ww,
                "vllm:kv_block_reuse_gap_seconds",
                help("vllm:kv_block_reuse_gap_seconds"),
                KV_RESIDENCY_BUCKETS,
            )?,
            spec_drafts: mk.counters(
                ww,
                "vllm:spec_decode_num_drafts",
                help("vllm:spec_decode_num_drafts"),
                &[],
            )?,
            spec_draft_tokens: mk.counters(
                ww,
                "vllm:spec_decode_num_draft_tokens",
                help("vllm:spec_decode_num_draft_tokens"),
                &[],
            )?,
            spec_accepted: mk.counters(
                ww,
                "vllm:spec_decode_num_accepted_tokens",
                help("vllm:spec_decode_num_accepted_tokens"),
                &[],
            )?,
            spec_accepted_per_pos: (0..SPEC_ACCEPT.len())
                .map(|p| {
                    mk.counters(
                        ww,
                        "vllm:spec_decode_num_accepted_tokens_per_pos",
                        help("vllm:spec_decode_num_accepted_tokens_per_pos"),
                        &[("position", &p.to_string())],
                    )
                })
                .collect::<io::Result<_>>()?,
            mfu_flops: mk.counters(
                ww,
                "vllm:estimated_flops_per_gpu_total",
                help("vllm:estimated_flops_per_gpu_total"),
                &[],
            )?,
            mfu_read: mk.counters(
                ww,
                "vllm:estimated_read_bytes_per_gpu_total",
                help("vllm:estimated_read_bytes_per_gpu_total"),
                &[],
            )?,
            mfu_write: mk.counters(
                ww,
                "vllm:estimated_write_bytes_per_gpu_total",
                help("vllm:estimated_write_bytes_per_gpu_total"),
                &[],
            )?,
            nixl_xfer: mk.histograms(
                ww,
                "vllm:nixl_xfer_time_seconds",
                help("vllm:nixl_xfer_time_seconds"),
                &NIXL_TIME_BUCKETS[1..],
            )?,
            nixl_post: mk.histograms(
                ww,
                "vllm:nixl_post_time_seconds",
                help("vllm:nixl_post_time_seconds"),
                NIXL_TIME_BUCKETS,
            )?,
            nixl_bytes: mk.histograms(
                ww,
                "vllm:nixl_bytes_transferred",
                help("vllm:nixl_bytes_transferred"),
                &nixl_bytes_buckets(),
            )?,
            nixl_descriptors: mk.histograms(
                ww,
                "vllm:nixl_num_descriptors",
                help("vllm:nixl_num_descriptors"),
                NIXL_DESCRIPTOR_BUCKETS,
            )?,
            nixl_failed_transfers: mk.counters(
                ww,
                "vllm:nixl_num_failed_transfers",
                help("vllm:nixl_num_failed_transfers"),
                &[],
            )?,
            nixl_failed_notifications: mk.counters(
                ww,
                "vllm:nixl_num_failed_notifications",
                help("vllm:nixl_num_failed_notifications"),
                &[],
            )?,
            nixl_expired: mk.counters(
                ww,
                "vllm:nixl_num_kv_expired_reqs",
                help("vllm:nixl_num_kv_expired_reqs"),
                &[],
            )?,
            nixl_after_expiry: mk.counters(
                ww,
                "vllm:nixl_num_notifications_after_expiry",
                help("vllm:nixl_num_notifications_after_expiry"),
                &[],
            )?,
        };

        // The CPU offloading connector's deprecated families, created with a
        // child per engine and transfer direction (the others appear once
        // something was offloaded; the demo offloads nothing).
        for e in 0..cfg.engines {
            let engine = e.to_string();
            for direction in ["CPU_to_GPU", "GPU_to_CPU"] {
                let labels = mk.labels(&engine, &[("transfer_type", direction)]);
                ww.histogram(
                    "vllm:kv_offload_size",
                    help("vllm:kv_offload_size"),
                    &labels,
                    KV_OFFLOAD_SIZE_BUCKETS,
                )?;
                for name in ["vllm:kv_offload_total_bytes", "vllm:kv_offload_total_time"] {
                    ww.counter(name, help(name), &labels)?;
                }
            }
        }

        // log_engine_initialized(): the CacheConfig info gauge (labels: every CacheConfig
        // field as str(), plus engine; no model_name), and the initial sleep state.
        for e in 0..cfg.engines {
            let engine = e.to_string();
            let mut info_labels = CACHE_CONFIG_INFO.to_vec();
            info_labels.push(("engine", &engine));
            let info = w.gauge(
                "vllm:cache_config_info",
                help("vllm:cache_config_info"),
                &info_labels,
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
            ws_duration,
        })
    }
}
