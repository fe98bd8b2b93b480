//! Merging records from many process files exactly like prometheus_client's
//! `MultiProcessCollector.merge` (`_read_metrics` + `_accumulate_metrics`).
//!
//! The merge is split in two so that scrapes stay cheap:
//!
//! * [`plan`] looks at the *structure* (the ordered file list and the keys of
//!   their records) and decides, for every record, which output series it
//!   feeds and how (add, min, max, assign, most recent, histogram bucket). It
//!   also fixes the output order of families, label groups and samples. Keys
//!   are decoded and interned once in a [`KeyStore`], so planning hashes small
//!   integers, not strings.
//! * [`MergePlan::evaluate`] runs the arithmetic on the current values, in the
//!   same operation order as Python (so sums are bit-identical), and builds the
//!   [`crate::model::MetricFamily`] list. A scrape of a directory whose structure did not
//!   change only evaluates.
//!
//! Semantics reproduced (see `../shared/research/prometheus_client_multiproc.md` §3):
//! the type comes from the first file naming a family, help from its first
//! record, the gauge mode from the last gauge file; counters, summaries,
//! `sum` gauges and histogram `_sum` add in file order from `0.0`; histogram
//! buckets are unioned over processes, sorted by their numeric bound, made
//! cumulative and re-labelled with `floatToGoString`, with `_count` derived;
//! `all` gauges get a `pid` label; `mostrecent` takes the strictly newest
//! timestamp and omits never-set series; everything keeps first-seen order.

mod cache;
mod floors;
mod keys;
#[cfg(test)]
mod monotone_tests;
mod plan;
mod python_float;
mod records;
#[cfg(test)]
mod tests;

use thiserror::Error;

pub use cache::{FileIdentity, MergeInput, Merged, PlanCache};
pub use keys::{KeyId, KeyStore, StoreMark};
pub use plan::{plan, MergePlan, Output, PlanInput, Planned, ShapeMismatch};
pub use python_float::python_float;
pub use records::{merge_records, RawRecord};

/// Why a file was left out of a merge although its bytes parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MergeError {
    /// The file-name prefix is not a metric type prometheus_client accepts.
    #[error("unknown metric type '{prefix}' in the file name")]
    UnknownType {
        /// The prefix, e.g. `foo` for `foo_1.db`.
        prefix: String,
    },
    /// A gauge file whose name has no mode and pid parts (`gauge_1.db`).
    #[error("gauge file name has no mode and pid parts")]
    GaugeNameWithoutPid,
    /// A histogram bucket's `le` label is not a number Python's `float()`
    /// accepts, or is NaN.
    #[error("histogram bucket bound le=\"{le}\" is not a number")]
    InvalidBucketBound {
        /// The `le` label value.
        le: String,
    },
}
