//! What `/proc` says about a process: when it started, which files it holds
//! open, which pid it has in its own namespace, and the standard `process_*`
//! values, read from `/proc/<pid>` (Linux only). The exporter reads its own
//! (`/proc/self`) the same way. A value that cannot be read is left out
//! rather than exported as a bogus one, as the client-library guidelines ask.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::model::{Labels, MetricFamily, MetricType, Sample};

/// Where the kernel's process table is mounted.
pub const PROC: &str = "/proc";

/// Kernel clock ticks per second as `/proc` reports them (`USER_HZ`, which
/// Linux fixes at 100 for user space on every architecture it exposes
/// `/proc/<pid>/stat` on).
const USER_HZ: f64 = 100.0;

/// `/proc/<pid>` of a process.
pub fn process_dir(pid: u32) -> PathBuf {
    Path::new(PROC).join(pid.to_string())
}

/// The fields of a `stat` file after the command name (field 3 onwards).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().collect())
}

/// Field `n` (numbered as in proc(5)) of a `stat` file's fields.
fn stat_field(fields: &[&str], n: usize) -> Option<u64> {
    fields.get(n.checked_sub(3)?).and_then(|f| f.parse().ok())
}

/// The system's boot time in whole seconds since the Unix epoch (`btime`),
/// which `process_start_time_seconds` builds on as client libraries do.
fn boot_time() -> Option<u64> {
    static BOOT: OnceLock<Option<u64>> = OnceLock::new();
    *BOOT.get_or_init(|| {
        std::fs::read_to_string(Path::new(PROC).join("stat"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// The system's boot time in seconds since the Unix epoch, to the hundredth
/// of a second: the clock now less `/proc/uptime` (which counts from boot in
/// the clock process start times count in). `btime` drops the fraction of a
/// second, so a start time built on it can be up to a second early. Read
/// anew at each call: the offset between the two clocks moves whenever the
/// wall clock is stepped (issue 53).
fn precise_boot_time() -> Option<f64> {
    let uptime = std::fs::read_to_string(Path::new(PROC).join("uptime")).ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    boot_from_uptime(&uptime, now)
}

/// Seconds since boot (`/proc/uptime`, the clock process start times count
/// in), to the hundredth of a second.
pub fn since_boot() -> Option<f64> {
    let uptime = std::fs::read_to_string(Path::new(PROC).join("uptime")).ok()?;
    let up: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    (up.is_finite() && up >= 0.0).then_some(up)
}

/// When the process of `dir` (`/proc/<pid>`) started, in seconds since boot
/// (no wall clock involved: immune to its steps).
/// `None` too for a zombie: a process that exited but is not reaped yet
/// (for seconds, or for ever under a pid 1 that reaps nothing) holds no file
/// and runs nothing.
pub fn start_since_boot(dir: &Path) -> Option<f64> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let fields = stat_fields(&stat)?;
    if exited(&fields) {
        return None;
    }
    Some(stat_field(&fields, 22)? as f64 / USER_HZ)
}

/// Whether a `stat` file's fields are those of a process that exited and
/// awaits its parent (state `Z`, or `X` while it is being reaped).
fn exited(fields: &[&str]) -> bool {
    matches!(fields.first(), Some(&("Z" | "X")))
}

/// The boot time that `/proc/uptime`'s text `uptime` gives at Unix time
/// `now`.
fn boot_from_uptime(uptime: &str, now: f64) -> Option<f64> {
    let up: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    (up.is_finite() && up >= 0.0 && up <= now).then_some(now - up)
}

/// How far [`start_time`] may be from the true start: `/proc/uptime` and the
/// start ticks are both cut to a hundredth of a second, and file times come
/// from a clock that lags by up to a kernel tick (at most 10 ms). Callers
/// comparing a start with a file's creation allow this much.
pub const START_TIME_PRECISION_SECONDS: f64 = 0.05;

/// When the process of `dir` (`/proc/<pid>`) started, in seconds since the
/// Unix epoch, to within [`START_TIME_PRECISION_SECONDS`] (`None` if it does
/// not exist). Unlike `process_start_time_seconds` ([`ProcessStats`], which
/// builds on `btime` as prometheus_client's and Go's process collectors do),
/// this does not drop the boot time's fraction of a second.
pub fn start_time(dir: &Path) -> Option<f64> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let fields = stat_fields(&stat)?;
    if exited(&fields) {
        return None;
    }
    Some(precise_boot_time()? + stat_field(&fields, 22)? as f64 / USER_HZ)
}

/// A live process, known by its start time and an open file of its
/// `/proc/<pid>` (`comm`, the cheapest to read): one `pread` and no path
/// lookup tell it still runs. The file belongs to the process it was opened
/// for: once that process is gone, reading fails, even if a later process
/// has its pid. Liveness checks of known writers read it on every scrape.
#[derive(Debug)]
pub struct ProcessHandle {
    comm: std::fs::File,
    start: f64,
}

impl ProcessHandle {
    /// The process of `dir` (`/proc/<pid>`), if one runs there now.
    pub fn open(dir: &Path) -> Option<Self> {
        // The file first: a start time read after it is this process's or,
        // if the pid was reused in between, the check below fails.
        let comm = std::fs::File::open(dir.join("comm")).ok()?;
        let start = start_since_boot(dir)?;
        let handle = Self { comm, start };
        handle.start_time().map(|_| handle)
    }

    /// The process's start time (seconds since boot, as
    /// [`start_since_boot`] gave it when the handle was opened); `None` once
    /// the process is gone.
    pub fn start_time(&self) -> Option<f64> {
        use std::os::unix::fs::FileExt as _;
        let mut buf = [0u8; 64];
        matches!(self.comm.read_at(&mut buf, 0), Ok(n) if n > 0).then_some(self.start)
    }
}

/// The process's pid in its innermost pid namespace (the last `NSpid` field
/// of `status`), which is the pid it names its files after.
pub fn innermost_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last())
        .and_then(|v| v.parse().ok())
}

/// The process's parent's pid (field 4 of `stat`).
pub fn parent_pid(dir: &Path) -> Option<u32> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let fields = stat_fields(&stat)?;
    stat_field(&fields, 4).and_then(|v| u32::try_from(v).ok())
}

/// The pids listed in `/proc`.
pub fn processes() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(PROC) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// A file a process holds open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFile {
    /// Its device and inode.
    pub identity: (u64, u64),
    /// Opened for writing (prometheus_client opens its files read-write; a
    /// reader such as its collector, read-only).
    pub writable: bool,
}

/// Every regular file the process of `dir` holds open; `None` when its
/// descriptors cannot be read (another user's process without
/// `CAP_SYS_PTRACE`, or gone).
pub fn open_files(dir: &Path) -> Option<Vec<OpenFile>> {
    let entries = std::fs::read_dir(dir.join("fd")).ok()?;
    Some(
        entries
            .filter_map(|e| {
                let entry = e.ok()?;
                // `stat` follows the descriptor's magic link to the file
                // itself, in whatever mount namespace the process lives.
                let meta = std::fs::metadata(entry.path()).ok()?;
                if !meta.file_type().is_file() {
                    return None;
                }
                // The link's own mode is the descriptor's access mode.
                let link = entry.metadata().ok()?;
                Some(OpenFile {
                    identity: (meta.dev(), meta.ino()),
                    writable: link.mode() & 0o200 != 0,
                })
            })
            .collect(),
    )
}

/// One reading of a process's standard values.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    cpu_seconds: Option<f64>,
    open_fds: Option<i64>,
    max_fds: Option<i64>,
    virtual_memory_bytes: Option<i64>,
    resident_memory_bytes: Option<i64>,
    start_time_seconds: Option<f64>,
    threads: Option<i64>,
}

impl ProcessStats {
    /// Reads the values of the process of `dir` (`/proc/self`,
    /// `/proc/<pid>`); unreadable ones are `None`.
    pub fn read(dir: &Path) -> Self {
        let mut stats = Self::default();
        if let Ok(stat) = std::fs::read_to_string(dir.join("stat")) {
            if let Some(fields) = stat_fields(&stat) {
                let num = |n: usize| stat_field(&fields, n);
                if let (Some(utime), Some(stime)) = (num(14), num(15)) {
                    stats.cpu_seconds = Some((utime + stime) as f64 / USER_HZ);
                }
                stats.threads = num(20).and_then(|v| i64::try_from(v).ok());
                stats.virtual_memory_bytes = num(23).and_then(|v| i64::try_from(v).ok());
                if let (Some(start), Some(boot)) = (num(22), boot_time()) {
                    stats.start_time_seconds = Some(boot as f64 + start as f64 / USER_HZ);
                }
            }
        }
        if let Ok(status) = std::fs::read_to_string(dir.join("status")) {
            stats.resident_memory_bytes = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .map(|kb| kb * 1024);
        }
        if let Ok(entries) = std::fs::read_dir(dir.join("fd")) {
            stats.open_fds = i64::try_from(entries.count()).ok();
        }
        if let Ok(limits) = std::fs::read_to_string(dir.join("limits")) {
            stats.max_fds = limits
                .lines()
                .find_map(|l| l.strip_prefix("Max open files"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<i64>().ok());
        }
        stats
    }

    /// The standard `process_*` families (as prometheus_client's
    /// `ProcessCollector` names them, behind `prefix`) of `processes`, one
    /// sample per process labelled with its `labels`; a family is left out
    /// when no process has its value.
    pub fn families(prefix: &str, processes: &[(Labels, ProcessStats)]) -> Vec<MetricFamily> {
        type Field = fn(&ProcessStats) -> Option<f64>;
        let defs: [(&str, &str, MetricType, Field); 7] = [
            (
                "cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                MetricType::Counter,
                |s| s.cpu_seconds,
            ),
            (
                "open_fds",
                "Number of open file descriptors.",
                MetricType::Gauge,
                |s| s.open_fds.map(|v| v as f64),
            ),
            (
                "max_fds",
                "Maximum number of open file descriptors.",
                MetricType::Gauge,
                |s| s.max_fds.map(|v| v as f64),
            ),
            (
                "virtual_memory_bytes",
                "Virtual memory size in bytes.",
                MetricType::Gauge,
                |s| s.virtual_memory_bytes.map(|v| v as f64),
            ),
            (
                "resident_memory_bytes",
                "Resident memory size in bytes.",
                MetricType::Gauge,
                |s| s.resident_memory_bytes.map(|v| v as f64),
            ),
            (
                "start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                MetricType::Gauge,
                |s| s.start_time_seconds,
            ),
            (
                "threads",
                "Number of OS threads in the process.",
                MetricType::Gauge,
                |s| s.threads.map(|v| v as f64),
            ),
        ];
        let mut out = Vec::new();
        for (suffix, help, metric_type, field) in defs {
            let name = format!("{prefix}{suffix}");
            let sample_name: Arc<str> = match metric_type {
                MetricType::Counter => format!("{name}_total").into(),
                _ => name.as_str().into(),
            };
            let samples: Vec<Sample> = processes
                .iter()
                .filter_map(|(labels, stats)| {
                    Some(Sample {
                        name: sample_name.clone(),
                        labels: labels.clone(),
                        value: field(stats)?,
                    })
                })
                .collect();
            if !samples.is_empty() {
                out.push(MetricFamily {
                    name: name.into(),
                    help: help.into(),
                    metric_type,
                    samples,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_self_on_linux() {
        let dir = Path::new(PROC).join("self");
        if !dir.join("stat").exists() {
            return;
        }
        let stats = ProcessStats::read(&dir);
        assert!(stats.cpu_seconds.is_some());
        assert!(stats.open_fds.unwrap() > 0);
        assert!(stats.max_fds.unwrap() > 0);
        assert!(stats.resident_memory_bytes.unwrap() > 0);
        assert!(stats.virtual_memory_bytes.unwrap() > 0);
        assert!(stats.threads.unwrap() >= 1);
        let start = stats.start_time_seconds.unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(start <= now + 1.0 && start > now - 86400.0 * 365.0);
        // The guard's start time keeps the boot time's fraction that
        // `btime` drops: never earlier, less than a second later.
        let precise = start_time(&dir).unwrap();
        assert!(
            precise >= start - 0.011 && precise < start + 1.0,
            "{precise} {start}"
        );
        assert_eq!(innermost_pid(&dir), Some(std::process::id()));
        assert!(processes().contains(&std::process::id()));
    }

    #[test]
    fn open_files_names_what_the_process_holds() {
        let dir = Path::new(PROC).join("self");
        if !dir.join("fd").exists() {
            return;
        }
        let held = tempfile::NamedTempFile::new().unwrap();
        let meta = held.as_file().metadata().unwrap();
        let read_only = std::fs::File::open(held.path()).unwrap();
        let files = open_files(&dir).unwrap();
        let identity = (meta.dev(), meta.ino());
        // Held read-write by `held`, read-only by `read_only`.
        for writable in [true, false] {
            assert!(
                files.contains(&OpenFile { identity, writable }),
                "{files:?}"
            );
        }
        drop(read_only);
        assert_eq!(open_files(Path::new("/proc/0")), None);
    }

    #[test]
    fn the_boot_time_keeps_its_fraction_of_a_second() {
        // Regression: `btime` is whole seconds, so the pid-reuse guard took
        // processes for up to a second older than they were.
        let boot = boot_from_uptime("62.71 120.50\n", 1_000.585).unwrap();
        assert!((boot - 937.875).abs() < 1e-9, "{boot}");
        assert_eq!(boot_from_uptime("", 1_000.0), None);
        assert_eq!(boot_from_uptime("x 1", 1_000.0), None);
        assert_eq!(boot_from_uptime("2000.0 1", 1_000.0), None);
        if let (Some(precise), Some(whole)) = (precise_boot_time(), boot_time()) {
            assert!(precise >= whole as f64 - 0.011 && precise < whole as f64 + 1.011);
        }
    }

    #[test]
    fn a_process_handle_fails_once_its_process_is_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let dir = process_dir(child.id());
        if !dir.join("stat").exists() {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        let kept = ProcessHandle::open(&dir).unwrap();
        assert_eq!(kept.start_time(), start_since_boot(&dir));
        assert!(kept.start_time().is_some());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(kept.start_time(), None);
        assert!(ProcessHandle::open(Path::new("/proc/0")).is_none());
    }

    /// Found merging issue 53: a run's writers killed with their process
    /// group stay zombies until pid 1 reaps them (seconds here, for ever
    /// under a pid 1 that reaps nothing), and the rule "no process holds a
    /// writer's pid" kept the stale run.
    #[test]
    fn a_zombie_writer_is_not_a_running_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let dir = process_dir(child.id());
        assert!(start_since_boot(&dir).is_some());
        child.kill().unwrap();
        // Not waited for: a zombie until `wait`.
        let zombie = (0..1000).any(|_| {
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            let fields = stat_fields(&stat).unwrap_or_default();
            if exited(&fields) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            false
        });
        assert!(zombie, "the killed child shows as a zombie");
        assert_eq!(start_since_boot(&dir), None);
        assert_eq!(start_time(&dir), None);
        child.wait().unwrap();
    }

    #[test]
    fn stat_fields_survive_odd_command_names() {
        let fields = stat_fields("12 (a) b) c) S 1 2 3").unwrap();
        assert_eq!(fields, ["S", "1", "2", "3"]);
    }

    #[test]
    fn families_have_one_sample_per_process_and_leave_out_unknown_values() {
        let labels = |pid: &str| Labels::new([(Arc::from("pid"), Arc::from(pid))]);
        let known = ProcessStats {
            cpu_seconds: Some(1.5),
            threads: Some(4),
            ..ProcessStats::default()
        };
        let families = ProcessStats::families(
            "process_",
            &[(labels("7"), known), (labels("8"), ProcessStats::default())],
        );
        let names: Vec<&str> = families.iter().map(|f| &*f.name).collect();
        assert_eq!(names, ["process_cpu_seconds", "process_threads"]);
        assert_eq!(&*families[0].samples[0].name, "process_cpu_seconds_total");
        assert_eq!(families[0].samples.len(), 1);
    }
}
