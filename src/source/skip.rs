//! Why a path was left out of a collection ([`SkipReason`], with the stable
//! label the metrics and logs use) and the report of one ([`Problem`]).

use std::path::PathBuf;

use crate::format::key::KeyError;
use crate::format::layout::LayoutError;
use crate::merge::MergeError;

/// Why a file or directory was skipped. The label is stable and used as a
/// metric label value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// The directory does not exist (yet).
    DirectoryMissing,
    /// The directory exists but cannot be listed.
    DirectoryUnreadable(String),
    /// A file found in a directory was deleted before it could be read
    /// (normal when a process exits).
    Vanished,
    /// A file named as an input (on `dump`'s command line) does not exist.
    FileMissing,
    /// Opening or reading failed with permission denied.
    PermissionDenied,
    /// Not a regular file (a directory, FIFO, socket or device named `*.db`).
    NotRegularFile,
    /// A symbolic link whose target is outside the metrics directory (not
    /// followed unless the [`super::link_policy::LinkPolicy`] allows it).
    LinkOutsideDirectory,
    /// A symbolic link that resolves to itself (too many levels of links).
    LinkLoop,
    /// Any other I/O error.
    Io(String),
    /// The bytes do not follow the file layout.
    Layout(LayoutError),
    /// A record key does not decode.
    Key(KeyError),
    /// The file cannot be merged (unknown type, bad bucket bound, ...).
    Merge(MergeError),
    /// Reading the file would take the memory held for records past the
    /// memory budget (`--memory.budget`).
    OverMemoryBudget {
        /// The budget in bytes.
        limit: usize,
    },
    /// Memory for reading the file could not be allocated.
    OutOfMemory {
        /// The allocation that failed, in bytes.
        bytes: usize,
    },
}

impl SkipReason {
    /// The label of every reason a *file* is skipped for, in the order the
    /// self-metric lists them (directory reasons are counted by
    /// `multiproc_exporter_scrape_directories` instead).
    pub const FILE_LABELS: &'static [&'static str] = &[
        "vanished",
        "file_missing",
        "permission_denied",
        "not_regular_file",
        "link_outside_directory",
        "link_loop",
        "io_error",
        "short_file",
        "bad_header",
        "bad_record",
        "key_not_utf8",
        "key_not_json",
        "key_bad_shape",
        "unknown_type",
        "bad_file_name",
        "bad_bucket_bound",
        "over_memory_budget",
        "out_of_memory",
    ];

    /// Whether the file may read next time as it did before (a read that
    /// failed, memory refused): its series are missing from this collection,
    /// not gone. A vanished file (a writer's files removed), a missing
    /// directory and the lasting problems (a bad link, a file that does not
    /// follow the layout) are not.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::DirectoryUnreadable(_)
                | Self::PermissionDenied
                | Self::Io(_)
                | Self::Layout(_)
                | Self::Key(_)
                | Self::OverMemoryBudget { .. }
                | Self::OutOfMemory { .. }
        )
    }

    /// Whether this reason concerns a directory (not a file).
    pub fn is_directory_reason(&self) -> bool {
        matches!(self, Self::DirectoryMissing | Self::DirectoryUnreadable(_))
    }

    /// A short, stable label for metrics (`reason="..."`).
    pub fn label(&self) -> &'static str {
        match self {
            Self::DirectoryMissing => "directory_missing",
            Self::DirectoryUnreadable(_) => "directory_unreadable",
            Self::Vanished => "vanished",
            Self::FileMissing => "file_missing",
            Self::PermissionDenied => "permission_denied",
            Self::NotRegularFile => "not_regular_file",
            Self::LinkOutsideDirectory => "link_outside_directory",
            Self::LinkLoop => "link_loop",
            Self::Io(_) => "io_error",
            Self::Layout(LayoutError::ShorterThanHeader { .. }) => "short_file",
            Self::Layout(
                LayoutError::UsedBelowHeader { .. } | LayoutError::UsedBeyondFile { .. },
            ) => "bad_header",
            Self::Layout(
                LayoutError::NegativeKeyLength { .. } | LayoutError::RecordPastUsed { .. },
            ) => "bad_record",
            Self::Key(KeyError::NotUtf8) => "key_not_utf8",
            Self::Key(KeyError::NotJson { .. }) => "key_not_json",
            Self::Key(KeyError::WrongShape { .. } | KeyError::EmptyFamily) => "key_bad_shape",
            Self::Merge(MergeError::UnknownType { .. }) => "unknown_type",
            Self::Merge(MergeError::GaugeNameWithoutPid) => "bad_file_name",
            Self::Merge(MergeError::InvalidBucketBound { .. }) => "bad_bucket_bound",
            Self::OverMemoryBudget { .. } => "over_memory_budget",
            Self::OutOfMemory { .. } => "out_of_memory",
        }
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DirectoryMissing => f.write_str("no such directory"),
            Self::DirectoryUnreadable(e) => write!(f, "cannot list the directory: {e}"),
            Self::Vanished => f.write_str("file does not exist any more (deleted after the directory was listed)"),
            Self::FileMissing => f.write_str("does not exist (no such file or directory)"),
            Self::PermissionDenied => f.write_str("permission denied"),
            Self::NotRegularFile => f.write_str("not a regular file"),
            Self::LinkOutsideDirectory => f.write_str(
                "symbolic link to a path outside the metrics directory (not followed without --dir.follow-links-outside)",
            ),
            Self::LinkLoop => f.write_str("symbolic link loop (too many levels of symbolic links)"),
            Self::Io(e) => write!(f, "read error: {e}"),
            Self::Layout(e) => write!(f, "corrupt file: {e}"),
            Self::Key(e) => write!(f, "corrupt record: {e}"),
            Self::Merge(e) => write!(f, "cannot merge: {e}"),
            Self::OverMemoryBudget { limit } => write!(
                f,
                "reading it would take the memory held for records past the {} MiB budget (--memory.budget)",
                limit >> 20
            ),
            Self::OutOfMemory { bytes } => write!(f, "cannot allocate {bytes} bytes to read it"),
        }
    }
}

/// A path left out of a collection, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file or directory.
    pub path: PathBuf,
    /// Why it was left out.
    pub reason: SkipReason,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::key::KeyError;
    use crate::format::layout::LayoutError;
    use crate::merge::MergeError;

    /// Every reason (one value of each variant and sub-variant).
    fn every_reason() -> Vec<SkipReason> {
        vec![
            SkipReason::DirectoryMissing,
            SkipReason::DirectoryUnreadable(String::new()),
            SkipReason::Vanished,
            SkipReason::FileMissing,
            SkipReason::PermissionDenied,
            SkipReason::NotRegularFile,
            SkipReason::LinkOutsideDirectory,
            SkipReason::LinkLoop,
            SkipReason::Io(String::new()),
            SkipReason::Layout(LayoutError::ShorterThanHeader { len: 0 }),
            SkipReason::Layout(LayoutError::UsedBelowHeader { used: 0 }),
            SkipReason::Layout(LayoutError::UsedBeyondFile { used: 0, len: 0 }),
            SkipReason::Layout(LayoutError::NegativeKeyLength { offset: 0, len: 0 }),
            SkipReason::Layout(LayoutError::RecordPastUsed {
                offset: 0,
                len: 0,
                used: 0,
            }),
            SkipReason::Key(KeyError::NotUtf8),
            SkipReason::Key(KeyError::NotJson {
                offset: 0,
                what: "",
            }),
            SkipReason::Key(KeyError::WrongShape { what: "" }),
            SkipReason::Key(KeyError::EmptyFamily),
            SkipReason::Merge(MergeError::UnknownType {
                prefix: String::new(),
            }),
            SkipReason::Merge(MergeError::GaugeNameWithoutPid),
            SkipReason::Merge(MergeError::InvalidBucketBound { le: String::new() }),
            SkipReason::OverMemoryBudget { limit: 0 },
            SkipReason::OutOfMemory { bytes: 0 },
        ]
    }

    /// Regression: a new skip reason never showed in the metric, because its
    /// label was copied into three lists by hand.
    #[test]
    fn every_file_skip_reason_is_in_the_metric_label_set() {
        for reason in every_reason() {
            assert_eq!(
                SkipReason::FILE_LABELS.contains(&reason.label()),
                !reason.is_directory_reason(),
                "{reason:?}"
            );
        }
    }
}
