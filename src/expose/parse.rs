//! Parsing an exposition (what an upstream's `/metrics` answers) back into
//! families: the Prometheus text format 0.0.4 and OpenMetrics 1.0.0. The
//! inverse of [`super::encode`]. Pure: no I/O.
//!
//! Hand-written (no crate on crates.io parsed both formats exactly into this
//! crate's model: escapes, `# EOF`, `_created`, the OpenMetrics-only types)
//! and fuzzed (`fuzz/fuzz_targets/exposition_parser.rs`: whatever parses
//! encodes and parses back to the same families).
//!
//! What comes out is this crate's [`MetricFamily`] model, so that every
//! source goes through the same transform and encoders:
//!
//! * values are parsed to the nearest `f64` (exact: the encoders write the
//!   shortest text that reads back to the same `f64`); `NaN`, `+Inf`, `-Inf`;
//! * label sets are sorted by name (the model's order); a repeated label
//!   name, a repeated series or a family that appears twice is an error;
//! * **timestamps and exemplars are checked and dropped**, and so is
//!   OpenMetrics' `# UNIT` (the model has none of them; a scrape gets the
//!   exporter's time, as for the directory's samples);
//! * a text-format counter is the family `<name>` of samples `<name>_total`
//!   (`# TYPE x_total counter`, as prometheus_client writes it); a text
//!   counter whose samples lack `_total` (older Go clients) is kept as
//!   `untyped`, so that its series keep their names and values;
//! * a sample whose name belongs to no declared family starts an `unknown`
//!   family of its own name, with an empty help;
//! * an OpenMetrics body must end with `# EOF` (a truncated answer is an
//!   error, not a smaller scrape); in the text format, blank lines,
//!   leading and trailing blanks and comments other than `# HELP`/`# TYPE`
//!   are ignored.
//!
//! Metric and label names must be legacy names (`[a-zA-Z_:][a-zA-Z0-9_:]*`,
//! label names not starting with `__`, which Prometheus reserves); quoted
//! UTF-8 names are not parsed (an error).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use crate::model::{Label, Labels, MetricFamily, MetricType, Sample};

/// Which exposition format a body is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpositionFormat {
    /// The Prometheus text format (`text/plain; version=0.0.4`).
    Text,
    /// OpenMetrics 1.0.0 (`application/openmetrics-text`).
    OpenMetrics,
}

impl ExpositionFormat {
    /// The format a `Content-Type` header names: OpenMetrics for
    /// `application/openmetrics-text`, the text format otherwise (also when
    /// there is no header, as Prometheus assumes).
    pub fn of_content_type(content_type: Option<&str>) -> Self {
        let media = content_type
            .and_then(|c| c.split(';').next())
            .map(|m| m.trim().to_ascii_lowercase());
        match media.as_deref() {
            Some("application/openmetrics-text") => Self::OpenMetrics,
            _ => Self::Text,
        }
    }
}

/// Why a body does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The line (1-based) where the problem is.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses `body` in `format` into families, in the order they appear.
pub fn parse(body: &[u8], format: ExpositionFormat) -> Result<Vec<MetricFamily>, ParseError> {
    let text = std::str::from_utf8(body).map_err(|e| ParseError {
        line: 1 + body[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        message: "not UTF-8".to_owned(),
    })?;
    let mut parser = Parser {
        format,
        families: Vec::new(),
        current: None,
        names: HashSet::new(),
    };
    let mut lines = text.split('\n').enumerate();
    let mut eof = false;
    for (i, line) in lines.by_ref() {
        let number = i + 1;
        let fail = |message: String| ParseError {
            line: number,
            message,
        };
        if format == ExpositionFormat::OpenMetrics && line == "# EOF" {
            eof = true;
            break;
        }
        parser.line(line).map_err(fail)?;
    }
    if format == ExpositionFormat::OpenMetrics {
        if !eof {
            return Err(ParseError {
                line: text.split('\n').count(),
                message: "no `# EOF` at the end".to_owned(),
            });
        }
        // Only the final newline may follow `# EOF`.
        if let Some((i, rest)) = lines.next() {
            if !rest.is_empty() || lines.next().is_some() {
                return Err(ParseError {
                    line: i + 1,
                    message: "text after `# EOF`".to_owned(),
                });
            }
        }
    }
    parser.finish();
    Ok(parser.families)
}

/// The family being read.
#[derive(Debug)]
struct Building {
    /// The name as `# HELP`/`# TYPE` wrote it.
    declared: String,
    /// Whether `# HELP`, `# TYPE` and `# UNIT` were seen.
    help_seen: bool,
    type_seen: bool,
    unit_seen: bool,
    family: MetricFamily,
    /// The series seen, to reject a repeated one.
    series: HashSet<(Arc<str>, Labels)>,
}

#[derive(Debug)]
struct Parser {
    format: ExpositionFormat,
    families: Vec<MetricFamily>,
    current: Option<Building>,
    /// Every family name (as declared and as modelled) seen so far.
    names: HashSet<String>,
}

impl Parser {
    fn line(&mut self, line: &str) -> Result<(), String> {
        let line = match self.format {
            ExpositionFormat::Text => line.trim_start_matches([' ', '\t']),
            ExpositionFormat::OpenMetrics => line,
        };
        if let Some(comment) = line.strip_prefix('#') {
            return self.comment(comment);
        }
        if line.trim_matches([' ', '\t']).is_empty() {
            return match self.format {
                ExpositionFormat::Text => Ok(()),
                ExpositionFormat::OpenMetrics => Err("blank line".to_owned()),
            };
        }
        self.sample(line)
    }

    fn comment(&mut self, comment: &str) -> Result<(), String> {
        let mut words = comment
            .trim_start_matches([' ', '\t'])
            .splitn(2, [' ', '\t']);
        let keyword = words.next().unwrap_or("");
        let rest = words.next().unwrap_or("");
        let om = self.format == ExpositionFormat::OpenMetrics;
        let metadata = matches!(keyword, "HELP" | "TYPE") || (om && keyword == "UNIT");
        if !metadata {
            return if om {
                Err(format!("unexpected comment `#{comment}`"))
            } else {
                Ok(())
            };
        }
        let rest = rest.trim_start_matches([' ', '\t']);
        let (name, value) = match rest.find([' ', '\t']) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        check_metric_name(name)?;
        self.declare(name)?;
        let Some(building) = self.current.as_mut() else {
            unreachable!("declare sets the current family");
        };
        match keyword {
            "HELP" => {
                if std::mem::replace(&mut building.help_seen, true) {
                    return Err(format!("second `# HELP` for {name}"));
                }
                building.family.help = unescape_help(value, om)?.into();
            }
            "UNIT" => {
                if std::mem::replace(&mut building.unit_seen, true) {
                    return Err(format!("second `# UNIT` for {name}"));
                }
            }
            _ => {
                if std::mem::replace(&mut building.type_seen, true) {
                    return Err(format!("second `# TYPE` for {name}"));
                }
                if !building.family.samples.is_empty() {
                    return Err(format!("`# TYPE` for {name} after its samples"));
                }
                let value = value.trim_end_matches([' ', '\t']);
                let metric_type = metric_type(value, om)
                    .ok_or_else(|| format!("unknown type {value:?} for {name}"))?;
                building.family.metric_type = metric_type;
                if !om && metric_type == MetricType::Counter {
                    // prometheus_client's text format: `# TYPE x_total counter`.
                    if let Some(base) = name.strip_suffix("_total").filter(|b| !b.is_empty()) {
                        building.family.name = base.into();
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes `name` the current family, starting it if the current one has
    /// another name.
    fn declare(&mut self, name: &str) -> Result<(), String> {
        if self.current.as_ref().is_some_and(|b| b.declared == name) {
            return Ok(());
        }
        self.finish();
        self.start(name, name)
    }

    fn start(&mut self, declared: &str, name: &str) -> Result<(), String> {
        if !self.names.insert(declared.to_owned()) {
            return Err(format!("family {declared} appears twice"));
        }
        self.current = Some(Building {
            declared: declared.to_owned(),
            help_seen: false,
            type_seen: false,
            unit_seen: false,
            family: MetricFamily {
                name: name.into(),
                help: "".into(),
                metric_type: MetricType::Unknown,
                samples: Vec::new(),
            },
            series: HashSet::new(),
        });
        Ok(())
    }

    /// Closes the current family.
    fn finish(&mut self) {
        if let Some(building) = self.current.take() {
            let mut family = building.family;
            let counter_without_total = self.format == ExpositionFormat::Text
                && family.metric_type == MetricType::Counter
                && *family.name == *building.declared;
            if counter_without_total {
                family.metric_type = MetricType::Unknown;
            }
            if *family.name != *building.declared && !self.names.insert(family.name.to_string()) {
                // `x_total counter` after a family `x`: keep both apart by
                // their declared names (the encoder would print them alike).
                family.metric_type = MetricType::Unknown;
                family.name = building.declared.into();
            }
            self.families.push(family);
        }
    }

    fn sample(&mut self, line: &str) -> Result<(), String> {
        let om = self.format == ExpositionFormat::OpenMetrics;
        let mut cursor = Cursor { rest: line };
        let name = cursor.metric_name()?;
        let labels = if cursor.rest.starts_with('{') {
            cursor.labels()?
        } else {
            Labels::default()
        };
        cursor.separator()?;
        let value = cursor.value()?;
        if !cursor.rest.is_empty() {
            cursor.separator()?;
            if !om && cursor.rest.is_empty() {
                // Trailing blanks, which Prometheus's text parser allows.
            } else if !cursor.rest.starts_with('#') {
                cursor.timestamp()?;
                if !cursor.rest.is_empty() {
                    cursor.separator()?;
                }
            }
            if !cursor.rest.is_empty() {
                if !om {
                    return Err(format!("unexpected {:?} after the value", cursor.rest));
                }
                cursor.exemplar()?;
            }
        }
        let belongs = self
            .current
            .as_ref()
            .is_some_and(|b| sample_belongs(&b.declared, b.family.metric_type, om, name));
        if !belongs {
            self.finish();
            self.start(name, name)?;
        }
        let Some(building) = self.current.as_mut() else {
            unreachable!("a family was started");
        };
        let name: Arc<str> = name.into();
        if !building.series.insert((name.clone(), labels.clone())) {
            return Err(format!("repeated series {name}"));
        }
        building.family.samples.push(Sample {
            name,
            labels,
            value,
        });
        Ok(())
    }
}

/// Whether a sample named `sample` belongs to the family declared as
/// `declared` of type `metric_type`.
fn sample_belongs(declared: &str, metric_type: MetricType, om: bool, sample: &str) -> bool {
    let Some(suffix) = sample.strip_prefix(declared) else {
        return false;
    };
    let suffixes: &[&str] = match (metric_type, om) {
        (MetricType::Counter, true) => &["_total", "_created"],
        (MetricType::Counter, false) => &[""],
        (MetricType::Histogram, true) => &["_bucket", "_count", "_sum", "_created"],
        (MetricType::Histogram, false) => &["_bucket", "_count", "_sum"],
        (MetricType::GaugeHistogram, _) => &["_bucket", "_gcount", "_gsum"],
        (MetricType::Summary, true) => &["", "_count", "_sum", "_created"],
        (MetricType::Summary, false) => &["", "_count", "_sum"],
        (MetricType::Info, _) => &["_info"],
        (MetricType::Gauge | MetricType::StateSet | MetricType::Unknown, _) => &[""],
    };
    suffixes.contains(&suffix)
}

fn metric_type(name: &str, om: bool) -> Option<MetricType> {
    Some(match (name, om) {
        ("counter", _) => MetricType::Counter,
        ("gauge", _) => MetricType::Gauge,
        ("histogram", _) => MetricType::Histogram,
        ("summary", _) => MetricType::Summary,
        ("untyped", false) | ("unknown", true) => MetricType::Unknown,
        ("gaugehistogram", true) => MetricType::GaugeHistogram,
        ("info", true) => MetricType::Info,
        ("stateset", true) => MetricType::StateSet,
        _ => return None,
    })
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_alphabetic() || b == b'_' || b == b':' || (i > 0 && b.is_ascii_digit())
        });
    if valid {
        Ok(())
    } else {
        Err(format!("invalid metric name {name:?}"))
    }
}

/// A help text's escapes: `\\` and `\n`, and in OpenMetrics `\"`.
fn unescape_help(text: &str, om: bool) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if om => out.push('"'),
            other => return Err(format!("invalid escape \\{} in a help text", opt(other))),
        }
    }
    Ok(out)
}

fn opt(c: Option<char>) -> String {
    c.map(String::from).unwrap_or_default()
}

/// What is left of a sample line.
struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    fn take_while(&mut self, keep: impl Fn(usize, u8) -> bool) -> &'a str {
        let end = self
            .rest
            .bytes()
            .enumerate()
            .find(|&(i, b)| !keep(i, b))
            .map_or(self.rest.len(), |(i, _)| i);
        let (taken, rest) = self.rest.split_at(end);
        self.rest = rest;
        taken
    }

    fn metric_name(&mut self) -> Result<&'a str, String> {
        let name = self.take_while(|i, b| {
            b.is_ascii_alphabetic() || b == b'_' || b == b':' || (i > 0 && b.is_ascii_digit())
        });
        if name.is_empty() {
            return Err(format!("expected a metric name at {:?}", self.rest));
        }
        Ok(name)
    }

    fn skip_blanks(&mut self) {
        self.rest = self.rest.trim_start_matches([' ', '\t']);
    }

    /// At least one blank.
    fn separator(&mut self) -> Result<(), String> {
        let before = self.rest.len();
        self.skip_blanks();
        if self.rest.len() == before {
            return Err(format!("expected a blank at {:?}", self.rest));
        }
        Ok(())
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                Ok(())
            }
            None => Err(format!("expected `{c}` at {:?}", self.rest)),
        }
    }

    /// `{name="value",...}`, a trailing comma allowed.
    fn labels(&mut self) -> Result<Labels, String> {
        self.expect('{')?;
        let mut pairs: Vec<Label> = Vec::new();
        loop {
            self.skip_blanks();
            if self.rest.starts_with('}') {
                break;
            }
            let name = self.take_while(|i, b| {
                b.is_ascii_alphabetic() || b == b'_' || (i > 0 && b.is_ascii_digit())
            });
            if name.is_empty() {
                return Err(format!("expected a label name at {:?}", self.rest));
            }
            if name.starts_with("__") {
                return Err(format!(
                    "label {name}: names starting with `__` are reserved"
                ));
            }
            if pairs.iter().any(|(n, _)| **n == *name) {
                return Err(format!("repeated label {name}"));
            }
            self.skip_blanks();
            self.expect('=')?;
            self.skip_blanks();
            let value = self.quoted()?;
            pairs.push((name.into(), value.into()));
            self.skip_blanks();
            if self.rest.starts_with(',') {
                self.rest = &self.rest[1..];
            } else if !self.rest.starts_with('}') {
                return Err(format!("expected `,` or `}}` at {:?}", self.rest));
            }
        }
        self.expect('}')?;
        Ok(Labels::new(pairs))
    }

    /// A label value in double quotes, with `\\`, `\"` and `\n` escapes.
    fn quoted(&mut self) -> Result<String, String> {
        self.expect('"')?;
        let mut out = String::new();
        let mut chars = self.rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &self.rest[i + 1..];
                    return Ok(out);
                }
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('\\') => out.push('\\'),
                    Some('"') => out.push('"'),
                    Some('n') => out.push('\n'),
                    other => {
                        return Err(format!("invalid escape \\{} in a label value", opt(other)))
                    }
                },
                c => out.push(c),
            }
        }
        Err("unterminated label value".to_owned())
    }

    fn token(&mut self) -> &'a str {
        self.take_while(|_, b| b != b' ' && b != b'\t')
    }

    fn value(&mut self) -> Result<f64, String> {
        let token = self.token();
        parse_float(token).ok_or_else(|| format!("invalid value {token:?}"))
    }

    fn timestamp(&mut self) -> Result<(), String> {
        let token = self.token();
        match parse_float(token) {
            Some(t) if t.is_finite() => Ok(()),
            _ => Err(format!("invalid timestamp {token:?}")),
        }
    }

    /// `# {labels} value [timestamp]` (OpenMetrics), checked and dropped.
    fn exemplar(&mut self) -> Result<(), String> {
        self.expect('#')?;
        self.separator()?;
        self.labels()?;
        self.separator()?;
        self.value()?;
        if !self.rest.is_empty() {
            self.separator()?;
            self.timestamp()?;
        }
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(format!("unexpected {:?} after an exemplar", self.rest))
        }
    }
}

/// A value as Go's `strconv.ParseFloat` reads the common forms: decimal
/// numbers with an optional exponent, and `NaN`, `Inf`, `+Inf`, `-Inf`,
/// `Infinity` in any case.
fn parse_float(token: &str) -> Option<f64> {
    let valid = !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'+' | b'-' | b'e' | b'E'));
    if valid {
        return token.parse().ok();
    }
    match token.to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "+inf" | "inf" | "+infinity" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
