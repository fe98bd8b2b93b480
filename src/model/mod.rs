//! The merged data model: metric families, samples and label sets.
//!
//! This mirrors what prometheus_client's `MultiProcessCollector.collect()`
//! yields: a list of families in first-seen order, each with a help text, a
//! type and samples in output order. Samples carry no timestamps or exemplars
//! (multiprocess mode never produces them).

pub(crate) mod family_list;
pub mod float;
pub mod names;

use std::sync::Arc;

/// A metric type as prometheus_client names it (`Metric.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricType {
    /// `counter` (text format prints the family as `<name>_total`).
    Counter,
    /// `gauge`.
    Gauge,
    /// `summary` (multiprocess summaries have only `_count` and `_sum`).
    Summary,
    /// `histogram`.
    Histogram,
    /// `gaugehistogram` (printed as `histogram` in the text format).
    GaugeHistogram,
    /// `unknown` (printed as `untyped` in the text format); also what `untyped` files become.
    Unknown,
    /// `info` (the text format prints `<name>_info` with type `gauge`).
    Info,
    /// `stateset` (printed as `gauge` in the text format).
    StateSet,
}

impl MetricType {
    /// The type for a file-name prefix (`counter_1.db` → `counter`), as
    /// prometheus_client's `Metric.__init__` accepts it (`untyped` becomes
    /// `unknown`). `None` for a prefix prometheus_client rejects.
    pub fn from_file_prefix(prefix: &str) -> Option<Self> {
        Some(match prefix {
            "counter" => Self::Counter,
            "gauge" => Self::Gauge,
            "summary" => Self::Summary,
            "histogram" => Self::Histogram,
            "gaugehistogram" => Self::GaugeHistogram,
            "unknown" | "untyped" => Self::Unknown,
            "info" => Self::Info,
            "stateset" => Self::StateSet,
            _ => return None,
        })
    }

    /// The OpenMetrics type name (`Metric.type`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Summary => "summary",
            Self::Histogram => "histogram",
            Self::GaugeHistogram => "gaugehistogram",
            Self::Unknown => "unknown",
            Self::Info => "info",
            Self::StateSet => "stateset",
        }
    }
}

/// One label: name and value.
pub type Label = (Arc<str>, Arc<str>);

/// A set of labels sorted by name with unique names, cheap to clone.
///
/// Construct with [`Labels::new`], which sorts and keeps the last value of a
/// repeated name (Python's `dict(...)` followed by `sorted(...)`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Labels(Arc<[Label]>);

impl Labels {
    /// Builds a label set from pairs in any order; a repeated name keeps its
    /// last value.
    pub fn new(pairs: impl IntoIterator<Item = Label>) -> Self {
        let mut pairs: Vec<Label> = pairs.into_iter().collect();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut unique: Vec<Label> = Vec::with_capacity(pairs.len());
        for (name, value) in pairs {
            match unique.last_mut() {
                Some(last) if last.0 == name => last.1 = value,
                _ => unique.push((name, value)),
            }
        }
        Self(unique.into())
    }

    /// The labels, sorted by name.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Label> {
        self.0.iter()
    }

    /// The labels as a slice, sorted by name.
    pub fn as_slice(&self) -> &[Label] {
        &self.0
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()
            .map(|i| &*self.0[i].1)
    }
}

/// One output line: sample name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Sample name, e.g. `requests_total` or `latency_seconds_bucket`.
    pub name: Arc<str>,
    /// Labels, sorted by name.
    pub labels: Labels,
    /// Value.
    pub value: f64,
}

/// A metric family: name, help, type and samples in output order.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFamily {
    /// Family name (a counter's family name has no `_total`).
    pub name: Arc<str>,
    /// Help text, unescaped.
    pub help: Arc<str>,
    /// Type.
    pub metric_type: MetricType,
    /// Samples in output order.
    pub samples: Vec<Sample>,
}

impl MetricFamily {
    /// Whether the name the text format declares for the family is `name`:
    /// `<name>_total` for a counter, `<name>_info` for an info metric.
    pub fn declares(&self, name: &str) -> bool {
        let suffix = match self.metric_type {
            MetricType::Counter => "_total",
            MetricType::Info => "_info",
            _ => return false,
        };
        name.strip_prefix(&*self.name) == Some(suffix)
    }

    /// Keeps only samples whose name is in `names`, as prometheus_client's
    /// `Metric._restricted_metric` does for `?name[]=`; `None` if none remain.
    pub fn restricted<S: AsRef<str>>(&self, names: &[S]) -> Option<MetricFamily> {
        let samples: Vec<Sample> = self
            .samples
            .iter()
            .filter(|s| names.iter().any(|n| n.as_ref() == &*s.name))
            .cloned()
            .collect();
        (!samples.is_empty()).then(|| MetricFamily {
            name: self.name.clone(),
            help: self.help.clone(),
            metric_type: self.metric_type,
            samples,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(n: &str, v: &str) -> Label {
        (n.into(), v.into())
    }

    #[test]
    fn labels_sort_and_keep_last_value() {
        let labels = Labels::new([l("pid", "user"), l("a", "1"), l("pid", "123")]);
        let names: Vec<&str> = labels.iter().map(|(n, _)| &**n).collect();
        assert_eq!(names, ["a", "pid"]);
        assert_eq!(labels.get("pid"), Some("123"));
        assert_eq!(labels.get("zzz"), None);
    }

    #[test]
    fn restricted_keeps_matching_samples_only() {
        let family = MetricFamily {
            name: "c".into(),
            help: "h".into(),
            metric_type: MetricType::Counter,
            samples: vec![Sample {
                name: "c_total".into(),
                labels: Labels::default(),
                value: 1.0,
            }],
        };
        assert!(family.restricted(&["c_total"]).is_some());
        assert!(family.restricted(&["c"]).is_none());
    }
}
