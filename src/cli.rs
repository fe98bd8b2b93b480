//! Command-line interface: argument definitions and the subcommands.
//!
//! `multiproc-exporter dump PATH...` prints the merged exposition of the given
//! directories and files to standard output.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::encode::{encode, Escaping, Format};
use crate::source::{Input, Reader, SkipReason};

/// Prometheus exporter for Python prometheus_client multiprocess metric files.
#[derive(Debug, Parser)]
#[command(name = "multiproc-exporter", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the merged exposition of metric files to standard output.
    Dump(DumpArgs),
}

/// Exposition format for `dump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// Prometheus text format (what prometheus_client's `generate_latest` writes).
    Text,
    /// OpenMetrics 1.0.0 text format.
    Openmetrics,
}

/// Name escaping for `dump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EscapingArg {
    /// Replace characters outside the legacy name character set with `_`.
    Underscores,
    /// Keep UTF-8 names, quoting those outside the legacy character set.
    #[value(name = "allow-utf-8")]
    AllowUtf8,
}

/// Arguments of `dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: FormatArg,
    /// How metric and label names outside the legacy character set are written.
    #[arg(long, value_enum, default_value = "underscores")]
    pub escaping: EscapingArg,
    /// Metric directories (their `*.db` entries are read in directory order)
    /// and files (merged in the order given). Defaults to
    /// `$PROMETHEUS_MULTIPROC_DIR`.
    pub paths: Vec<PathBuf>,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Dump(args) => dump(args),
    }
}

/// The multiprocess directory named by the environment, as prometheus_client
/// finds it (the lower-case name is its deprecated spelling).
pub fn multiproc_dir_from_env() -> Option<PathBuf> {
    ["PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"]
        .iter()
        .find_map(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
}

fn dump(args: DumpArgs) -> ExitCode {
    let paths = if args.paths.is_empty() {
        match multiproc_dir_from_env() {
            Some(dir) => vec![dir],
            None => {
                eprintln!(
                    "multiproc-exporter: no PATH given and PROMETHEUS_MULTIPROC_DIR is not set"
                );
                return ExitCode::from(2);
            }
        }
    } else {
        args.paths
    };
    let inputs: Vec<Input> = paths.into_iter().map(Input::detect).collect();
    let collection = Reader::new().collect(&inputs);
    let mut missing_inputs = 0;
    for problem in &collection.problems {
        let is_input = inputs.iter().any(|i| i.path() == problem.path);
        if is_input
            && matches!(
                problem.reason,
                SkipReason::DirectoryMissing | SkipReason::Vanished
            )
        {
            missing_inputs += 1;
        }
        eprintln!(
            "multiproc-exporter: skipped {}: {}",
            problem.path.display(),
            problem.reason
        );
    }
    if missing_inputs == inputs.len() {
        eprintln!("multiproc-exporter: nothing to read: no such file or directory");
        return ExitCode::from(1);
    }
    let format = match args.format {
        FormatArg::Text => Format::Text,
        FormatArg::Openmetrics => Format::OpenMetrics,
    };
    let escaping = match args.escaping {
        EscapingArg::Underscores => Escaping::Underscores,
        EscapingArg::AllowUtf8 => Escaping::AllowUtf8,
    };
    let body = encode(&collection.families, format, escaping);
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&body).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("multiproc-exporter: cannot write output: {e}");
            ExitCode::from(1)
        }
    }
}
