//! The exporter's own telemetry: its metrics ([`self_metrics`],
//! [`web_metrics`], [`process`]) and its log output ([`logging`]).

pub(crate) mod logging;
pub(crate) mod process;
pub(crate) mod self_metrics;
pub(crate) mod web_metrics;
