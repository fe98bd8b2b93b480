//! The server's operational events outside a collection, one type each:
//! `emit` writes the event's one log line and updates its counter, so the two
//! cannot drift apart (Vector's `InternalEvent` pattern). The counters'
//! update methods are private to `telemetry`: counting goes through an event.
//! A collection's problems take the same path through [`super::events`].

use std::error::Error;
use std::path::Path;

use super::self_metrics::SelfMetrics;
use super::web_metrics::{RejectReason, WebMetrics};

/// A configuration file (`--config.file`) was reloaded, or failed to.
#[derive(Debug)]
pub(crate) struct ConfigReload<'a> {
    /// The file.
    pub(crate) path: &'a Path,
    /// `Ok(changed)`: in force now, and whether it differs from the last;
    /// `Err`: why the previous configuration stays.
    pub(crate) outcome: Result<bool, &'a dyn Error>,
}

impl ConfigReload<'_> {
    /// Logs and counts the reload.
    pub(crate) fn emit(self, metrics: &SelfMetrics) {
        let path = self.path.display();
        match self.outcome {
            Ok(changed) => {
                metrics.observe_reload(true);
                tracing::info!(%path, changed, "Configuration reloaded.");
            }
            Err(error) => {
                metrics.observe_reload(false);
                tracing::error!(
                    %path,
                    %error,
                    "Configuration reload failed; keeping the previous configuration."
                );
            }
        }
    }
}

/// The web configuration (`--web.config.file`) was reloaded, or failed to.
#[derive(Debug)]
pub(crate) struct WebConfigReload<'a> {
    /// The file.
    pub(crate) path: &'a Path,
    /// `Err`: why the previous web configuration stays.
    pub(crate) outcome: Result<(), &'a dyn Error>,
}

impl WebConfigReload<'_> {
    /// Logs and counts the reload.
    pub(crate) fn emit(self, metrics: &WebMetrics) {
        let path = self.path.display();
        match self.outcome {
            Ok(()) => {
                metrics.observe_web_config_reload(true);
                tracing::info!(%path, "Web configuration reloaded.");
            }
            Err(error) => {
                metrics.observe_web_config_reload(false);
                tracing::error!(
                    %path,
                    %error,
                    "Web configuration reload failed; keeping the previous web configuration."
                );
            }
        }
    }
}

/// The watched directories are rescanned because events may have been lost.
#[derive(Debug)]
pub(crate) enum Rescan<'a> {
    /// The file watcher reported an error.
    WatcherError(&'a dyn Error),
    /// The kernel's event queue overflowed.
    QueueOverflow,
}

impl Rescan<'_> {
    /// Logs and counts the rescan.
    pub(crate) fn emit(self, metrics: &SelfMetrics) {
        metrics.observe_rescan();
        match self {
            Self::WatcherError(error) => {
                tracing::warn!(%error, "File watcher error; rescanning.")
            }
            Self::QueueOverflow => tracing::info!("File watcher queue overflowed; rescanning."),
        }
    }
}

/// A request was refused (logged at debug level: a client's doing, counted
/// so that it shows).
#[derive(Debug)]
pub(crate) enum RequestRejected<'a> {
    /// 401: missing or wrong basic-authentication credentials.
    Unauthorized {
        /// The request's path.
        path: &'a str,
    },
    /// 503: `--web.max-requests` scrapes already in flight.
    TooManyScrapes {
        /// The limit.
        max: usize,
    },
}

impl RequestRejected<'_> {
    /// Logs and counts the refusal.
    pub(crate) fn emit(self, metrics: &WebMetrics) {
        match self {
            Self::Unauthorized { path } => {
                metrics.request_rejected(RejectReason::Unauthorized);
                tracing::debug!(path, "Unauthorized request (401).");
            }
            Self::TooManyScrapes { max } => {
                metrics.request_rejected(RejectReason::MaxRequests);
                tracing::debug!(
                    max_requests = max,
                    "Scrape refused: too many scrapes in flight."
                );
            }
        }
    }
}
