//! The status page at `/` in a real browser (Debian's headless Chromium,
//! driven by [`crate::support::browser`]): against the live demo, whose
//! charts fill as collections go by, and against a directory with a bad file
//! and no vLLM metrics behind basic authentication. No console errors; a
//! screenshot of each goes to `target/test-output/`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value as Json;

use crate::support::browser::{chromium, load, load_with_auth, Page};
use crate::support::web::bcrypt_hash;
use crate::support::{get, key, repo_root, wait_for, write_counter, write_db, Exporter};

/// Where the screenshots go (kept after the run).
pub(crate) fn screenshot(name: &str) -> PathBuf {
    let dir = repo_root().join("target/test-output");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `multiproc-exporter demo` on a free port, killed on drop.
struct Demo {
    child: Child,
    base: String,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn demo() -> Demo {
    let demo = demo_in(None);
    let base = &demo.base;
    let port = base.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    wait_for("the demo to serve vLLM metrics", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        let body = String::from_utf8(get(&format!("{base}/metrics"), &[]).body).ok()?;
        body.contains("vllm:generation_tokens_total").then_some(())
    });
    demo
}

/// The text of the element with `id` in the page's DOM.
fn text_of(page: &Page, id: &str) -> String {
    let start = page
        .dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the DOM"));
    let open = start + page.dom[start..].find('>').unwrap() + 1;
    let close = open + page.dom[open..].find('<').unwrap();
    page.dom[open..close].to_owned()
}

/// The `data-points` of every chart's SVG, in order (the page's script, in
/// the DOM too, has the attribute with an expression instead of a number).
pub(crate) fn chart_points(page: &Page) -> Vec<usize> {
    page.dom
        .match_indices("preserveAspectRatio=\"none\" data-points=\"")
        .filter_map(|(at, m)| {
            let rest = &page.dom[at + m.len()..];
            rest[..rest.find('"').unwrap()].parse().ok()
        })
        .collect()
}

pub(crate) fn assert_no_errors(page: &Page) {
    assert!(
        page.errors().is_empty(),
        "console errors: {:?}",
        page.errors()
    );
}

#[test]
fn the_status_page_charts_the_live_demo() {
    let Some(chromium) = chromium() else { return };
    let demo = demo();
    let shot = screenshot("status-page-demo.png");
    // The page polls every 2 s: 7 s are three collections at least.
    let page = load(
        &chromium,
        &format!("{}/", demo.base),
        Duration::from_secs(7),
        Some(&shot),
    );
    assert_no_errors(&page);
    assert!(
        page.dom
            .contains("data-model=\"meta-llama/Llama-3.1-8B-Instruct\""),
        "no model section: {}",
        page.dom
    );
    let merged: usize = text_of(&page, "files-merged").parse().unwrap();
    assert!(merged > 0, "{merged} files");
    assert_eq!(text_of(&page, "files-skipped"), "0");
    assert!(page.dom.contains("Nothing left out."));
    let points = chart_points(&page);
    assert_eq!(points.len(), 6, "six charts per model");
    // Requests and KV cache have a point per collection; throughput, from
    // the second on.
    assert!(points[0] >= 3 && points[1] >= 3, "{points:?}");
    assert!(points[2] >= 2, "{points:?}");
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
}

#[test]
fn the_status_page_names_a_bad_file_behind_basic_auth() {
    let Some(chromium) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_db(
        &dir.join("counter_1.db"),
        &[(
            key(
                "http_requests",
                "http_requests_total",
                &[("code", "200")],
                "Requests.",
            ),
            7.0,
        )],
    );
    // A file whose first record is garbage.
    let (bad, _) = write_counter(&dir, "2", 1.0);
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes[8..16].copy_from_slice(&[0xff; 8]);
    std::fs::write(&bad, bytes).unwrap();
    let web = tmp.path().join("web.yml");
    std::fs::write(
        &web,
        format!("basic_auth_users:\n  alice: {}\n", bcrypt_hash("s3cret")),
    )
    .unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--web.config.file",
        web.to_str().unwrap(),
    ]);
    let url = format!("{}/", exporter.base);

    // Without credentials: nothing.
    let refused = load(&chromium, &url, Duration::from_secs(1), None);
    assert!(
        !refused.dom.contains("multiproc-exporter"),
        "{}",
        refused.dom
    );
    assert!(get(&format!("{}/api/v1/status", exporter.base), &[]).status == 401);

    let shot = screenshot("status-page-bad-file.png");
    let page = load_with_auth(
        &chromium,
        &url,
        "alice",
        "s3cret",
        Duration::from_secs(5),
        Some(&shot),
    );
    assert_no_errors(&page);
    assert_eq!(text_of(&page, "files-merged"), "1");
    assert_eq!(text_of(&page, "files-skipped"), "1");
    // The reason, as the status API names it.
    let status: Json = serde_json::from_slice(
        &get(
            &format!("{}/api/v1/status", exporter.base),
            &[("Authorization", "Basic YWxpY2U6czNjcmV0")],
        )
        .body,
    )
    .unwrap();
    let problem = &status["last"]["problems"][0];
    assert!(page.dom.contains(bad.to_str().unwrap()), "{}", page.dom);
    assert!(
        page.dom.contains(&format!(
            "<code>{}</code>",
            problem["reason"].as_str().unwrap()
        )),
        "{}",
        page.dom
    );
    // No vLLM metrics: the generic part only.
    assert!(
        page.dom
            .contains("No vLLM or SGLang metrics in these directories"),
        "{}",
        page.dom
    );
}

/// `multiproc-exporter demo` (writing `dir`, if given), on a port of its own.
fn demo_in(dir: Option<&std::path::Path>) -> Demo {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_multiproc-exporter"));
    command.args(["demo", "--demo.tick-ms", "200"]);
    if let Some(dir) = dir {
        command.arg("--demo.dir").arg(dir);
    }
    let child = command
        .args(["--web.listen-address", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start demo");
    Demo {
        child,
        base: format!("http://127.0.0.1:{port}"),
    }
}

#[test]
fn the_status_page_of_a_daemonset_shows_every_pod_and_charts_each() {
    let Some(chromium) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("pods");
    let (a, b) = (parent.join("llm_vllm-a"), parent.join("llm_vllm-b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let _demos = [demo_in(Some(&a)), demo_in(Some(&b))];
    let exporter = Exporter::start(&[
        "--dir",
        parent.to_str().unwrap(),
        "--dir.subdirectories-label",
        "vllm_pod",
    ]);
    let status = wait_for("both pods on /api/v1/status", || {
        let status: Json =
            serde_json::from_slice(&get(&format!("{}/api/v1/status", exporter.base), &[]).body)
                .ok()?;
        let parts = status["last"]["parts"].as_array()?;
        let served = |pod: &str| {
            parts
                .iter()
                .any(|p| p["labels"]["vllm_pod"] == pod && p["files_merged"].as_u64() > Some(0))
        };
        (served("llm_vllm-a") && served("llm_vllm-b")).then_some(status)
    });
    let part = &status["last"]["parts"][0];
    assert_eq!(part["directories"][0]["dir"], a.to_str().unwrap(), "{part}");
    assert_eq!(part["directories"][0]["state"], Json::Null, "{part}");

    let shot = screenshot("status-page-daemonset.png");
    let page = load(
        &chromium,
        &format!("{}/", exporter.base),
        Duration::from_secs(7),
        Some(&shot),
    );
    assert_no_errors(&page);
    for pod in ["llm_vllm-a", "llm_vllm-b"] {
        for wanted in [
            format!("<tr data-part=\"{pod}\">"),
            format!("<option value=\"{pod}\">"),
            format!("{pod} · meta-llama/Llama-3.1-8B-Instruct"),
        ] {
            assert!(page.dom.contains(&wanted), "no {wanted}: {}", page.dom);
        }
    }
    // Six charts per pod, each with points.
    let points = chart_points(&page);
    assert_eq!(points.len(), 12, "{points:?}");
    assert!(points[0] >= 2 && points[6] >= 2, "{points:?}");

    // The summary: a key per pod and model, with its labels.
    let summary: Json =
        serde_json::from_slice(&get(&format!("{}/api/v1/summary", exporter.base), &[]).body)
            .unwrap();
    let key = "vllm_pod=\"llm_vllm-a\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"";
    assert!(summary["models"][key].is_object(), "{summary}");
    assert_eq!(
        summary["groups"][key]["vllm_pod"], "llm_vllm-a",
        "{summary}"
    );
}

#[test]
fn a_single_directory_hides_the_pods_section() {
    let tmp = tempfile::tempdir().unwrap();
    write_counter(tmp.path(), "1", 1.0);
    let exporter = Exporter::start(&["--dir", tmp.path().to_str().unwrap()]);
    let page = String::from_utf8(get(&format!("{}/", exporter.base), &[]).body).unwrap();
    assert!(
        page.contains("<section id=\"pods-section\" hidden>"),
        "{page}"
    );
    let status: Json =
        serde_json::from_slice(&get(&format!("{}/api/v1/status", exporter.base), &[]).body)
            .unwrap();
    assert_eq!(status["last"]["parts"], serde_json::json!([]), "{status}");
    assert_eq!(status["dropped"], serde_json::json!([]), "{status}");
}
