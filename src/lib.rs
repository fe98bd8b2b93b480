//! multiproc-exporter: read, merge and expose the per-process metric files of
//! Python's `prometheus_client` multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`).
//!
//! The crate is layered so that the core stays pure and testable:
//!
//! * [`layout`], [`key`], [`file_name`]: bytes of one file → record locations
//!   and decoded keys (no I/O).
//! * [`merge`]: records of many files → [`model::MetricFamily`] list, exactly as
//!   prometheus_client's `MultiProcessCollector` merges them, planned once and
//!   re-evaluated cheaply on every scrape (no I/O).
//! * [`encode`] and [`float`]: families → the exact bytes of prometheus_client's
//!   text and OpenMetrics encoders (no I/O).
//! * [`source`], [`link_policy`]: the I/O layer: lists directories, reads files incrementally,
//!   reports bad files instead of failing.
//! * [`config`], [`transform`]: the YAML configuration and how it filters,
//!   renames and labels families (no I/O in `transform`).
//! * [`combine`]: several directories' merged families → one list, each
//!   sample labelled with its directory (no I/O); [`subdirectories`] reads a
//!   parent's subdirectories that way (one pod each, for a DaemonSet).
//! * [`negotiate`]: HTTP content negotiation as prometheus_client does it (no I/O).
//! * [`server`]: the HTTP sidecar (`multiproc-exporter serve`).
//! * [`cli`]: the command-line interface of the `multiproc-exporter` binary.
//!
//! Deliberate differences from prometheus_client are listed in
//! `docs/differences.md`.
#![deny(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod cli;
pub mod demo;
pub mod expose;
pub mod format;
pub mod merge;
pub mod model;
pub mod pipeline;
pub mod server;
pub mod source;
pub mod transform;
