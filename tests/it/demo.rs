//! The `demo` simulation: prometheus_client's own collector reads the files it
//! writes to exactly the exporter's output, and `multiproc-exporter demo`
//! serves them over HTTP.

use std::net::TcpListener;
use std::process::{Command, Stdio};

use crate::support::{dump, get, python, run_python, wait_for};
use multiproc_exporter::demo::{Demo, DemoConfig};

const PYTHON_MERGE: &str = r#"
import sys
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.openmetrics import exposition as om
registry = CollectorRegistry()
MultiProcessCollector(registry, path=sys.argv[1])
encode = om.generate_latest if sys.argv[2] == 'openmetrics' else generate_latest
sys.stdout.write(encode(registry, escaping=sys.argv[3]).decode('utf-8'))
"#;

#[test]
fn python_reads_the_demo_files_to_the_exporters_bytes() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = DemoConfig::new(dir.path());
    config.worker_restart_ticks = 7; // exercise restarts: live gauge files vanish, new pids appear
    let mut demo = Demo::new(config).expect("demo");
    for _ in 0..25 {
        demo.step().expect("step");
    }
    let path = dir.path().to_str().expect("utf-8");
    for format in ["text", "openmetrics"] {
        for escaping in ["underscores", "allow-utf-8"] {
            let ours = String::from_utf8(dump(&["--format", format, "--escaping", escaping, path]))
                .expect("utf-8");
            let theirs = run_python(&python, PYTHON_MERGE, &[path, format, escaping], &[]);
            assert!(
                ours.contains("vllm:") && ours.contains("lmcache:"),
                "{ours}"
            );
            assert_eq!(ours, theirs, "{format} {escaping}");
        }
    }
}

#[test]
fn demo_command_serves_a_live_directory() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_multiproc-exporter"))
        .args([
            "demo",
            "--demo.tick-ms",
            "100",
            "--web.listen-address",
            &format!("127.0.0.1:{port}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start demo");
    let url = format!("http://127.0.0.1:{port}/metrics");
    let first = wait_for("the demo to serve vLLM metrics", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        let text = String::from_utf8(get(&url, &[]).body).ok()?;
        text.contains("vllm:generation_tokens_total")
            .then_some(text)
    });
    let counter = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("vllm:generation_tokens_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let later = wait_for("the demo's counters to move", || {
        let text = String::from_utf8(get(&url, &[]).body).ok()?;
        (counter(&text) > counter(&first)).then_some(text)
    });
    assert!(later.contains("# TYPE vllm:time_to_first_token_seconds histogram"));
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let status = child.wait().expect("wait");
    assert!(status.success(), "demo exits cleanly on SIGTERM: {status}");
}
