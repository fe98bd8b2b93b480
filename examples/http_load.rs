//! A small, bounded HTTP/1.1 load loop for `scripts/compare.py` (loopback benchmarks only):
//! `--concurrency` threads send GET requests with the given headers until `--requests`
//! requests were started or `--max-seconds` passed, then print latency percentiles and
//! throughput as one JSON object.
//!
//! ```text
//! http_load --url http://127.0.0.1:9089/metrics --concurrency 8 --requests 2000 --max-seconds 5 \
//!     --header 'Accept-Encoding: gzip' [--output first-body.bin]
//! ```
//!
//! Connections are kept alive when the server allows it (HTTP/1.1 without `Connection:
//! close`) and re-opened otherwise, as Prometheus does; a request's latency includes the
//! connect when one was needed. Bodies are read raw (not decompressed).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;

/// Command-line arguments.
#[derive(Debug, Parser)]
struct Args {
    /// `http://HOST:PORT/PATH`.
    #[arg(long)]
    url: String,
    /// Parallel connections (threads).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Requests to send at most.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Start no new request after this many seconds.
    #[arg(long, default_value_t = 5.0)]
    max_seconds: f64,
    /// Extra request header, `Name: value` (repeatable).
    #[arg(long)]
    header: Vec<String>,
    /// Write the first response body (raw) here.
    #[arg(long)]
    output: Option<PathBuf>,
}

/// One parsed response.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    keep_alive: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Some((host, path)) = parse_url(&args.url) else {
        eprintln!("http_load: unsupported URL {}", args.url);
        return ExitCode::from(2);
    };
    let mut request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: mpe-http-load\r\n");
    for h in &args.header {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");

    let started = AtomicUsize::new(0);
    let errors = AtomicUsize::new(0);
    let latencies = Mutex::new(Vec::with_capacity(args.requests));
    let first: Mutex<Option<Response>> = Mutex::new(None);
    let deadline = Duration::from_secs_f64(args.max_seconds);
    let begin = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..args.concurrency.max(1) {
            scope.spawn(|| {
                let mut local = Vec::new();
                let mut conn: Option<BufReader<TcpStream>> = None;
                loop {
                    if begin.elapsed() >= deadline
                        || started.fetch_add(1, Ordering::Relaxed) >= args.requests
                    {
                        break;
                    }
                    let t = Instant::now();
                    match send(&mut conn, &host, request.as_bytes()) {
                        Ok(resp) if resp.status == 200 => {
                            local.push(t.elapsed());
                            if !resp.keep_alive {
                                conn = None;
                            }
                            let mut f = first.lock().unwrap_or_else(|e| e.into_inner());
                            if f.is_none() {
                                *f = Some(resp);
                            }
                        }
                        Ok(resp) => {
                            eprintln!("http_load: status {}", resp.status);
                            errors.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                        }
                        Err(e) => {
                            eprintln!("http_load: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    if errors.load(Ordering::Relaxed) > 20 {
                        break;
                    }
                }
                latencies
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(local);
            });
        }
    });
    let elapsed = begin.elapsed().as_secs_f64();
    let mut ms: Vec<f64> = latencies
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| -> f64 {
        if ms.is_empty() {
            return f64::NAN;
        }
        ms[((ms.len() - 1) as f64 * q).round() as usize]
    };
    let first = first.into_inner().unwrap_or_else(|e| e.into_inner());
    if let (Some(path), Some(resp)) = (&args.output, &first) {
        if let Err(e) = std::fs::write(path, &resp.body) {
            eprintln!("http_load: {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    let header = |name: &str| -> Option<String> {
        first.as_ref().and_then(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        })
    };
    let errors = errors.load(Ordering::Relaxed);
    println!(
        "{}",
        json!({
            "requests": ms.len(),
            "errors": errors,
            "concurrency": args.concurrency,
            "seconds": elapsed,
            "requests_per_second": ms.len() as f64 / elapsed,
            "latency_ms": {
                "min": at(0.0), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1.0),
                "mean": ms.iter().sum::<f64>() / ms.len().max(1) as f64,
            },
            "content_type": header("content-type"),
            "content_encoding": header("content-encoding"),
            "body_bytes": first.as_ref().map(|r| r.body.len()),
        })
    );
    if ms.is_empty() || errors > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `http://host:port/path` → (`host:port`, `/path`).
fn parse_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Some((host.to_owned(), path.to_owned()))
}

fn send(
    conn: &mut Option<BufReader<TcpStream>>,
    host: &str,
    request: &[u8],
) -> std::io::Result<Response> {
    if conn.is_none() {
        let stream = TcpStream::connect(host)?;
        stream.set_nodelay(true)?;
        // Long: prometheus_client's server takes over 100 s for each of 8
        // concurrent scrapes of the 10,000-dead-writer directory
        // (scripts/compare.py); a shorter wait failed that run.
        stream.set_read_timeout(Some(Duration::from_secs(600)))?;
        *conn = Some(BufReader::with_capacity(64 * 1024, stream));
    }
    let reader = conn.as_mut().ok_or_else(|| invalid("no connection"))?;
    reader.get_mut().write_all(request)?;
    read_response(reader)
}

fn invalid(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.to_owned())
}

fn read_response(reader: &mut BufReader<TcpStream>) -> std::io::Result<Response> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(invalid("connection closed before the response"));
    }
    let mut parts = line.split_whitespace();
    let version = parts.next().unwrap_or_default().to_owned();
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((k, v)) = trimmed.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let connection = get("connection");
    let mut keep_alive = if version == "HTTP/1.1" {
        connection.as_deref() != Some("close")
    } else {
        connection.as_deref() == Some("keep-alive")
    };
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    line.clear();
                    reader.read_line(&mut line)?;
                    if line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            line.clear();
            reader.read_line(&mut line)?;
        }
    } else if let Some(len) = get("content-length") {
        let len: usize = len.parse().map_err(|_| invalid("bad content-length"))?;
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    } else {
        reader.read_to_end(&mut body)?;
        keep_alive = false;
    }
    Ok(Response {
        status,
        headers,
        body,
        keep_alive,
    })
}
