//! The signals that stop the server (SIGTERM, SIGINT), handled from before
//! it says it listens, so that one sent on "Listening." is never the
//! default action. SIGHUP's stream is `watch::hangup_signal`.

/// SIGTERM's and SIGINT's streams, made before the exporter says it listens.
pub(crate) struct StopSignals {
    terminate: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Handles SIGTERM and SIGINT from now on (a warning when it cannot).
    pub(crate) fn new() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let stream = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "Cannot listen for {name}.");
                None
            }
        };
        Self {
            terminate: stream(SignalKind::terminate(), "SIGTERM"),
            interrupt: stream(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Completes on SIGTERM or SIGINT.
    pub(crate) async fn received(mut self) {
        async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = next(&mut self.interrupt) => tracing::info!("SIGINT received."),
            _ = next(&mut self.terminate) => tracing::info!("SIGTERM received."),
        }
    }
}
