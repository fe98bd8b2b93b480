//! Log set-up: `tracing` to standard error, as logfmt (the default, what
//! Prometheus exporters write and Loki's `logfmt` parser reads:
//! `ts=… level=info msg="…" key=value`) or one JSON object per line.
//!
//! The logfmt formatter is hand-written: `tracing-logfmt`, the crate that
//! does it, names the message `message=` where promslog and Loki's
//! conventions say `msg=`.

use std::fmt::{self, Write as _};

use clap::ValueEnum;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `ts=… level=info msg="…" key=value` lines (the default; `text` is
    /// accepted too).
    #[value(alias = "text")]
    Logfmt,
    /// One JSON object per line.
    Json,
}

/// Minimum level of log messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Everything, including every file added or removed.
    Debug,
    /// Start-up, directories and files appearing, reloads (the default).
    Info,
    /// Problems only: bad files, failed reloads.
    Warn,
    /// Errors only.
    Error,
}

/// Installs the global subscriber (does nothing if one is already installed,
/// e.g. when a test runs several servers in one process).
pub fn init(format: LogFormat, level: LogLevel) {
    let level = match level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    // The level applies to this crate; dependencies log warnings and errors only.
    let filter = EnvFilter::new(format!("warn,multiproc_exporter={level}"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let result = match format {
        LogFormat::Logfmt => builder.event_format(Logfmt).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    // An error means a subscriber is already installed, which is fine.
    drop(result);
}

/// Formats an event as one logfmt line.
#[derive(Debug, Clone, Copy)]
struct Logfmt;

impl<S, N> FormatEvent<S, N> for Logfmt
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writer.write_str("ts=")?;
        SystemTime.format_time(&mut writer)?;
        let level = event.metadata().level().as_str().to_ascii_lowercase();
        write!(writer, " level={level}")?;
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = String::new();
        if let Some(message) = &fields.message {
            line.push_str(" msg=");
            push_value(&mut line, message);
        }
        for (key, value) in &fields.others {
            line.push(' ');
            line.push_str(key);
            line.push('=');
            push_value(&mut line, value);
        }
        writeln!(writer, "{line}")
    }
}

/// An event's message and other fields, as text.
#[derive(Debug, Default)]
struct Fields {
    message: Option<String>,
    others: Vec<(&'static str, String)>,
}

impl Fields {
    fn push(&mut self, field: &Field, value: String) {
        if field.name() == "message" {
            self.message = Some(value);
        } else {
            self.others.push((field.name(), value));
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, format!("{value:?}"));
    }
}

/// Appends a logfmt value: bare when it is a plain word, otherwise quoted
/// with `"`, `\\` and control characters escaped.
fn push_value(out: &mut String, value: &str) {
    let bare = !value.is_empty()
        && value
            .chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '"' && c != '=' && c != '\\');
    if bare {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::push_value;

    #[test]
    fn values_are_quoted_only_when_needed() {
        let cases = [
            ("word", "word"),
            ("/var/run/vllm-metrics", "/var/run/vllm-metrics"),
            ("two words", "\"two words\""),
            ("", "\"\""),
            ("a=b", "\"a=b\""),
            ("say \"hi\"\n", "\"say \\\"hi\\\"\\n\""),
        ];
        for (value, want) in cases {
            let mut out = String::new();
            push_value(&mut out, value);
            assert_eq!(out, want, "{value:?}");
        }
    }
}
