//! `multiproc_exporter._native`: the Python bindings of multiproc-exporter
//! (PyO3), behind the pure-Python package `multiproc_exporter`
//! (python/multiproc_exporter/).
//!
//! Nothing here reads, merges or encodes by itself: a directory is collected
//! by the library's [`Collector`] (the reader and merge the binary uses) and
//! encoded by [`multiproc_exporter::expose::encode`]. What this module adds is
//! the state per directory across Python collector objects, the release of
//! the GIL while reading and merging, and the conversion to Python values.
//! The command line of the `multiproc-exporter` entry point is the library's
//! [`multiproc_exporter::cli::main_from`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use multiproc_exporter::expose::encode::{encode, Escaping, Format};
use multiproc_exporter::model::{MetricFamily, MetricType};
use multiproc_exporter::pipeline::{Collection, Collector};
use multiproc_exporter::source::writers::{LivenessMode, WriterPolicy};
use multiproc_exporter::source::Input;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

/// The binary's deliberate differences a Python collector may opt into
/// (all off: prometheus_client's exact output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
struct Differences {
    /// Leave out dead writers' `live*` gauges (the binary's default).
    skip_dead_live_gauges: bool,
    /// Leave out dead writers' `sum`, `min` and `max` gauges too.
    drop_dead_gauges: bool,
    /// Serve the live writers' `process_*` metrics.
    process_metrics: bool,
}

impl Differences {
    fn policy(self) -> WriterPolicy {
        // prometheus_client's collector reads `path/*.db` only: the
        // temporary subdirectories a server may leave (SGLang's) are not
        // read here, whatever the options.
        if !(self.skip_dead_live_gauges || self.drop_dead_gauges || self.process_metrics) {
            return WriterPolicy {
                temporary_runs: false,
                collector_writes: true,
                ..WriterPolicy::exact()
            };
        }
        WriterPolicy {
            liveness: LivenessMode::Auto,
            keep_dead_live_gauges: !self.skip_dead_live_gauges,
            drop_dead_gauges: self.drop_dead_gauges,
            process_metrics: self.process_metrics,
            pending_grace: Duration::from_secs(10),
            // Sums in file order, as prometheus_client adds them.
            fold_dead: false,
            compact_dead: false,
            temporary_runs: false,
            remove_stale_runs: false,
            // The process that collects may write too (a gunicorn or uvicorn
            // worker serving /metrics): its own files are live.
            collector_writes: true,
        }
    }
}

/// What is kept for one directory between collections.
#[derive(Debug)]
struct DirectoryState {
    collector: Collector,
    /// Files reported as skipped and still skipped: each is logged once.
    reported: HashSet<PathBuf>,
}

/// Files newly skipped by a collection: (path, reason).
type Skipped = Vec<(String, String)>;

type States = Mutex<HashMap<(PathBuf, Differences), Arc<Mutex<DirectoryState>>>>;

/// One state per directory (and set of differences) for the whole process:
/// applications create a new registry and collector on every request.
fn state_of(path: &Path, differences: Differences) -> Arc<Mutex<DirectoryState>> {
    static STATES: OnceLock<States> = OnceLock::new();
    let mut states = STATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    states
        .entry((path.to_path_buf(), differences))
        .or_insert_with(|| {
            let mut collector = Collector::new();
            collector.set_writer_policy(differences.policy());
            Arc::new(Mutex::new(DirectoryState {
                collector,
                reported: HashSet::new(),
            }))
        })
        .clone()
}

/// Collects `path` (no GIL needed) and returns the families with the skipped
/// files not reported before (path, reason).
fn collect_directory(path: PathBuf, differences: Differences) -> (Vec<MetricFamily>, Skipped) {
    let state = state_of(&path, differences);
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let Collection {
        families, problems, ..
    } = state.collector.collect(&[Input::Directory(path)]);
    let mut fresh = Vec::new();
    let mut now = HashSet::with_capacity(problems.len());
    for problem in problems {
        if !state.reported.contains(&problem.path) {
            fresh.push((
                problem.path.display().to_string(),
                problem.reason.to_string(),
            ));
        }
        now.insert(problem.path);
    }
    // A file that reads again and breaks later is reported again.
    state.reported = now;
    (families, fresh)
}

/// The merged families of directory `path` as
/// `[(name, help, type, [(sample name, {label: value}, value)])]`, and the
/// files newly skipped as `[(path, reason)]`.
#[pyfunction]
#[pyo3(signature = (path, skip_dead_live_gauges=false, drop_dead_gauges=false, process_metrics=false))]
fn collect<'py>(
    py: Python<'py>,
    path: PathBuf,
    skip_dead_live_gauges: bool,
    drop_dead_gauges: bool,
    process_metrics: bool,
) -> PyResult<(Bound<'py, PyList>, Skipped)> {
    let differences = Differences {
        skip_dead_live_gauges,
        drop_dead_gauges,
        process_metrics,
    };
    let (families, problems) = py.detach(|| collect_directory(path, differences));
    let mut out = Vec::with_capacity(families.len());
    for family in &families {
        let mut samples = Vec::with_capacity(family.samples.len());
        for sample in &family.samples {
            // prometheus_client's dicts: the labels sorted, then the label it
            // appends (a bucket's `le`, an `all` gauge's `pid`).
            let appended = match family.metric_type {
                MetricType::Histogram if sample.name.ends_with("_bucket") => Some("le"),
                MetricType::Gauge => Some("pid"),
                _ => None,
            };
            let labels = PyDict::new(py);
            let mut last = None;
            for (name, value) in sample.labels.iter() {
                if Some(&**name) == appended {
                    last = Some(value);
                } else {
                    labels.set_item(&**name, &**value)?;
                }
            }
            if let (Some(name), Some(value)) = (appended, last) {
                labels.set_item(name, &**value)?;
            }
            samples.push((&*sample.name, labels, sample.value));
        }
        out.push((
            &*family.name,
            &*family.help,
            family.metric_type.as_str(),
            PyList::new(py, samples)?,
        ));
    }
    Ok((PyList::new(py, out)?, problems))
}

/// The exposition of directory `path` (text, or OpenMetrics) as bytes, and
/// the files newly skipped as `[(path, reason)]`.
#[pyfunction]
#[pyo3(signature = (path, openmetrics=false, skip_dead_live_gauges=false, drop_dead_gauges=false, process_metrics=false))]
fn exposition<'py>(
    py: Python<'py>,
    path: PathBuf,
    openmetrics: bool,
    skip_dead_live_gauges: bool,
    drop_dead_gauges: bool,
    process_metrics: bool,
) -> (Bound<'py, PyBytes>, Skipped) {
    let differences = Differences {
        skip_dead_live_gauges,
        drop_dead_gauges,
        process_metrics,
    };
    let format = if openmetrics {
        Format::OpenMetrics
    } else {
        Format::Text
    };
    let (body, problems) = py.detach(|| {
        let (families, problems) = collect_directory(path, differences);
        (encode(&families, format, Escaping::Underscores), problems)
    });
    (PyBytes::new(py, &body), problems)
}

/// Runs the `multiproc-exporter` command line with `args` (the program's
/// name first), without the GIL, and returns its exit status.
#[pyfunction]
fn run_cli(py: Python<'_>, args: Vec<String>) -> u8 {
    let code = py.detach(|| multiproc_exporter::cli::main_from(args));
    // ExitCode does not tell its number; find it among the 256.
    (0..=u8::MAX)
        .find(|n| ExitCode::from(*n) == code)
        .unwrap_or(1)
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(collect, m)?)?;
    m.add_function(wrap_pyfunction!(exposition, m)?)?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
