//! Exposition encoders, byte-identical to prometheus_client 0.26.0.
//!
//! * `Format::Text`: `prometheus_client.exposition.generate_latest`, the
//!   Prometheus text format (0.0.4, and 1.0.0 which has the same body).
//! * `Format::OpenMetrics`: `prometheus_client.openmetrics.exposition.generate_latest`
//!   (OpenMetrics 1.0.0).
//!
//! Both take an [`Escaping`] for metric and label names: `underscores`
//! (replace characters outside the legacy character set with `_`) or
//! `allow-utf-8` (quote names outside it). The quirks of the reference are
//! kept on purpose, because Prometheus series identity depends on them: the
//! OpenMetrics encoder with `underscores` rewrites `:` to `_` in sample lines
//! but not in `# HELP`/`# TYPE` (client_python #1177), and Python's `$` in the
//! name regular expressions also accepts one trailing newline.

use crate::model::float::write_go_float;
use crate::model::names::{
    is_legacy_label_name, is_legacy_label_rune, is_legacy_metric_name, is_legacy_metric_rune,
};
use crate::model::{MetricFamily, MetricType, Sample};

/// The exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Prometheus text format (`text/plain; version=0.0.4` or `1.0.0`).
    Text,
    /// OpenMetrics 1.0.0 text format (ends with `# EOF`).
    OpenMetrics,
}

/// How metric and label names outside the legacy character set are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Escaping {
    /// Replace every invalid character with `_` (the default).
    #[default]
    Underscores,
    /// Keep UTF-8 names, quoted when not legacy-valid.
    AllowUtf8,
}

impl Escaping {
    /// The name used in `escaping=` parameters.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Underscores => "underscores",
            Self::AllowUtf8 => "allow-utf-8",
        }
    }
}

/// Encodes families in `format` with `escaping` into a new byte vector.
pub fn encode(families: &[MetricFamily], format: Format, escaping: Escaping) -> Vec<u8> {
    let mut out = String::with_capacity(families.iter().map(|f| 64 + f.samples.len() * 64).sum());
    encode_into(&mut out, families, format, escaping);
    out.into_bytes()
}

/// Appends the encoding of one family to `out` (what [`encode_into`] writes
/// for it; [`encode_end`] closes the body).
pub fn encode_family(out: &mut String, family: &MetricFamily, format: Format, escaping: Escaping) {
    match format {
        Format::Text => encode_text_family(out, family, escaping),
        Format::OpenMetrics => encode_openmetrics_family(out, family, escaping),
    }
}

/// Appends what ends a body after its families (`# EOF` in OpenMetrics).
pub fn encode_end(out: &mut String, format: Format) {
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
}

/// Appends the encoding of `families` to `out`.
pub fn encode_into(
    out: &mut String,
    families: &[MetricFamily],
    format: Format,
    escaping: Escaping,
) {
    for family in families {
        encode_family(out, family, format, escaping);
    }
    encode_end(out, format);
}

fn encode_text_family(out: &mut String, family: &MetricFamily, escaping: Escaping) {
    let (suffix, type_name) = match family.metric_type {
        MetricType::Counter => ("_total", "counter"),
        MetricType::Info => ("_info", "gauge"),
        MetricType::StateSet => ("", "gauge"),
        MetricType::GaugeHistogram => ("", "histogram"),
        MetricType::Unknown => ("", "untyped"),
        other => ("", other.as_str()),
    };
    let exposed_name = format!("{}{suffix}", family.name);
    text_header(out, &exposed_name, &family.help, type_name, escaping);

    // Samples named <family>_created/_gsum/_gcount move to gauge families after
    // this one, in sorted suffix order (never written by multiprocess files,
    // but a key can name them).
    let mut moved: [Vec<&Sample>; 3] = Default::default();
    const MOVED: [&str; 3] = ["_created", "_gcount", "_gsum"];
    for sample in &family.samples {
        let moved_to = MOVED.iter().position(|suffix| {
            sample.name.len() == family.name.len() + suffix.len()
                && sample.name.starts_with(&*family.name)
                && sample.name.ends_with(suffix)
        });
        match moved_to {
            Some(i) => moved[i].push(sample),
            None => text_sample(out, sample, escaping),
        }
    }
    for (suffix, samples) in MOVED.iter().zip(&moved) {
        if samples.is_empty() {
            continue;
        }
        text_header(
            out,
            &format!("{}{suffix}", family.name),
            &family.help,
            "gauge",
            escaping,
        );
        for sample in samples {
            text_sample(out, sample, escaping);
        }
    }
}

fn text_header(out: &mut String, name: &str, help: &str, type_name: &str, escaping: Escaping) {
    out.push_str("# HELP ");
    push_metric_name(out, name, escaping);
    out.push(' ');
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push_str("\n# TYPE ");
    push_metric_name(out, name, escaping);
    out.push(' ');
    out.push_str(type_name);
    out.push('\n');
}

fn text_sample(out: &mut String, sample: &Sample, escaping: Escaping) {
    let quoted = escaping == Escaping::AllowUtf8 && !is_legacy_metric_name(&sample.name);
    if quoted {
        out.push('{');
        push_metric_name(out, &sample.name, escaping);
        if !sample.labels.is_empty() {
            out.push(',');
        }
        push_labels(out, sample, escaping);
        out.push('}');
    } else {
        push_metric_name(out, &sample.name, escaping);
        if !sample.labels.is_empty() {
            out.push('{');
            push_labels(out, sample, escaping);
            out.push('}');
        }
    }
    out.push(' ');
    write_go_float(out, sample.value);
    out.push('\n');
}

fn encode_openmetrics_family(out: &mut String, family: &MetricFamily, escaping: Escaping) {
    out.push_str("# HELP ");
    push_metric_name(out, &family.name, escaping);
    out.push(' ');
    push_escaped_value(out, &family.help);
    out.push_str("\n# TYPE ");
    push_metric_name(out, &family.name, escaping);
    out.push(' ');
    out.push_str(family.metric_type.as_str());
    out.push('\n');
    for sample in &family.samples {
        let quoted = escaping == Escaping::AllowUtf8 && !is_legacy_metric_name(&sample.name);
        if !quoted {
            // `_escape(s.name, escaping, _is_legacy_labelname_rune)`: with
            // underscores this rewrites ':' too, even in a legacy-valid name.
            match escaping {
                Escaping::Underscores => push_replaced(out, &sample.name, is_legacy_label_rune),
                Escaping::AllowUtf8 => push_escaped_value(out, &sample.name),
            }
        }
        if quoted || !sample.labels.is_empty() {
            out.push('{');
            if quoted {
                push_metric_name(out, &sample.name, escaping);
                if !sample.labels.is_empty() {
                    out.push(',');
                }
            }
            push_labels(out, sample, escaping);
            out.push('}');
        }
        out.push(' ');
        write_go_float(out, sample.value);
        out.push('\n');
    }
}

fn push_labels(out: &mut String, sample: &Sample, escaping: Escaping) {
    for (i, (name, value)) in sample.labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_label_name(out, name, escaping);
        out.push_str("=\"");
        push_escaped_value(out, value);
        out.push('"');
    }
}

/// `escape_metric_name(s, escaping)`.
fn push_metric_name(out: &mut String, name: &str, escaping: Escaping) {
    push_name(
        out,
        name,
        escaping,
        is_legacy_metric_name(name),
        is_legacy_metric_rune,
    );
}

/// `escape_label_name(s, escaping)`.
fn push_label_name(out: &mut String, name: &str, escaping: Escaping) {
    push_name(
        out,
        name,
        escaping,
        is_legacy_label_name(name),
        is_legacy_label_rune,
    );
}

fn push_name(
    out: &mut String,
    name: &str,
    escaping: Escaping,
    legacy: bool,
    rune: fn(char, usize) -> bool,
) {
    match escaping {
        Escaping::AllowUtf8 if !legacy && !name.is_empty() => {
            out.push('"');
            push_escaped_value(out, name);
            out.push('"');
        }
        Escaping::AllowUtf8 => push_escaped_value(out, name),
        Escaping::Underscores if legacy || name.is_empty() => out.push_str(name),
        Escaping::Underscores => push_replaced(out, name, rune),
    }
}

/// `_escape(s, UNDERSCORES, rune)`: every code point failing `rune` becomes `_`.
fn push_replaced(out: &mut String, name: &str, rune: fn(char, usize) -> bool) {
    for (i, c) in name.chars().enumerate() {
        out.push(if rune(c, i) { c } else { '_' });
    }
}

/// `_escape(s, ALLOWUTF8, ...)`: backslash, newline and double quote.
fn push_escaped_value(out: &mut String, value: &str) {
    if memchr::memchr3(b'\\', b'\n', b'"', value.as_bytes()).is_none() {
        out.push_str(value);
        return;
    }
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Labels;

    /// Sample name, labels and value.
    type TestSample<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

    fn family(
        name: &str,
        help: &str,
        metric_type: MetricType,
        samples: &[TestSample<'_>],
    ) -> MetricFamily {
        MetricFamily {
            name: name.into(),
            help: help.into(),
            metric_type,
            samples: samples
                .iter()
                .map(|(n, labels, v)| Sample {
                    name: (*n).into(),
                    labels: Labels::new(labels.iter().map(|(k, v)| ((*k).into(), (*v).into()))),
                    value: *v,
                })
                .collect(),
        }
    }

    fn text(families: &[MetricFamily], format: Format, escaping: Escaping) -> String {
        String::from_utf8(encode(families, format, escaping)).unwrap()
    }

    #[test]
    fn colon_names_follow_python_in_every_format() {
        let f = [family(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            MetricType::Counter,
            &[("vllm:prompt_tokens_total", &[("model_name", "m")], 30.0)],
        )];
        assert_eq!(
            text(&f, Format::Text, Escaping::Underscores),
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n\
             # TYPE vllm:prompt_tokens_total counter\n\
             vllm:prompt_tokens_total{model_name=\"m\"} 30.0\n"
        );
        assert_eq!(
            text(&f, Format::OpenMetrics, Escaping::Underscores),
            "# HELP vllm:prompt_tokens Number of prefill tokens processed.\n\
             # TYPE vllm:prompt_tokens counter\n\
             vllm_prompt_tokens_total{model_name=\"m\"} 30.0\n# EOF\n"
        );
        assert_eq!(
            text(&f, Format::OpenMetrics, Escaping::AllowUtf8),
            "# HELP vllm:prompt_tokens Number of prefill tokens processed.\n\
             # TYPE vllm:prompt_tokens counter\n\
             vllm:prompt_tokens_total{model_name=\"m\"} 30.0\n# EOF\n"
        );
    }

    #[test]
    fn escaping_of_names_values_and_help() {
        let f = [family(
            "my.metric",
            "Total \"requests\"\nwith \\ backslash",
            MetricType::Counter,
            &[(
                "my.metric_total",
                &[("my-label", "v"), ("0lead", "w"), ("é", "\\x\n\"")],
                1.0,
            )],
        )];
        assert_eq!(
            text(&f, Format::Text, Escaping::Underscores),
            "# HELP my_metric_total Total \"requests\"\\nwith \\\\ backslash\n\
             # TYPE my_metric_total counter\n\
             my_metric_total{_lead=\"w\",my_label=\"v\",_=\"\\\\x\\n\\\"\"} 1.0\n"
        );
        assert_eq!(
            text(&f, Format::Text, Escaping::AllowUtf8),
            "# HELP \"my.metric_total\" Total \"requests\"\\nwith \\\\ backslash\n\
             # TYPE \"my.metric_total\" counter\n\
             {\"my.metric_total\",\"0lead\"=\"w\",\"my-label\"=\"v\",\"é\"=\"\\\\x\\n\\\"\"} 1.0\n"
        );
        assert_eq!(
            text(&f, Format::OpenMetrics, Escaping::Underscores),
            "# HELP my_metric Total \\\"requests\\\"\\nwith \\\\ backslash\n\
             # TYPE my_metric counter\n\
             my_metric_total{_lead=\"w\",my_label=\"v\",_=\"\\\\x\\n\\\"\"} 1.0\n# EOF\n"
        );
    }

    #[test]
    fn type_munging_in_text_format() {
        let f = [
            family("i", "", MetricType::Info, &[]),
            family("s", "", MetricType::StateSet, &[]),
            family("gh", "", MetricType::GaugeHistogram, &[]),
            family("u", "", MetricType::Unknown, &[]),
        ];
        assert_eq!(
            text(&f, Format::Text, Escaping::Underscores),
            "# HELP i_info \n# TYPE i_info gauge\n# HELP s \n# TYPE s gauge\n\
             # HELP gh \n# TYPE gh histogram\n# HELP u \n# TYPE u untyped\n"
        );
    }

    #[test]
    fn created_samples_move_to_their_own_gauge_family_in_text() {
        let f = [family(
            "c",
            "h",
            MetricType::Counter,
            &[("c_created", &[], 5.0), ("c_total", &[], 1.0)],
        )];
        assert_eq!(
            text(&f, Format::Text, Escaping::Underscores),
            "# HELP c_total h\n# TYPE c_total counter\nc_total 1.0\n\
             # HELP c_created h\n# TYPE c_created gauge\nc_created 5.0\n"
        );
    }

    #[test]
    fn empty_output() {
        assert_eq!(text(&[], Format::Text, Escaping::Underscores), "");
        assert_eq!(
            text(&[], Format::OpenMetrics, Escaping::Underscores),
            "# EOF\n"
        );
    }

    #[test]
    fn python_regex_dollar_accepts_one_trailing_newline() {
        assert!(is_legacy_metric_name("abc\n"));
        assert!(!is_legacy_metric_name("abc\n\n"));
        assert!(!is_legacy_metric_name("\n"));
        assert!(!is_legacy_label_name("__reserved"));
        assert!(is_legacy_label_name("_x"));
        assert!(!is_legacy_label_name("a:b"));
        assert!(is_legacy_metric_name("a:b"));
    }
}
