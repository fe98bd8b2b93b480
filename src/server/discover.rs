//! The server's side of `--discover.processes` (the node agent): what it
//! says at start-up about its privileges, and a collection every
//! `--discover.interval`, so that directories are found, named, and dropped
//! with their pods (their descriptors closed) even while nobody scrapes.
//! Scrapes scan too, when a scan is due ([`crate::pipeline::discovered`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{interval, MissedTickBehavior};

use crate::pipeline::discovered::DiscoverOptions;
use crate::server::Shared;
use crate::source::discover::Privileges;

/// Logs, in one line, the capabilities discovery needs and this process
/// lacks (nothing when it has them).
pub(crate) fn log_privileges(privileges: Privileges) {
    let missing = privileges.missing();
    if missing.is_empty() {
        return;
    }
    tracing::warn!(
        missing = %missing.join(","),
        uid = privileges.uid.map_or_else(String::new, |u| u.to_string()),
        "Missing privileges for --discover.processes: without CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH in the effective set, other users' processes cannot be scanned nor their directories read; only what this user may read is served (see multiproc_exporter_discovery_processes_unreadable and docs/configuration.md)."
    );
}

/// Logs how discovery is set up.
pub(crate) fn log_start(options: &DiscoverOptions) {
    let label = |name: &Option<Arc<str>>| name.as_deref().unwrap_or_default().to_owned();
    tracing::info!(
        pod_log_dir = %options
            .pod_log_dir
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        interval_seconds = options.interval.as_secs_f64(),
        linger_seconds = options.linger.as_secs_f64(),
        namespace_label = %label(&options.labels.namespace),
        pod_label = %label(&options.labels.pod),
        container_label = %label(&options.labels.container),
        pod_uid_label = %label(&options.labels.pod_uid),
        "Discovering multiprocess directories through /proc."
    );
}

/// Collects every `every` until `shutdown` turns true (the first at once:
/// the directories are found at start-up).
pub(crate) async fn run(shared: Arc<Shared>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut ticker = interval(every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = ticker.tick() => {
                let shared = shared.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    shared.collect_now();
                })
                .await;
            }
        }
    }
}
