//! The web configuration file (`--web.config.file`, exporter-toolkit's
//! format) on a plain-HTTP exporter: start-up validation, basic
//! authentication on every path, response headers, and reloads (a password
//! change applies without a restart; an invalid new file keeps the previous
//! configuration and is logged and counted). TLS is in `tests/tls.rs`.

use crate::support::web as web_support;

use crate::support::web::{assert_web_config_rejected, bcrypt_hash, write_atomically};
use crate::support::{get, run_exporter, sample_value, tool, wait_for, Exporter};

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

fn start(config: &std::path::Path, dir: &std::path::Path) -> Exporter {
    Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--web.config.file",
        config.to_str().unwrap(),
    ])
}

#[test]
fn an_invalid_web_config_stops_the_exporter_at_start_up() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("web.yml");
    for (yaml, expected) in [
        (
            "basic_auth_users: {alice: plaintext}\n",
            "not a bcrypt hash",
        ),
        ("basic_auth_user: {}\n", "unknown field `basic_auth_user`"),
        (
            "tls_server_config: {cert_file: x.pem}\n",
            "missing one of key or key_file",
        ),
        (
            "http_server_config: {headers: {Server: x}}\n",
            "HTTP header \"Server\" can not be configured",
        ),
        ("tls_server_config: [\n", "invalid web configuration"),
    ] {
        assert_web_config_rejected(tmp.path(), &config, yaml, expected);
    }
    let (code, _, stderr) = run_exporter(&[
        "serve",
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.config.file",
        tmp.path().join("missing.yml").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");
}

#[test]
fn every_path_needs_credentials_and_gets_the_configured_headers() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("web.yml");
    std::fs::write(
        &config,
        format!(
            "basic_auth_users:\n  alice: {}\nhttp_server_config:\n  headers:\n    \
             X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n",
            bcrypt_hash("pw")
        ),
    )
    .unwrap();
    let exporter = start(&config, tmp.path());
    let good = basic("alice", "pw");
    for path in ["/metrics", "/-/healthy", "/-/ready", "/", "/nothing"] {
        let denied = exporter.get(path);
        assert_eq!(denied.status, 401, "{path}");
        assert_eq!(denied.header("www-authenticate"), Some("Basic"));
        assert_eq!(denied.header("x-frame-options"), Some("deny"), "{path}");
        let allowed = exporter.get_with(path, &[("Authorization", &good)]);
        assert_ne!(allowed.status, 401, "{path}");
        assert_eq!(allowed.header("x-content-type-options"), Some("nosniff"));
    }
    let wrong = exporter.get_with("/metrics", &[("Authorization", &basic("alice", "Pw"))]);
    assert_eq!(wrong.status, 401);
    let garbage = exporter.get_with("/metrics", &[("Authorization", "Basic %%%")]);
    assert_eq!(garbage.status, 401);
}

#[test]
fn a_password_change_applies_without_a_restart_and_a_bad_file_keeps_the_old_one() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("web.yml");
    std::fs::write(
        &config,
        format!("basic_auth_users: {{alice: '{}'}}\n", bcrypt_hash("one")),
    )
    .unwrap();
    let exporter = start(&config, tmp.path());
    let status = |password: &str| {
        exporter
            .get_with(
                "/-/healthy",
                &[("Authorization", &basic("alice", password))],
            )
            .status
    };
    assert_eq!(status("one"), 200);
    assert_eq!(status("two"), 401);

    write_atomically(
        &config,
        &format!("basic_auth_users: {{alice: '{}'}}\n", bcrypt_hash("two")),
    );
    wait_for("the new password to apply", || {
        (status("two") == 200).then_some(())
    });
    assert_eq!(status("one"), 401);

    // An invalid file: logged, counted, and the previous users stay.
    write_atomically(&config, "basic_auth_users: {alice: not-a-hash}\n");
    let logged = wait_for("the failed reload to be logged", || {
        exporter
            .find_log("Web configuration reload failed; keeping the previous web configuration.")
    });
    assert_eq!(logged["level"], "ERROR");
    assert!(logged["error"]
        .as_str()
        .unwrap()
        .contains("not a bcrypt hash"));
    assert_eq!(status("two"), 200);
    let metrics = exporter
        .get_with("/metrics", &[("Authorization", &basic("alice", "two"))])
        .text();
    let value = |series: &str| sample_value(&metrics, series);
    assert_eq!(
        value("multiproc_exporter_web_config_last_reload_successful"),
        Some(0.0)
    );
    assert_eq!(
        value("multiproc_exporter_web_config_reloads_total{result=\"failure\"}"),
        Some(1.0)
    );
    assert_eq!(
        value("multiproc_exporter_web_config_reloads_total{result=\"success\"}"),
        Some(1.0)
    );

    // The failure is logged once, not at every check.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(
        exporter
            .logs_with("Web configuration reload failed; keeping the previous web configuration.")
            .len(),
        1
    );

    // Switching TLS on needs a restart: refused, the listener stays plain HTTP.
    if tool("openssl").is_some() {
        let _pki = web_support::Pki::new(&tmp.path().join("pki"));
        write_atomically(
            &config,
            "tls_server_config: {cert_file: pki/server.pem, key_file: pki/server.key}\n",
        );
        let refused = wait_for("the second failed reload", || {
            exporter
                .logs_with(
                    "Web configuration reload failed; keeping the previous web configuration.",
                )
                .into_iter()
                .nth(1)
        });
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .contains("needs a restart"),
            "{refused}"
        );
        assert_eq!(status("two"), 200);
    }
    // Removing the users (a valid file) turns authentication off.
    write_atomically(&config, "basic_auth_users: {}\n");
    wait_for("authentication to be switched off", || {
        (get(&format!("{}/-/healthy", exporter.base), &[]).status == 200).then_some(())
    });
}
