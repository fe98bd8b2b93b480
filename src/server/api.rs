//! The JSON API and what the status page shows: `/api/v1/snapshot` (the
//! families as typed JSON, [`crate::expose::json`]), `/api/v1/summary` (the
//! curated vLLM numbers and their history, [`crate::insight`]) and
//! `/api/v1/status` (the last collection: directories, files, problems,
//! writers, cost). Schemas: `docs/api.md`.
//!
//! Every endpoint runs (or joins) a collection first, as a scrape does, so the
//! status page keeps the history going without a Prometheus.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::expose::json;
use crate::expose::negotiate::name_params;
use crate::insight::{History, Point, Summary};
use crate::model::MetricFamily;
use crate::pipeline::Gathered;
use crate::transform::restrict;

use super::parts_status::{dropped_of, parts_of, Dropped, DroppedJson, PartJson};

/// What the last collection found, for `/api/v1/status`.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct LastCollection {
    /// Unix time, seconds.
    pub(crate) at: f64,
    /// How long reading and merging took, milliseconds.
    pub(crate) duration_ms: f64,
    /// Input directories that exist / do not.
    pub(crate) directories_present: usize,
    pub(crate) directories_missing: usize,
    /// Files listed, merged, left out (problems), pending (being created).
    pub(crate) files_listed: usize,
    pub(crate) files_merged: usize,
    pub(crate) files_skipped: usize,
    pub(crate) files_pending: usize,
    /// Bytes read from files.
    pub(crate) bytes_read: u64,
    /// Families and samples served from the directories.
    pub(crate) families: usize,
    pub(crate) samples: usize,
    /// Writers live, dead, of unknown liveness.
    pub(crate) writers_live: usize,
    pub(crate) writers_dead: usize,
    pub(crate) writers_unknown: usize,
    /// What was left out and why.
    pub(crate) problems: Vec<ProblemJson>,
    /// With subdirectories or `--discover.processes`: every part (pod,
    /// directory) read, with its labels, directories, files and writers.
    pub(crate) parts: Vec<PartJson>,
    /// The current runs among the directories' temporary subdirectories,
    /// read with them (see `crate::source::temporary`).
    pub(crate) current_subdirectories: Vec<String>,
    /// The runs left by earlier starts of the server: left out (also listed
    /// in `problems`, reason `stale_subdirectory`).
    pub(crate) stale_subdirectories: Vec<StaleJson>,
    /// Discovered directories dropped by this collection's scans (kept by
    /// [`Insight`] for a few minutes, served as the status's `dropped`).
    #[serde(skip)]
    pub(crate) dropped: Vec<DroppedJson>,
}

/// One stale run of [`LastCollection`].
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StaleJson {
    pub(crate) path: String,
    /// Its metric files.
    pub(crate) files: usize,
    /// Whether its writers are known to have exited.
    pub(crate) writers_dead: bool,
    /// Whether a newer run superseded it: it is not served again when that
    /// one goes away (with no run current, none is served).
    pub(crate) superseded: bool,
    /// When anything in it last changed, seconds since the Unix epoch.
    pub(crate) last_change: f64,
}

/// The reason a stale run has in [`LastCollection::problems`].
pub(crate) const STALE_SUBDIRECTORY: &str = "stale_subdirectory";

/// One problem of [`LastCollection`].
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProblemJson {
    pub(crate) path: String,
    /// The stable reason label (as in `multiproc_exporter_scrape_files_skipped`).
    pub(crate) reason: &'static str,
    /// What is wrong, in words.
    pub(crate) message: String,
}

impl LastCollection {
    /// The status of `gathered`, whose transformed families are `families`.
    pub(crate) fn of(
        gathered: &Gathered,
        families: &[MetricFamily],
        at: f64,
        took: Duration,
    ) -> Self {
        let c = &gathered.collection;
        Self {
            at,
            duration_ms: took.as_secs_f64() * 1000.0,
            directories_present: c.stats.directories_present,
            directories_missing: c.stats.directories_missing,
            files_listed: c.stats.files_listed,
            files_merged: c.stats.files_merged + c.stats.files_skipped,
            files_skipped: c.problems.len(),
            files_pending: c.writers.pending,
            bytes_read: c.stats.bytes_read,
            families: families.len(),
            samples: families.iter().map(|f| f.samples.len()).sum(),
            writers_live: c.writers.writers[0],
            writers_dead: c.writers.writers[1],
            writers_unknown: c.writers.writers[2],
            problems: c
                .problems
                .iter()
                .map(|p| ProblemJson {
                    path: p.path.display().to_string(),
                    reason: p.reason.label(),
                    message: p.reason.to_string(),
                })
                .chain(gathered.runs.stale.iter().map(|run| ProblemJson {
                    path: run.path.display().to_string(),
                    reason: STALE_SUBDIRECTORY,
                    message: format!(
                        "A temporary subdirectory left by an earlier run of the server ({} metric files, {}{}): not summed with the current run.",
                        run.files,
                        if run.writers_dead { "its writers exited" } else { "its writers cannot be seen" },
                        if run.superseded { ", superseded by a newer run" } else { "" }
                    ),
                }))
                .collect(),
            current_subdirectories: gathered
                .runs
                .current
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            stale_subdirectories: gathered
                .runs
                .stale
                .iter()
                .map(|run| StaleJson {
                    path: run.path.display().to_string(),
                    files: run.files,
                    writers_dead: run.writers_dead,
                    superseded: run.superseded,
                    last_change: run
                        .last_change
                        .duration_since(UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64()),
                })
                .collect(),
            parts: parts_of(gathered),
            dropped: dropped_of(gathered, at),
        }
    }
}

/// The history and the last collection, updated by every collection.
#[derive(Debug, Default)]
pub(crate) struct Insight {
    history: Mutex<History>,
    last: Mutex<Option<LastCollection>>,
    dropped: Mutex<Dropped>,
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Insight {
    /// Records a collection: its curated numbers and its status.
    pub(crate) fn record(&self, point: Point, mut last: LastCollection) {
        let dropped = std::mem::take(&mut last.dropped);
        self.dropped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(dropped, last.at);
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(point);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(last);
    }

    /// The summary of the history.
    pub(crate) fn summary(&self) -> Summary {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .summary()
    }

    /// The directories dropped in the last few minutes.
    pub(crate) fn dropped(&self) -> Vec<DroppedJson> {
        self.dropped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list()
    }

    /// The last collection's status, if there was one.
    pub(crate) fn last(&self) -> Option<LastCollection> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A JSON endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `/api/v1/snapshot`: the families as typed JSON (`name[]` filters).
    Snapshot,
    /// `/api/v1/summary`: the curated vLLM numbers and their history.
    Summary,
    /// `/api/v1/status`: the last collection.
    Status,
}

impl Endpoint {
    /// The endpoint at `path`, if any.
    pub(crate) fn of(path: &str) -> Option<Self> {
        match path {
            "/api/v1/snapshot" => Some(Self::Snapshot),
            "/api/v1/summary" => Some(Self::Summary),
            "/api/v1/status" => Some(Self::Status),
            _ => None,
        }
    }
}

/// The JSON body of `endpoint`, for a collection that served `families`.
pub(crate) fn answer(
    endpoint: Endpoint,
    families: &[MetricFamily],
    insight: &Insight,
    dirs: &[std::path::PathBuf],
    query: Option<&str>,
) -> Vec<u8> {
    let value = match endpoint {
        Endpoint::Snapshot => {
            let restricted;
            let families = match name_params(query) {
                Some(names) => {
                    restricted = restrict(families, &names);
                    &restricted[..]
                }
                None => families,
            };
            let mut snapshot = json::snapshot(families);
            if let Some(object) = snapshot.as_object_mut() {
                let at = insight.last().map(|l| l.at);
                object.insert("at".to_owned(), serde_json::json!(at));
            }
            snapshot
        }
        Endpoint::Summary => serde_json::to_value(insight.summary()).unwrap_or_default(),
        Endpoint::Status => {
            let last = insight.last();
            serde_json::json!({
                "version": env!("CARGO_PKG_VERSION"),
                "directories": status_directories(dirs, last.as_ref()),
                "last": last,
                "dropped": insight.dropped(),
            })
        }
    };
    let mut body = value.to_string().into_bytes();
    body.push(b'\n');
    body
}

/// `/api/v1/status`'s `directories`: the directories given; without any
/// (the node agent, which finds them through `/proc`), every directory of
/// the last collection's parts, as their writers see them, once each.
fn status_directories(dirs: &[std::path::PathBuf], last: Option<&LastCollection>) -> Vec<String> {
    if !dirs.is_empty() {
        return dirs.iter().map(|d| d.display().to_string()).collect();
    }
    let mut found: Vec<String> = last
        .into_iter()
        .flat_map(|l| &l.parts)
        .flat_map(|p| &p.directories)
        .map(|d| d.dir.clone())
        .collect();
    found.sort();
    found.dedup();
    found
}
