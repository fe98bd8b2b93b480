//! The exporter's own telemetry: its metrics ([`self_metrics`],
//! [`web_metrics`], [`writer_metrics`], [`discovery`]'s, pushing's from
//! [`crate::sink::metrics`], the upstreams' from [`crate::source::upstream`],
//! the process values from `source::writers::procfs`), its log output
//! ([`logging`]), how a collection's problems are logged and counted
//! ([`events`]), and the other operational events, each logged and counted by
//! one type ([`operational`]). The metrics are built as families directly
//! ([`crate::model::family_list`]).

pub(crate) mod discovery;
pub(crate) mod events;
pub(crate) mod logging;
pub(crate) mod operational;
pub(crate) mod part_costs;
pub(crate) mod self_metrics;
pub(crate) mod web_metrics;
pub(crate) mod writer_metrics;
