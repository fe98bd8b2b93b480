//! The command line of the `multiproc-exporter` binary: flags defined once in
//! shared groups ([`flags`]), validated once into typed settings
//! ([`settings`]), and the subcommands: `serve` (the default: the HTTP
//! exporter, [`crate::server`]), `dump` (the merged exposition printed once)
//! and `demo` (a simulated vLLM directory, served).

#[cfg(feature = "demo")]
mod demo;
mod dump;
mod dump_discover;
pub mod flags;
pub mod settings;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::server;
#[cfg(feature = "demo")]
use flags::DemoFlags;
use flags::{DumpFlags, ServeFlags};
pub use settings::multiproc_dir_from_env;

/// Prometheus exporter for Python prometheus_client multiprocess metric files.
///
/// Without a subcommand, serves the metrics over HTTP (`serve`).
#[derive(Debug, Parser)]
#[command(
    name = "multiproc-exporter",
    version,
    long_version = crate::build_info::LONG_VERSION,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do (default: `serve`).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags of `serve`, accepted without the subcommand too.
    #[command(flatten)]
    pub serve: ServeFlags,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the merged metrics over HTTP (the default).
    Serve(ServeFlags),
    /// Print the merged exposition of metric files to standard output.
    Dump(DumpFlags),
    /// Write a live, vLLM-like metrics directory and serve it (a quick start).
    #[cfg(feature = "demo")]
    Demo(DemoFlags),
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Runs the command line `args` (the program's name first) and returns the
/// exit code: the Python package's `multiproc-exporter` entry point, whose
/// own arguments are not the process's.
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // Every mode: the soft descriptor limit raised to the hard one, as
    // Go programs (node_exporter, Prometheus, the kubelet) do at start.
    let nofile = crate::source::descriptors::raise_nofile_limit();
    match cli.command {
        Some(Command::Dump(flags)) => dump::run(flags),
        Some(Command::Serve(flags)) => serve(flags, nofile),
        #[cfg(feature = "demo")]
        Some(Command::Demo(flags)) => demo::run(flags),
        None => serve(cli.serve, nofile),
    }
}

/// Reports a command-line error the way clap does, with a hint when a path
/// was given where a subcommand was expected (`multiproc-exporter /dir`).
fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() == ErrorKind::InvalidSubcommand {
        if let Some(ContextValue::String(value)) = error.get(ContextKind::InvalidSubcommand) {
            if value.contains('/') || std::path::Path::new(value).exists() {
                eprintln!(
                    "error: '{value}' is not a subcommand\n\n  \
                     tip: to serve that directory: multiproc-exporter --dir {value}\n  \
                     tip: to print its metrics once: multiproc-exporter dump {value}\n\n\
                     For more information, try '--help'."
                );
                return ExitCode::from(2);
            }
        }
    }
    // Help and version are not errors; clap prints and exits as usual.
    error.exit()
}

/// `serve`: logging first (so that a bad flag is reported in the chosen
/// format), then the flags validated into settings, then the server.
fn serve(
    flags: ServeFlags,
    nofile: (
        crate::source::descriptors::NofileLimit,
        Option<std::io::Error>,
    ),
) -> ExitCode {
    server::init_logging(flags.log.log_format, flags.log.log_level);
    log_nofile(&nofile.0, nofile.1.as_ref());
    match flags.validate() {
        Ok(settings) => server::run(settings),
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(2)
        }
    }
}

/// Warns when the soft descriptor limit could not be raised (the limit
/// itself is a field of the start-up line).
fn log_nofile(limit: &crate::source::descriptors::NofileLimit, error: Option<&std::io::Error>) {
    if let Some(error) = error {
        let text = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |v| v.to_string());
        tracing::warn!(
            soft = %text(limit.soft),
            hard = %text(limit.hard),
            %error,
            "Cannot raise the soft file descriptor limit to the hard one; running with the soft one."
        );
    }
}
