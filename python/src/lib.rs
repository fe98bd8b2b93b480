//! `multiproc_exporter._native`: the Python bindings of multiproc-exporter
//! (PyO3), behind the pure-Python package `multiproc_exporter`
//! (python/multiproc_exporter/).
//!
//! Nothing here reads, merges or encodes by itself: a directory is collected
//! by the library's [`Collector`] (the reader and merge the binary uses) and
//! encoded by the exporter's [`EncodeMemo`] (over
//! [`multiproc_exporter::expose::encode`]). What this module adds is the
//! state per directory across Python collector objects (bounded: dropped
//! after 10 minutes unread, at most 64; reset in a forked child), the
//! version of each family (so that Python reuses the objects of families
//! that did not change), the release of the GIL while reading and merging,
//! and the conversion to Python values.
//! The command line of the `multiproc-exporter` entry point is the library's
//! [`multiproc_exporter::cli::main_from`].

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use multiproc_exporter::expose::encode::{Escaping, Format};
use multiproc_exporter::expose::memo::{same, EncodeMemo};
use multiproc_exporter::model::{MetricFamily, MetricType};
use multiproc_exporter::pipeline::{Collection, Collector};
use multiproc_exporter::source::writers::{LivenessMode, WriterPolicy};
use multiproc_exporter::source::Input;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple, PyType};
use pyo3::PyTypeInfo;

/// The binary's deliberate differences a Python collector may opt into
/// (all off: prometheus_client's exact output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
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
    /// Each family last collected, with the version it got when its content
    /// last changed (versions come from [`NEXT_VERSION`]: never reused, so a
    /// version names one content for the life of the process).
    versions: HashMap<Arc<str>, (MetricFamily, u64)>,
    /// One encoding memo per format and escaping asked (the exporter's
    /// [`EncodeMemo`]: families unchanged since the last exposition are
    /// copied, not encoded again).
    memos: Vec<EncodeMemo>,
}

/// Text a memo keeps at most (as the exporter's scrape memo).
const MEMO_MAX_BYTES: usize = 16 << 20;

/// Files newly skipped by a collection: (path, reason).
type Skipped = Vec<(String, String)>;

/// A directory's state and when it was last read.
#[derive(Debug)]
struct Kept {
    state: Arc<Mutex<DirectoryState>>,
    last_used: Instant,
}

/// The states of the directories read, by directory and set of differences.
type States = BTreeMap<(PathBuf, Differences), Kept>;

/// One state per directory (and set of differences) for the whole process:
/// applications create a new registry and collector on every request.
static STATES: Mutex<States> = Mutex::new(BTreeMap::new());

/// A state not read for this long (milliseconds) is dropped at the next
/// collection of any directory (`_set_idle_limit` changes it for tests).
static IDLE_LIMIT_MS: AtomicU64 = AtomicU64::new(10 * 60 * 1000);

/// At most this many directory states are kept: beyond, the least recently
/// read one not in use is dropped.
const MAX_DIRECTORIES: usize = 64;

/// The next family version (see [`DirectoryState::versions`]).
static NEXT_VERSION: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The lock of [`STATES`], held by the forking thread from just before
    /// `fork()` until just after it, so that the child never inherits it held
    /// by a thread it does not have.
    static HELD_FOR_FORK: RefCell<Option<MutexGuard<'static, States>>> = const { RefCell::new(None) };
}

fn lock_states() -> MutexGuard<'static, States> {
    STATES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The state of `path` (created if new); drops the states that have not been
/// read for the idle limit, and the least recently read beyond
/// [`MAX_DIRECTORIES`], unless a collection is using them.
fn state_of(path: &Path, differences: Differences) -> Arc<Mutex<DirectoryState>> {
    let mut states = lock_states();
    let now = Instant::now();
    let idle_limit = Duration::from_millis(IDLE_LIMIT_MS.load(Ordering::Relaxed));
    states.retain(|_, kept| {
        Arc::strong_count(&kept.state) > 1 || now.duration_since(kept.last_used) <= idle_limit
    });
    let key = (path.to_path_buf(), differences);
    let kept = states.entry(key.clone()).or_insert_with(|| {
        let mut collector = Collector::new();
        collector.set_writer_policy(differences.policy());
        Kept {
            state: Arc::new(Mutex::new(DirectoryState {
                collector,
                reported: HashSet::new(),
                versions: HashMap::new(),
                memos: Vec::new(),
            })),
            last_used: now,
        }
    });
    kept.last_used = now;
    let state = kept.state.clone();
    while states.len() > MAX_DIRECTORIES {
        let oldest = states
            .iter()
            .filter(|(k, kept)| **k != key && Arc::strong_count(&kept.state) == 1)
            .min_by_key(|(_, kept)| kept.last_used)
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => drop(states.remove(&k)),
            None => break,
        }
    }
    state
}

/// Collects `path` (no GIL needed) and returns the families with the skipped
/// files not reported before (path, reason). With `versions`, also the
/// version of each family (see [`DirectoryState::versions`]).
fn collect_directory(
    path: PathBuf,
    differences: Differences,
    versions: bool,
) -> (Vec<MetricFamily>, Vec<u64>, Skipped) {
    let state = state_of(&path, differences);
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    collect_into(&mut state, path, versions)
}

/// The exposition of `path` in `format` and `escaping` (no GIL needed),
/// through the directory's memo, and the skipped files not reported before.
fn expose_directory(
    path: PathBuf,
    differences: Differences,
    format: Format,
    escaping: Escaping,
) -> (Vec<u8>, Skipped) {
    let state = state_of(&path, differences);
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let (families, _, problems) = collect_into(&mut state, path, false);
    let at = match state
        .memos
        .iter()
        .position(|m| m.encodes() == (format, escaping))
    {
        Some(at) => at,
        None => {
            state
                .memos
                .push(EncodeMemo::new(format, escaping, MEMO_MAX_BYTES));
            state.memos.len() - 1
        }
    };
    let memo = &mut state.memos[at];
    memo.encode(&families, 0);
    let body = memo.body().to_vec();
    memo.release_unkept();
    (body, problems)
}

/// [`collect_directory`] with the directory's state locked.
fn collect_into(
    state: &mut DirectoryState,
    path: PathBuf,
    versions: bool,
) -> (Vec<MetricFamily>, Vec<u64>, Skipped) {
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
    let mut numbers = Vec::new();
    if versions {
        numbers.reserve(families.len());
        let kept = &mut state.versions;
        for family in &families {
            let number = match kept.get_mut(&family.name) {
                Some((last, number)) if same(last, family) => *number,
                Some((last, number)) => {
                    *last = family.clone();
                    *number = NEXT_VERSION.fetch_add(1, Ordering::Relaxed);
                    *number
                }
                None => {
                    let number = NEXT_VERSION.fetch_add(1, Ordering::Relaxed);
                    kept.insert(family.name.clone(), (family.clone(), number));
                    number
                }
            };
            numbers.push(number);
        }
        if kept.len() > families.len() {
            let current: HashSet<&str> = families.iter().map(|f| &*f.name).collect();
            kept.retain(|name, _| current.contains(&**name));
        }
    }
    (families, numbers, fresh)
}

/// The Python string of `text`, made once per `strings`.
fn interned<'a, 'py>(
    py: Python<'py>,
    strings: &mut HashMap<&'a str, Bound<'py, PyString>>,
    text: &'a str,
) -> Bound<'py, PyString> {
    strings
        .entry(text)
        .or_insert_with(|| PyString::new(py, text))
        .clone()
}

/// The samples of `family` as prometheus_client's collector makes them:
/// `[sample_class((sample name, {label: value}, value, None, ...))]`, each
/// tuple as long as `sample_class`'s fields (at least 3), made by
/// `tuple.__new__(sample_class, fields)` (prometheus_client's `Sample` is a
/// named tuple: this is its `_make` without a Python call per sample), or
/// plain 3-tuples without `sample_class`.
fn samples_of<'py>(
    py: Python<'py>,
    family: &MetricFamily,
    sample_class: Option<&Bound<'py, PyType>>,
) -> PyResult<Bound<'py, PyList>> {
    let (width, tuple_new) = match sample_class {
        Some(class) => (
            class.getattr("_fields")?.len()?.max(3),
            Some(PyTuple::type_object(py).getattr("__new__")?),
        ),
        None => (3, None),
    };
    // prometheus_client's dicts: the labels sorted, then the label it
    // appends (a bucket's `le`, an `all` gauge's `pid`).
    let appended = match family.metric_type {
        MetricType::Histogram => Some("le"),
        MetricType::Gauge => Some("pid"),
        _ => None,
    };
    // Label names and values repeat from sample to sample: one Python
    // string each.
    let mut strings: HashMap<&str, Bound<'py, PyString>> = HashMap::new();
    let mut samples = Vec::with_capacity(family.samples.len());
    for sample in &family.samples {
        let appended = appended.filter(|name| *name != "le" || sample.name.ends_with("_bucket"));
        let labels = PyDict::new(py);
        let mut last = None;
        for (name, value) in sample.labels.iter() {
            if Some(&**name) == appended {
                last = Some(value);
            } else {
                labels.set_item(
                    interned(py, &mut strings, name),
                    interned(py, &mut strings, value),
                )?;
            }
        }
        if let (Some(name), Some(value)) = (appended, last) {
            labels.set_item(
                interned(py, &mut strings, name),
                interned(py, &mut strings, value),
            )?;
        }
        let mut fields: Vec<Bound<'py, PyAny>> = Vec::with_capacity(width);
        fields.push(interned(py, &mut strings, &sample.name).into_any());
        fields.push(labels.into_any());
        fields.push(PyFloat::new(py, sample.value).into_any());
        fields.resize_with(width, || py.None().into_bound(py));
        let fields = PyTuple::new(py, fields)?.into_any();
        samples.push(match (&tuple_new, sample_class) {
            (Some(new), Some(class)) => new.call1((class, fields))?,
            _ => fields,
        });
    }
    PyList::new(py, samples)
}

/// The merged families of directory `path` as
/// `[(name, version, (help, type, samples))]` (samples as [`samples_of`]
/// makes them, of `sample_class`),
/// and the files newly skipped as `[(path, reason)]`. A family whose version
/// is `known[name]` comes as `(name, version, None)`: its content is the one
/// the caller saw with that version.
#[pyfunction]
#[pyo3(signature = (path, skip_dead_live_gauges=false, drop_dead_gauges=false, process_metrics=false, known=None, sample_class=None))]
fn collect<'py>(
    py: Python<'py>,
    path: PathBuf,
    skip_dead_live_gauges: bool,
    drop_dead_gauges: bool,
    process_metrics: bool,
    known: Option<Bound<'py, PyDict>>,
    sample_class: Option<Bound<'py, PyType>>,
) -> PyResult<(Bound<'py, PyList>, Skipped)> {
    let differences = Differences {
        skip_dead_live_gauges,
        drop_dead_gauges,
        process_metrics,
    };
    let (families, versions, problems) = py.detach(|| collect_directory(path, differences, true));
    let mut out = Vec::with_capacity(families.len());
    for (family, version) in families.iter().zip(versions) {
        let name = PyString::new(py, &family.name);
        let seen = match &known {
            Some(known) => match known.get_item(&name)? {
                Some(v) => v.extract::<u64>().ok() == Some(version),
                None => false,
            },
            None => false,
        };
        let payload = if seen {
            py.None()
        } else {
            (
                &*family.help,
                family.metric_type.as_str(),
                samples_of(py, family, sample_class.as_ref())?,
            )
                .into_pyobject(py)?
                .into_any()
                .unbind()
        };
        out.push((name, version, payload));
    }
    Ok((PyList::new(py, out)?, problems))
}

/// The exposition of directory `path` (text, or OpenMetrics) as bytes, and
/// the files newly skipped as `[(path, reason)]`. `escaping` is
/// prometheus_client's name for the escaping of names: `underscores` or
/// `allow-utf-8` (others raise `ValueError`).
#[pyfunction]
#[pyo3(signature = (path, openmetrics=false, skip_dead_live_gauges=false, drop_dead_gauges=false, process_metrics=false, escaping="underscores".to_owned()))]
fn exposition<'py>(
    py: Python<'py>,
    path: PathBuf,
    openmetrics: bool,
    skip_dead_live_gauges: bool,
    drop_dead_gauges: bool,
    process_metrics: bool,
    escaping: String,
) -> PyResult<(Bound<'py, PyBytes>, Skipped)> {
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
    let escaping = match escaping.as_str() {
        "underscores" => Escaping::Underscores,
        "allow-utf-8" => Escaping::AllowUtf8,
        other => {
            return Err(PyValueError::new_err(format!(
                "escaping {other:?} is not encoded natively"
            )))
        }
    };
    let (body, problems) = py.detach(|| expose_directory(path, differences, format, escaping));
    Ok((PyBytes::new(py, &body), problems))
}

/// Drops every directory's state (for tests; a child process after
/// `fork()` gets the same through [`after_fork_in_child`]).
#[pyfunction]
fn _reset() {
    lock_states().clear();
}

/// The directories whose state is kept (for tests).
#[pyfunction]
fn _kept_directories() -> Vec<PathBuf> {
    lock_states().keys().map(|(path, _)| path.clone()).collect()
}

/// Sets how long a directory's state is kept after its last read (for
/// tests; default 10 minutes).
#[pyfunction]
fn _set_idle_limit(seconds: f64) {
    let ms = (seconds.max(0.0) * 1000.0) as u64;
    IDLE_LIMIT_MS.store(ms, Ordering::Relaxed);
}

/// `os.register_at_fork(before=...)`: takes the lock of the directory
/// states, so that no other thread holds it when the process forks.
#[pyfunction]
fn before_fork() {
    // With the GIL held: whoever holds this lock does not need the GIL to
    // release it.
    let guard = lock_states();
    HELD_FOR_FORK.with(|held| *held.borrow_mut() = Some(guard));
}

/// `os.register_at_fork(after_in_parent=...)`: releases the lock taken by
/// [`before_fork`].
#[pyfunction]
fn after_fork_in_parent() {
    HELD_FOR_FORK.with(|held| drop(held.borrow_mut().take()));
}

/// `os.register_at_fork(after_in_child=...)`: the child starts without any
/// directory state (the parent's maps, the helper thread and any lock held
/// by the parent's other threads are not the child's).
#[pyfunction]
fn after_fork_in_child() {
    let held = HELD_FOR_FORK.with(|held| held.borrow_mut().take());
    match held {
        Some(mut states) => states.clear(),
        // Not taken before the fork (the hooks were registered in between):
        // never wait for a lock a vanished thread may hold.
        None => {
            if let Ok(mut states) = STATES.try_lock() {
                states.clear();
            }
        }
    }
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
    m.add_function(wrap_pyfunction!(_reset, m)?)?;
    m.add_function(wrap_pyfunction!(_kept_directories, m)?)?;
    m.add_function(wrap_pyfunction!(_set_idle_limit, m)?)?;
    m.add_function(wrap_pyfunction!(before_fork, m)?)?;
    m.add_function(wrap_pyfunction!(after_fork_in_parent, m)?)?;
    m.add_function(wrap_pyfunction!(after_fork_in_child, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
