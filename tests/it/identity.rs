//! A file is the file it was only if device, inode and birth agree, and a
//! directory is re-listed as soon as it changes (issue "Never wrong, never
//! out of memory", points 1, 5 and 6):
//!
//! * a tmpfs mounted over the metrics directory (new files with the old
//!   inode numbers, on another device) and a bind mount swapped in are read
//!   afresh: every scrape equals prometheus_client's reading of the files now
//!   there (the exporter used to serve the old files' values for ever);
//! * a file whose name is not UTF-8 is merged as prometheus_client merges it
//!   (its `glob` lists it, with surrogate escapes);
//! * a directory made unreadable (mode 0000, or 0444 without search
//!   permission) is noticed at the next scrape, not at the periodic rescan.
//!
//! Mounting needs root: without it the mount tests say so and return.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{
    dump, is_root, key, listing_order, merged_part, python, python_expositions, run_python,
    sample_value, unprivileged_launch, write_db, Exporter,
};

/// A mount, undone (lazily) on drop, even when the test fails.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount(args: &[&OsStr], target: &Path) -> Option<Mount> {
    if !is_root() {
        eprintln!("skipping: mounting needs root");
        return None;
    }
    let status = Command::new("mount").args(args).arg(target).status().ok()?;
    if !status.success() {
        eprintln!("skipping: mount {args:?} {} failed", target.display());
        return None;
    }
    Some(Mount(target.to_path_buf()))
}

fn tmpfs(target: &Path) -> Option<Mount> {
    mount(&["-t".as_ref(), "tmpfs".as_ref(), "none".as_ref()], target)
}

/// Two processes' files: a counter (`req_total`) and an `all` gauge (`temp`).
fn write_files(dir: &Path, requests: f64, temperature: f64) -> Vec<u64> {
    write_db(
        &dir.join("counter_1.db"),
        &[(key("req", "req_total", &[], "Requests."), requests)],
    );
    write_db(
        &dir.join("gauge_all_2.db"),
        &[(key("temp", "temp", &[], "Temperature."), temperature)],
    );
    ["counter_1.db", "gauge_all_2.db"]
        .iter()
        .map(|n| std::fs::metadata(dir.join(n)).unwrap().ino())
        .collect()
}

/// What prometheus_client prints for the directory now.
fn python_text(python: &Path, dir: &Path) -> String {
    let files: Vec<PathBuf> = listing_order(dir).iter().map(|n| dir.join(n)).collect();
    python_expositions(python, &[("now".into(), files)])
        .remove("now")
        .unwrap()
        .text
}

#[test]
fn a_tmpfs_mounted_over_the_directory_is_read_afresh() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    let Some(_first) = tmpfs(&dir) else { return };
    let old_inodes = write_files(&dir, 203.0, 12.0);
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    let body = exporter.metrics();
    assert_eq!(merged_part(&body), python_text(&python, &dir));
    assert!(body.contains("req_total 203.0"), "{body}");

    let Some(_second) = tmpfs(&dir) else { return };
    let new_inodes = write_files(&dir, 403.0, 22.0);
    assert_eq!(
        old_inodes, new_inodes,
        "the case needs the old inode numbers again"
    );
    for _ in 0..3 {
        let body = exporter.metrics();
        assert_eq!(merged_part(&body), python_text(&python, &dir), "{body}");
        assert!(
            body.contains("req_total 403.0") && body.contains("temp{pid=\"2\"} 22.0"),
            "{body}"
        );
    }
}

#[test]
fn a_bind_mount_swapped_in_is_read_afresh() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (dir, other) = (tmp.path().join("metrics"), tmp.path().join("other"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&other).unwrap();
    // Two tmpfs instances number their inodes alike.
    let Some(_a) = tmpfs(&dir) else { return };
    let Some(_b) = tmpfs(&other) else { return };
    write_files(&dir, 5.0, 1.0);
    write_files(&other, 7.0, 2.0);
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    assert!(exporter.metrics().contains("req_total 5.0"));
    let Some(_bind) = mount(&["--bind".as_ref(), other.as_os_str()], &dir) else {
        return;
    };
    let body = exporter.metrics();
    assert_eq!(merged_part(&body), python_text(&python, &other), "{body}");
    assert!(body.contains("req_total 7.0"), "{body}");
}

const PYTHON_DIRECTORY: &str = r#"
import sys
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
registry = CollectorRegistry()
MultiProcessCollector(registry, path=sys.argv[1])
sys.stdout.write(generate_latest(registry).decode('utf-8'))
"#;

#[test]
fn a_file_name_that_is_not_utf8_is_merged_like_python() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let counter = key("c", "c_total", &[("l", "a")], "help");
    write_db(&dir.path().join("counter_1.db"), &[(counter.clone(), 1.0)]);
    let odd = dir.path().join(OsStr::from_bytes(b"counter_\xff\xfe.db"));
    write_db(&odd, &[(counter, 2.0)]);
    let ours = String::from_utf8(dump(&[dir.path().to_str().unwrap()])).unwrap();
    let theirs = run_python(
        &python,
        PYTHON_DIRECTORY,
        &[dir.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(ours, theirs);
    assert!(ours.contains("c_total{l=\"a\"} 3.0"), "{ours}");
}

#[test]
fn an_unreadable_directory_is_noticed_at_the_next_scrape() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_files(&dir, 3.0, 4.0);
    let launch = unprivileged_launch(tmp.path());
    let exporter = Exporter::launch(&["--dir", dir.to_str().unwrap()], &launch);
    // Let the listing settle so that it is reused while the directory is unchanged.
    std::thread::sleep(Duration::from_millis(2200));
    for _ in 0..2 {
        assert!(exporter.metrics().contains("req_total 3.0"));
    }
    let chmod =
        |mode| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();

    chmod(0o000);
    let body = exporter.metrics();
    assert!(
        !body.contains("req_total"),
        "no stale data from an unlistable directory: {body}"
    );
    assert_eq!(
        sample_value(
            &body,
            "multiproc_exporter_scrape_directories{state=\"unreadable\"}"
        ),
        Some(1.0),
        "{body}"
    );

    chmod(0o755);
    assert!(exporter.metrics().contains("req_total 3.0"));

    // Listable but not searchable: the names are there, the files cannot be opened.
    chmod(0o444);
    let body = exporter.metrics();
    assert!(!body.contains("req_total"), "{body}");
    assert_eq!(
        sample_value(
            &body,
            "multiproc_exporter_scrape_files_skipped{reason=\"permission_denied\"}"
        ),
        Some(2.0),
        "{body}"
    );
    chmod(0o755);
    assert!(exporter.metrics().contains("req_total 3.0"));
}
