//! multiproc-exporter: read, merge and expose the per-process metric files of
//! Python's `prometheus_client` multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`).
//!
//! The folders name the stages of the flow; a sample goes strictly downward
//! through them, and dependencies point the other way, from the top to the
//! bottom (`docs/architecture.md` traces one sample through the code):
//!
//! ```text
//!  .db file bytes ─► source ─► records ─► merge ─► families ─► transform ─► expose ─► bytes
//!                    (I/O)                (pure)               (pure)       (pure)
//!
//!  cli ─► server ─► sink ─► pipeline ─► source ─► transform, expose ─► merge ─► format, model
//!                      (sink and source also use http_client, the outgoing HTTP(S) connector)
//! ```
//!
//! * [`format`](mod@format): the `.db` file format, both sides: a file's bytes → record
//!   locations ([`format::layout`]), decoded keys ([`format::key`]), what a
//!   file name says ([`format::file_name`]); and writing files byte-identical
//!   to prometheus_client's ([`format::writer`]).
//! * [`model`]: the vocabulary every stage shares: metric families, samples,
//!   labels, and Go's float formatting ([`model::float`]).
//! * [`merge`]: records of many files → [`model::MetricFamily`] list, exactly
//!   as prometheus_client's `MultiProcessCollector` merges them, planned once
//!   and re-evaluated cheaply on every scrape (no I/O).
//! * [`source`]: what a collection reads, the I/O: the metrics directory
//!   (lists directories, follows links by policy ([`source::link_policy`]),
//!   reads files incrementally and through long-lived maps (`source::mapped`,
//!   the crate's only `unsafe`), and reports bad files with a stable reason
//!   instead of failing) and the configuration's HTTP upstreams
//!   (`source::upstream`).
//! * [`transform`]: the YAML configuration, read raw then validated
//!   ([`transform::config`]); filtering, renaming and constant labels; several
//!   directories' families combined into one list ([`transform::combine`]).
//! * [`expose`]: families → the exact bytes of prometheus_client's text and
//!   OpenMetrics encoders ([`expose::encode`]), content negotiation
//!   ([`expose::negotiate`]), and typed JSON ([`expose::json`]).
//! * [`insight`]: vLLM at a glance: the curated numbers (requests, KV cache,
//!   throughput, prefix-cache hits, TTFT, TPOT) of each collection, kept for
//!   the last minutes, with reset-safe rates (no I/O).
//! * [`pipeline`]: collect → transform → encode, the one path both `dump` and
//!   `serve` take; a parent's subdirectories read as one pod each
//!   ([`pipeline::subdirectories`]).
//! * [`sink`]: where collections go besides a scrape's answer: push with
//!   Prometheus remote write ([`sink::push`]).
//! * [`http_client`]: the one outgoing HTTP(S) connector that upstreams and
//!   push share.
//! * [`server`]: the HTTP face (`multiproc-exporter serve`): router and
//!   layers, scrape coalescing, the status page and API, web configuration,
//!   telemetry.
//! * [`cli`]: the command-line interface of the `multiproc-exporter` binary;
//!   [`build_info`]: what the binary is (version, revision, build date).
//! * `demo` (cargo feature `demo`, on by default): a vLLM-like simulator that
//!   writes real multiprocess files (`multiproc-exporter demo`), kept out of
//!   the core.
//!
//! Deliberate differences from prometheus_client are listed in
//! `docs/differences.md`.
#![deny(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod build_info;
pub mod cli;
#[cfg(feature = "demo")]
pub mod demo;
pub mod expose;
pub mod format;
pub mod http_client;
pub mod insight;
pub mod merge;
pub mod model;
pub mod pipeline;
pub mod server;
pub mod sink;
pub mod source;
pub mod transform;
