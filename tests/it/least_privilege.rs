//! Least privilege: the exporter never writes to, creates or deletes anything
//! in a metrics directory, opens what it reads read-only, needs no privilege,
//! and does not follow links out of the directory (the link cases are in
//! `tests/faults.rs`).
//!
//! * Run as root, so that nothing would stop a write, against a directory
//!   holding good files and every kind of bad entry, through many scrapes in
//!   both formats and a SIGHUP: afterwards every entry has the same inode,
//!   mode, size, link count, modification and change times and bytes, and
//!   nothing was added or removed. While it runs, every descriptor it holds on
//!   a file in the directory (`/proc/PID/fdinfo`) and every map of one
//!   (`/proc/PID/maps`) is read-only.
//! * Run as `nobody` with no capabilities and `no_new_privs`, against a
//!   directory and files nobody can write: everything is served exactly as
//!   prometheus_client prints it, nothing is skipped and nothing is logged as
//!   a warning or an error.

use crate::support;

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::support::{
    is_root, merged_part, python, python_expositions, skipped_by_reason, unprivileged_launch,
    Exporter, ACCEPT_OPENMETRICS,
};
use multiproc_exporter::format::writer::{GaugeMode, ProcessWriter};

/// Files of two processes, as prometheus_client writes them.
fn write_processes(dir: &Path) {
    for pid in [11, 12] {
        let mut w = ProcessWriter::new(dir, pid);
        let c = w
            .counter(
                "vllm:generation_tokens",
                "Generation tokens.",
                &[("model_name", "m")],
            )
            .unwrap();
        c.inc(&mut w, f64::from(pid)).unwrap();
        let g = w
            .gauge(
                "vllm:num_requests_waiting",
                "Waiting requests.",
                &[],
                GaugeMode::LiveSum,
            )
            .unwrap();
        g.set(&mut w, 2.0).unwrap();
        let h = w
            .histogram(
                "vllm:time_to_first_token_seconds",
                "TTFT.",
                &[],
                &[0.1, 1.0],
            )
            .unwrap();
        h.observe(&mut w, 0.5).unwrap();
    }
}

/// Everything observable about a directory tree except access times:
/// relative path -> (inode, mode, links, uid, gid, size, mtime, ctime, bytes
/// of regular files, link target).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let m = std::fs::symlink_metadata(&path).unwrap();
        let mut entry = format!(
            "ino={} mode={:o} nlink={} uid={} gid={} size={} mtime={}.{} ctime={}.{}",
            m.ino(),
            m.mode(),
            m.nlink(),
            m.uid(),
            m.gid(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        );
        if m.file_type().is_symlink() {
            entry += &format!(" target={}", std::fs::read_link(&path).unwrap().display());
        } else if m.is_file() {
            entry += &format!(" bytes={:?}", std::fs::read(&path).unwrap());
        } else if m.is_dir() {
            for child in std::fs::read_dir(&path).unwrap() {
                pending.push(child.unwrap().path());
            }
        }
        out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), entry);
    }
    out
}

/// (descriptor target, `flags:` from fdinfo) for every descriptor of `pid`.
fn open_descriptors(pid: u32) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue; // closed meanwhile
        };
        let fd = entry.file_name();
        let Ok(info) =
            std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy()))
        else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        out.push((target, flags));
    }
    out
}

/// (mapped file, permissions such as `r--s`) for every file map of `pid`.
fn mapped_files(pid: u32) -> Vec<(PathBuf, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let perms = fields.nth(1)?.to_owned();
            let path = fields.nth(3)?;
            path.starts_with('/').then(|| (PathBuf::from(path), perms))
        })
        .collect()
}

#[test]
fn never_writes_creates_or_deletes_in_the_metrics_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_processes(&dir);
    // Every kind of bad entry, each of which the exporter handles differently.
    std::fs::write(dir.join("counter_20.db"), b"").unwrap();
    std::fs::write(dir.join("counter_21.db"), [0xff, 0xff, 0, 0, 0, 0, 0, 0]).unwrap();
    std::fs::create_dir(dir.join("x.db")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(dir.join("counter_22.db"))
        .status()
        .unwrap();
    assert!(fifo.success());
    symlink("counter_23.db", dir.join("counter_23.db")).unwrap();
    symlink("/dev/zero", dir.join("counter_24.db")).unwrap();
    symlink("gone", dir.join("counter_25.db")).unwrap();
    std::fs::write(dir.join("app.db"), b"SQLite format 3\0").unwrap();
    let before = snapshot(&dir);

    let mut exporter =
        Exporter::start(&["--dir", dir.to_str().unwrap(), "--writers.pending-grace=0"]);
    for round in 0..20 {
        let accept = if round % 2 == 0 {
            "*/*"
        } else {
            ACCEPT_OPENMETRICS
        };
        let reply = exporter.get_with(
            "/metrics",
            &[("Accept", accept), ("Accept-Encoding", "gzip")],
        );
        assert_eq!(reply.status, 200);
    }
    let body = exporter.metrics();
    assert!(
        body.contains("vllm:generation_tokens_total{model_name=\"m\"} 23.0\n"),
        "{body}"
    );
    assert_eq!(
        skipped_by_reason(&body).values().sum::<f64>(),
        8.0,
        "{body}"
    );

    // What it holds on files in the directory between scrapes (descriptors,
    // maps) is read-only.
    let canonical = dir.canonicalize().unwrap();
    let descriptors: Vec<(PathBuf, u32)> = open_descriptors(exporter.pid())
        .into_iter()
        .filter(|(target, _)| target.starts_with(&canonical))
        .collect();
    for (target, flags) in &descriptors {
        assert_eq!(
            flags & 0o3,
            0,
            "{} open with flags {flags:o}",
            target.display()
        );
        assert_eq!(flags & 0o100, 0, "{} open with O_CREAT", target.display());
    }
    let maps: Vec<(PathBuf, String)> = mapped_files(exporter.pid())
        .into_iter()
        .filter(|(target, _)| target.starts_with(&canonical))
        .collect();
    for (target, perms) in &maps {
        assert!(
            perms.starts_with("r-"),
            "{} mapped {perms}",
            target.display()
        );
    }
    assert!(
        !descriptors.is_empty() || !maps.is_empty(),
        "nothing held on the files between scrapes: nothing was checked"
    );
    eprintln!(
        "{} descriptors and {} maps checked",
        descriptors.len(),
        maps.len()
    );
    exporter.signal("HUP");
    exporter.signal("TERM");
    assert!(exporter.wait_exit().success());

    let after = snapshot(&dir);
    assert_eq!(before, after);
}

#[test]
fn serves_a_read_only_directory_as_an_unprivileged_user() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = root.join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_processes(&dir);
    let names = support::listing_order(&dir);
    for name in &names {
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    let launch = unprivileged_launch(root);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    if is_root() {
        assert_eq!(
            launch.wrapper.first().map(|w| w.to_str().unwrap()),
            Some("setpriv")
        );
    }
    let files: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
    let expected = python_expositions(&python, &[("dir".into(), files)])
        .remove("dir")
        .unwrap();
    let mut exporter = Exporter::launch(&["--dir", dir.to_str().unwrap()], &launch);
    for _ in 0..3 {
        let body = exporter.metrics();
        assert_eq!(merged_part(&body), expected.text);
        assert_eq!(skipped_by_reason(&body).values().sum::<f64>(), 0.0);
    }
    assert_eq!(exporter.get("/-/ready").status, 200);
    exporter.sync_logs();
    let complaints: Vec<_> = exporter
        .logs()
        .into_iter()
        .filter(|l| l["level"] == "WARN" || l["level"] == "ERROR")
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
    // It really ran as nobody.
    let status = std::fs::read_to_string(format!("/proc/{}/status", exporter.pid())).unwrap();
    if is_root() {
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(
            uid.split_whitespace().skip(1).all(|id| id == "65534"),
            "{uid}"
        );
        let caps = status.lines().find(|l| l.starts_with("CapEff:")).unwrap();
        assert!(caps.ends_with("0000000000000000"), "{caps}");
        let nnp = status
            .lines()
            .find(|l| l.starts_with("NoNewPrivs:"))
            .unwrap();
        assert!(nnp.ends_with('1'), "{nnp}");
    }
    exporter.assert_alive();
}
