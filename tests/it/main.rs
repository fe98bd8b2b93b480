//! The integration tests: one test binary (ripgrep's `autotests = false`
//! pattern) with one support tree (`support/`), grouped by area. Run one area
//! with `cargo test --test it AREA::` (for example `cargo test --test it faults::`).

mod support;

// Exactness: the same bytes as prometheus_client 0.26.0.
mod conformance;
mod differential;
mod float_format;

// Bad input, faults and reading.
mod compaction;
mod dump_inputs;
mod faults;
mod freshness;
mod fuzz_corpus;
mod identity;
mod memory;

// The layout of the code itself.
mod architecture;
mod discover;
mod least_privilege;
mod live_writers;
mod monotone_sums;
mod reader;
mod robustness;
mod writers;

// The server: HTTP, configuration, web config, limits, load.
mod config;
mod http;
mod limits;
mod load;
mod log_volume;
mod subdirectories;
mod temporary_runs;
mod tls;
mod upstreams;
mod web_config;

// The demo, deployment, rules and dashboards with a real Prometheus.
mod data_parallel;
mod demo;
mod deploy_prometheus;
mod first_hour;
mod gateway_parser;
mod negotiation_e2e;
mod otlp;
mod otlp_delta;
mod prometheus_e2e;
mod push;
mod queries_e2e;
mod ray;
mod ray_agent;
mod ray_dashboard;
mod rules_and_dashboards;
mod status;
mod status_page;
