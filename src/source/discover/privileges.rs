//! Whether this process has the privileges discovery needs, from the
//! effective capability set (`CapEff`) of `/proc/self/status`.
//!
//! Measured with util-linux's `setpriv` (as `nobody` and as root with a
//! reduced bounding set) against writers running as root and as another user
//! (`tests/it/discover/privileges.rs` runs them through the exporter):
//!
//! | what | needs, for another user's process |
//! | --- | --- |
//! | list `/proc/<pid>/fd` (mode `0500`, owned by the process's user) | `CAP_DAC_READ_SEARCH` (or `CAP_DAC_OVERRIDE`) |
//! | `readlink`/`stat` of `/proc/<pid>/fd/<n>`, `/proc/<pid>/ns/mnt`, `/proc/<pid>/io` | `CAP_SYS_PTRACE` |
//! | open `/proc/<pid>/root/<dir>` and its files | `CAP_SYS_PTRACE`, and `CAP_DAC_READ_SEARCH` for a directory or files the exporter's user may not read |
//! | `/proc/<pid>/cgroup`, `/proc/<pid>/stat`, `/proc/<pid>/status` | nothing |
//!
//! Being root is not needed, nor enough: root without `CAP_SYS_PTRACE`
//! cannot read another process's descriptors (the kernel also asks that the
//! reader's capabilities include the target's, which root's processes have
//! in full), and `nobody` with both capabilities reads everything. A
//! process of the exporter's own user whose capabilities are not beyond the
//! exporter's needs neither.

use std::path::Path;

/// `CAP_DAC_OVERRIDE`'s bit.
const CAP_DAC_OVERRIDE: u32 = 1;
/// `CAP_DAC_READ_SEARCH`'s bit.
const CAP_DAC_READ_SEARCH: u32 = 2;
/// `CAP_SYS_PTRACE`'s bit.
const CAP_SYS_PTRACE: u32 = 19;

/// The process's user and effective capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privileges {
    /// The effective user ID (`Uid:`'s second field).
    pub uid: Option<u32>,
    /// The effective capability set (`CapEff:`).
    pub effective: Option<u64>,
}

impl Privileges {
    /// This process's, from `/proc/self/status` (unknown fields `None`).
    pub fn current() -> Self {
        let status = std::fs::read_to_string(
            Path::new(crate::source::writers::procfs::PROC).join("self/status"),
        )
        .unwrap_or_default();
        Self::parse(&status)
    }

    /// From the text of a `/proc/<pid>/status` file.
    pub fn parse(status: &str) -> Self {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
        };
        Self {
            uid: field("Uid:")
                .and_then(|v| v.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok()),
            effective: field("CapEff:").and_then(|v| u64::from_str_radix(v, 16).ok()),
        }
    }

    /// Whether capability `bit` is effective (`false` when unknown).
    fn has(&self, bit: u32) -> bool {
        self.effective.is_some_and(|set| set & (1 << bit) != 0)
    }

    /// The capabilities discovery needs that are not effective, by name:
    /// `CAP_SYS_PTRACE`, and `CAP_DAC_READ_SEARCH` unless `CAP_DAC_OVERRIDE`
    /// (which includes it) is there. Empty when nothing is missing.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if !self.has(CAP_SYS_PTRACE) {
            missing.push("CAP_SYS_PTRACE");
        }
        if !self.has(CAP_DAC_READ_SEARCH) && !self.has(CAP_DAC_OVERRIDE) {
            missing.push("CAP_DAC_READ_SEARCH");
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_from_status() {
        let root =
            "Name:\tx\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let p = Privileges::parse(root);
        assert_eq!(p.uid, Some(0));
        assert!(p.missing().is_empty());
        let nobody = "Uid:\t65534\t65534\t65534\t65534\nCapEff:\t0000000000000000\n";
        let p = Privileges::parse(nobody);
        assert_eq!(p.uid, Some(65534));
        assert_eq!(p.missing(), ["CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"]);
        // sys_ptrace (bit 19) and dac_override (bit 1).
        let p = Privileges::parse("CapEff:\t0000000000080002\n");
        assert!(p.missing().is_empty(), "{p:?}");
        let p = Privileges::parse("CapEff:\t0000000000000004\n");
        assert_eq!(p.missing(), ["CAP_SYS_PTRACE"]);
        assert_eq!(Privileges::parse("").missing().len(), 2);
        assert!(Privileges::current().uid.is_some());
    }
}
