//! In-process scrape timing for `scripts/compare.py`: runs read + merge + encode on a warm
//! [`Reader`] in a loop and prints the timings as one JSON object; also measures the floors
//! the performance report compares against.
//!
//! ```text
//! bench_scrape --dir D [--iterations 200] [--max-seconds 5] [--format text] [--output FILE]
//! bench_scrape --membw [--mib 512]        # memory bandwidth: sequential read-sum and memcpy
//! bench_scrape --dir D --read-floor       # open + pread of every file's used bytes, nothing else
//! ```
//!
//! The first scrape (empty reader: every key decoded, merge planned) is reported separately
//! as `cold_ms`; the loop that follows is the steady state. `--output` writes the last body,
//! which `scripts/compare.py` compares byte for byte with prometheus_client's.

use std::fs::File;
use std::hint::black_box;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use flate2::write::GzEncoder;
use flate2::Compression;
use multiproc_exporter::expose::encode::{encode, Escaping, Format};
use multiproc_exporter::pipeline::{CollectStats, Collector};
use multiproc_exporter::source::Input;
use serde_json::{json, Value};

/// Exposition format to encode.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    /// `generate_latest` (text 0.0.4 / 1.0.0).
    Text,
    /// OpenMetrics 1.0.0.
    Openmetrics,
}

/// Command-line arguments.
#[derive(Debug, Parser)]
struct Args {
    /// Metrics directory (repeatable).
    #[arg(long)]
    dir: Vec<PathBuf>,
    /// Steady-state scrapes to time (after the first, cold one).
    #[arg(long, default_value_t = 200)]
    iterations: usize,
    /// Stop the steady-state loop after this many seconds even if fewer iterations ran.
    #[arg(long, default_value_t = 10.0)]
    max_seconds: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: FormatArg,
    /// Write the last encoded body here.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Also time gzip (level "fast", as `serve` does) of each body, reported separately.
    #[arg(long)]
    gzip: bool,
    /// Measure memory bandwidth instead.
    #[arg(long)]
    membw: bool,
    /// Buffer size of `--membw`, MiB.
    #[arg(long, default_value_t = 512)]
    mib: usize,
    /// Time only opening and reading every file's used bytes (no parsing, no merge).
    #[arg(long)]
    read_floor: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = if args.membw {
        Ok(membw(args.mib))
    } else if args.dir.is_empty() {
        Err("--dir is required".to_owned())
    } else if args.read_floor {
        read_floor(&args)
    } else {
        scrape_loop(&args)
    };
    match result {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench_scrape: {e}");
            ExitCode::from(1)
        }
    }
}

fn scrape_loop(args: &Args) -> Result<Value, String> {
    let inputs: Vec<Input> = args.dir.iter().cloned().map(Input::Directory).collect();
    let format = match args.format {
        FormatArg::Text => Format::Text,
        FormatArg::Openmetrics => Format::OpenMetrics,
    };
    let mut reader = Collector::new();
    let cpu_start = cpu_ns();

    let start = Instant::now();
    let cold = reader.collect(&inputs);
    let cold_collect = start.elapsed();
    let mut body = encode(&cold.families, format, Escaping::Underscores);
    let cold_total = start.elapsed();
    if !cold.problems.is_empty() {
        return Err(format!("problems reading the fixture: {:?}", cold.problems));
    }
    let cold_stats = cold.stats;
    let families = cold.families.len();
    drop(cold);

    let mut total = Vec::with_capacity(args.iterations);
    let mut collect = Vec::with_capacity(args.iterations);
    let mut encoding = Vec::with_capacity(args.iterations);
    let mut gzipping = Vec::new();
    let mut gzip_bytes = 0;
    let mut keys_decoded_max = 0;
    let mut replanned = 0;
    let mut problems_max = 0;
    let mut last_stats = CollectStats::default();
    let cpu_steady_start = cpu_ns();
    let loop_start = Instant::now();
    let deadline = Duration::from_secs_f64(args.max_seconds);
    while total.len() < args.iterations && (total.is_empty() || loop_start.elapsed() < deadline) {
        let t0 = Instant::now();
        let c = reader.collect(&inputs);
        let t1 = Instant::now();
        body = encode(&c.families, format, Escaping::Underscores);
        let t2 = Instant::now();
        black_box(&body);
        total.push(t2 - t0);
        collect.push(t1 - t0);
        encoding.push(t2 - t1);
        if args.gzip {
            let t = Instant::now();
            let mut encoder =
                GzEncoder::new(Vec::with_capacity(body.len() / 4 + 64), Compression::fast());
            encoder.write_all(&body).map_err(|e| e.to_string())?;
            gzip_bytes = black_box(encoder.finish().map_err(|e| e.to_string())?).len();
            gzipping.push(t.elapsed());
        }
        keys_decoded_max = keys_decoded_max.max(c.stats.keys_decoded);
        replanned += usize::from(c.stats.replanned);
        problems_max = problems_max.max(c.problems.len());
        last_stats = c.stats;
    }
    let steady_cpu = cpu_ns().saturating_sub(cpu_steady_start);
    let all_cpu = cpu_ns().saturating_sub(cpu_start);
    if let Some(path) = &args.output {
        std::fs::write(path, &body).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut result = json!({
        "cold_ms": ms(cold_total),
        "cold_collect_ms": ms(cold_collect),
        "cold_stats": stats_json(&cold_stats),
        "iterations": total.len(),
        "scrape_ms": summary(&total),
        "collect_ms": summary(&collect),
        "encode_ms": summary(&encoding),
        "steady_cpu_ms_per_scrape": steady_cpu as f64 / 1e6 / total.len().max(1) as f64,
        "cpu_s_total": all_cpu as f64 / 1e9,
        "steady_keys_decoded_max": keys_decoded_max,
        "steady_replanned": replanned,
        "steady_problems_max": problems_max,
        "steady_stats": stats_json(&last_stats),
        "families": families,
        "output_bytes": body.len(),
        "vm_hwm_kib": vm_hwm_kib(),
    });
    if args.gzip {
        result["gzip_ms"] = summary(&gzipping);
        result["gzip_bytes"] = json!(gzip_bytes);
    }
    Ok(result)
}

/// Lists, opens and reads every file's used bytes (`read_ms`), and reads them again through
/// descriptors kept open (`open_fds_read_ms`): lower bounds for `pread` designs.
fn read_floor(args: &Args) -> Result<Value, String> {
    let mut buffer = Vec::new();
    let mut times = Vec::new();
    let mut bytes = 0u64;
    let mut files = 0usize;
    let loop_start = Instant::now();
    while times.len() < args.iterations
        && (times.is_empty() || loop_start.elapsed().as_secs_f64() < args.max_seconds)
    {
        let t0 = Instant::now();
        bytes = 0;
        files = 0;
        for dir in &args.dir {
            let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "db") {
                    bytes += read_used(&path, &mut buffer)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    files += 1;
                }
            }
        }
        black_box(&buffer);
        times.push(t0.elapsed());
    }
    // The same with descriptors kept open and sizes known: one `pread` per file, no listing.
    // Not measured when the files outnumber the descriptors this process may hold.
    let mut open = Vec::new();
    let mut too_many = false;
    'dirs: for dir in &args.dir {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "db") {
                match File::open(&path).and_then(|f| Ok((f, read_used(&path, &mut buffer)?))) {
                    Ok((file, used)) => open.push((file, used as usize)),
                    Err(e) if e.raw_os_error() == Some(libc::EMFILE) => {
                        too_many = true;
                        break 'dirs;
                    }
                    Err(e) => return Err(format!("{}: {e}", path.display())),
                }
            }
        }
    }
    if too_many {
        return Ok(json!({
            "iterations": times.len(),
            "files": files,
            "used_bytes": bytes,
            "read_ms": summary(&times),
        }));
    }
    let mut open_times = Vec::new();
    let loop_start = Instant::now();
    while open_times.len() < args.iterations
        && (open_times.is_empty() || loop_start.elapsed().as_secs_f64() < args.max_seconds)
    {
        let t0 = Instant::now();
        for (file, used) in &open {
            buffer.resize(*used, 0);
            file.read_exact_at(&mut buffer, 0)
                .map_err(|e| e.to_string())?;
        }
        black_box(&buffer);
        open_times.push(t0.elapsed());
    }
    Ok(json!({
        "iterations": times.len(),
        "files": files,
        "used_bytes": bytes,
        "read_ms": summary(&times),
        "open_fds_read_ms": summary(&open_times),
    }))
}

fn read_used(path: &Path, buffer: &mut Vec<u8>) -> std::io::Result<u64> {
    let file = File::open(path)?;
    let mut header = [0u8; 8];
    file.read_exact_at(&mut header, 0)?;
    let used = usize::try_from(i32::from_ne_bytes([
        header[0], header[1], header[2], header[3],
    ]))
    .unwrap_or(0);
    buffer.resize(used, 0);
    file.read_exact_at(buffer, 0)?;
    Ok(used as u64)
}

/// Sequential read-sum and `memcpy` bandwidth over `mib` MiB buffers, best of 5 (GB/s).
fn membw(mib: usize) -> Value {
    let words = mib * 1024 * 1024 / 8;
    let source: Vec<u64> = (0..words as u64).collect();
    let mut target = vec![0u64; words];
    target.copy_from_slice(&source);
    let bytes = (words * 8) as f64;
    let mut best_sum = f64::INFINITY;
    let mut best_copy = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        let s = black_box(&source)
            .iter()
            .fold(0u64, |acc, &x| acc.wrapping_add(x));
        black_box(s);
        best_sum = best_sum.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        black_box(&mut target).copy_from_slice(black_box(&source));
        best_copy = best_copy.min(t.elapsed().as_secs_f64());
    }
    json!({
        "method": "sequential u64 read-sum and copy_from_slice over two buffers of this size, best of 5",
        "mib": mib,
        "read_gb_s": bytes / best_sum / 1e9,
        "copy_gb_s": bytes / best_copy / 1e9,
    })
}

fn stats_json(s: &CollectStats) -> Value {
    json!({
        "files_listed": s.files_listed,
        "files_merged": s.files_merged,
        "records": s.records,
        "bytes_read": s.bytes_read,
        "keys_decoded": s.keys_decoded,
        "replanned": s.replanned,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Percentiles of `times` in milliseconds.
fn summary(times: &[Duration]) -> Value {
    let mut sorted: Vec<f64> = times.iter().map(|d| ms(*d)).collect();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let i = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[i]
    };
    let mean = sorted.iter().sum::<f64>() / sorted.len().max(1) as f64;
    json!({
        "min": at(0.0),
        "p50": at(0.5),
        "p90": at(0.9),
        "p99": at(0.99),
        "max": at(1.0),
        "mean": mean,
    })
}

/// CPU time this (single-threaded) process has run, from `/proc/self/schedstat` (ns).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Peak resident set size (`VmHWM`), KiB.
fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
