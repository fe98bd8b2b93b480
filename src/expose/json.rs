//! The families as typed JSON: `/api/v1/snapshot` and `dump --format json`,
//! the outside-the-process counterpart of vLLM's `get_metrics_snapshot()`.
//! Pure: no I/O. The schema is documented in `docs/api.md`.
//!
//! Every family becomes `{name, type, help, series}`; the samples of one
//! label set (without `le` and `quantile`) become one series, typed:
//!
//! * counter: `value` (the `_total` sample), `created` (`_created`, if any);
//! * gauge, unknown, stateset: `value`; info: `value` (the `_info` sample);
//! * histogram and gaugehistogram: `buckets` (`[{le, count}]`, cumulative, in
//!   order, `le` as written in the exposition), `count`, `sum` (`_gcount` and
//!   `_gsum` for a gaugehistogram), `created`;
//! * summary: `quantiles` (`[{quantile, value}]`), `count`, `sum`, `created`.
//!
//! A sample that fits none of these (prometheus_client serves what the files
//! hold) goes to the series' `other` list as `{name, value}`, so nothing the
//! exposition has is lost. Finite values are JSON numbers; NaN and the
//! infinities, which JSON cannot hold, are the strings `"NaN"`, `"+Inf"` and
//! `"-Inf"`.

use serde_json::{json, Map, Value};

use crate::model::{MetricFamily, MetricType, Sample};

/// The snapshot of `families`, as `{"families": [...]}`.
pub fn snapshot(families: &[MetricFamily]) -> Value {
    json!({ "families": families.iter().map(family).collect::<Vec<_>>() })
}

/// A value as JSON: a number, or `"NaN"`, `"+Inf"`, `"-Inf"`.
pub fn number(value: f64) -> Value {
    if value.is_nan() {
        Value::from("NaN")
    } else if value == f64::INFINITY {
        Value::from("+Inf")
    } else if value == f64::NEG_INFINITY {
        Value::from("-Inf")
    } else {
        Value::from(value)
    }
}

/// The JSON type name of a family.
pub fn type_name(t: MetricType) -> &'static str {
    match t {
        MetricType::Counter => "counter",
        MetricType::Gauge => "gauge",
        MetricType::Summary => "summary",
        MetricType::Histogram => "histogram",
        MetricType::GaugeHistogram => "gaugehistogram",
        MetricType::Unknown => "unknown",
        MetricType::Info => "info",
        MetricType::StateSet => "stateset",
    }
}

fn family(family: &MetricFamily) -> Value {
    // Series in first-seen order, keyed by their labels without le/quantile.
    let mut series: Vec<(Map<String, Value>, Map<String, Value>)> = Vec::new();
    for sample in &family.samples {
        let labels: Map<String, Value> = sample
            .labels
            .iter()
            .filter(|(name, _)| &**name != "le" && &**name != "quantile")
            .map(|(name, value)| (name.to_string(), Value::from(&**value)))
            .collect();
        let at = match series.iter().position(|(l, _)| *l == labels) {
            Some(at) => at,
            None => {
                series.push((labels, Map::new()));
                series.len() - 1
            }
        };
        place(family, sample, &mut series[at].1);
    }
    json!({
        "name": &*family.name,
        "type": type_name(family.metric_type),
        "help": &*family.help,
        "series": series
            .into_iter()
            .map(|(labels, mut fields)| {
                fields.insert("labels".to_owned(), Value::Object(labels));
                Value::Object(fields)
            })
            .collect::<Vec<_>>(),
    })
}

/// Puts `sample` into its series' `fields`.
fn place(family: &MetricFamily, sample: &Sample, fields: &mut Map<String, Value>) {
    let suffix = sample.name.strip_prefix(&*family.name);
    let value = number(sample.value);
    let label = |name: &str| sample.labels.get(name).map(|v| v.to_string());
    use MetricType as T;
    let slot: Option<(&str, Value)> = match (family.metric_type, suffix) {
        (T::Counter, Some("_total")) => Some(("value", value.clone())),
        (T::Gauge | T::Unknown | T::StateSet, Some("")) => Some(("value", value.clone())),
        (T::Info, Some("_info")) => Some(("value", value.clone())),
        (T::Histogram | T::GaugeHistogram, Some("_bucket")) => label("le").map(|le| {
            push(
                fields,
                "buckets",
                json!({ "le": le, "count": value.clone() }),
            );
            ("", Value::Null)
        }),
        (T::Summary, Some("")) => label("quantile").map(|q| {
            push(
                fields,
                "quantiles",
                json!({ "quantile": q, "value": value.clone() }),
            );
            ("", Value::Null)
        }),
        (T::Histogram | T::Summary, Some("_count")) | (T::GaugeHistogram, Some("_gcount")) => {
            Some(("count", value.clone()))
        }
        (T::Histogram | T::Summary, Some("_sum")) | (T::GaugeHistogram, Some("_gsum")) => {
            Some(("sum", value.clone()))
        }
        (T::Counter | T::Histogram | T::Summary | T::GaugeHistogram, Some("_created")) => {
            Some(("created", value.clone()))
        }
        _ => None,
    };
    match slot {
        Some(("", _)) => {}
        Some((key, v)) if !fields.contains_key(key) => {
            fields.insert(key.to_owned(), v);
        }
        _ => push(
            fields,
            "other",
            json!({ "name": &*sample.name, "value": value }),
        ),
    }
}

fn push(fields: &mut Map<String, Value>, key: &str, item: Value) {
    match fields.get_mut(key) {
        Some(Value::Array(items)) => items.push(item),
        _ => {
            fields.insert(key.to_owned(), Value::Array(vec![item]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Labels;

    fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            name: name.into(),
            labels: Labels::new(labels.iter().map(|(k, v)| ((*k).into(), (*v).into()))),
            value,
        }
    }

    #[test]
    fn histograms_counters_and_odd_samples() {
        let families = vec![
            MetricFamily {
                name: "lat".into(),
                help: "Latency.".into(),
                metric_type: MetricType::Histogram,
                samples: vec![
                    sample("lat_sum", &[("m", "a")], 2.5),
                    sample("lat_bucket", &[("le", "1.0"), ("m", "a")], 1.0),
                    sample("lat_bucket", &[("le", "+Inf"), ("m", "a")], 2.0),
                    sample("lat_count", &[("m", "a")], 2.0),
                ],
            },
            MetricFamily {
                name: "c".into(),
                help: "".into(),
                metric_type: MetricType::Counter,
                samples: vec![sample("c_total", &[], f64::INFINITY), sample("c", &[], 1.0)],
            },
        ];
        assert_eq!(
            snapshot(&families),
            json!({"families": [
                {"name": "lat", "type": "histogram", "help": "Latency.", "series": [
                    {"labels": {"m": "a"}, "sum": 2.5, "count": 2.0,
                     "buckets": [{"le": "1.0", "count": 1.0}, {"le": "+Inf", "count": 2.0}]}]},
                {"name": "c", "type": "counter", "help": "", "series": [
                    {"labels": {}, "value": "+Inf", "other": [{"name": "c", "value": 1.0}]}]}
            ]})
        );
    }
}
