//! Writes a vLLM-like benchmark fixture directory (the same generator as `cargo bench --bench
//! scrape`, see `benches/support/fixture.rs`) and prints a JSON summary of what it wrote.
//!
//! ```text
//! cargo run --release --example gen_fixture -- --processes 256 --dir /tmp/mpe-256 [--dead 1024] [--clean]
//! cargo run --release --example gen_fixture -- --spec    # the metric catalogue, as JSON
//! ```
//!
//! `--spec` is what `scripts/compare.py` gives its Python writer processes, so that they write
//! the same families as the generated processes.

#[path = "../benches/support/fixture.rs"]
mod fixture;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use serde_json::json;

/// Command-line arguments.
#[derive(Debug, Parser)]
struct Args {
    /// Live writer processes (every file: counter, histogram, gauge_mostrecent, summary).
    #[arg(long, default_value_t = 16)]
    processes: usize,
    /// Dead processes: only their counter and histogram files are left (high churn).
    #[arg(long, default_value_t = 0)]
    dead: usize,
    /// Output directory (created if missing).
    #[arg(long, required_unless_present = "spec")]
    dir: Option<PathBuf>,
    /// Seed of the values.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Remove every `*.db` file in the directory first.
    #[arg(long)]
    clean: bool,
    /// Print the metric catalogue as JSON instead of writing files.
    #[arg(long)]
    spec: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.spec {
        let defs: Vec<_> = fixture::catalogue()
            .into_iter()
            .map(|d| {
                json!({
                    "type": d.kind.as_str(),
                    "name": d.name,
                    "help": d.help,
                    "labelnames": d.label_names,
                    "children": d.children,
                    "buckets": d.buckets,
                })
            })
            .collect();
        println!("{}", json!(defs));
        return ExitCode::SUCCESS;
    }
    let Some(dir) = args.dir else {
        eprintln!("gen_fixture: --dir is required");
        return ExitCode::from(2);
    };
    if args.clean {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "db") {
                    if let Err(e) = std::fs::remove_file(&path) {
                        eprintln!("gen_fixture: cannot remove {}: {e}", path.display());
                        return ExitCode::from(1);
                    }
                }
            }
        }
    }
    let start = std::time::Instant::now();
    match fixture::generate(&dir, args.processes, args.dead, args.seed) {
        Ok(s) => {
            debug_assert_eq!(s.records, fixture::expected_records(s.processes, s.dead));
            println!(
                "{}",
                json!({
                    "dir": dir,
                    "processes": s.processes,
                    "dead": s.dead,
                    "files": s.files,
                    "records": s.records,
                    "series_per_process": fixture::series_per_process(),
                    "used_bytes": s.used_bytes,
                    "file_bytes": s.file_bytes,
                    "seconds": start.elapsed().as_secs_f64(),
                })
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gen_fixture: {}: {e}", dir.display());
            ExitCode::from(1)
        }
    }
}
