//! Command-line interface: argument definitions and the subcommands.
//!
//! `multiproc-exporter dump PATH...` prints the merged exposition of the given
//! directories and files to standard output (with `--subdirectories-label`,
//! of each subdirectory of the given directories, side by side). `multiproc-exporter serve` (also
//! what runs without a subcommand) is the HTTP exporter, see [`crate::server`].

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::expose::encode::{encode, Escaping, Format};
use crate::pipeline::subdirectories::SubdirectoryReader;
use crate::pipeline::Collector;
use crate::server::{self, ServeArgs};
use crate::source::link_policy::LinkPolicy;
use crate::source::{Input, SkipReason};
use crate::transform;
use crate::transform::config::Config;

/// Prometheus exporter for Python prometheus_client multiprocess metric files.
///
/// Without a subcommand, serves the metrics over HTTP (`serve`).
#[derive(Debug, Parser)]
#[command(
    name = "multiproc-exporter",
    version,
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
    pub serve: ServeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the merged metrics over HTTP (the default).
    Serve(ServeArgs),
    /// Print the merged exposition of metric files to standard output.
    Dump(DumpArgs),
    /// Write a live, vLLM-like metrics directory and serve it (a quick start).
    Demo(DemoArgs),
}

/// Arguments of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to write the simulated processes' files (default: a new directory
    /// under the system temporary directory, removed on exit).
    #[arg(
        long = "demo.dir",
        env = "MULTIPROC_EXPORTER_DEMO_DIR",
        value_name = "DIR"
    )]
    pub dir: Option<PathBuf>,
    /// Simulated vLLM API-server processes.
    #[arg(
        long = "demo.api-servers",
        env = "MULTIPROC_EXPORTER_DEMO_API_SERVERS",
        default_value_t = 2
    )]
    pub api_servers: usize,
    /// Simulated worker processes (they write the `lmcache:` metrics).
    #[arg(
        long = "demo.workers",
        env = "MULTIPROC_EXPORTER_DEMO_WORKERS",
        default_value_t = 2
    )]
    pub workers: usize,
    /// Milliseconds between simulation steps.
    #[arg(
        long = "demo.tick-ms",
        env = "MULTIPROC_EXPORTER_DEMO_TICK_MS",
        default_value_t = 1000
    )]
    pub tick_ms: u64,
    /// Seed of the simulation (the same seed gives the same values).
    #[arg(
        long = "demo.seed",
        env = "MULTIPROC_EXPORTER_DEMO_SEED",
        default_value_t = 0
    )]
    pub seed: u64,
    /// Address to listen on (see `serve --help`).
    #[arg(long = "web.listen-address", env = "MULTIPROC_EXPORTER_WEB_LISTEN_ADDRESS", value_name = "ADDRESS", value_delimiter = ',', default_value = server::DEFAULT_LISTEN_ADDRESS)]
    pub listen_addresses: Vec<String>,
    /// YAML configuration file (see `serve --help`).
    #[arg(
        long = "config",
        env = "MULTIPROC_EXPORTER_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,
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
    #[arg(
        long,
        env = "MULTIPROC_EXPORTER_DUMP_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub format: FormatArg,
    /// How metric and label names outside the legacy character set are written.
    #[arg(
        long,
        env = "MULTIPROC_EXPORTER_DUMP_ESCAPING",
        value_enum,
        default_value = "underscores"
    )]
    pub escaping: EscapingArg,
    /// YAML configuration file to apply (filtering, naming, constant labels),
    /// as `serve --config` does.
    #[arg(long, env = "MULTIPROC_EXPORTER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Treat every PATH as a parent directory whose subdirectories are each
    /// merged on their own and labelled with NAME set to the subdirectory name, as
    /// `serve --dir.subdirectories-label` does.
    #[arg(
        long = "subdirectories-label",
        env = "MULTIPROC_EXPORTER_DUMP_SUBDIRECTORIES_LABEL",
        value_name = "NAME"
    )]
    pub subdirectories_label: Option<String>,
    /// Follow symbolic links in a metrics directory wherever they point, as
    /// `serve --dir.follow-links-outside` does (by default only links whose
    /// target is inside the directory are followed).
    #[arg(
        long = "dir.follow-links-outside",
        env = "MULTIPROC_EXPORTER_DIR_FOLLOW_LINKS_OUTSIDE",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub follow_links_outside: bool,
    /// Metric directories (their `*.db` entries are read in directory order)
    /// and files (merged in the order given). Defaults to
    /// `$PROMETHEUS_MULTIPROC_DIR`.
    pub paths: Vec<PathBuf>,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Dump(args)) => dump(args),
        Some(Command::Serve(args)) => server::run(args),
        Some(Command::Demo(args)) => demo(args),
        None => server::run(cli.serve),
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

fn demo(args: DemoArgs) -> ExitCode {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let (dir, temporary) = match args.dir {
        Some(dir) => (dir, false),
        None => (
            std::env::temp_dir().join(format!("multiproc-exporter-demo-{}", std::process::id())),
            true,
        ),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("multiproc-exporter: cannot create {}: {e}", dir.display());
        return ExitCode::from(1);
    }
    eprintln!(
        "multiproc-exporter: demo writing vLLM-like metrics to {}",
        dir.display()
    );
    let mut config = crate::demo::DemoConfig::new(&dir);
    config.api_servers = args.api_servers;
    config.workers = args.workers;
    config.tick = std::time::Duration::from_millis(args.tick_ms.max(1));
    config.seed = args.seed;
    let stop = Arc::new(AtomicBool::new(false));
    let simulation = {
        let stop = stop.clone();
        std::thread::spawn(move || crate::demo::run_demo(config, &stop))
    };
    let mut serve = server::ServeArgs::for_dirs(vec![dir.clone()]);
    serve.listen_addresses = args.listen_addresses;
    serve.config = args.config;
    let code = server::run(serve);
    stop.store(true, Ordering::Relaxed);
    match simulation.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("multiproc-exporter: the demo simulation failed: {e}"),
        Err(_) => eprintln!("multiproc-exporter: the demo simulation panicked"),
    }
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    code
}

fn dump(args: DumpArgs) -> ExitCode {
    let config = match &args.config {
        None => Config::default(),
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("multiproc-exporter: {e}");
                return ExitCode::from(2);
            }
        },
    };
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
    let link_policy = if args.follow_links_outside {
        LinkPolicy::Anywhere
    } else {
        LinkPolicy::InsideDirectory
    };
    let (inputs, collection) = match args.subdirectories_label {
        None => {
            let inputs: Vec<Input> = paths.into_iter().map(Input::detect).collect();
            let collection = Collector::with_link_policy(link_policy).collect(&inputs);
            (inputs, collection)
        }
        Some(label) => {
            if let Some(problem) = crate::transform::config::label_name_problem(&label) {
                eprintln!(
                    "multiproc-exporter: invalid --subdirectories-label {label:?}: {problem}"
                );
                return ExitCode::from(2);
            }
            let inputs: Vec<Input> = paths.iter().cloned().map(Input::Directory).collect();
            let result = SubdirectoryReader::new(paths, label, link_policy).collect();
            for path in &result.duplicates {
                eprintln!(
                    "multiproc-exporter: skipped {}: an earlier directory has a subdirectory of the same name",
                    path.display()
                );
            }
            for c in &result.conflicts {
                eprintln!(
                    "multiproc-exporter: family {} of subdirectory {} disagrees with subdirectory {} ({}); kept the first one's type and help",
                    c.family,
                    c.part,
                    c.kept_from,
                    c.reason.label()
                );
            }
            (inputs, result.collection)
        }
    };
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
    let transformed = transform::apply(&config, collection.families);
    for c in &transformed.collisions {
        eprintln!(
            "multiproc-exporter: dropped family {}: its new name {} is already used",
            c.original, c.renamed
        );
    }
    let body = encode(&transformed.families, format, escaping);
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
