//! Keeping the web configuration in force and reloading it: the configuration
//! file and every file it names are looked at once a second
//! ([`RELOAD_CHECK_INTERVAL`]) and reloaded when one of them changed; a file
//! that turns invalid is logged, counted, and the previous configuration
//! stays in force.

use crate::server::telemetry::operational::WebConfigReload;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::schema::{error, WebConfigError};
use super::{parse, read_file, Contents, WebConfig};
use crate::server::telemetry::web_metrics::WebMetrics;

/// How often the configuration file and the files it names are checked for
/// changes.
pub(crate) const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What `stat` says about one file: enough to notice a rewrite, a rename
/// over it, or a Kubernetes Secret's symlink swap.
type Stamp = Option<(u64, u64, u64, i64, i64, i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path).ok().map(|m| {
        (
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        )
    })
}

/// What the reload check remembers between runs.
#[derive(Debug)]
struct LastSeen {
    /// The configuration file and the files the last parseable version named.
    watched: Vec<PathBuf>,
    /// Their stamps at the last check.
    stamps: Vec<Stamp>,
    /// The contents at the last load attempt.
    contents: Contents,
}

/// The web configuration in force, and how to reload it.
#[derive(Debug)]
pub(crate) struct WebSettings {
    path: Option<PathBuf>,
    current: RwLock<Arc<WebConfig>>,
    last: Mutex<Option<LastSeen>>,
    metrics: WebMetrics,
}

impl WebSettings {
    /// Loads `path` (no file: plain HTTP, no authentication). An error is
    /// fatal at start-up.
    pub(crate) fn load(
        path: Option<PathBuf>,
        metrics: WebMetrics,
    ) -> Result<Arc<Self>, WebConfigError> {
        let settings = Self {
            path,
            current: RwLock::new(Arc::new(WebConfig::default())),
            last: Mutex::new(None),
            metrics,
        };
        if let Some(path) = &settings.path {
            let (seen, loaded) = attempt(path);
            let config = loaded?;
            for warning in &config.warnings {
                tracing::warn!(path = %path.display(), "{warning}");
            }
            *settings.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
            *settings.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(seen);
        }
        settings.metrics.observe_initial_web_config();
        Ok(Arc::new(settings))
    }

    /// The configuration in force.
    pub(crate) fn current(&self) -> Arc<WebConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the server speaks TLS (decided at start-up).
    pub(crate) fn tls_enabled(&self) -> bool {
        self.current().tls.is_some()
    }

    /// The exporter's own HTTP metrics.
    pub(crate) fn metrics(&self) -> &WebMetrics {
        &self.metrics
    }

    /// Reloads when the file or a file it names changed. Blocking (`stat`,
    /// and reads when something changed).
    pub(crate) fn check_for_changes(&self) {
        let Some(path) = &self.path else { return };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(seen) = last.as_ref() {
            let stamps: Vec<Stamp> = seen.watched.iter().map(|p| stamp(p)).collect();
            if stamps == seen.stamps {
                return;
            }
        }
        let (seen, loaded) = attempt(path);
        let unchanged = last.as_ref().is_some_and(|l| l.contents == seen.contents);
        *last = Some(seen);
        drop(last);
        if unchanged {
            return;
        }
        let loaded = loaded.and_then(|config| {
            if config.tls.is_some() != self.tls_enabled() {
                Err(error(
                    "switching TLS on or off needs a restart (the listeners keep their protocol)",
                ))
            } else {
                Ok(config)
            }
        });
        match loaded {
            Ok(config) => {
                for warning in &config.warnings {
                    tracing::warn!(path = %path.display(), "{warning}");
                }
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                WebConfigReload {
                    path,
                    outcome: Ok(()),
                }
                .emit(&self.metrics);
            }
            Err(e) => WebConfigReload {
                path,
                outcome: Err(&e),
            }
            .emit(&self.metrics),
        }
    }

    /// Checks for changes every [`RELOAD_CHECK_INTERVAL`] until `shutdown`
    /// turns true.
    pub(crate) async fn watch(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        if self.path.is_none() {
            return;
        }
        let mut interval = tokio::time::interval(RELOAD_CHECK_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            let settings = self.clone();
            let _ = tokio::task::spawn_blocking(move || settings.check_for_changes()).await;
        }
    }
}

/// Reads and validates the file at `path`; what was seen, and the result.
fn attempt(path: &Path) -> (LastSeen, Result<WebConfig, WebConfigError>) {
    let base = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let config_stamp = stamp(path);
    let config_bytes = read_file(path);
    let parsed = match &config_bytes {
        Ok(bytes) => std::str::from_utf8(bytes)
            .map_err(|e| error(format!("invalid web configuration: not UTF-8: {e}")))
            .and_then(|text| parse(text, &base)),
        Err(e) => Err(error(format!("cannot read {}: {e}", path.display()))),
    };
    let mut watched = vec![path.to_path_buf()];
    let mut stamps = vec![config_stamp];
    let mut contents = vec![(path.to_path_buf(), config_bytes)];
    if let Ok(parsed) = &parsed {
        for file in parsed.referenced() {
            stamps.push(stamp(&file));
            let bytes = read_file(&file);
            contents.push((file.clone(), bytes));
            watched.push(file);
        }
    }
    let contents = Contents(contents);
    let result = parsed.and_then(|p| WebConfig::validate(&p, &contents));
    (
        LastSeen {
            watched,
            stamps,
            contents,
        },
        result,
    )
}
