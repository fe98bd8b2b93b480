//! Log set-up: `tracing` to standard error, as text (the default) or JSON.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    Text,
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
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    // An error means a subscriber is already installed, which is fine.
    drop(result);
}
