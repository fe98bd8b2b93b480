//! The memory budget ([`MemoryBudget`]): how much memory the records read
//! from the metrics directory may hold, shared by every reader of one
//! exporter, and its default derived from the process's memory limit (the
//! cgroup's `memory.max` or `memory.limit_in_bytes`, or `ulimit -v`).
//!
//! The charge is an estimate made from what is held, not a measurement of
//! the heap: the bytes of every decoded key and its strings, a fixed
//! overhead per key, and the per-record vectors of every file (see
//! [`crate::merge::KeyStore::approx_bytes`] and the reader). A file whose
//! reading would take the charge past the limit is skipped with
//! [`super::SkipReason::OverMemoryBudget`]; the files read before it stay.
//!
//! # Sharing the budget between parts
//!
//! With several parts (one per subdirectory with
//! `--dir.subdirectories-label`, one per pod with `--discover.processes`),
//! each part reads within its own share ([`MemoryBudget::share_of`]), whose
//! limit is the part's *allowance*, set before each of its reads by
//! [`allowances`] (issue 47):
//!
//! - Each part's *floor* is an equal share, `limit / parts`. A share is a
//!   floor, not a cap: without contention (the parts together need no more
//!   than the limit) every part is read whole, however unequal they are.
//! - Under contention the budget is filled like water: every part gets what
//!   it needs up to a common level, and the parts that need more than the
//!   level get the level (never less than their floor). The part furthest
//!   over its floor is therefore the one cut, and the one cut most.
//! - What a part *needs* is what it held after its last read (charged after
//!   the merge); a part that had files skipped for the budget needs that
//!   plus an estimate of what they would cost (never "unbounded": issue 53,
//!   it dragged every other part's allowance down); a part never read yet
//!   is counted at its floor, so that a
//!   new part always finds its floor free (issue 40: a hostile pod cannot
//!   take the others' budget before its caps apply). One read is enough to
//!   learn a part's need: there is no global two-pass read.
//! - A part holding more than its new allowance (a part was added, another
//!   grew) lets go of everything it holds before its next read and reads
//!   anew within its allowance; a part that was cut and whose allowance
//!   grew reads anew too, so that the files it skipped are read. A file
//!   skipped is read again whenever its reader has more room than when it
//!   was skipped ([`MemoryBudget::room`]), and a part cut while another
//!   still held a charge its new allowance takes back is read again once
//!   that part has let go of it (issue 53).
//! - A part's files are read whole or not at all, so a part cut holds less
//!   than its allowance. Once every part was read, the room the budget
//!   leaves unused is handed to the parts cut, least needy first, each read
//!   again with it; the room handed stays the part's while the parts' needs
//!   stay the same, so that it is not let go of and handed again at every
//!   collection (issue 53: every part cut at its level, most of the budget
//!   unused). A new part or a need that changes takes it back.
//! - Every share's charge also counts against the whole budget, so the
//!   limit holds even while allowances computed from last known needs are
//!   stale: a part is never given memory another part still holds.
//!
//! The computation is deterministic: the same needs give the same
//! allowances, whatever order the parts are read in.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The share of the process's memory limit the default budget takes: the
/// rest is for the encoded bodies of concurrent scrapes, the runtime and the
/// allocator's slack.
const DEFAULT_SHARE_PERCENT: u64 = 60;

/// A limit on the memory held for records, shared by the readers of one
/// exporter (one per subdirectory with `--dir.subdirectories-label`).
#[derive(Debug)]
pub struct MemoryBudget {
    limit: AtomicUsize,
    held: AtomicUsize,
    /// The budget this one is a share of ([`MemoryBudget::share_of`]):
    /// what is charged here is charged there too.
    parent: Option<Arc<MemoryBudget>>,
}

impl MemoryBudget {
    /// A budget of `limit` bytes, nothing held yet.
    pub fn new(limit: usize) -> Self {
        Self {
            limit: AtomicUsize::new(limit),
            held: AtomicUsize::new(0),
            parent: None,
        }
    }

    /// One reader's share of `parent`: at most `limit` bytes of it (a
    /// node agent's pod: [`crate::pipeline::parts`]), and never more than
    /// `parent` has left. What the reader charges here is charged to
    /// `parent` too.
    pub fn share_of(parent: Arc<MemoryBudget>, limit: usize) -> Self {
        Self {
            limit: AtomicUsize::new(limit),
            held: AtomicUsize::new(0),
            parent: Some(parent),
        }
    }

    /// The budget this one is a share of, if it is one.
    pub fn parent(&self) -> Option<&Arc<MemoryBudget>> {
        self.parent.as_ref()
    }

    /// Changes the limit of a share (what is held stays; what would pass
    /// the new limit is refused from now on).
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Bytes charged by every reader together.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Replaces a reader's charge `before` with `after`.
    pub(crate) fn update(&self, before: usize, after: usize) {
        if after >= before {
            self.held.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.held.fetch_sub(before - after, Ordering::Relaxed);
        }
        if let Some(parent) = &self.parent {
            parent.update(before, after);
        }
    }

    /// Bytes not held by any reader, within this budget and every budget it
    /// is a share of (the smallest): what a reader could still take.
    pub fn free(&self) -> usize {
        let here = self.limit().saturating_sub(self.held());
        self.parent
            .as_ref()
            .map_or(here, |parent| here.min(parent.free()))
    }

    /// The most the reader of this budget (a share's one reader) could
    /// hold: what it holds plus [`Self::free`]. What it holds does not
    /// change it; an allowance that grows or another reader letting go of
    /// its charge does.
    pub fn room(&self) -> usize {
        self.free().saturating_add(self.held())
    }

    /// Whether a reader that has charged `own` so far may hold `own_now`
    /// bytes: what the other readers hold plus `own_now` is within the limit
    /// (and within the parent's, for a share).
    pub(crate) fn allows(&self, own: usize, own_now: usize) -> bool {
        let others = self.held().saturating_sub(own);
        others.saturating_add(own_now) <= self.limit()
            && self
                .parent
                .as_ref()
                .is_none_or(|parent| parent.allows(own, own_now))
    }
}

/// Each part's allowance of a budget of `limit` bytes shared by parts that
/// need `needs` bytes, in the same order:
/// for part `i`, the water level `w` at which the others' needs, each taken
/// up to `w`, plus `w` for part `i` fill the limit
/// (`sum(min(need_j, w) for j != i) + w == limit`), and `limit` when the
/// others leave that much. Never less than the floor `limit / parts`: a
/// part always gets at least its equal share, and only the parts that need
/// more than the level are cut (see the module's documentation).
pub fn allowances(limit: usize, needs: &[usize]) -> Vec<usize> {
    let mut sorted: Vec<(usize, usize)> = needs.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    (0..needs.len())
        .map(|i| {
            let mut remaining = limit;
            let mut sharing = needs.len();
            for &(need, j) in &sorted {
                if j == i {
                    continue;
                }
                // Everyone left shares `remaining` equally: a need below that
                // level is met whole, and leaves more for the others.
                if need <= remaining / sharing {
                    remaining -= need;
                    sharing -= 1;
                } else {
                    break;
                }
            }
            remaining / sharing.max(1)
        })
        .collect()
}

/// The memory limit this process runs under, in bytes: the smallest of its
/// cgroup's memory limit (v2 `memory.max`, v1 `memory.limit_in_bytes`) and
/// its address-space limit (`ulimit -v`); `None` when there is none.
pub fn process_memory_limit() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| cgroup_memory_limit(&text, Path::new("/sys/fs/cgroup")));
    let address_space = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| address_space_limit(&text));
    match (cgroup, address_space) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The default budget: 60% of `limit`, or none
/// without a limit.
pub fn default_budget(limit: Option<u64>) -> Option<usize> {
    limit.map(|limit| usize::try_from(limit / 100 * DEFAULT_SHARE_PERCENT).unwrap_or(usize::MAX))
}

/// Which cgroup hierarchy holds a memory cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1's `memory` controller (`memory.limit_in_bytes`).
    V1,
    /// The unified v2 hierarchy (`memory.max`).
    V2,
}

impl CgroupVersion {
    /// The file that holds the memory limit.
    pub fn limit_file(self) -> &'static str {
        match self {
            Self::V1 => "memory.limit_in_bytes",
            Self::V2 => "memory.max",
        }
    }
}

/// The directories of the memory cgroups named in `proc_self_cgroup` (the
/// text of `/proc/self/cgroup`) under `root` (`/sys/fs/cgroup`): the v1
/// memory controller's and the v2 hierarchy's, in the file's order. Where a
/// hierarchy is not mounted the directory does not exist.
pub fn memory_cgroup_dirs(proc_self_cgroup: &str, root: &Path) -> Vec<(PathBuf, CgroupVersion)> {
    proc_self_cgroup
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let relative = path.trim_start_matches('/');
            if controllers.is_empty() {
                Some((root.join(relative), CgroupVersion::V2))
            } else if controllers.split(',').any(|c| c == "memory") {
                Some((root.join("memory").join(relative), CgroupVersion::V1))
            } else {
                None
            }
        })
        .collect()
}

/// The memory limit of the cgroup named in `proc_self_cgroup`, looked up
/// under `root`: at the process's own cgroup or, inside a container whose
/// cgroup namespace hides the path, at the hierarchy's root.
fn cgroup_memory_limit(proc_self_cgroup: &str, root: &Path) -> Option<u64> {
    memory_cgroup_dirs(proc_self_cgroup, root)
        .into_iter()
        .flat_map(|(dir, version)| {
            let top = match version {
                CgroupVersion::V1 => root.join("memory"),
                CgroupVersion::V2 => root.to_path_buf(),
            };
            [dir, top].map(|d| d.join(version.limit_file()))
        })
        .find_map(|file| {
            std::fs::read_to_string(file)
                .ok()
                .and_then(|text| parse_limit(&text))
        })
}

/// A limit file's value; `None` for `max` and for v1's "unlimited"
/// (a number near `i64::MAX`).
fn parse_limit(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 60).then_some(value)
}

/// The soft "Max address space" of `/proc/self/limits`, in bytes.
fn address_space_limit(proc_self_limits: &str) -> Option<u64> {
    let line = proc_self_limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let soft = line["Max address space".len()..]
        .split_whitespace()
        .next()?;
    soft.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_read_from_cgroup_v1_and_v2_and_ulimit() {
        let root = tempfile::tempdir().unwrap();
        let v1 = root.path().join("memory/pod/app");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), "268435456\n").unwrap();
        assert_eq!(
            cgroup_memory_limit("4:memory:/pod/app\n0::/\n", root.path()),
            Some(256 << 20)
        );
        std::fs::write(v1.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        assert_eq!(
            cgroup_memory_limit("4:memory:/pod/app\n", root.path()),
            None
        );

        let v2 = root.path().join("kubepods/pod1");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.max"), "536870912\n").unwrap();
        assert_eq!(
            cgroup_memory_limit("0::/kubepods/pod1\n", root.path()),
            Some(512 << 20)
        );
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        assert_eq!(
            cgroup_memory_limit("0::/kubepods/pod1\n", root.path()),
            None
        );
        // A cgroup namespace: the path is "/", the limit at the root.
        std::fs::write(root.path().join("memory.max"), "1073741824\n").unwrap();
        assert_eq!(cgroup_memory_limit("0::/\n", root.path()), Some(1 << 30));

        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         1073741824           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(1 << 30));
        assert_eq!(
            address_space_limit(
                "Max address space         unlimited            unlimited            bytes\n"
            ),
            None
        );
        assert_eq!(default_budget(Some(1000 << 20)), Some(600 << 20));
        assert_eq!(default_budget(None), None);
    }

    #[test]
    fn readers_share_one_budget() {
        let budget = MemoryBudget::new(100);
        budget.update(0, 60);
        assert!(budget.allows(60, 100));
        assert!(!budget.allows(0, 41));
        assert!(budget.allows(0, 40));
        budget.update(60, 10);
        assert_eq!(budget.held(), 10);
    }

    #[test]
    fn a_share_is_a_floor_not_a_cap() {
        // Without contention, every part may take what it needs.
        assert_eq!(allowances(100, &[60, 5, 5, 5]), [85, 45, 45, 45]);
        // Under contention, the part furthest over its floor is cut to the
        // level; the others keep what they need.
        assert_eq!(allowances(100, &[90, 5, 5, 5]), [85, 45, 45, 45]);
        assert_eq!(allowances(8, &[5, 3, 1]), [4, 3, 2]);
        // Two parts wanting more than they got: equal shares of what the
        // others leave, never less than the floor.
        assert_eq!(allowances(100, &[usize::MAX, usize::MAX, 10]), [45, 45, 33]);
        let needs = [usize::MAX; 4];
        assert_eq!(allowances(100, &needs), [25; 4]);
        assert_eq!(allowances(100, &[]), Vec::<usize>::new());
        assert_eq!(allowances(100, &[200]), [100]);
    }
}
