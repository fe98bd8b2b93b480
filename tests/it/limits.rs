//! Slow and greedy clients against the real exporter binary: a request
//! trickled byte by byte is cut off by `--web.read-header-timeout`, a silent
//! connection too, an idle kept-alive connection by `--web.idle-timeout`, a
//! client that stops reading by `--web.write-timeout`; idle sockets beyond
//! `--web.max-connections` cannot lock out a scraper; scrapes beyond
//! `--web.max-requests` get 503 while the others succeed; and a shutdown with
//! idle connections open is prompt. Every closure is counted in the exporter's
//! own metrics.

use crate::support;

use crate::support::fixture;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::support::{
    assert_sample, get, key, python, run_python, sample_value, write_db, Exporter, TIMEOUT,
};

const CLOSED: &str = "multiproc_exporter_http_connections_closed_total";

fn address(exporter: &Exporter) -> String {
    exporter.base.trim_start_matches("http://").to_owned()
}

fn connect(exporter: &Exporter) -> TcpStream {
    let socket = TcpStream::connect(address(exporter)).unwrap();
    socket.set_read_timeout(Some(TIMEOUT)).unwrap();
    socket
}

/// Reads until the server closes the connection; whether it did (rather
/// than the read timing out).
fn closed_by_server(socket: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 4096];
    loop {
        match socket.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// A small scrape of the self-metrics about connections.
fn connection_metrics(exporter: &Exporter) -> String {
    let reply = exporter.get("/metrics?name[]=multiproc_exporter_http_connections_closed_total&name[]=multiproc_exporter_http_requests_rejected_total&name[]=multiproc_exporter_http_connections_open");
    assert_eq!(reply.status, 200);
    reply.text()
}

#[test]
fn a_trickled_request_and_a_silent_connection_are_cut_off_by_the_header_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    support::write_counter(tmp.path(), "1", 3.0);
    let exporter = Exporter::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.read-header-timeout",
        "1s",
    ]);

    let mut silent = connect(&exporter);
    let mut trickling = connect(&exporter);
    let start = Instant::now();
    let mut reader = trickling.try_clone().unwrap();
    let closed = std::thread::spawn(move || closed_by_server(&mut reader));
    // One byte every 50 ms: 400 bytes would take 20 s; the server must hang
    // up long before.
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: {}\r\n\r\n",
        "a".repeat(360)
    );
    let mut sent = 0;
    for byte in request.bytes() {
        if closed.is_finished() || trickling.write_all(&[byte]).is_err() {
            break;
        }
        sent += 1;
        // Meanwhile, real scrapes are served.
        if sent % 10 == 0 {
            assert!(exporter.metrics().contains("vllm:prompt_tokens_total"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        closed.join().unwrap(),
        "the trickling connection was not closed"
    );
    assert!(sent < request.len(), "the whole request went through");
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "closed before the timeout"
    );
    assert!(
        closed_by_server(&mut silent),
        "the silent connection was not closed"
    );

    let metrics = connection_metrics(&exporter);
    assert_sample(
        &metrics,
        &format!("{CLOSED}{{reason=\"header_timeout\"}}"),
        2.0,
    );
}

/// Sends one keep-alive request and reads its response (Content-Length
/// bodies only); the status.
fn request_on(socket: &mut TcpStream, path: &str) -> u16 {
    socket
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(socket.read(&mut byte).unwrap(), 1, "connection closed");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a Content-Length");
    let mut body = vec![0u8; length];
    socket.read_exact(&mut body).unwrap();
    head[9..12].parse().unwrap()
}

#[test]
fn an_idle_kept_alive_connection_is_closed_by_the_idle_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.idle-timeout",
        "1s",
    ]);
    let mut socket = connect(&exporter);
    // Kept alive across requests sent in quick succession.
    for _ in 0..3 {
        assert_eq!(request_on(&mut socket, "/-/healthy"), 200);
    }
    let idle_from = Instant::now();
    assert!(
        closed_by_server(&mut socket),
        "the idle connection stayed open"
    );
    assert!(
        idle_from.elapsed() >= Duration::from_secs(1),
        "closed before the timeout"
    );
    let metrics = connection_metrics(&exporter);
    assert_sample(
        &metrics,
        &format!("{CLOSED}{{reason=\"idle_timeout\"}}"),
        1.0,
    );
    assert_sample(
        &metrics,
        &format!("{CLOSED}{{reason=\"header_timeout\"}}"),
        0.0,
    );
}

#[test]
fn idle_connections_beyond_the_limit_cannot_lock_out_a_scraper() {
    let tmp = tempfile::tempdir().unwrap();
    support::write_counter(tmp.path(), "1", 3.0);
    let exporter = Exporter::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.max-connections",
        "8",
    ]);
    // 32 connections that never complete a request: half silent, half with
    // a partial request.
    let mut hogs = Vec::new();
    for i in 0..32 {
        let mut socket = connect(&exporter);
        if i % 2 == 1 {
            socket.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        }
        hogs.push(socket);
    }
    for _ in 0..3 {
        assert!(exporter.metrics().contains("vllm:prompt_tokens_total"));
    }
    let metrics = connection_metrics(&exporter);
    let evicted = sample_value(&metrics, &format!("{CLOSED}{{reason=\"evicted\"}}")).unwrap();
    // 24 hogs made room for the last 8 hogs, one more for the first scrape
    // (the later ones found the earlier scrapes' connections closed).
    assert!(evicted >= 25.0, "{metrics}");
    assert_sample(
        &metrics,
        &format!("{CLOSED}{{reason=\"max_connections\"}}"),
        0.0,
    );
    let open = sample_value(&metrics, "multiproc_exporter_http_connections_open").unwrap();
    assert!(open <= 8.0, "{metrics}");
    // The oldest hogs were the ones closed.
    assert!(closed_by_server(&mut hogs[0]));
}

#[test]
fn scrapes_beyond_max_requests_get_503_and_the_others_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    // 256 vLLM-like processes (1,024 files): the first scrape takes hundreds
    // of milliseconds, while the other requests, written at the same moment
    // on connections already open, arrive within a millisecond or so and
    // find the single slot taken.
    fixture::generate(tmp.path(), 256, 0, 1).unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.max-requests",
        "1",
    ]);
    let clients = 16;
    let barrier = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let barrier = barrier.clone();
            let mut socket = connect(&exporter);
            std::thread::spawn(move || {
                barrier.wait();
                socket
                    .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut response = Vec::new();
                socket.read_to_end(&mut response).unwrap();
                let text = String::from_utf8_lossy(&response).into_owned();
                let status: u16 = text[9..12].parse().unwrap();
                (status, text)
            })
        })
        .collect();
    let results: Vec<(u16, String)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<&String> = results
        .iter()
        .filter(|(s, _)| *s == 503)
        .map(|(_, t)| t)
        .collect();
    eprintln!("{ok} scrapes served, {} refused", refused.len());
    assert_eq!(ok + refused.len(), clients, "only 200 and 503 expected");
    assert!(
        ok >= 1 && !refused.is_empty(),
        "{ok} OK, {} refused",
        refused.len()
    );
    for text in &refused {
        assert!(
            text.ends_with("\r\n\r\nLimit of concurrent requests reached (1), try again later.\n"),
            "{text}"
        );
    }
    for (status, text) in &results {
        if *status == 200 {
            assert!(
                text.contains("vllm:num_requests_running"),
                "an OK scrape without data"
            );
        }
    }
    let metrics = connection_metrics(&exporter);
    assert_sample(
        &metrics,
        "multiproc_exporter_http_requests_rejected_total{reason=\"max_requests\"}",
        refused.len() as f64,
    );
}

#[test]
fn a_client_that_stops_reading_is_cut_off_by_the_write_timeout() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // About 13 MB of text, three times what the server's socket buffer can hold.
    let label = "x".repeat(100);
    for pid in 0..250 {
        let records: Vec<(String, f64)> = (0..400)
            .map(|i| {
                let series = format!("{label}-{i}");
                (
                    key(
                        "big_gauge",
                        "big_gauge",
                        &[("series", series.as_str())],
                        "A gauge with many series.",
                    ),
                    f64::from(i),
                )
            })
            .collect();
        write_db(&tmp.path().join(format!("gauge_all_{pid}.db")), &records);
    }
    let exporter = Exporter::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.write-timeout",
        "2s",
    ]);
    // A client with a tiny receive buffer that asks and stops reading, then
    // after 5 s drains what had been sent.
    let script = r#"
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect((host, int(port)))
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
time.sleep(5)
s.settimeout(20)
total = 0
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        total += len(chunk)
except ConnectionResetError:
    pass
print(total)
"#;
    let received: usize = run_python(&python, script, &[&address(&exporter)], &[])
        .trim()
        .parse()
        .unwrap();
    let full = get(&format!("{}/metrics", exporter.base), &[]).body.len();
    assert!(full > 10_000_000, "{full}");
    assert!(received < full, "received {received} of {full} bytes");
    let metrics = connection_metrics(&exporter);
    assert_sample(
        &metrics,
        &format!("{CLOSED}{{reason=\"write_timeout\"}}"),
        1.0,
    );
}

#[test]
fn shutdown_with_idle_connections_open_is_prompt() {
    let tmp = tempfile::tempdir().unwrap();
    // Timeouts longer than the test's patience: closing must not wait for them.
    let mut exporter = Exporter::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.read-header-timeout",
        "60s",
        "--web.idle-timeout",
        "60s",
    ]);
    let mut kept_alive = connect(&exporter);
    assert_eq!(request_on(&mut kept_alive, "/-/healthy"), 200);
    let _silent = connect(&exporter);
    let _partial = {
        let mut s = connect(&exporter);
        s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        s
    };
    exporter.signal("TERM");
    let status = exporter.wait_exit();
    assert!(status.success(), "{status}");
    assert!(closed_by_server(&mut kept_alive));
}
