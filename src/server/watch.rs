//! Watching the metric directories and the configuration file with `notify`.
//!
//! Values are written through `mmap`, which produces no inotify events, so
//! every scrape reads the files anyway; the watcher does not drive freshness.
//! It is used for what events can tell:
//!
//! * logging directories appearing and disappearing (at once), and files
//!   being added and removed: per file at `debug`, and at `info` one summary
//!   line per directory every [`RESCAN_INTERVAL`] at most, only when files
//!   came or went (a worker creating its file is normal operation: gunicorn's
//!   worker churn must not write a line per file);
//! * keeping the watches right: a directory that does not exist yet is
//!   waited for by watching its nearest existing ancestor, and a directory
//!   that is deleted and recreated (a new inode) is watched again;
//! * reloading the configuration file when it changes (its directory is
//!   watched, so editors that replace the file and Kubernetes ConfigMap
//!   symlink swaps are seen), after a short quiet period; the file is also
//!   compared with what was last loaded at every periodic rescan.
//!
//! A queue overflow (`Flag::Rescan`) or a watcher error forces a full rescan
//! of the directories; a periodic rescan every [`RESCAN_INTERVAL`] covers
//! filesystems that deliver no events (NFS, some overlay setups) and a
//! watcher that could not be created at all (inotify limits).

use crate::server::telemetry::operational::Rescan;
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};
use tokio::time::{interval, sleep_until, Instant, MissedTickBehavior};

use crate::format::file_name::is_listed_name;
use crate::source::temporary::is_temporary_name;

use crate::server::{ReloadTrigger, Shared};

/// How often the directories are rescanned without any event.
pub(crate) const RESCAN_INTERVAL: Duration = Duration::from_secs(10);

/// How long the configuration file must be quiet before it is reloaded.
const CONFIG_SETTLE: Duration = Duration::from_millis(200);

/// What the watcher knows about one configured directory.
#[derive(Debug, Default)]
struct DirState {
    exists: Option<bool>,
    /// Whether it ever existed since start-up (to tell "never existed" from
    /// "was removed").
    existed: bool,
    files: BTreeSet<OsString>,
    /// Files added since the last summary line.
    added: usize,
    /// Files removed since the last summary line.
    removed: usize,
}

/// Why a configured directory gives nothing to serve, as the periodic
/// warning says it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unservable {
    NeverExisted,
    Removed,
    Unreadable(String),
    Empty,
    OnlySubdirectories(usize),
    NoSubdirectories,
}

impl Unservable {
    /// What is wrong with `path` now, if anything.
    fn of(path: &Path, state: &DirState, per_subdirectory: bool) -> Option<Self> {
        if !path.is_dir() {
            return Some(if state.existed {
                Self::Removed
            } else {
                Self::NeverExisted
            });
        }
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => return Some(Self::Unreadable(e.to_string())),
        };
        let (mut files, mut subdirectories) = (0, 0);
        for entry in entries.flatten() {
            let name = entry.file_name();
            if is_listed_name(name.as_bytes()) {
                files += 1;
            } else if !per_subdirectory
                && is_temporary_name(name.as_bytes())
                && entry.file_type().is_ok_and(|t| t.is_dir())
            {
                // A server's run (SGLang, TensorRT-LLM): its files are
                // served with the directory's; an empty one is nothing.
                files += usize::from(holds_metric_files(&entry.path()));
            } else if entry.file_type().is_ok_and(|t| t.is_dir())
                && !name.to_string_lossy().starts_with('.')
            {
                subdirectories += 1;
            }
        }
        match (per_subdirectory, files, subdirectories) {
            (true, _, 0) => Some(Self::NoSubdirectories),
            (true, _, _) => None,
            (false, 0, 0) => Some(Self::Empty),
            (false, 0, n) => Some(Self::OnlySubdirectories(n)),
            (false, _, _) => None,
        }
    }

    /// Logs the warning for `path`.
    fn warn(&self, path: &Path) {
        let path = path.display();
        match self {
            Self::NeverExisted => tracing::warn!(
                %path,
                "Metrics directory does not exist, so there is nothing to serve: check that --dir (or PROMETHEUS_MULTIPROC_DIR) names the directory the application writes to, as the exporter's container sees it."
            ),
            Self::Removed => tracing::warn!(
                %path,
                "Metrics directory was removed; nothing to serve from it until it is created again."
            ),
            Self::Unreadable(error) => tracing::warn!(
                %path,
                %error,
                "Cannot list the metrics directory; nothing to serve from it (check its permissions for the exporter's user)."
            ),
            Self::Empty => tracing::warn!(
                %path,
                "Metrics directory has no metric files (*.db) yet: is the application running, with PROMETHEUS_MULTIPROC_DIR set to this path before Python started?"
            ),
            Self::OnlySubdirectories(subdirectories) => tracing::warn!(
                %path,
                subdirectories,
                "Metrics directory holds only subdirectories, no metric files: to serve one directory per pod (a DaemonSet), pass --dir.subdirectories-label NAME."
            ),
            Self::NoSubdirectories => tracing::warn!(
                %path,
                "Parent directory has no subdirectories yet (--dir.subdirectories-label): no pod writes here."
            ),
        }
    }
}

/// Whether `dir` has a `*.db` entry.
fn holds_metric_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| is_listed_name(e.file_name().as_bytes()))
    })
}

/// Warns about every directory that gives nothing to serve (called every
/// `--dir.warn-interval` after the first).
fn warn_unservable(shared: &Shared, dirs: &[DirState]) {
    let per_subdirectory = shared.scraper.collection().reads_subdirectories();
    for (path, state) in shared.dirs.iter().zip(dirs) {
        if let Some(problem) = Unservable::of(path, state, per_subdirectory) {
            problem.warn(path);
        }
    }
}

/// The watcher and its watched paths (with the identity each had when watched).
struct Watches {
    watcher: Option<RecommendedWatcher>,
    watched: HashMap<PathBuf, (u64, u64)>,
}

impl Watches {
    /// Makes the watched set exactly `desired`, re-watching paths whose inode changed.
    fn sync(&mut self, desired: &BTreeSet<PathBuf>) {
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        self.watched.retain(|path, identity| {
            let current = identity_of(path);
            let keep = desired.contains(path) && current == Some(*identity);
            if !keep {
                // Fails harmlessly when the kernel already dropped the watch.
                let _ = watcher.unwatch(path);
            }
            keep
        });
        for path in desired {
            if self.watched.contains_key(path) {
                continue;
            }
            let Some(identity) = identity_of(path) else {
                continue;
            };
            match watcher.watch(path, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "Watching.");
                    self.watched.insert(path.clone(), identity);
                }
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "Cannot watch; changes will be noticed by periodic rescans only."
                ),
            }
        }
    }
}

fn identity_of(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The nearest existing ancestor of `path` (or `path` itself).
fn nearest_existing(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|p| !p.as_os_str().is_empty() && p.is_dir())
        .map(Path::to_path_buf)
}

/// Runs until `shutdown` turns true. `hangup` is SIGHUP's stream
/// ([`hangup_signal`]), made by the caller before it says it listens: made
/// here, after the first rescan, a SIGHUP sent in between killed the
/// process (its default action).
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    mut hangup: Option<tokio::signal::unix::Signal>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<notify::Result<Event>>();
    let watcher = match notify::recommended_watcher(move |event| {
        let _ = tx.send(event);
    }) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "Cannot create a file watcher; relying on periodic rescans."
            );
            None
        }
    };
    let mut watches = Watches {
        watcher,
        watched: HashMap::new(),
    };
    let config_dir = shared
        .config_path
        .as_ref()
        .map(|p| p.parent().unwrap_or(Path::new(".")).to_path_buf());
    let mut dirs: Vec<DirState> = shared.dirs.iter().map(|_| DirState::default()).collect();
    rescan(&shared, &mut dirs, &mut watches, config_dir.as_deref());

    let mut ticker = interval(RESCAN_INTERVAL);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate
    let mut config_due: Option<Instant> = None;
    // The first warning about a missing or empty directory waits one
    // interval: at start-up the application may not have written yet.
    let mut warnings = interval(shared.directory_warn_interval);
    warnings.set_missed_tick_behavior(MissedTickBehavior::Delay);
    warnings.tick().await;

    loop {
        let mut dirty = false;
        let mut summarize = false;
        tokio::select! {
            _ = shutdown.changed() => break,
            event = rx.recv() => {
                let Some(event) = event else { break };
                let mut batch = vec![event];
                while batch.len() < 4096 {
                    match rx.try_recv() {
                        Ok(e) => batch.push(e),
                        Err(_) => break,
                    }
                }
                for event in batch {
                    let (d, c) = classify(&shared, config_dir.as_deref(), event);
                    dirty |= d;
                    if c {
                        config_due = Some(Instant::now() + CONFIG_SETTLE);
                    }
                }
            }
            _ = ticker.tick() => {
                dirty = true;
                summarize = true;
                // File systems without events: check every map now and then.
                shared.recheck_all();
                // Also catch configuration changes on filesystems without events.
                if config_due.is_none() && shared.config_path.is_some() {
                    config_due = Some(Instant::now());
                }
            }
            _ = sleep_until(config_due.unwrap_or_else(Instant::now)), if config_due.is_some() => {
                config_due = None;
                let shared = shared.clone();
                let _ = tokio::task::spawn_blocking(move || shared.reload_config(ReloadTrigger::FileChanged)).await;
            }
            _ = warnings.tick() => warn_unservable(&shared, &dirs),
            Some(()) = recv_hangup(&mut hangup) => {
                tracing::info!("SIGHUP received; reloading the configuration.");
                let shared = shared.clone();
                let _ = tokio::task::spawn_blocking(move || shared.reload_config(ReloadTrigger::Signal)).await;
            }
        }
        if dirty {
            rescan(&shared, &mut dirs, &mut watches, config_dir.as_deref());
        }
        if summarize {
            summarize_changes(&shared, &mut dirs);
        }
    }
    summarize_changes(&shared, &mut dirs);
}

/// Logs, at `info`, one line for each directory whose files came or went
/// since the last summary, and starts counting anew.
fn summarize_changes(shared: &Shared, dirs: &mut [DirState]) {
    for (path, state) in shared.dirs.iter().zip(dirs.iter_mut()) {
        if state.added == 0 && state.removed == 0 {
            continue;
        }
        tracing::info!(
            dir = %path.display(),
            added = state.added,
            removed = state.removed,
            files = state.files.len(),
            "Metric files changed."
        );
        state.added = 0;
        state.removed = 0;
    }
}

/// What an event means: (directories may have changed, configuration may
/// have changed). Metric files modified in place (truncated, grown) are handed
/// to the scraper to be checked before their maps are trusted again.
fn classify(
    shared: &Shared,
    config_dir: Option<&Path>,
    event: notify::Result<Event>,
) -> (bool, bool) {
    let event = match event {
        Ok(e) => e,
        Err(e) => {
            Rescan::WatcherError(&e).emit(&shared.self_metrics);
            shared.recheck_all();
            return (true, true);
        }
    };
    if event.need_rescan() {
        Rescan::QueueOverflow.emit(&shared.self_metrics);
        shared.recheck_all();
        return (true, true);
    }
    if matches!(event.kind, EventKind::Modify(ref kind) if !matches!(kind, ModifyKind::Name(_))) {
        let metric_file =
            |p: &&PathBuf| p.file_name().is_some_and(|n| is_listed_name(n.as_bytes()));
        shared.recheck(event.paths.iter().filter(metric_file).cloned());
    }
    let structural = matches!(
        event.kind,
        EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Name(_))
            | EventKind::Any
            | EventKind::Other
    );
    let content = structural
        || matches!(
            event.kind,
            EventKind::Modify(_) | EventKind::Access(AccessKind::Close(AccessMode::Write))
        );
    let in_config_dir = |p: &PathBuf| config_dir.is_some_and(|d| p.parent() == Some(d));
    let config = content && event.paths.iter().any(in_config_dir);
    // Opens and closes (including our own reads) say nothing about the set of files.
    (structural, config)
}

/// Lists every directory, logs what changed, and fixes the watches.
fn rescan(
    shared: &Shared,
    dirs: &mut [DirState],
    watches: &mut Watches,
    config_dir: Option<&Path>,
) {
    let mut desired = BTreeSet::new();
    for (path, state) in shared.dirs.iter().zip(dirs.iter_mut()) {
        let exists = path.is_dir();
        // The files found at start-up are no change (the first line says
        // which directory is watched).
        let first = state.exists.is_none();
        match (state.exists, exists) {
            (None, true) => tracing::info!(path = %path.display(), "Watching metrics directory."),
            (None, false) => tracing::info!(
                path = %path.display(),
                "Metrics directory does not exist yet; waiting for it (not ready until one exists)."
            ),
            (Some(false), true) => {
                tracing::info!(path = %path.display(), "Metrics directory appeared.")
            }
            (Some(true), false) => {
                tracing::warn!(path = %path.display(), "Metrics directory disappeared.")
            }
            _ => {}
        }
        state.exists = Some(exists);
        state.existed |= exists;
        let files = if exists { list(path) } else { BTreeSet::new() };
        let added: Vec<&OsString> = files.difference(&state.files).collect();
        let removed: Vec<&OsString> = state.files.difference(&files).collect();
        for f in &added {
            tracing::debug!(dir = %path.display(), file = %f.to_string_lossy(), "Metric file added.");
        }
        for f in &removed {
            tracing::debug!(dir = %path.display(), file = %f.to_string_lossy(), "Metric file removed.");
        }
        if !first {
            state.added += added.len();
            state.removed += removed.len();
        }
        state.files = files;
        if exists {
            desired.insert(path.clone());
        } else if let Some(ancestor) = path.parent().and_then(nearest_existing) {
            desired.insert(ancestor);
        }
    }
    if let Some(dir) = config_dir.and_then(nearest_existing) {
        desired.insert(dir);
    }
    watches.sync(&desired);
}

/// The `*.db` names in a directory (what a scrape would read).
fn list(dir: &Path) -> BTreeSet<OsString> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name())
                .filter(|n| is_listed_name(n.as_bytes()))
                .collect()
        })
        .unwrap_or_default()
}

/// SIGHUP's stream; from then on SIGHUP no longer ends the process.
pub(crate) fn hangup_signal() -> Option<tokio::signal::unix::Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "Cannot listen for SIGHUP.");
            None
        }
    }
}

async fn recv_hangup(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
