//! The standard `process_*` metrics of the exporter's own process, read from
//! `/proc/self` on every scrape (Linux only; elsewhere, and for any value that
//! cannot be read, the metric is left out rather than exported as a bogus
//! value, as the client-library guidelines ask).

use super::families::FamilyList;

/// Kernel clock ticks per second as `/proc` reports them (`USER_HZ`, which
/// Linux fixes at 100 for user space on every architecture it exposes
/// `/proc/<pid>/stat` on).
const USER_HZ: f64 = 100.0;

/// One reading of `/proc/self`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProcessStats {
    cpu_seconds: Option<f64>,
    open_fds: Option<i64>,
    max_fds: Option<i64>,
    virtual_memory_bytes: Option<i64>,
    resident_memory_bytes: Option<i64>,
    start_time_seconds: Option<f64>,
    threads: Option<i64>,
}

impl ProcessStats {
    /// Reads the current values; unreadable ones are `None`.
    pub(crate) fn read() -> Self {
        let mut stats = Self::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            if let Some(fields) = stat_fields(&stat) {
                // Indices are field numbers from proc(5) minus 3 (fields 1 and 2
                // are before the closing parenthesis).
                let num = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
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
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            stats.resident_memory_bytes = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .map(|kb| kb * 1024);
        }
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            stats.open_fds = i64::try_from(entries.count()).ok();
        }
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
            stats.max_fds = limits
                .lines()
                .find_map(|l| l.strip_prefix("Max open files"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<i64>().ok());
        }
        stats
    }
}

/// The fields of `/proc/self/stat` after the command name.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().collect())
}

fn boot_time() -> Option<u64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

impl ProcessStats {
    /// Adds the `process_*` families whose values could be read.
    pub(crate) fn add_families(&self, out: &mut FamilyList) {
        if let Some(v) = self.cpu_seconds {
            out.counter(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                v,
            );
        }
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors.",
                self.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                self.max_fds.map(|v| v as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                self.virtual_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                self.resident_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                self.start_time_seconds,
            ),
            (
                "process_threads",
                "Number of OS threads in the process.",
                self.threads.map(|v| v as f64),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                out.gauge(name, help, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_self_on_linux() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            return;
        }
        let stats = ProcessStats::read();
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
    }

    #[test]
    fn stat_fields_survive_odd_command_names() {
        let fields = stat_fields("12 (a) b) c) S 1 2 3").unwrap();
        assert_eq!(fields, ["S", "1", "2", "3"]);
    }
}
