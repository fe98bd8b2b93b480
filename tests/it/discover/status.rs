//! The node agent seen from the operator's chair (issue 36), as root, with
//! real processes:
//!
//! * two vLLM-like pods (`multiproc-exporter demo` processes in cgroups named
//!   as the kubelet's systemd driver names them, with a `/var/log/pods`-like
//!   tree) are each on `/api/v1/status` (labels, directory, mount namespace,
//!   holders, files, writers, when found), on the status page in Chromium (a
//!   row each, charts per pod and a pod selector; the screenshot is
//!   `docs/status-page-node-agent.png`'s source) and in `/api/v1/summary`
//!   (keyed by pod and model); one whose log directory goes is listed as
//!   dropped with the reason; `dump --discover.processes` prints each pod's
//!   series with its labels and what it found on standard error;
//! * outside Kubernetes, two processes of one name writing two directories
//!   (in no container, in one Docker container, or at one path in two mount
//!   namespaces) are two label sets, never one sum; a systemd service is
//!   labelled with its unit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value as Json;

use super::harness::*;
use super::serve::{named_sleep, stop_all, OUTSIDE_KUBERNETES};
use crate::support::browser::{chromium, load};
use crate::support::{
    self, python, repo_root, run_exporter, sample_value, wait_for, write_counter, Exporter,
};

/// The cgroup hierarchy a plain cgroup is made in: cgroup v2's, or a hybrid
/// host's `unified` (whose line `/proc/<pid>/cgroup` reads first). `None` on
/// a v1-only host.
fn unified_root() -> Option<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return Some(root.to_path_buf());
    }
    let unified = root.join("unified");
    unified.join("cgroup.procs").exists().then_some(unified)
}

/// A cgroup at `segments` under [`unified_root`] (removed on drop).
fn plain_cgroup(segments: &[String]) -> Option<FakeCgroup> {
    let mut dir = unified_root()?;
    let mut created = Vec::new();
    for segment in segments {
        dir.push(segment);
        if !dir.exists() {
            std::fs::create_dir(&dir).ok()?;
            created.push(dir.clone());
        }
    }
    Some(FakeCgroup { dir, created })
}

/// Runs `program args` as a child that first moves itself into `cgroup`.
fn spawn_in(cgroup: &FakeCgroup, program: &Path, args: &[&str]) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
        .arg(&cgroup.dir)
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A process running `bin` (a copy of `sleep` with a command name of its
/// own) in `cgroup`, holding `file` open read-write.
fn holder_in(cgroup: &FakeCgroup, bin: &Path, file: &Path) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg("echo $$ > \"$0/cgroup.procs\" && exec 3<>\"$2\" && exec \"$1\" 600")
        .arg(&cgroup.dir)
        .arg(bin)
        .arg(file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// A fake pod running `multiproc-exporter demo` (vLLM's metrics) in a
/// kubelet-named cgroup, with its log directory.
struct DemoPod {
    demo: Child,
    log_dir: PathBuf,
    _cgroup: FakeCgroup,
}

impl Drop for DemoPod {
    fn drop(&mut self) {
        let _ = self.demo.kill();
        let _ = self.demo.wait();
    }
}

fn demo_pod(logs: &Path, dir: &Path, namespace: &str, pod: &str) -> Option<DemoPod> {
    let uid = pod_uid();
    let container_id = hex(64);
    let cgroup = FakeCgroup::make(Driver::Systemd, &uid, &container_id)?;
    let log_dir = logs.join("pods").join(format!("{namespace}_{pod}_{uid}"));
    std::fs::create_dir_all(log_dir.join("vllm")).unwrap();
    std::fs::write(log_dir.join("vllm/0.log"), "").unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let demo = spawn_in(
        &cgroup,
        &support::exporter_bin(),
        &[
            "demo",
            "--demo.dir",
            dir.to_str().unwrap(),
            "--demo.tick-ms",
            "200",
            "--web.listen-address",
            "127.0.0.1:0",
        ],
    );
    Some(DemoPod {
        demo,
        log_dir,
        _cgroup: cgroup,
    })
}

fn json(exporter: &Exporter, path: &str) -> Json {
    serde_json::from_slice(&exporter.get(path).body).unwrap()
}

/// The part of `status` whose labels include `pod="<pod>"`.
fn part_of<'a>(status: &'a Json, pod: &str) -> Option<&'a Json> {
    status["last"]["parts"]
        .as_array()?
        .iter()
        .find(|p| p["labels"]["pod"] == pod)
}

#[test]
fn a_node_agent_shows_every_pod_on_its_status_page_api_and_dump() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(logs.join("pods")).unwrap();
    let namespace = format!("mpe-{}", hex(6));
    let Some(a) = or_skip(demo_pod(&logs, &tmp.path().join("a"), &namespace, "vllm-a")) else {
        return;
    };
    let Some(b) = or_skip(demo_pod(&logs, &tmp.path().join("b"), &namespace, "vllm-b")) else {
        return;
    };
    let pods = logs.join("pods");
    let exporter = Exporter::start(&[
        "--discover.processes",
        "--discover.pod-log-dir",
        pods.to_str().unwrap(),
        "--discover.interval",
        "1s",
    ]);
    let status = wait_for("both pods on /api/v1/status", || {
        let status = json(&exporter, "/api/v1/status");
        let served =
            |pod| part_of(&status, pod).is_some_and(|p| p["files_merged"].as_u64() > Some(0));
        (served("vllm-a") && served("vllm-b")).then_some(status)
    });
    let part = part_of(&status, "vllm-a").unwrap();
    assert_eq!(part["labels"]["namespace"], namespace.as_str(), "{part}");
    assert_eq!(part["labels"]["container"], "vllm", "{part}");
    assert_eq!(part["name"], format!("{namespace}/vllm-a/vllm"), "{part}");
    let directory = &part["directories"][0];
    assert_eq!(
        directory["dir"],
        tmp.path().join("a").to_str().unwrap(),
        "{part}"
    );
    assert_eq!(directory["state"], "held", "{part}");
    assert_eq!(directory["holders"][0], a.demo.id(), "{part}");
    // Issue 40: the top-level `directories` was a bare `[]` in node mode.
    let listed = status["directories"].as_array().unwrap();
    assert!(
        listed.contains(&directory["dir"]),
        "{}",
        status["directories"]
    );
    assert_eq!(
        directory["mount_ns"].as_u64(),
        mount_ns(a.demo.id()),
        "{part}"
    );
    assert!(directory["found_at"].as_f64().unwrap() > 1.0e9, "{part}");

    // The vLLM numbers per pod and model.
    let summary = wait_for("both pods in /api/v1/summary", || {
        let summary = json(&exporter, "/api/v1/summary");
        let pods: Vec<&str> = summary["groups"]
            .as_object()?
            .values()
            .filter(|g| g["namespace"] == namespace.as_str())
            .filter_map(|g| g["pod"].as_str())
            .collect();
        (pods.contains(&"vllm-a") && pods.contains(&"vllm-b")).then_some(summary)
    });
    let key = summary["groups"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, g)| g["pod"] == "vllm-a")
        .map(|(k, _)| k.clone())
        .unwrap();
    assert!(summary["models"][&key].is_object(), "{summary}");

    // The page: a row each, a pod selector, the charts of the pod chosen.
    if let Some(chromium) = chromium() {
        let shot = repo_root().join("target/test-output/status-page-node-agent.png");
        std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
        // Searched for this test's namespace (other tests' processes are
        // found too), the charts of pod a only.
        let page = load(
            &chromium,
            &format!(
                "{}/?q={namespace}&pod={namespace}/vllm-a/vllm",
                exporter.base
            ),
            Duration::from_secs(7),
            Some(&shot),
        );
        assert!(page.errors().is_empty(), "{:?}", page.errors());
        for pod in ["vllm-a", "vllm-b"] {
            let row = format!("data-part=\"{namespace}/{pod}/vllm\"");
            assert!(page.dom.contains(&row), "no row {row}: {}", page.dom);
            let option = format!("<option value=\"{namespace}/{pod}/vllm\"");
            assert!(page.dom.contains(&option), "no {option}: {}", page.dom);
        }
        let charts = |pod: &str| page.dom.contains(&format!("{namespace}/{pod}/vllm · "));
        assert!(charts("vllm-a") && !charts("vllm-b"), "{}", page.dom);
        assert!(
            page.dom
                .contains("<span id=\"pods-count\" class=\"muted\">2 shown</span>"),
            "{}",
            page.dom
        );
        assert!(
            !page.dom.contains("id=\"pods-section\" hidden"),
            "{}",
            page.dom
        );
    }

    // `dump --discover.processes`: each pod's series, with its labels.
    let (code, stdout, stderr) = run_exporter(&[
        "dump",
        "--discover.processes",
        "--discover.pod-log-dir",
        pods.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let text = String::from_utf8(stdout).unwrap();
    for pod in ["vllm-a", "vllm-b"] {
        let labels = format!("namespace=\"{namespace}\",pod=\"{pod}\"");
        assert!(
            text.lines()
                .any(|l| l.starts_with("vllm:num_requests_running{") && l.contains(&labels)),
            "no series of {pod}: {text}"
        );
        let found = format!("pod=\"{pod}\"");
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&found) && l.contains("held")),
            "{stderr}"
        );
    }
    assert!(stderr.contains("multiproc-exporter: found "), "{stderr}");
    // Another pod log directory: no pod names, the same directories.
    let (code, _, stderr) = run_exporter(&["dump", "--discover.processes", "--dir", "/x"]);
    assert_eq!(code, 2, "{stderr}");

    // Pod b deleted: its row goes, and it is listed as dropped.
    let b_logs = b.log_dir.clone();
    drop(b);
    std::fs::remove_dir_all(b_logs).unwrap();
    let status = wait_for("pod b dropped", || {
        let status = json(&exporter, "/api/v1/status");
        let dropped = status["dropped"]
            .as_array()?
            .iter()
            .any(|d| d["labels"]["pod"] == "vllm-b" && d["reason"] == "pod_gone");
        (dropped && part_of(&status, "vllm-b").is_none()).then_some(status)
    });
    assert!(part_of(&status, "vllm-a").is_some(), "{status}");
    drop(a);
}

#[test]
fn two_processes_of_one_name_writing_two_directories_are_two_label_sets() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let tmp = tempfile::tempdir().unwrap();
    let run = hex(8);
    let Some(plain) = or_skip(plain_cgroup(&[format!("mpe-{run}")])) else {
        return;
    };
    let container_id = hex(64);
    let docker = plain_cgroup(&[
        format!("mpe-{run}-docker"),
        format!("docker-{container_id}.scope"),
    ])
    .unwrap();
    let unit = format!("gunicorn-{run}.service");
    let systemd = plain_cgroup(&[format!("mpe-{run}.slice"), unit.clone()]).unwrap();
    let (bin, name) = named_sleep(tmp.path());
    let dir = |n: &str| {
        let d = tmp.path().join(n);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let (one, two, three, four, five) = (
        dir("one"),
        dir("two"),
        dir("three"),
        dir("four"),
        dir("five"),
    );
    let mut holders = vec![
        // Two of one name in no container.
        holder_in(&plain, &bin, &write_counter(&one, "7", 2.0).0),
        holder_in(&plain, &bin, &write_counter(&two, "7", 5.0).0),
        // Two of one name in one Docker container.
        holder_in(&docker, &bin, &write_counter(&three, "7", 11.0).0),
        holder_in(&docker, &bin, &write_counter(&four, "7", 13.0).0),
        // A systemd service.
        holder_in(&systemd, &bin, &write_counter(&five, "7", 17.0).0),
    ];
    let exporter = Exporter::start(&OUTSIDE_KUBERNETES);
    // Labels sorted by name, as the exporter writes them.
    let series = |owner: String, dir: &Path| {
        let mut labels = [
            owner,
            format!("directory=\"{}\"", dir.display()),
            "model_name=\"m\"".to_owned(),
        ];
        labels.sort();
        format!("vllm:prompt_tokens_total{{{}}}", labels.join(","))
    };
    let process = || format!("process=\"{name}\"");
    let container = || format!("container=\"{container_id}\"");
    let expected = [
        (series(process(), &one), 2.0),
        (series(process(), &two), 5.0),
        (series(container(), &three), 11.0),
        (series(container(), &four), 13.0),
        (series(format!("unit=\"{unit}\""), &five), 17.0),
    ];
    let text = wait_for("five label sets", || {
        let text = exporter.metrics();
        expected
            .iter()
            .all(|(s, v)| sample_value(&text, s) == Some(*v))
            .then_some(text)
    });
    // Never one sum.
    for sum in [7.0, 24.0] {
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("vllm:prompt_tokens_total")
                    && l.ends_with(&format!(" {sum:?}"))),
            "{text}"
        );
    }
    stop_all(&mut holders);
}

#[test]
fn one_path_in_two_mount_namespaces_is_two_label_sets() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let Some(python) = python() else { return };
    let run = hex(8);
    let Some(cgroup) = or_skip(plain_cgroup(&[format!("mpe-{run}-ns")])) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let metrics = tmp.path().join("metrics");
    std::fs::create_dir_all(&metrics).unwrap();
    // Two sandboxes, each with a private tmpfs at the same path, a real
    // prometheus_client writer in each (one command name).
    let first = Sandbox::start(&metrics, Some("mode=0755"));
    let second = Sandbox::start(&metrics, Some("mode=0755"));
    let writers = [
        Writer::start(&python, &first, &cgroup, &metrics),
        Writer::start(&python, &second, &cgroup, &metrics),
    ];
    let exporter = Exporter::start(&["--discover.processes", "--discover.pod-log-dir", ""]);
    let path = metrics.display().to_string();
    let lines = wait_for("two label sets", || {
        let text = exporter.metrics();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| {
                l.starts_with("app_requests_total{") && l.contains(&format!("directory=\"{path}"))
            })
            .map(str::to_owned)
            .collect();
        (lines.len() == 2).then_some(lines)
    });
    // Each its own writer's 3, never 6; the one found later with its inode.
    assert!(lines.iter().all(|l| l.ends_with(" 3.0")), "{lines:?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains(&format!("directory=\"{path}#")))
            .count(),
        1,
        "{lines:?}"
    );
    drop(writers);
    drop((first, second));
}

/// One metrics directory path for sandboxes outside Kubernetes (each
/// mounts its own `tmpfs` there), and a plain cgroup for their writers.
struct SamePath {
    /// Beside the other ordinary discovery tests.
    _beside: std::sync::RwLockReadGuard<'static, ()>,
    python: PathBuf,
    cgroup: FakeCgroup,
    _tmp: tempfile::TempDir,
    metrics: PathBuf,
    /// `metrics`, as text.
    path: String,
}

/// A [`SamePath`] whose cgroup is named after `name`; `None` (skip) when
/// not root, without Python, or when the cgroup cannot be made.
fn same_path(name: &str) -> Option<SamePath> {
    if !privileged() {
        return None;
    }
    let beside = super::beside_others();
    let python = python()?;
    let cgroup = or_skip(plain_cgroup(&[format!("mpe-{}-{name}", hex(8))]))?;
    let tmp = tempfile::tempdir().unwrap();
    let metrics = tmp.path().join("metrics");
    std::fs::create_dir_all(&metrics).unwrap();
    let path = metrics.display().to_string();
    Some(SamePath {
        _beside: beside,
        python,
        cgroup,
        _tmp: tmp,
        metrics,
        path,
    })
}

/// The `app_requests_total` lines of the directories at `path` (with or
/// without a suffix), sorted.
fn requests_at(exporter: &Exporter, path: &str) -> Vec<String> {
    let mut lines: Vec<String> = exporter
        .metrics()
        .lines()
        .filter(|l| {
            l.starts_with("app_requests_total{") && l.contains(&format!("directory=\"{path}"))
        })
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// A directory's identity as the node agent's suffix shows it:
/// `<device>:<inode>` (`stat -c %d:%i`).
fn identity(path: &str) -> String {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    format!("{}:{}", meta.dev(), meta.ino())
}

/// Issue 40: outside Kubernetes the `#<inode>` suffix went to whichever of
/// two same-path directories was found later, decided anew at every scan,
/// so when the older one went, the younger one took over its labels (and
/// two directories' series joined in Prometheus). Now a directory keeps the
/// suffix it was given, its own identity, for as long as it is discovered.
#[test]
fn two_same_path_directories_keep_their_labels_when_the_older_goes() {
    let Some(same) = same_path("stable") else {
        return;
    };
    let (python, cgroup, metrics, path) = (&same.python, &same.cgroup, &same.metrics, &same.path);
    let exporter = Exporter::start(&[
        "--discover.processes",
        "--discover.pod-log-dir",
        "",
        "--discover.interval",
        "1s",
        "--discover.linger",
        "1s",
    ]);
    let lines = |exporter: &Exporter| requests_at(exporter, path);
    // The older directory, found alone: its path as it is.
    let older = Sandbox::start(metrics, Some("mode=0755"));
    let older_writer = Writer::start(python, &older, cgroup, metrics);
    wait_for("the older directory", || {
        (lines(&exporter).len() == 1).then_some(())
    });
    // The younger one, at the same path in another mount namespace: its
    // own inode after the path.
    let younger = Sandbox::start(metrics, Some("mode=0755"));
    let younger_writer = Writer::start(python, &younger, cgroup, metrics);
    let suffixed = format!(
        "directory=\"{path}#{}\"",
        identity(&format!("/proc/{}/root{path}", younger_writer.pid))
    );
    let both = wait_for("two label sets", || {
        let both = lines(&exporter);
        (both.len() == 2).then_some(both)
    });
    assert_eq!(
        both.iter().filter(|l| l.contains(&suffixed)).count(),
        1,
        "{both:?}"
    );
    // The older one goes: the younger keeps its labels.
    older_writer.exit();
    drop(older);
    let left = wait_for("the older directory to go", || {
        let left = lines(&exporter);
        (left.len() == 1).then_some(left)
    });
    assert!(left[0].contains(&suffixed), "{left:?}");
    drop(younger_writer);
    drop(younger);
}

/// Issue 40: of two same-path directories found by one scan (the agent
/// started, or restarted, after both), the one that kept its path alone was
/// decided by their identities (device and inode), so a restart of the
/// agent could swap the two directories' labels and join their series in
/// Prometheus. Now the one made first (its birth time) keeps it, as it did
/// when the two were found one after the other.
#[test]
fn two_same_path_directories_keep_their_labels_across_a_restart_of_the_agent() {
    let Some(same) = same_path("restart") else {
        return;
    };
    let (python, cgroup, metrics, path) = (&same.python, &same.cgroup, &same.metrics, &same.path);
    let args = [
        "--discover.processes",
        "--discover.pod-log-dir",
        "",
        "--discover.interval",
        "1s",
    ];
    let lines = |exporter: &Exporter| requests_at(exporter, path);
    let device = |pid: u32| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}/root{path}"))
            .unwrap()
            .dev()
    };
    // A tmpfs mounted before the older directory's and gone before the
    // younger's is mounted: the younger takes its device number, lower
    // than the older's, so that their identities are not in their order.
    let placeholder = Sandbox::start(metrics, Some("mode=0755"));
    let older = Sandbox::start(metrics, Some("mode=0755"));
    // Two writers in the older (6), one in the younger (3): a swap of
    // their labels shows in the values too.
    let older_writers = [
        Writer::start(python, &older, cgroup, metrics),
        Writer::start(python, &older, cgroup, metrics),
    ];
    let first = Exporter::start(&args);
    wait_for("the older directory", || {
        (lines(&first).len() == 1).then_some(())
    });
    let placeholder_ns = placeholder.mount_ns();
    drop(placeholder);
    wait_for("the placeholder's namespace to go", || {
        (!namespace_alive(placeholder_ns)).then_some(())
    });
    std::thread::sleep(Duration::from_millis(100));
    let younger = Sandbox::start(metrics, Some("mode=0755"));
    let younger_writer = Writer::start(python, &younger, cgroup, metrics);
    eprintln!(
        "devices: older {}, younger {}",
        device(older_writers[0].pid),
        device(younger_writer.pid)
    );
    let before = wait_for("two label sets", || {
        let both = lines(&first);
        (both.len() == 2).then_some(both)
    });
    let suffixed = format!(
        "directory=\"{path}#{}\"",
        identity(&format!("/proc/{}/root{path}", younger_writer.pid))
    );
    let younger_line: Vec<&String> = before.iter().filter(|l| l.contains(&suffixed)).collect();
    assert_eq!(younger_line.len(), 1, "{before:?}");
    assert!(younger_line[0].ends_with(" 3.0"), "{before:?}");
    // The agent restarts: one scan finds both, and gives them the labels
    // they had.
    drop(first);
    let second = Exporter::start(&args);
    let after = wait_for("two label sets after the restart", || {
        let both = lines(&second);
        (both.len() == 2).then_some(both)
    });
    assert_eq!(after, before);
    drop((older_writers, younger_writer));
    drop((older, younger));
}

/// Issue 40: the suffix telling same-path directories apart was the
/// directory's inode alone, and every `tmpfs`'s root is inode 1: of three
/// directories at one path in three mount namespaces, two got one label set
/// and were served as one sum. The suffix is now the directory's device and
/// inode.
#[test]
fn one_path_in_three_mount_namespaces_is_three_label_sets() {
    let Some(same) = same_path("three") else {
        return;
    };
    let (python, cgroup, metrics, path) = (&same.python, &same.cgroup, &same.metrics, &same.path);
    let sandboxes: Vec<Sandbox> = (0..3)
        .map(|_| Sandbox::start(metrics, Some("mode=0755")))
        .collect();
    let writers: Vec<Writer> = sandboxes
        .iter()
        .map(|sandbox| Writer::start(python, sandbox, cgroup, metrics))
        .collect();
    let exporter = Exporter::start(&["--discover.processes", "--discover.pod-log-dir", ""]);
    let lines = wait_for("three series", || {
        let lines = requests_at(&exporter, path);
        (lines.len() == 3 || lines.iter().any(|l| !l.ends_with(" 3.0"))).then_some(lines)
    });
    // Each its own writer's 3, never 6; two of them with their identities.
    assert!(lines.iter().all(|l| l.ends_with(" 3.0")), "{lines:?}");
    let suffixes: Vec<String> = writers
        .iter()
        .map(|w| identity(&format!("/proc/{}/root{path}", w.pid)))
        .filter(|id| lines.iter().any(|l| l.contains(&format!("{path}#{id}\""))))
        .collect();
    assert_eq!(suffixes.len(), 2, "{lines:?}");
    drop(writers);
    drop(sandboxes);
}
