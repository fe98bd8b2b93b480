//! The exporter's own telemetry: its metrics ([`self_metrics`],
//! [`web_metrics`], [`process`]), its log output ([`logging`]), and how a
//! collection's problems are logged and counted ([`events`]). The metrics
//! are built as families directly ([`families`]).

pub(crate) mod events;
pub(crate) mod families;
pub(crate) mod logging;
pub(crate) mod process;
pub(crate) mod self_metrics;
pub(crate) mod web_metrics;
