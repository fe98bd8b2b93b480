//! Ray's worker ids of the writer processes, from the log files Ray names
//! after them (`per_writer.ray_logs` in the configuration).
//!
//! Ray's metrics agent labels a worker's series `WorkerId="<56 hex digits>"`,
//! and Ray's dashboards join on it. A process that writes prometheus_client
//! files names them after its pid; Ray names every worker's log files after
//! both (`<session>/logs/python-core-worker-<WORKERID>_<PID>.log`, and
//! `worker-<WORKERID>-<JOBID>-<PID>.out`/`.err`). [`RayWorkerIds`] reads that
//! directory to map a pid to its worker id: again whenever a pid it does not
//! know turns up (at most once a second), so a new worker is known from its
//! first collection on. The directory (`/tmp/ray/session_latest/logs` on a
//! Ray node) must be shared with the exporter. Where a pid has several log
//! files (a pid reused by a later worker), the most recently modified wins.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How often the directory may be read again for an unknown pid.
const RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// Worker ids by pid, from a Ray session's log directory.
#[derive(Debug)]
pub struct RayWorkerIds {
    logs: PathBuf,
    by_pid: HashMap<u32, Arc<str>>,
    scanned: Option<Instant>,
    /// Why the directory could not be read at the last reading, if it
    /// could not.
    error: Option<String>,
}

impl RayWorkerIds {
    /// Worker ids from the log files in `logs` (read at the first lookup).
    pub fn new(logs: PathBuf) -> Self {
        Self {
            logs,
            by_pid: HashMap::new(),
            scanned: None,
            error: None,
        }
    }

    /// Why the directory could not be read the last time it was, if it
    /// could not (its pids then keep their pid).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The directory read.
    pub fn logs(&self) -> &Path {
        &self.logs
    }

    /// Ray's worker id of the process `pid`, if a log file names it.
    pub fn worker_id(&mut self, pid: u32) -> Option<Arc<str>> {
        if let Some(id) = self.by_pid.get(&pid) {
            return Some(id.clone());
        }
        if self
            .scanned
            .is_none_or(|at| at.elapsed() >= RESCAN_INTERVAL)
        {
            self.scanned = Some(Instant::now());
            match scan(&self.logs) {
                Ok(by_pid) => {
                    self.by_pid = by_pid;
                    self.error = None;
                }
                Err(error) => self.error = Some(error.to_string()),
            }
        }
        self.by_pid.get(&pid).cloned()
    }
}

/// Every `(pid, worker id)` the log file names in `logs` give, the newest
/// file's for a pid named more than once.
fn scan(logs: &Path) -> std::io::Result<HashMap<u32, Arc<str>>> {
    let mut found: HashMap<u32, (SystemTime, Arc<str>)> = HashMap::new();
    let entries = std::fs::read_dir(logs)?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((worker, pid)) = name.to_str().and_then(parse_log_name) else {
            continue;
        };
        let modified = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        match found.get(&pid) {
            Some((newest, _)) if *newest >= modified => {}
            _ => {
                found.insert(pid, (modified, Arc::from(worker)));
            }
        }
    }
    Ok(found
        .into_iter()
        .map(|(pid, (_, worker))| (pid, worker))
        .collect())
}

/// The worker id and pid a Ray worker log file's name gives:
/// `python-core-worker-<WORKERID>_<PID>.log` or
/// `worker-<WORKERID>-<JOBID>-<PID>.out` (or `.err`).
pub fn parse_log_name(name: &str) -> Option<(&str, u32)> {
    let is_worker_id = |s: &str| s.len() == 56 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(rest) = name
        .strip_prefix("python-core-worker-")
        .and_then(|r| r.strip_suffix(".log"))
    {
        let (worker, pid) = rest.split_once('_')?;
        return (is_worker_id(worker)).then_some((worker, pid.parse().ok()?));
    }
    let rest = name.strip_prefix("worker-")?;
    let rest = rest
        .strip_suffix(".out")
        .or_else(|| rest.strip_suffix(".err"))?;
    let mut parts = rest.split('-');
    let (worker, _job, pid) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !is_worker_id(worker) {
        return None;
    }
    Some((worker, pid.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "6891d20374f236b60d1769d6ef355761f004bdb7a546bf51136b56b8";

    #[test]
    fn log_names_give_worker_and_pid() {
        assert_eq!(
            parse_log_name(&format!("python-core-worker-{ID}_13210.log")),
            Some((ID, 13210))
        );
        assert_eq!(
            parse_log_name(&format!("worker-{ID}-ffffffff-13210.out")),
            Some((ID, 13210))
        );
        assert_eq!(
            parse_log_name(&format!("worker-{ID}-01000000-7.err")),
            Some((ID, 7))
        );
        for other in [
            "raylet.out",
            "python-core-driver-01000000ffffffff_13042.log",
            "python-core-worker-abc_1.log",
            &format!("worker-{ID}-ffffffff-x.out"),
            &format!("worker-{ID}-ffffffff-1-2.out"),
            &format!("python-core-worker-{ID}_1.out"),
        ] {
            assert_eq!(parse_log_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_new_worker_is_found_and_the_newest_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        let mut missing = RayWorkerIds::new(dir.path().join("missing"));
        assert_eq!(missing.worker_id(1), None);
        assert!(missing.error().is_some());
        let mut ids = RayWorkerIds::new(dir.path().to_path_buf());
        assert_eq!(ids.worker_id(1), None);
        assert_eq!(ids.error(), None);
        std::fs::write(dir.path().join(format!("worker-{ID}-ffffffff-1.out")), "").unwrap();
        ids.scanned = None; // as if a second had passed
        assert_eq!(ids.worker_id(1).as_deref(), Some(ID));
        // pid 1 reused by a later worker.
        let later = "ab".repeat(28);
        let path = dir.path().join(format!("python-core-worker-{later}_1.log"));
        std::fs::write(&path, "").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() + Duration::from_secs(5))
            .unwrap();
        ids.by_pid.clear();
        ids.scanned = None;
        assert_eq!(ids.worker_id(1).as_deref(), Some(later.as_str()));
    }
}
