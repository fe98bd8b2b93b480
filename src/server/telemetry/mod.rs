//! The exporter's own telemetry: its metrics ([`self_metrics`],
//! [`web_metrics`], [`push_metrics`], the process values from `source::writers::procfs`), its log output ([`logging`]), and how a
//! collection's problems are logged and counted ([`events`]), and the other
//! operational events, each logged and counted by one type ([`operational`]). The metrics
//! are built as families directly ([`families`]).

pub(crate) mod events;
pub(crate) mod families;
pub(crate) mod logging;
pub(crate) mod operational;
pub(crate) mod push_metrics;
pub(crate) mod self_metrics;
pub(crate) mod web_metrics;
pub(crate) mod writer_metrics;
