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
