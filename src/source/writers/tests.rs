//! Liveness against real processes: a child holding a file is its live
//! writer, a killed one is dead, and a pid whose process started after the
//! file was created does not revive it.

use super::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command};

/// A child process that holds `file` open (fd 3) and sleeps.
fn holder(file: &Path) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(r#"exec 3<"$0"; exec sleep 60"#)
        .arg(file)
        .spawn()
        .expect("spawn sh")
}

/// A child process that holds nothing in particular.
fn sleeper() -> Child {
    Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep")
}

fn written(path: &Path, pid: u32) -> WrittenFile {
    let meta = std::fs::metadata(path).unwrap();
    let born = meta
        .created()
        .unwrap_or_else(|_| meta.modified().unwrap())
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    WrittenFile {
        pid: Some(pid),
        identity: (meta.dev(), meta.ino()),
        born,
        archive: false,
    }
}

/// Waits until the child has exec'd `sleep` with the file open.
fn settle(child: &Child) {
    for _ in 0..200 {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap_or_default();
        if cmdline.starts_with(b"sleep") {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the child never started sleeping");
}

fn kill(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A new file in a new directory, held open by a new child process.
fn held_file() -> (tempfile::TempDir, std::path::PathBuf, Child) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counter.db");
    std::fs::write(&path, b"").unwrap();
    let child = holder(&path);
    settle(&child);
    (dir, path, child)
}

fn proc_available() -> bool {
    Path::new("/proc/self/fd").exists()
}

#[test]
fn a_process_holding_its_file_is_live_and_dead_once_killed() {
    if !proc_available() {
        return;
    }
    let (_dir, path, child) = held_file();
    let pid = child.id();
    let file = written(&path, pid);
    let mut writers = Writers::new(WriterPolicy::default());
    let census = writers.census(&[file]);
    assert_eq!(census.states, [WriterState::Live]);
    assert_eq!(census.live, [(pid, pid)]);
    assert_eq!(writers.visibility(), Visibility::Confirmed);
    kill(child);
    assert_eq!(writers.census(&[file]).states, [WriterState::Dead]);
}

/// Regression: a pid reused by an unrelated process must not revive a dead
/// writer's files (its process started after they were created), even when
/// that process holds them open.
#[test]
fn a_pid_reused_by_a_later_process_does_not_revive_a_dead_writer() {
    if !proc_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("gauge_livesum.db");
    std::fs::write(&old, b"").unwrap();
    // Well past the guard's slack, and short of a second: with a boot time
    // cut to whole seconds (the bug), a later process looked older than the
    // file on machines whose boot time has a large fraction of a second.
    std::thread::sleep(Duration::from_secs_f64(START_SLACK_SECONDS + 0.25));
    let witness_path = dir.path().join("witness.db");
    std::fs::write(&witness_path, b"").unwrap();
    let witness = holder(&witness_path);
    let later = holder(&old);
    settle(&witness);
    settle(&later);
    let mut writers = Writers::new(WriterPolicy::default());
    let census = writers.census(&[
        written(&witness_path, witness.id()),
        written(&old, later.id()),
    ]);
    assert_eq!(census.states, [WriterState::Live, WriterState::Dead]);
    // Regression: evidence found on a file listed later decides the earlier
    // ones too (a one-shot `dump` has no second collection).
    let mut writers = Writers::new(WriterPolicy::default());
    let census = writers.census(&[
        written(&old, later.id()),
        written(&witness_path, witness.id()),
    ]);
    assert_eq!(census.states, [WriterState::Dead, WriterState::Live]);
    kill(witness);
    kill(later);
}

#[test]
fn without_evidence_auto_knows_nothing_and_proc_trusts_proc() {
    if !proc_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counter.db");
    std::fs::write(&path, b"").unwrap();
    let unrelated = sleeper();
    let gone = {
        let child = sleeper();
        let pid = child.id();
        kill(child);
        pid
    };
    let files = [written(&path, unrelated.id()), written(&path, gone)];
    // The sleeper started after the file: not its writer either way.
    let mut auto = Writers::new(WriterPolicy::default());
    assert_eq!(
        auto.census(&files).states,
        [WriterState::Unknown, WriterState::Unknown]
    );
    assert_eq!(auto.visibility(), Visibility::Unconfirmed);
    let mut proc = Writers::new(WriterPolicy {
        liveness: LivenessMode::Proc,
        ..WriterPolicy::default()
    });
    assert_eq!(
        proc.census(&files).states,
        [WriterState::Dead, WriterState::Dead]
    );
    let mut off = Writers::new(WriterPolicy::exact());
    assert_eq!(
        off.census(&files).states,
        [WriterState::Unknown, WriterState::Unknown]
    );
    kill(unrelated);
}

/// The exporter holds the files it reads: a file named with the exporter's
/// own pid (another pid namespace's writer) is never taken as evidence.
#[test]
fn the_exporter_itself_is_never_a_writer() {
    if !proc_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counter.db");
    let held = std::fs::File::create(&path).unwrap();
    let mut writers = Writers::new(WriterPolicy::default());
    let census = writers.census(&[written(&path, std::process::id())]);
    assert_eq!(census.states, [WriterState::Unknown]);
    assert_eq!(writers.visibility(), Visibility::Unconfirmed);
    drop(held);
}

#[test]
fn a_name_without_a_pid_is_unknown() {
    let mut writers = Writers::new(WriterPolicy {
        liveness: LivenessMode::Proc,
        ..WriterPolicy::default()
    });
    let file = WrittenFile {
        pid: None,
        identity: (1, 2),
        born: 0.0,
        archive: false,
    };
    assert_eq!(writers.census(&[file]).states, [WriterState::Unknown]);
}

/// Regression: verdicts were kept by device and inode only, and a file
/// created where a dead writer's file had been deleted often gets its inode
/// number: the new, live writer's file was taken for dead (and its values
/// frozen). The creation time tells them apart.
#[test]
fn a_new_file_with_a_dead_files_inode_number_is_decided_afresh() {
    if !proc_available() {
        return;
    }
    let (_dir, path, child) = held_file();
    let live = written(&path, child.id());
    let gone = {
        let old = sleeper();
        let pid = old.id();
        kill(old);
        pid
    };
    let deleted = WrittenFile {
        pid: Some(gone),
        born: live.born - 100.0,
        ..live
    };
    let mut writers = Writers::new(WriterPolicy {
        liveness: LivenessMode::Proc,
        ..WriterPolicy::default()
    });
    assert_eq!(writers.census(&[deleted]).states, [WriterState::Dead]);
    assert_eq!(writers.census(&[live]).states, [WriterState::Live]);
    kill(child);
}

/// Regression: a census of the files read while the frozen ones were skipped
/// forgot the skipped files' dead verdicts (too many for the files asked),
/// so a later writer of their pid was never looked for.
#[test]
fn a_census_of_some_files_keeps_the_others_dead_verdicts() {
    if !proc_available() {
        return;
    }
    let gone = {
        let old = sleeper();
        let pid = old.id();
        kill(old);
        pid
    };
    let files: Vec<WrittenFile> = (0..2000)
        .map(|i| WrittenFile {
            pid: Some(gone),
            identity: (1, i),
            born: 0.0,
            archive: false,
        })
        .collect();
    let mut writers = Writers::new(WriterPolicy {
        liveness: LivenessMode::Proc,
        ..WriterPolicy::default()
    });
    let states = writers.census(&files).states;
    assert!(states.iter().all(|s| *s == WriterState::Dead));
    writers.census_of_some(&files[..1]);
    assert_eq!(writers.verdicts.len(), 2000);
    // A census of every file forgets what no file asked about.
    writers.census(&files[..1]);
    assert_eq!(writers.verdicts.len(), 1);
}

/// Issue 47: the Python drop-in runs this code in the process that serves
/// `/metrics`, which also writes (a gunicorn or uvicorn worker); its own pid
/// was left out of the candidates, so its own files were dead (or unknown)
/// and its `live*` gauges dropped.
#[test]
fn the_collecting_process_is_the_live_writer_of_the_files_it_holds_for_writing() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let own = dir.path().join(format!("counter_{me}.db"));
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&own)
        .unwrap();
    let file = written(&own, me);
    let policy = WriterPolicy {
        liveness: LivenessMode::Proc,
        collector_writes: true,
        ..WriterPolicy::default()
    };
    let census = Writers::new(policy).census(&[file]);
    assert_eq!(census.states, vec![WriterState::Live]);
    assert_eq!(census.live, vec![(me, me)]);
    // The standalone exporter writes no metric file: never its own writer.
    let binary = WriterPolicy {
        collector_writes: false,
        ..policy
    };
    assert_eq!(
        Writers::new(binary).census(&[file]).states,
        vec![WriterState::Dead]
    );
    // Held for reading only (as every collector holds the files it reads):
    // not evidence of writing.
    drop(held);
    let _read = std::fs::File::open(&own).unwrap();
    assert_eq!(
        Writers::new(policy).census(&[file]).states,
        vec![WriterState::Dead]
    );
}
