//! Families → a Prometheus remote-write 1.0 request (`prometheus.WriteRequest`,
//! protobuf, compressed with snappy's block format), as `--push.*` sends them.
//! No I/O.
//!
//! Every sample becomes one series with one sample at the collection's
//! timestamp, named as the text format names it (`<name>_total`,
//! `<name>_bucket{le=...}`, `<name>_sum`, ...). Names are escaped as the text
//! format escapes them with `underscores` (characters outside the legacy set
//! become `_`, so `vllm:` names keep their colon), labels are sorted by name
//! with `__name__` among them, empty label values are left out (Prometheus
//! treats them as absent), and a series that would appear twice is sent once
//! (Prometheus rejects a whole request with a duplicate sample).
//!
//! The messages are derived by hand with `prost` from `prompb/types.proto`
//! and `prompb/remote.proto` (only the fields sent), so no `protoc` is needed.

use crate::model::names::{
    is_legacy_label_name, is_legacy_label_rune, is_legacy_metric_name, is_legacy_metric_rune,
};
use crate::model::MetricFamily;

/// `prometheus.WriteRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// The series, each with its samples in timestamp order.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Labels sorted by name, `__name__` included.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Samples in timestamp order.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<WriteSample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct Label {
    /// Label name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Label value (never empty).
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteSample {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// The series of `families` at `timestamp_ms`, with `extra` labels added to
/// every series that lacks them (as Prometheus's `external_labels`): sorted
/// by labels, each series once.
pub fn write_request(
    families: &[MetricFamily],
    timestamp_ms: i64,
    extra: &[(String, String)],
) -> WriteRequest {
    let mut timeseries: Vec<TimeSeries> =
        Vec::with_capacity(families.iter().map(|f| f.samples.len()).sum());
    for family in families {
        for sample in &family.samples {
            let mut labels = Vec::with_capacity(sample.labels.len() + 1 + extra.len());
            labels.push(Label {
                name: "__name__".to_owned(),
                value: escaped(
                    &sample.name,
                    is_legacy_metric_name(&sample.name),
                    is_legacy_metric_rune,
                ),
            });
            for (name, value) in sample.labels.iter() {
                if value.is_empty() {
                    continue;
                }
                labels.push(Label {
                    name: escaped(name, is_legacy_label_name(name), is_legacy_label_rune),
                    value: value.to_string(),
                });
            }
            for (name, value) in extra {
                if !value.is_empty() && !labels.iter().any(|l| l.name == *name) {
                    labels.push(Label {
                        name: name.clone(),
                        value: value.clone(),
                    });
                }
            }
            // Escaping may reorder names (and make two equal: the first stays).
            labels.sort_by(|a, b| a.name.cmp(&b.name));
            labels.dedup_by(|later, earlier| later.name == earlier.name);
            timeseries.push(TimeSeries {
                labels,
                samples: vec![WriteSample {
                    value: sample.value,
                    timestamp: timestamp_ms,
                }],
            });
        }
    }
    timeseries.sort_by(|a, b| a.labels.cmp(&b.labels));
    timeseries.dedup_by(|later, earlier| later.labels == earlier.labels);
    WriteRequest { timeseries }
}

/// A name as the text format writes it with `underscores`.
fn escaped(name: &str, legacy: bool, rune: fn(char, usize) -> bool) -> String {
    if legacy || name.is_empty() {
        return name.to_owned();
    }
    name.chars()
        .enumerate()
        .map(|(i, c)| if rune(c, i) { c } else { '_' })
        .collect()
}

/// The request's protobuf bytes compressed with snappy's block format: the
/// body of a remote-write 1.0 POST.
pub fn encode(request: &WriteRequest) -> Vec<u8> {
    let bytes = prost::Message::encode_to_vec(request);
    snap::raw::Encoder::new()
        .compress_vec(&bytes)
        .unwrap_or_default()
}

/// Decodes a body made by [`encode`] (tests and tools).
pub fn decode(body: &[u8]) -> Result<WriteRequest, String> {
    let bytes = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| format!("not snappy: {e}"))?;
    <WriteRequest as prost::Message>::decode(&bytes[..])
        .map_err(|e| format!("not a WriteRequest: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Labels, MetricType, Sample};
    use std::sync::Arc;

    fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            name: name.into(),
            labels: Labels::new(labels.iter().map(|&(n, v)| (Arc::from(n), Arc::from(v)))),
            value,
        }
    }

    fn names(series: &TimeSeries) -> Vec<(&str, &str)> {
        series
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect()
    }

    #[test]
    fn samples_become_sorted_series_with_their_text_names() {
        let families = vec![
            MetricFamily {
                name: "vllm:requests".into(),
                help: "h".into(),
                metric_type: MetricType::Counter,
                samples: vec![sample(
                    "vllm:requests_total",
                    &[("model_name", "m"), ("Zone", "z"), ("empty", "")],
                    3.0,
                )],
            },
            MetricFamily {
                name: "latency".into(),
                help: "h".into(),
                metric_type: MetricType::Histogram,
                samples: vec![
                    sample("latency_bucket", &[("le", "0.5")], 1.0),
                    sample("latency_bucket", &[("le", "+Inf")], f64::INFINITY),
                    sample("latency_sum", &[], -0.0),
                    sample("latency_count", &[], f64::NAN),
                    // Twice: sent once, the first value.
                    sample("latency_count", &[], 9.0),
                ],
            },
            MetricFamily {
                name: "odd.name".into(),
                help: "h".into(),
                metric_type: MetricType::Gauge,
                samples: vec![sample("odd.name", &[("a.b", "1"), ("pod", "own")], 1.0)],
            },
        ];
        let extra = [
            ("pod".to_owned(), "p-1".to_owned()),
            ("cluster".to_owned(), "c".to_owned()),
        ];
        let request = write_request(&families, 1_700_000_000_123, &extra);
        let body = encode(&request);
        let decoded = decode(&body).unwrap();
        // (NaN makes the requests unequal; their bytes compare.)
        assert_eq!(encode(&decoded), body);
        // The protobuf bytes really are snappy-compressed.
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        assert_eq!(raw, prost::Message::encode_to_vec(&request));
        let got: Vec<Vec<(&str, &str)>> = decoded.timeseries.iter().map(names).collect();
        assert_eq!(
            got,
            vec![
                vec![
                    ("Zone", "z"),
                    ("__name__", "vllm:requests_total"),
                    ("cluster", "c"),
                    ("model_name", "m"),
                    ("pod", "p-1"),
                ],
                vec![
                    ("__name__", "latency_bucket"),
                    ("cluster", "c"),
                    ("le", "+Inf"),
                    ("pod", "p-1"),
                ],
                vec![
                    ("__name__", "latency_bucket"),
                    ("cluster", "c"),
                    ("le", "0.5"),
                    ("pod", "p-1"),
                ],
                vec![
                    ("__name__", "latency_count"),
                    ("cluster", "c"),
                    ("pod", "p-1")
                ],
                vec![
                    ("__name__", "latency_sum"),
                    ("cluster", "c"),
                    ("pod", "p-1")
                ],
                vec![
                    ("__name__", "odd_name"),
                    ("a_b", "1"),
                    ("cluster", "c"),
                    ("pod", "own"),
                ],
            ]
        );
        let values: Vec<f64> = decoded
            .timeseries
            .iter()
            .map(|s| {
                assert_eq!(s.samples.len(), 1);
                assert_eq!(s.samples[0].timestamp, 1_700_000_000_123);
                s.samples[0].value
            })
            .collect();
        assert_eq!(values[0], 3.0);
        assert_eq!(values[1], f64::INFINITY);
        assert!(values[3].is_nan());
        // proto3 leaves out a field equal to its default, 0, so -0 arrives as 0.
        assert_eq!(values[4].to_bits(), 0.0f64.to_bits());
    }

    #[test]
    fn empty_families_make_an_empty_request() {
        let request = write_request(&[], 0, &[]);
        assert!(request.timeseries.is_empty());
        assert_eq!(decode(&encode(&request)).unwrap(), request);
        assert!(decode(b"not snappy at all").is_err());
    }
}
