//! The catalogue the simulation draws from: bucket sets and label values of
//! vLLM 0.33.0, prometheus-fastapi-instrumentator 8.1.0 and LMCache 0.5.x.

#[allow(unused_imports)]
use super::*;

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
/// The offloading connector's `TRANSFER_SIZE_BUCKETS`
/// (`vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py`).
pub const KV_OFFLOAD_SIZE_BUCKETS: &[f64] =
    &[1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6];
/// The labels of `vllm:cache_config_info` besides `engine`: vLLM 0.33.0's
/// `CacheConfig.metrics_info()` for a default configuration with 27,000 GPU
/// blocks (`tests/data/vllm-0.33.0-stat-logger.json`).
pub const CACHE_CONFIG_INFO: &[(&str, &str)] = &[
    ("block_size", "16"),
    ("user_specified_block_size", "True"),
    ("kv_cache_layout", "None"),
    ("prefix_match_unit", "None"),
    ("gpu_memory_utilization", "0.9"),
    ("cache_dtype", "auto"),
    ("is_attention_free", "False"),
    ("num_gpu_blocks_override", "None"),
    ("sliding_window", "None"),
    ("enable_prefix_caching", "True"),
    ("prefix_caching_hash_algo", "sha256"),
    ("prefix_cache_retention_interval", "0"),
    ("kv_cache_dtype_skip_layers", "[]"),
    ("mamba_page_size_padded", "None"),
    ("skip_page_size_padded", "None"),
    ("mamba_block_size", "None"),
    ("mamba_cache_dtype", "auto"),
    ("mamba_ssm_cache_dtype", "auto"),
    ("mamba_cache_mode", "none"),
    ("enable_mamba_shared_prefix_checkpoint", "False"),
    ("replayssm_buffer_len", "16"),
    ("use_replayssm", "False"),
    ("use_kda_recoverssm", "False"),
    ("num_gpu_blocks", "27000"),
    ("num_cpu_blocks", "0"),
    ("simple_cpu_offload_num_blocks", "None"),
    ("effective_attention_block_size", "None"),
    ("kv_cache_size_tokens", "None"),
    ("kv_cache_max_concurrency", "None"),
    ("hash_block_size", "None"),
    ("cache_hit_alignment_tokens", "None"),
    ("kv_sharing_fast_prefill", "False"),
    ("swa_bounded_replay", "True"),
    ("kv_cache_memory_bytes", "None"),
    ("kv_offloading_size", "None"),
    ("kv_offloading_backend", "native"),
    ("_block_size_resolved", "True"),
];
/// `vllm/entrypoints/speech_to_text/realtime/metrics.py`
/// `vllm:websocket_connection_duration_seconds`.
pub const WEBSOCKET_DURATION_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
/// vLLM's tool-call parser metric children: mode, outcome, request type
/// (`vllm/parser/metrics.py`, all combinations created at start-up).
pub const TOOL_PARSER_MODES: &[&str] = &["streaming", "non_streaming"];
/// See [`TOOL_PARSER_MODES`].
pub const TOOL_PARSER_OUTCOMES: &[&str] = &["tool_call", "no_tool_call"];
/// See [`TOOL_PARSER_MODES`].
pub const TOOL_PARSER_REQUEST_TYPES: &[&str] = &["chat_completions", "responses", "other"];
/// `vllm:watermark_requests` `status` values.
pub const WATERMARK_STATUSES: &[&str] = &["watermarked", "skipped", "not_watermarked"];
/// The gauges LMCache 0.5.6's `PrometheusLogger` creates with a child (so
/// writes) when a worker starts, with their multiprocess modes: health,
/// periodic threads, connector and storage queues, chunk statistics
/// (`tests/data/lmcache-0.5.6-prometheus-logger.json`).
pub const LMCACHE_STARTUP_GAUGES: &[(&str, GaugeMode)] = &[
    (
        "lmcache:chunk_statistics_bloom_filter_fill_rate",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:chunk_statistics_bloom_filter_size_mb",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:chunk_statistics_current_file_size",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:chunk_statistics_enabled",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:chunk_statistics_file_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:chunk_statistics_reuse_rate",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:chunk_statistics_total_chunks",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:chunk_statistics_total_requests",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:chunk_statistics_unique_chunks",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:connector_invalid_block_ids_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:connector_kv_caches_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:connector_layerwise_retrievers_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:connector_load_specs_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:connector_request_trackers_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:connector_requests_priority_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:get_blocking_failed_count",
        GaugeMode::LiveMostRecent,
    ),
    ("lmcache:kv_msg_queue_size", GaugeMode::LiveMostRecent),
    ("lmcache:lmcache_is_healthy", GaugeMode::LiveMostRecent),
    (
        "lmcache:local_cpu_hot_cache_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:local_cpu_keys_in_request_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_active_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_critical_active",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_critical_running",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_critical_total",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_high_active",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_high_running",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_high_total",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_low_active",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_low_running",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_low_total",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_medium_active",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_medium_running",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_medium_total",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_running_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:periodic_threads_total_count",
        GaugeMode::LiveMostRecent,
    ),
    (
        "lmcache:pin_monitor_pinned_objects_count",
        GaugeMode::LiveMostRecent,
    ),
    ("lmcache:put_failed_count", GaugeMode::LiveMostRecent),
    ("lmcache:remote_put_task_num", GaugeMode::LiveMostRecent),
    (
        "lmcache:scheduler_unfinished_requests_count",
        GaugeMode::LiveMostRecent,
    ),
    ("lmcache:storage_events_done_count", GaugeMode::Sum),
    ("lmcache:storage_events_not_found_count", GaugeMode::Sum),
    ("lmcache:storage_events_ongoing_count", GaugeMode::Sum),
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
pub(super) const NIXL_TIME_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
];
/// NIXL `vllm:nixl_num_descriptors`.
pub(super) const NIXL_DESCRIPTOR_BUCKETS: &[f64] = &[
    10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0, 4000.0, 10000.0, 20000.0,
    50000.0,
];
/// Instrumentator `http_request_duration_highr_seconds`.
pub(super) const HTTP_HIGHR_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    7.5, 10.0, 30.0, 60.0,
];
/// Instrumentator `http_request_duration_seconds`.
pub(super) const HTTP_LOWR_BUCKETS: &[f64] = &[0.1, 0.5, 1.0];
/// LMCache `time_to_retrieve` / `time_to_store`.
pub(super) const LMCACHE_TIME_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// LMCache `retrieve_speed` / `store_speed`.
pub(super) const LMCACHE_SPEED_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
    32768.0, 65536.0,
];

/// `FinishReason` values and the share of requests finishing that way.
pub(super) const FINISH_REASONS: [(&str, f64); 5] = [
    ("stop", 0.78),
    ("length", 0.15),
    ("abort", 0.05),
    ("error", 0.01),
    ("repetition", 0.01),
];
pub(super) const WAITING_REASONS: [&str; 2] = ["capacity", "deferred"];
pub(super) const KV_FETCH_STAGES: [&str; 3] =
    ["waiting_to_start", "in_progress", "completed_waiting"];
pub(super) const SLEEP_STATES: [&str; 3] = ["awake", "weights_offloaded", "discard_all"];
pub(super) const PROMPT_SOURCES: [&str; 3] =
    ["local_compute", "local_cache_hit", "external_kv_transfer"];
pub(super) const CACHED_SOURCES: [&str; 5] =
    ["device", "host", "p2p", "disk", "external_unspecified"];
pub(super) const ADMISSION_REASONS: [&str; 2] = ["max_num_queued_reqs", "max_num_queued_tokens"];
/// Speculative decoding: `num_speculative_tokens` and the acceptance rate per position.
pub(super) const SPEC_ACCEPT: [f64; 3] = [0.78, 0.56, 0.39];
/// Requests one engine runs at most (`max_num_seqs`).
pub(super) const MAX_NUM_SEQS: u64 = 64;
/// KV-cache block size (tokens).
pub(super) const BLOCK_SIZE: u64 = 16;

/// `vllm.v1.metrics.loggers.build_1_2_5_buckets(max_value)`.
pub(super) fn build_1_2_5_buckets(max_value: u64) -> Vec<f64> {
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
pub(super) fn lmcache_lookup_buckets() -> Vec<f64> {
    (0..20).map(|i| 0.00001 * f64::from(1u32 << i)).collect()
}

/// NIXL `vllm:nixl_bytes_transferred`: `[2 ** (10 + i) for i in range(1, 25, 2)]`.
pub(super) fn nixl_bytes_buckets() -> Vec<f64> {
    (1..25)
        .step_by(2)
        .map(|i| (1u64 << (10 + i)) as f64)
        .collect()
}

/// The help text of every family the simulation and the benchmarks' fixture
/// write, by family name (a counter's without `_total`): the one place these
/// strings live. vLLM's stat-logger families carry vLLM 0.33.0's own texts,
/// extracted from its code by `scripts/vllm-catalogue.py`
/// (`tests/data/vllm-0.33.0-stat-logger.json`, which `tests/it/demo.rs`
/// checks the demo against); the others are vLLM's frontend,
/// prometheus-fastapi-instrumentator's and LMCache's texts.
pub const HELP: &[(&str, &str)] = &[
    ("lmcache:chunk_statistics_bloom_filter_fill_rate", "Bloom Filter fill rate (0.0 to 1.0)"),
    ("lmcache:chunk_statistics_bloom_filter_size_mb", "Bloom Filter memory usage in MB"),
    ("lmcache:chunk_statistics_current_file_size", "Current file size in bytes for file_hash strategy"),
    ("lmcache:chunk_statistics_enabled", "Whether chunk statistics collection is enabled"),
    ("lmcache:chunk_statistics_file_count", "Number of files created for file_hash strategy"),
    ("lmcache:chunk_statistics_reuse_rate", "Chunk reuse rate (0.0 to 1.0)"),
    ("lmcache:chunk_statistics_total_chunks", "Total number of chunks processed"),
    ("lmcache:chunk_statistics_total_requests", "Total number of requests processed by chunk statistics"),
    ("lmcache:chunk_statistics_unique_chunks", "Number of unique chunks (estimated)"),
    ("lmcache:connector_invalid_block_ids_count", "The count of connector invalid block ids count"),
    ("lmcache:connector_kv_caches_count", "The count of connector kv caches count"),
    ("lmcache:connector_layerwise_retrievers_count", "The count of connector layerwise retrievers count"),
    ("lmcache:connector_load_specs_count", "The count of connector load specs count"),
    ("lmcache:connector_request_trackers_count", "The count of connector request trackers count"),
    ("lmcache:connector_requests_priority_count", "The count of connector requests priority count"),
    ("lmcache:get_blocking_failed_count", "The number of get blocking failed"),
    ("lmcache:kv_msg_queue_size", "The size of the KV message queue in BatchedMessageSender"),
    ("lmcache:lmcache_is_healthy", "The health status of LMCache (1=healthy, 0=unhealthy)"),
    ("lmcache:local_cpu_hot_cache_count", "The size of the hot_cache"),
    ("lmcache:local_cpu_keys_in_request_count", "The size of the keys_in_request"),
    ("lmcache:periodic_threads_active_count", "Number of active periodic threads (recently executed)"),
    ("lmcache:periodic_threads_critical_active", "Number of active critical level periodic threads"),
    ("lmcache:periodic_threads_critical_running", "Number of running critical level periodic threads"),
    ("lmcache:periodic_threads_critical_total", "Total number of critical level periodic threads"),
    ("lmcache:periodic_threads_high_active", "Number of active high level periodic threads"),
    ("lmcache:periodic_threads_high_running", "Number of running high level periodic threads"),
    ("lmcache:periodic_threads_high_total", "Total number of high level periodic threads"),
    ("lmcache:periodic_threads_low_active", "Number of active low level periodic threads"),
    ("lmcache:periodic_threads_low_running", "Number of running low level periodic threads"),
    ("lmcache:periodic_threads_low_total", "Total number of low level periodic threads"),
    ("lmcache:periodic_threads_medium_active", "Number of active medium level periodic threads"),
    ("lmcache:periodic_threads_medium_running", "Number of running medium level periodic threads"),
    ("lmcache:periodic_threads_medium_total", "Total number of medium level periodic threads"),
    ("lmcache:periodic_threads_running_count", "Number of running periodic threads"),
    ("lmcache:periodic_threads_total_count", "Total number of registered periodic threads"),
    ("lmcache:pin_monitor_pinned_objects_count", "The number of pinned objects in PinMonitor"),
    ("lmcache:put_failed_count", "The number of put failed"),
    ("lmcache:remote_put_task_num", "The number of remote put tasks"),
    ("lmcache:scheduler_unfinished_requests_count", "The count of scheduler unfinished requests count"),
    ("lmcache:storage_events_done_count", "The number of done events"),
    ("lmcache:storage_events_not_found_count", "The number of not found events"),
    ("lmcache:storage_events_ongoing_count", "The number of ongoing events"),
    ("vllm:corrupted_requests", "Corrupted requests, in terms of total number of requests with NaNs in logits."),
    ("vllm:watermark_requests", "Finished requests by watermark status (only with watermark_config)."),
    ("vllm:tool_call_parser_invocations", "Total number of ToolParser invocations. Non-streaming increments once per choice; streaming increments once per delta."),
    ("vllm:websocket_connection_duration_seconds", "Duration of WebSocket connections in seconds."),
    ("vllm:kv_offload_size", "Histogram of KV offload transfer size, in bytes."),
    ("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector"),
    ("vllm:kv_offload_total_time", "Total time measured by all KV offloading operations"),
    ("http_request_duration_highr_seconds", "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. "),
    ("http_request_duration_seconds", "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. "),
    ("http_request_size_bytes", "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. "),
    ("http_requests", "Total number of requests by method, status and handler."),
    ("http_response_size_bytes", "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. "),
    ("lmcache:active_memory_objs_count", "The number of active memory objects"),
    ("lmcache:local_cache_usage", "Local cache usage (bytes) of lmcache"),
    ("lmcache:local_cpu_evict_count", "Total number of evict in local cpu backend"),
    ("lmcache:local_cpu_evict_keys_count", "Total number of evict keys in local cpu backend"),
    ("lmcache:local_storage_usage", "Local storage usage (bytes) of lmcache"),
    ("lmcache:lookup_0_hit_requests", "Total number of 0 hit lookup requests"),
    ("lmcache:lookup_hit_rate", "Hit rate of lmcache lookup requests since last log"),
    ("lmcache:num_hit_tokens", "Total number of tokens hit in lmcache"),
    ("lmcache:num_lookup_hits", "Total number of tokens hit in lookup from lmcache"),
    ("lmcache:num_lookup_requests", "Total number of lookup requests sent to lmcache"),
    ("lmcache:num_lookup_tokens", "Total number of tokens requested in lookup from lmcache"),
    ("lmcache:num_prompt_tokens", "Number of prompt tokens in lmcache"),
    ("lmcache:num_requested_tokens", "Total number of tokens requested from lmcache"),
    ("lmcache:num_retrieve_requests", "Total number of retrieve requests sent to lmcache"),
    ("lmcache:num_store_requests", "Total number of store requests sent to lmcache"),
    ("lmcache:num_stored_tokens", "Total number of tokens stored in lmcache including evicted ones"),
    ("lmcache:num_vllm_hit_tokens", "Number of hit tokens in vllm"),
    ("lmcache:pinned_memory_objs_count", "The number of pinned memory objects"),
    ("lmcache:remote_cache_usage", "Remote cache usage (bytes) of lmcache"),
    ("lmcache:retrieve_hit_rate", "Hit rate of lmcache retrieve requests since last log"),
    ("lmcache:retrieve_speed", "Retrieve speed of lmcache (tokens per second)"),
    ("lmcache:store_speed", "Store speed of lmcache (tokens per second)"),
    ("lmcache:time_to_lookup", "Time to lookup in lmcache (seconds)"),
    ("lmcache:time_to_retrieve", "Time to retrieve from lmcache (seconds)"),
    ("lmcache:time_to_store", "Time to store to lmcache (seconds)"),
    ("vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, by reason."),
    ("vllm:cache_config_info", "Information of the LLMEngine CacheConfig"),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    ("vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."),
    ("vllm:estimated_flops_per_gpu", "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations)."),
    ("vllm:estimated_read_bytes_per_gpu", "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations)."),
    ("vllm:estimated_write_bytes_per_gpu", "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations)."),
    ("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens."),
    ("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens."),
    ("vllm:generation_tokens", "Number of generation tokens processed."),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step."),
    ("vllm:kv_block_idle_before_evict_seconds", "Histogram of idle time before KV cache block eviction. Sampled metrics (controlled by --kv-cache-metrics-sample)."),
    ("vllm:kv_block_lifetime_seconds", "Histogram of KV cache block lifetime from allocation to eviction. Sampled metrics (controlled by --kv-cache-metrics-sample)."),
    ("vllm:kv_block_reuse_gap_seconds", "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent accesses are recorded (ring buffer). Sampled metrics (controlled by --kv-cache-metrics-sample)."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
    ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."),
    ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."),
    ("vllm:nixl_bytes_transferred", "Histogram of bytes transferred per NIXL KV Cache transfers."),
    ("vllm:nixl_num_descriptors", "Histogram of number of descriptors per NIXL  KV Cache transfers."),
    ("vllm:nixl_num_failed_notifications", "Number of failed NIXL KV Cache notifications. Retained for compatibility; these failures are also included in vllm:nixl_num_failed_transfers."),
    ("vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers, including handshake and notification failures. NOTE: KV expiry is tracked separately in vllm:nixl_num_kv_expired_reqs."),
    ("vllm:nixl_num_kv_expired_reqs", "Number of requests that had their KV expire. NOTE: This metric is tracked on the P instance."),
    ("vllm:nixl_num_notifications_after_expiry", "Number of completion notifications for requests that were no longer tracked, usually because their KV lease expired. The KV blocks may have been reused before the transfer finished. Counted per notification (one per remote rank), not per request."),
    ("vllm:nixl_post_time_seconds", "Histogram of transfer post time for NIXL KV Cache transfers."),
    ("vllm:nixl_xfer_time_seconds", "Histogram of transfer duration for NIXL KV Cache transfers."),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:num_requests_kv_fetch_by_stage", "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs an async KV load that has not started; 'in_progress' = load started and not yet reported finished; 'completed_waiting' = load finished, request not running yet."),
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:num_requests_waiting_by_reason", "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting."),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:prompt_tokens_by_source", "Number of prompt tokens by source."),
    ("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."),
    ("vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits."),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."),
    ("vllm:request_generation_tokens", "Number of generation tokens processed."),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens."),
    ("vllm:request_num_preemptions", "Histogram of the number of times a request was preempted."),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter."),
    ("vllm:request_params_n", "Histogram of the n request parameter."),
    ("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens)."),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
    ("vllm:request_success", "Count of successfully processed requests."),
    ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request."),
    ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
    ("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position."),
    ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
    ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    ("vllm:websocket_connections", "Total number of WebSocket connections."),
    ("vllm:websocket_connections_active", "Number of currently active WebSocket connections."),
];

/// The help text of `family` (a counter may be named with its `_total`).
///
/// # Panics
/// Panics for a family missing from [`HELP`]: the demo's and the fixture's
/// tests then fail, so that a new family gets its text here.
pub fn help(family: &str) -> &'static str {
    let find = |name: &str| HELP.iter().find(|(n, _)| *n == name).map(|(_, h)| *h);
    find(family)
        .or_else(|| family.strip_suffix("_total").and_then(find))
        .unwrap_or_else(|| panic!("no help text for {family} in demo::catalogue::HELP"))
}
