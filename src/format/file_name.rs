//! What a `.db` file's name says: metric type, gauge mode and process id.
//!
//! prometheus_client derives all three from `os.path.basename(f).split('_')`:
//! the type is the first part, a gauge file's mode is the second, and its pid
//! is the third part minus its last three characters (the `.db`). Those exact
//! rules are reproduced here, including their quirks (`gauge_all_host_12.db`
//! has pid `h`).

use std::fmt;

use crate::model::MetricType;

/// A `Gauge`'s `multiprocess_mode` (`Gauge._MULTIPROC_MODES` in `metrics.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GaugeMode {
    /// `all` (the Python default): one series per pid, with a `pid` label.
    All,
    /// `liveall`: like `all`, file removed by `mark_process_dead`.
    LiveAll,
    /// `min`: minimum across processes.
    Min,
    /// `livemin`: like `min`, file removed by `mark_process_dead`.
    LiveMin,
    /// `max`: maximum across processes.
    Max,
    /// `livemax`: like `max`, file removed by `mark_process_dead`.
    LiveMax,
    /// `sum`: sum across processes.
    Sum,
    /// `livesum`: like `sum`, file removed by `mark_process_dead`.
    LiveSum,
    /// `mostrecent`: the value with the greatest stored timestamp wins.
    MostRecent,
    /// `livemostrecent`: like `mostrecent`, file removed by `mark_process_dead`.
    LiveMostRecent,
}

impl GaugeMode {
    /// All ten modes, in the order of `Gauge._MULTIPROC_MODES`' declaration.
    pub const ALL_MODES: [GaugeMode; 10] = [
        GaugeMode::All,
        GaugeMode::LiveAll,
        GaugeMode::Min,
        GaugeMode::LiveMin,
        GaugeMode::Max,
        GaugeMode::LiveMax,
        GaugeMode::Sum,
        GaugeMode::LiveSum,
        GaugeMode::MostRecent,
        GaugeMode::LiveMostRecent,
    ];

    /// The mode's Python spelling, as used in the file name (`gauge_<mode>_<pid>.db`).
    pub fn as_str(self) -> &'static str {
        match self {
            GaugeMode::All => "all",
            GaugeMode::LiveAll => "liveall",
            GaugeMode::Min => "min",
            GaugeMode::LiveMin => "livemin",
            GaugeMode::Max => "max",
            GaugeMode::LiveMax => "livemax",
            GaugeMode::Sum => "sum",
            GaugeMode::LiveSum => "livesum",
            GaugeMode::MostRecent => "mostrecent",
            GaugeMode::LiveMostRecent => "livemostrecent",
        }
    }

    /// Parses a Python mode name (exact, case-sensitive, like Python).
    pub fn from_name(name: &str) -> Option<GaugeMode> {
        GaugeMode::ALL_MODES
            .into_iter()
            .find(|m| m.as_str() == name)
    }

    /// Whether `mark_process_dead` deletes this mode's files (the `live*` modes).
    pub fn is_live(self) -> bool {
        self.as_str().starts_with("live")
    }

    /// Whether `set` stores the wall-clock timestamp and `inc`/`dec` are forbidden.
    pub fn is_most_recent(self) -> bool {
        matches!(self, GaugeMode::MostRecent | GaugeMode::LiveMostRecent)
    }

    /// How the collector combines this mode's values across processes.
    pub fn merge(self) -> GaugeMerge {
        match self {
            GaugeMode::All | GaugeMode::LiveAll => GaugeMerge::All,
            GaugeMode::Min | GaugeMode::LiveMin => GaugeMerge::Min,
            GaugeMode::Max | GaugeMode::LiveMax => GaugeMerge::Max,
            GaugeMode::Sum | GaugeMode::LiveSum => GaugeMerge::Sum,
            GaugeMode::MostRecent | GaugeMode::LiveMostRecent => GaugeMerge::MostRecent,
        }
    }
}

impl fmt::Display for GaugeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a gauge family combines the values of several processes (the
/// collector's view of a [`GaugeMode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GaugeMerge {
    /// `all`, `liveall` (and any unrecognised mode): one series per process, with a `pid` label.
    All,
    /// `min`, `livemin`.
    Min,
    /// `max`, `livemax`.
    Max,
    /// `sum`, `livesum`.
    Sum,
    /// `mostrecent`, `livemostrecent`: the value with the newest timestamp.
    MostRecent,
}

impl GaugeMerge {
    /// Classifies the mode part of a gauge file name; a mode prometheus_client
    /// does not know merges like `all`, as the collector does.
    pub fn from_mode_name(mode: &str) -> Self {
        GaugeMode::from_name(mode).map_or(GaugeMerge::All, GaugeMode::merge)
    }
}

/// The parts of a multiprocess file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileName {
    /// The first `_`-separated part of the name (`counter`, `gauge`, ...).
    pub type_prefix: String,
    /// The metric type for the prefix, `None` if prometheus_client rejects it.
    pub metric_type: Option<MetricType>,
    /// For gauge files: the second part (`all`, `livesum`, ...), if present.
    pub gauge_mode_name: Option<String>,
    /// For gauge files: the process id Python derives (`parts[2][:-3]`), if
    /// the name has a third part.
    pub gauge_pid: Option<String>,
    /// The writer's process id ([`writer_pid`]), if the name ends in one.
    pub writer_pid: Option<u32>,
    /// Whether the name is an archive's ([`is_archive_name`]).
    pub archive: bool,
}

impl FileName {
    /// Parses a file's base name (without directories).
    pub fn parse(basename: &str) -> Self {
        let mut parts = basename.split('_');
        let type_prefix = parts.next().unwrap_or_default().to_string();
        let metric_type = MetricType::from_file_prefix(&type_prefix);
        let (gauge_mode_name, gauge_pid) = if type_prefix == "gauge" {
            let mode = parts.next().map(str::to_string);
            let pid = parts.next().map(|third| {
                // Python slices code points: parts[2][:-3].
                let keep = third.chars().count().saturating_sub(3);
                third.chars().take(keep).collect::<String>()
            });
            (mode, pid)
        } else {
            (None, None)
        };
        Self {
            type_prefix,
            metric_type,
            gauge_mode_name,
            gauge_pid,
            writer_pid: writer_pid(basename),
            archive: is_archive_name(basename),
        }
    }

    /// How the collector merges this gauge file's values, for gauge files
    /// that name a mode.
    pub fn gauge_merge(&self) -> Option<GaugeMerge> {
        self.gauge_mode_name
            .as_deref()
            .map(GaugeMerge::from_mode_name)
    }

    /// Whether this is a file of a `live*` gauge, which `mark_process_dead`
    /// deletes when its process exits (so it may vanish at any time).
    pub fn is_live_gauge(&self) -> bool {
        self.type_prefix == "gauge"
            && self
                .gauge_mode_name
                .as_deref()
                .is_some_and(|m| m.starts_with("live"))
    }

    /// Whether this is a gauge file (`metric_type` is gauge).
    pub fn is_gauge(&self) -> bool {
        self.metric_type == Some(MetricType::Gauge)
    }
}

/// The process id a file's name gives its writer: the last `_`-separated
/// part before `.db`, when it is a decimal number (`counter_1234.db`,
/// `gauge_livesum_1234.db`). prometheus_client names files after
/// `os.getpid()` unless an application passes its own identifier; `None`
/// for such names (their writer's liveness is unknown).
pub fn writer_pid(basename: &str) -> Option<u32> {
    let stem = basename.strip_suffix(".db")?;
    let (_, last) = stem.rsplit_once('_')?;
    if last.is_empty() || !last.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    last.parse().ok()
}

/// The writer a file's name names: what follows the type (and, for gauge
/// files, the mode) before `.db`, as prometheus_client builds names
/// (`'{}_{}.db'.format(typ, pid)`): `1234` for `counter_1234.db` and
/// `gauge_livesum_1234.db`, `worker-3` for `counter_worker-3.db`, `archive`
/// for an archive. Empty when the name has no such part.
pub fn writer_id(basename: &str) -> &str {
    let stem = basename.strip_suffix(".db").unwrap_or(basename);
    let skip = if stem.starts_with("gauge_") { 2 } else { 1 };
    stem.splitn(skip + 1, '_').nth(skip).unwrap_or("")
}

/// The writer part of an archive's name (`counter_archive.db`): files the
/// exporter's compaction wrote from dead writers' files (final, like them).
pub const ARCHIVE_WRITER: &str = "archive";

/// Whether a file's base name is an archive's (`<kind>_archive.db`).
pub fn is_archive_name(basename: &str) -> bool {
    basename
        .strip_suffix(".db")
        .and_then(|stem| stem.rsplit_once('_'))
        .is_some_and(|(_, writer)| writer == ARCHIVE_WRITER)
}

/// Whether prometheus_client's `glob('*.db')` would list a directory entry
/// with this name: ends in `.db` (case-sensitive) and does not start with `.`.
pub fn is_listed_name(name: &[u8]) -> bool {
    name.ends_with(b".db") && !name.starts_with(b".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_id_is_what_follows_the_type() {
        assert_eq!(writer_id("counter_1234.db"), "1234");
        assert_eq!(writer_id("histogram_1234.db"), "1234");
        assert_eq!(writer_id("gauge_livesum_77.db"), "77");
        assert_eq!(writer_id("gauge_all_host_12.db"), "host_12");
        assert_eq!(writer_id("counter_worker-3.db"), "worker-3");
        assert_eq!(writer_id("counter_archive.db"), "archive");
        assert_eq!(writer_id("counter.db"), "");
        assert_eq!(writer_id("gauge_all.db"), "");
        assert_eq!(writer_id("counter_.db"), "");
    }

    #[test]
    fn writer_pid_is_the_numeric_last_part() {
        assert_eq!(writer_pid("counter_1234.db"), Some(1234));
        assert_eq!(writer_pid("gauge_livesum_77.db"), Some(77));
        assert_eq!(writer_pid("gauge_all_host_12.db"), Some(12));
        assert_eq!(writer_pid("counter_worker-3.db"), None);
        assert_eq!(writer_pid("counter_.db"), None);
        assert_eq!(writer_pid("counter.db"), None);
        assert_eq!(writer_pid("counter_99999999999.db"), None);
    }

    #[test]
    fn parses_python_names() {
        let f = FileName::parse("counter_123.db");
        assert_eq!(f.metric_type, Some(MetricType::Counter));
        assert_eq!(f.gauge_pid, None);

        let g = FileName::parse("gauge_livemostrecent_42.db");
        assert_eq!(g.gauge_merge(), Some(GaugeMerge::MostRecent));
        assert_eq!(g.gauge_pid.as_deref(), Some("42"));
        assert!(g.is_live_gauge());

        let odd = FileName::parse("gauge_all_host_12.db");
        assert_eq!(odd.gauge_pid.as_deref(), Some("h"));

        let short = FileName::parse("gauge_1.db");
        assert_eq!(short.gauge_pid, None);

        assert_eq!(FileName::parse("foo_1.db").metric_type, None);
        assert_eq!(
            FileName::parse("untyped_1.db").metric_type,
            Some(MetricType::Unknown)
        );
        assert_eq!(
            FileName::parse("gauge_weird_1.db").gauge_merge(),
            Some(GaugeMerge::All)
        );
    }

    #[test]
    fn glob_rules() {
        assert!(is_listed_name(b"counter_1.db"));
        assert!(is_listed_name(b"x.db"));
        assert!(!is_listed_name(b".hidden.db"));
        assert!(!is_listed_name(b"counter_1.DB"));
        assert!(!is_listed_name(b"counter_1.db.tmp"));
    }
}
