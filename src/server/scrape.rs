//! One scrape: read and merge the directories, apply the configuration, add
//! the self-metrics, restrict to `?name[]=`, encode. Blocking (file I/O); the
//! HTTP handler runs it on tokio's blocking pool.
//!
//! A single [`Reader`] is shared by all scrapes behind a mutex, so every scrape
//! reuses what earlier ones decoded, and concurrent scrapes are serialised
//! (each still reads the current values).
//!
//! Nothing here fails a scrape: a bad file is left out, logged once when it
//! first turns bad (again only if its reason changes) and counted in the
//! self-metrics; a panic in the reader (a bug) is caught, logged, and the
//! scrape serves the self-metrics alone, with a fresh reader for the next one.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::config::Config;
use crate::encode::{encode, Escaping, Format};
use crate::model::MetricFamily;
use crate::source::{Collection, Input, Problem, Reader, SkipReason};
use crate::transform;

use super::self_metrics::{self, SelfMetrics};

/// Reads, merges and encodes; one per server.
#[derive(Debug)]
pub(crate) struct Scraper {
    inputs: Vec<Input>,
    state: Mutex<ScrapeState>,
}

#[derive(Debug, Default)]
struct ScrapeState {
    reader: Reader,
    /// Paths currently left out, with the reason last logged.
    bad: HashMap<PathBuf, SkipReason>,
    /// Renaming collisions and self-metric clashes already logged.
    logged_collisions: HashSet<(Arc<str>, Arc<str>)>,
}

/// What a scrape asks for.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// Format.
    pub(crate) format: Format,
    /// Escaping.
    pub(crate) escaping: Escaping,
    /// `?name[]=` values, if any.
    pub(crate) names: Option<Vec<String>>,
}

impl Scraper {
    /// A scraper for these directories.
    pub(crate) fn new(dirs: &[PathBuf]) -> Self {
        Self {
            inputs: dirs.iter().cloned().map(Input::Directory).collect(),
            state: Mutex::new(ScrapeState::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ScrapeState> {
        // A panic is caught inside `render`, so poisoning only means an earlier
        // scrape panicked somewhere else; the state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one scrape and returns the encoded body.
    pub(crate) fn render(
        &self,
        request: &Request,
        config: &Config,
        self_metrics: Option<&SelfMetrics>,
    ) -> Vec<u8> {
        let mut state = self.lock();
        let start = Instant::now();
        let collected = catch_unwind(AssertUnwindSafe(|| state.reader.collect(&self.inputs)));
        let panicked = collected.is_err();
        let Collection {
            families,
            problems,
            stats,
        } = collected.unwrap_or_else(|_| {
            tracing::error!(
                "Reading the metric files panicked (a bug); serving no merged metrics this time."
            );
            state.reader = Reader::new();
            Collection::default()
        });
        state.log_problems(&problems);
        let transformed = transform::apply(config, families);
        for c in &transformed.collisions {
            if state
                .logged_collisions
                .insert((c.original.clone(), c.renamed.clone()))
            {
                tracing::warn!(
                    family = %c.original,
                    renamed = %c.renamed,
                    "Dropping a metric family: its new name is already used by another family."
                );
            }
        }
        let mut families = transformed.families;
        if let Some(m) = self_metrics {
            m.observe_scrape(&stats, &problems, families.len(), start.elapsed(), panicked);
            let (own, clashes) = self_metrics::without_clashes(m.families(), &families);
            for name in clashes {
                if state.logged_collisions.insert((name.clone(), name.clone())) {
                    tracing::warn!(
                        family = %name,
                        "Leaving out an exporter self-metric: a merged family has the same name."
                    );
                }
            }
            families.extend(own);
        }
        drop(state);
        let families: Vec<MetricFamily> = match &request.names {
            Some(names) => transform::restrict(&families, names),
            None => families,
        };
        encode(&families, request.format, request.escaping)
    }

    /// Whether at least one directory exists now.
    pub(crate) fn any_directory_exists(&self) -> bool {
        self.inputs.iter().any(|i| i.path().is_dir())
    }
}

impl ScrapeState {
    /// Logs paths that turned bad or changed reason, and those that recovered.
    fn log_problems(&mut self, problems: &[Problem]) {
        let mut now: HashMap<PathBuf, SkipReason> = HashMap::with_capacity(problems.len());
        for problem in problems {
            if self.bad.get(&problem.path) != Some(&problem.reason) {
                log_problem(problem);
            }
            now.insert(problem.path.clone(), problem.reason.clone());
        }
        for (path, reason) in &self.bad {
            if !now.contains_key(path) {
                match reason {
                    SkipReason::Vanished => {}
                    SkipReason::DirectoryMissing => {
                        tracing::debug!(path = %path.display(), "Metrics directory exists now.")
                    }
                    _ => tracing::info!(path = %path.display(), "File is readable again."),
                }
            }
        }
        self.bad = now;
    }
}

fn log_problem(problem: &Problem) {
    let path = problem.path.display();
    let reason = &problem.reason;
    let label = reason.label();
    match reason {
        // The watcher logs directories appearing and disappearing.
        SkipReason::DirectoryMissing => {
            tracing::debug!(%path, "Metrics directory does not exist (yet); serving nothing from it.")
        }
        // Deleted between listing and reading: normal when a process exits.
        SkipReason::Vanished => {
            tracing::debug!(%path, %reason, reason_label = label, "Skipping file.")
        }
        _ => tracing::warn!(%path, %reason, reason_label = label, "Skipping file."),
    }
}
