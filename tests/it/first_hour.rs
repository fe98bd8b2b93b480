//! What a new user meets in the first hour (issue "The first hour"): precise,
//! loud failures (`dump` exit codes and messages, a path given where a
//! subcommand goes, periodic warnings while a directory gives nothing to
//! serve), exporter conventions (logfmt that a logfmt parser reads, build
//! information in `--version` and `multiproc_exporter_build_info`), and a
//! demo that binds this host only, says where it listens and starts afresh.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{exporter_bin, get, key, run_exporter, wait_for, write_db, Exporter};

fn counter_file(dir: &Path, pid: u32) {
    write_db(
        &dir.join(format!("counter_{pid}.db")),
        &[(key("c", "c_total", &[], "help"), 1.0)],
    );
}

#[test]
fn dump_exit_codes_say_whether_anything_could_be_read() {
    // A file that never existed: exit 1, and not "deleted before it could be read".
    let (code, stdout, stderr) = run_exporter(&["dump", "/nonexistent/counter_1.db"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("/nonexistent/counter_1.db: does not exist (no such file or directory)"),
        "{stderr}"
    );
    assert!(!stderr.contains("deleted"), "{stderr}");

    // Every file unreadable: exit 1.
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(bad.path().join("counter_1.db"), b"bad").unwrap();
    let (code, _, stderr) = run_exporter(&[
        "dump",
        "--writers.pending-grace=0",
        bad.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("none of the 1 metric files could be read"),
        "{stderr}"
    );

    // An empty directory: nothing printed, like Python, and not an error.
    let empty = tempfile::tempdir().unwrap();
    let (code, stdout, _) = run_exporter(&["dump", empty.path().to_str().unwrap()]);
    assert_eq!((code, stdout.len()), (0, 0));

    // `dump --dir DIR` is `dump DIR` (serve's spelling works).
    let good = tempfile::tempdir().unwrap();
    counter_file(good.path(), 1);
    let dir = good.path().to_str().unwrap();
    let (code, by_flag, _) = run_exporter(&["dump", "--dir", dir]);
    let (_, by_path, _) = run_exporter(&["dump", dir]);
    assert_eq!((code, &by_flag), (0, &by_path));
    assert!(String::from_utf8_lossy(&by_flag).contains("c_total 1.0"));
}

#[test]
fn an_unreadable_directory_is_named_as_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    counter_file(&dir, 1);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Root reads any directory: run a copy of the binary as nobody.
    let binary = tmp.path().join("multiproc-exporter");
    std::fs::copy(exporter_bin(), &binary).unwrap();
    let is_root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    let mut command = if is_root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&binary);
        c
    } else {
        Command::new(&binary)
    };
    let out = command.arg("dump").arg(&dir).output().expect("run dump");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot list the directory"), "{stderr}");
    assert!(
        !stderr.contains("file"),
        "a directory is not a file: {stderr}"
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_path_given_as_a_subcommand_gets_a_hint() {
    let (code, _, stderr) = run_exporter(&["/var/run/vllm-metrics"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("multiproc-exporter --dir /var/run/vllm-metrics"),
        "{stderr}"
    );
    assert!(
        stderr.contains("multiproc-exporter dump /var/run/vllm-metrics"),
        "{stderr}"
    );
    // A mistyped subcommand still gets clap's suggestion.
    let (code, _, stderr) = run_exporter(&["serv"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("'serve'"), "{stderr}");
}

#[test]
fn a_directory_that_gives_nothing_is_warned_about_until_it_does() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--dir.warn-interval",
        "200ms",
    ]);
    let warned = |fragment: &str| {
        exporter
            .logs()
            .iter()
            .filter(|l| {
                l["level"] == "WARN" && l["message"].as_str().is_some_and(|m| m.contains(fragment))
            })
            .count()
    };
    wait_for("two warnings about the missing directory", || {
        (warned("does not exist") >= 2).then_some(())
    });
    std::fs::create_dir(&dir).unwrap();
    wait_for("a warning about the empty directory", || {
        (warned("no metric files") >= 1).then_some(())
    });
    std::fs::create_dir(dir.join("default_vllm-0")).unwrap();
    wait_for("a warning about subdirectories", || {
        (warned("--dir.subdirectories-label") >= 1).then_some(())
    });
    counter_file(&dir, 7);
    // Once a file is there, the warnings stop.
    std::thread::sleep(Duration::from_millis(400));
    let settled = exporter
        .logs()
        .iter()
        .filter(|l| l["level"] == "WARN")
        .count();
    std::thread::sleep(Duration::from_millis(800));
    let later = exporter
        .logs()
        .iter()
        .filter(|l| l["level"] == "WARN")
        .count();
    assert_eq!(settled, later, "{:#?}", exporter.logs());
}

/// Parses one logfmt line the way Loki's `logfmt` parser does (bare or
/// double-quoted values with `\"`, `\\` and `\n` escapes).
fn parse_logfmt(line: &str) -> Option<BTreeMap<String, String>> {
    let mut fields = BTreeMap::new();
    let mut rest = line.trim_end();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                let (i, c) = chars.next()?;
                match c {
                    '"' => break i + 1,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    c => value.push(c),
                }
            };
            (value, &quoted[end..])
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        if key.is_empty() || key.contains(' ') {
            return None;
        }
        fields.insert(key.to_owned(), value);
        rest = after.trim_start();
    }
    Some(fields)
}

#[test]
fn logs_are_logfmt_by_default_with_values_as_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(exporter_bin())
        .args([
            "--dir",
            dir.path().to_str().unwrap(),
            "--web.listen-address",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut parsed = Vec::new();
    while parsed.len() < 2 {
        let line = lines.next().expect("a log line").unwrap();
        parsed.push(parse_logfmt(&line).unwrap_or_else(|| panic!("not logfmt: {line}")));
    }
    let _ = child.kill();
    let _ = child.wait();
    let start = &parsed[0];
    assert!(start.contains_key("ts"), "{start:?}");
    assert_eq!(start["level"], "info");
    assert_eq!(start["msg"], "Starting multiproc-exporter.");
    assert_eq!(
        start["dirs"],
        dir.path().to_str().unwrap(),
        "a path, not a Rust list"
    );
    assert_eq!(start["config"], "", "no config: empty, not None");
    for value in start.values() {
        assert!(
            !value.starts_with("Some(") && !value.starts_with('[') && value != "None",
            "{start:?}"
        );
    }
    // promslog's names are accepted: logfmt and json; `text` stays an alias.
    for format in ["logfmt", "text", "json"] {
        let (code, _, stderr) = run_exporter(&[
            "--dir",
            "/nonexistent",
            "--log.format",
            format,
            "--web.listen-address",
            "bad address",
        ]);
        assert_ne!(code, 2, "--log.format {format} is accepted: {stderr}");
    }
}

#[test]
fn version_and_build_info_say_what_was_built() {
    let (code, stdout, _) = run_exporter(&["--version"]);
    assert_eq!(code, 0);
    let version = String::from_utf8(stdout).unwrap();
    for field in [
        "0.1.0",
        "branch: ",
        "revision: ",
        "build date: ",
        "rustc version: ",
        "platform:",
        " linux/",
    ] {
        assert!(version.contains(field), "{field}: {version}");
    }
    let revision = version
        .split("revision: ")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let exporter = Exporter::start(&["--dir", dir.path().to_str().unwrap()]);
    let body = exporter.metrics();
    let line = body
        .lines()
        .find(|l| l.starts_with("multiproc_exporter_build_info{"))
        .expect("build_info");
    for label in [
        "version=\"0.1.0\"",
        "branch=",
        "build_date=",
        "rustc_version=",
        "os=\"linux\"",
        "arch=",
    ] {
        assert!(line.contains(label), "{label}: {line}");
    }
    assert!(line.contains(&format!("revision=\"{revision}\"")), "{line}");
}

#[test]
fn the_demo_binds_this_host_says_where_and_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let left_over = dir.path().join("counter_424242.db");
    counter_file(dir.path(), 424242);
    // Default listen address: 127.0.0.1:9089, free unless something else runs.
    if TcpListener::bind("127.0.0.1:9089").is_err() {
        eprintln!("skipping the default-address part: port 9089 is taken");
        return;
    }
    let mut child = Command::new(exporter_bin())
        .args([
            "demo",
            "--demo.tick-ms",
            "100",
            "--demo.dir",
            dir.path().to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("msg=Listening.")) && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(line);
        }
    }
    let reply = get("http://127.0.0.1:9089/metrics", &[]);
    let _ = child.kill();
    let _ = child.wait();
    let all = seen.join("\n");
    assert!(
        all.contains("demo serving http://127.0.0.1:9089/metrics"),
        "{all}"
    );
    assert!(
        all.contains("address=127.0.0.1:9089"),
        "listens on this host only: {all}"
    );
    assert!(all.contains("removed 1 metric files"), "{all}");
    assert!(!left_over.exists(), "the earlier run's file is gone");
    assert_eq!(reply.status, 200);
    assert!(
        !reply.text().contains("c_total"),
        "the earlier run's counter is not served"
    );
}

#[test]
fn the_demo_continues_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let left_over = dir.path().join("counter_424242.db");
    counter_file(dir.path(), 424242);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(exporter_bin())
        .args([
            "demo",
            "--demo.continue",
            "--demo.tick-ms",
            "100",
            "--demo.dir",
        ])
        .arg(dir.path())
        .args(["--web.listen-address", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let body = wait_for("the demo's metrics", || {
        crate::support::try_get_within(
            &format!("http://127.0.0.1:{port}/metrics"),
            &[],
            Duration::from_secs(2),
        )
        .ok()
        .filter(|r| r.status == 200)
        .map(|r| r.text())
        .filter(|t| t.contains("vllm:"))
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(left_over.exists());
    assert!(
        body.contains("c_total 1.0"),
        "the earlier run's counter is served"
    );
}
