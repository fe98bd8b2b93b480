//! The process's file descriptors: its limit (`RLIMIT_NOFILE`), raised at
//! start from the soft value to the hard one, as the kubelet, node_exporter,
//! Prometheus and every Go program do (containerd 2.x starts containers with
//! a soft limit of 1,024 and a far higher hard one; Rust, unlike Go, does not
//! raise it), and how many are open now.
//!
//! The node agent ([`crate::pipeline::discovered`]) keeps one descriptor
//! open per discovered directory so that dead writers' files stay readable;
//! [`retained_budget`] says how many it may keep so that a reserve is always
//! left for serving (accepting connections, scanning `/proc`, opening the
//! files it reads).

use std::io;

/// The descriptor limit this process runs with, after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit before the raise (`None`: unlimited).
    pub before: Option<u64>,
    /// The soft limit now (`None`: unlimited).
    pub soft: Option<u64>,
    /// The hard limit (`None`: unlimited).
    pub hard: Option<u64>,
}

impl NofileLimit {
    /// The limit as it is, without changing it.
    pub fn current() -> Self {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        Self {
            before: limit.current,
            soft: limit.current,
            hard: limit.maximum,
        }
    }

    /// Whether the soft limit was raised.
    pub fn raised(&self) -> bool {
        self.before != self.soft
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (when the hard limit is
/// unlimited, to the kernel's `fs/nr_open`, since the soft limit of
/// descriptors cannot be unlimited); returns the limit it runs with and, if
/// the raise failed, why (the limit is then unchanged).
pub fn raise_nofile_limit() -> (NofileLimit, Option<io::Error>) {
    let (limit, error) = raise();
    let _ = AT_START.set(limit);
    (limit, error)
}

/// The limit [`raise_nofile_limit`] left the process with, if it ran.
static AT_START: std::sync::OnceLock<NofileLimit> = std::sync::OnceLock::new();

/// The limit the process runs with since [`raise_nofile_limit`] (the current
/// one if it never ran), for the start-up log line.
pub fn limit_at_start() -> NofileLimit {
    AT_START.get().copied().unwrap_or_else(NofileLimit::current)
}

fn raise() -> (NofileLimit, Option<io::Error>) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let target = limit.maximum.or_else(nr_open);
    let Some(target) = target else {
        return (NofileLimit::current(), None);
    };
    if limit.current.is_some_and(|soft| soft >= target) || limit.current.is_none() {
        return (NofileLimit::current(), None);
    }
    let raised = Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    let error = setrlimit(Resource::Nofile, raised)
        .err()
        .map(io::Error::from);
    let now = NofileLimit {
        before: limit.current,
        ..NofileLimit::current()
    };
    (now, error)
}

/// `/proc/sys/fs/nr_open`: the most descriptors a process may have.
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// How many descriptors this process has open now (`/proc/self/fd`), if it
/// can tell.
pub fn open_count() -> Option<usize> {
    // The listing's own descriptor is counted: take it off.
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some(n.saturating_sub(1))
}

/// How many directories the node agent may keep open: the soft limit less
/// `reserve` descriptors for serving and less those open now (`open`);
/// or half of what is free when that is less than twice the reserve. `None`
/// when the limit is unlimited.
pub fn retained_budget(soft: Option<u64>, reserve: usize, open: usize) -> Option<usize> {
    let soft = usize::try_from(soft?).unwrap_or(usize::MAX);
    let free = soft.saturating_sub(open);
    Some(if free >= 2 * reserve {
        free - reserve
    } else {
        free / 2
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_the_reserve() {
        // 1,024 with 20 open and a reserve of 256: 748 may be kept.
        assert_eq!(retained_budget(Some(1024), 256, 20), Some(748));
        // A limit below the reserve: half of what is free.
        assert_eq!(retained_budget(Some(200), 256, 20), Some(90));
        assert_eq!(retained_budget(None, 256, 20), None);
    }

    #[test]
    fn the_limit_is_raised_to_the_hard_one() {
        let (limit, error) = raise_nofile_limit();
        assert!(error.is_none(), "{error:?}");
        assert_eq!(limit.soft, NofileLimit::current().soft);
        if let (Some(soft), Some(hard)) = (limit.soft, limit.hard) {
            assert_eq!(soft, hard);
        }
        assert!(open_count().unwrap() >= 3);
    }
}
