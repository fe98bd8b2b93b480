//! Serving with `--dir.subdirectories-label`: one collection of a
//! [`SubdirectoryReader`], with its log lines. Subdirectories appearing and
//! disappearing are logged at `info`; a subdirectory left out because its
//! name is taken, and families that did not combine cleanly, are logged at
//! `warn` once when they first appear (again if they go away and come back)
//! and counted in the self-metrics.

use std::collections::HashSet;
use std::sync::Arc;

use crate::pipeline::subdirectories::SubdirectoryReader;
use crate::pipeline::Collection;

/// What was last logged about one conflict: (family or path, subdirectory,
/// reason label).
pub(crate) type LoggedConflict = (Arc<str>, Arc<str>, &'static str);

/// `reason` label of a subdirectory left out because an earlier directory has
/// one of the same name.
pub(crate) const DUPLICATE_NAME: &str = "duplicate_name";

/// What the self-metrics record about one collection.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// Subdirectories read.
    pub(crate) subdirectories: usize,
    /// The reason label of every conflict (one entry per conflict).
    pub(crate) conflicts: Vec<&'static str>,
}

/// Runs one collection and logs what changed.
pub(crate) fn collect(
    reader: &mut SubdirectoryReader,
    logged: &mut HashSet<LoggedConflict>,
) -> (Collection, Outcome) {
    let result = reader.collect();
    for path in &result.appeared {
        tracing::info!(path = %path.display(), "Reading a new subdirectory.");
    }
    for path in &result.disappeared {
        tracing::info!(path = %path.display(), "Subdirectory is gone; its series are no longer served.");
    }
    let mut now: HashSet<LoggedConflict> = HashSet::new();
    let mut conflicts = Vec::with_capacity(result.conflicts.len() + result.duplicates.len());
    for path in &result.duplicates {
        let key: LoggedConflict = (path.to_string_lossy().into(), "".into(), DUPLICATE_NAME);
        if !logged.contains(&key) {
            tracing::warn!(
                path = %path.display(),
                reason_label = DUPLICATE_NAME,
                "Leaving out a subdirectory: an earlier directory has one of the same name."
            );
        }
        now.insert(key);
        conflicts.push(DUPLICATE_NAME);
    }
    for conflict in &result.conflicts {
        let label = conflict.reason.label();
        let key: LoggedConflict = (conflict.family.clone(), conflict.part.clone(), label);
        if !logged.contains(&key) {
            tracing::warn!(
                family = %conflict.family,
                subdirectory = %conflict.part,
                kept_from = %conflict.kept_from,
                reason_label = label,
                "Subdirectories disagree about a metric family; keeping the first one's type and help."
            );
        }
        now.insert(key);
        conflicts.push(label);
    }
    *logged = now;
    (
        result.collection,
        Outcome {
            subdirectories: result.subdirectories,
            conflicts,
        },
    )
}
