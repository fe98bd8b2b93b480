//! Families built straight from current values ([`FamilyList`]), as the
//! exporter's own metrics are (the server's self-metrics, pushing's,
//! the upstreams'): no text is encoded and parsed back, and the families are
//! then encoded with the merged ones by [`crate::expose::encode`], in
//! whichever format was negotiated.

use std::sync::Arc;

use crate::model::{Labels, MetricFamily, MetricType, Sample};

/// The self-metric families of one scrape, in the order they are added.
#[derive(Debug, Default)]
pub(crate) struct FamilyList {
    families: Vec<MetricFamily>,
}

impl FamilyList {
    /// A gauge with one unlabelled sample.
    pub(crate) fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.push(
            name,
            help,
            MetricType::Gauge,
            vec![sample(name, Labels::default(), value)],
        );
    }

    /// A counter with one unlabelled sample (`<name>_total`).
    pub(crate) fn counter(&mut self, name: &str, help: &str, value: f64) {
        let total = format!("{name}_total");
        self.push(
            name,
            help,
            MetricType::Counter,
            vec![sample(&total, Labels::default(), value)],
        );
    }

    /// A gauge with one sample labelled `labels`.
    pub(crate) fn gauge_with_labels(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let labels = Labels::new(labels.iter().map(|&(n, v)| (Arc::from(n), Arc::from(v))));
        self.push(
            name,
            help,
            MetricType::Gauge,
            vec![sample(name, labels, value)],
        );
    }

    /// A gauge with one sample per label set, in the order given.
    pub(crate) fn gauge_series(
        &mut self,
        name: &str,
        help: &str,
        series: Vec<(Vec<(&str, &str)>, f64)>,
    ) {
        let samples = series
            .into_iter()
            .map(|(labels, value)| {
                let labels = Labels::new(labels.iter().map(|&(n, v)| (Arc::from(n), Arc::from(v))));
                sample(name, labels, value)
            })
            .collect();
        self.push(name, help, MetricType::Gauge, samples);
    }

    /// A gauge or counter with one sample per value of the label `label`,
    /// sorted by that value.
    pub(crate) fn by_label<'a>(
        &mut self,
        name: &str,
        help: &str,
        metric_type: MetricType,
        label: &str,
        values: impl IntoIterator<Item = (&'a str, f64)>,
    ) {
        let sample_name = match metric_type {
            MetricType::Counter => format!("{name}_total"),
            _ => name.to_owned(),
        };
        let mut values: Vec<(&str, f64)> = values.into_iter().collect();
        values.sort_by(|a, b| a.0.cmp(b.0));
        let label: Arc<str> = label.into();
        let samples = values
            .into_iter()
            .map(|(value_label, value)| {
                let labels = Labels::new([(label.clone(), Arc::from(value_label))]);
                sample(&sample_name, labels, value)
            })
            .collect();
        self.push(name, help, metric_type, samples);
    }

    /// Families built elsewhere, in order.
    pub(crate) fn extend(&mut self, families: impl IntoIterator<Item = MetricFamily>) {
        self.families.extend(families);
    }

    /// The families.
    pub(crate) fn into_families(self) -> Vec<MetricFamily> {
        self.families
    }

    fn push(&mut self, name: &str, help: &str, metric_type: MetricType, samples: Vec<Sample>) {
        self.families.push(MetricFamily {
            name: name.into(),
            help: help.into(),
            metric_type,
            samples,
        });
    }
}

fn sample(name: &str, labels: Labels, value: f64) -> Sample {
    Sample {
        name: name.into(),
        labels,
        value,
    }
}
