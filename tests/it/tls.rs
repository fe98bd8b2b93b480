//! TLS and basic authentication with real clients against the real exporter
//! binary: certificates made by the `openssl` command, clients `curl`
//! (OpenSSL), Python's `ssl`/`urllib` and ureq (rustls), and a real
//! Prometheus server scraping over TLS with a client certificate and basic
//! authentication. The web configuration files are exporter-toolkit's format.

use crate::support;
use crate::support::web as web_support;

use std::path::Path;

use crate::support::monitoring::Prometheus;
use crate::support::web::{
    assert_web_config_rejected, bcrypt_hash, curl, ureq_get, Pki, PYTHON_CLIENT,
};
use crate::support::{assert_sample, python, tool, wait_for, write_counter, Exporter};

/// A temporary directory with a fresh [`Pki`] in its `pki/`; `None` skips
/// when `openssl` or `curl` is missing (outside CI).
fn setup() -> Option<(tempfile::TempDir, Pki)> {
    tool("openssl")?;
    tool("curl")?;
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(&tmp.path().join("pki"));
    Some((tmp, pki))
}

/// Starts the exporter on `dir` with the web configuration `yaml` (written to
/// `web.yml` next to the PKI, so relative paths resolve to it); the HTTPS base
/// URL.
fn start(pki: &Pki, dir: &Path, yaml: &str, extra: &[&str]) -> (Exporter, String) {
    let config = pki.path("web.yml");
    std::fs::write(&config, yaml).unwrap();
    let mut args = vec![
        "--dir",
        dir.to_str().unwrap(),
        "--web.config.file",
        config.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let exporter = Exporter::start(&args);
    let https = exporter.base.replacen("http://", "https://", 1);
    (exporter, https)
}

/// curl arguments trusting the test CA and presenting `client` if given.
fn curl_tls(pki: &Pki, client: Option<&str>) -> Vec<String> {
    let mut args = vec!["--cacert".to_owned(), pki.arg("ca.pem")];
    if let Some(name) = client {
        args.extend([
            "--cert".to_owned(),
            pki.arg(&format!("{name}.pem")),
            "--key".to_owned(),
            pki.arg(&format!("{name}.key")),
        ]);
    }
    args
}

fn curl_with(url: &str, args: &[String], more: &[&str]) -> web_support::CurlResult {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(more);
    curl(url, &all)
}

/// Python's TLS client; its one-line answer.
fn python_get(
    python: &Path,
    url: &str,
    pki: &Pki,
    client: Option<&str>,
    max_version: &str,
    credentials: Option<(&str, &str)>,
) -> String {
    let (cert, key) = client.map_or((String::new(), String::new()), |name| {
        (
            pki.arg(&format!("{name}.pem")),
            pki.arg(&format!("{name}.key")),
        )
    });
    let (user, password) = credentials.unwrap_or(("", ""));
    support::run_python(
        python,
        PYTHON_CLIENT,
        &[
            url,
            &pki.arg("ca.pem"),
            &cert,
            &key,
            max_version,
            user,
            password,
        ],
        &[],
    )
    .trim()
    .to_owned()
}

/// The exporter's own metrics, fetched with a trusted client certificate.
fn self_metrics(https: &str, pki: &Pki, headers: &[(&str, &str)]) -> String {
    let reply = ureq_get(&format!("{https}/metrics"), pki, Some("client"), headers).unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.text()
}

const CLOSED: &str = "multiproc_exporter_http_connections_closed_total";

#[test]
fn client_certificates_are_verified_with_real_clients() {
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let Some(python) = python() else { return };
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_counter(&dir, "1", 7.0);
    let (_exporter, https) = start(
        &pki,
        &dir,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n",
        &[],
    );
    let url = format!("{https}/metrics");

    // A certificate from the trusted CA: every client gets the metrics.
    let ok = curl_with(&url, &curl_tls(&pki, Some("client")), &[]);
    assert_eq!(ok.status, 200, "{ok:?}");
    assert!(ok
        .body
        .contains("vllm:prompt_tokens_total{model_name=\"m\"} 7.0"));
    let reply = ureq_get(&url, &pki, Some("client"), &[]).unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(
        python_get(
            &python,
            &format!("{https}/-/healthy"),
            &pki,
            Some("client"),
            "",
            None
        ),
        "200 Healthy."
    );

    // No certificate, one from another CA, a self-signed one: no HTTP at all.
    for client in [None, Some("untrusted-client"), Some("self-signed-client")] {
        let refused = curl_with(&url, &curl_tls(&pki, client), &[]);
        assert_eq!(refused.status, 0, "{client:?}: {refused:?}");
        assert_ne!(refused.exit, 0, "{client:?}");
    }
    for client in [None, Some("untrusted-client")] {
        let e = ureq_get(&url, &pki, client, &[]).unwrap_err();
        assert!(!e.is_empty());
        let answer = python_get(&python, &url, &pki, client, "", None);
        assert!(answer.starts_with("error "), "{client:?}: {answer}");
    }

    // The refusals are counted; the server is unharmed.
    let metrics = self_metrics(&https, &pki, &[]);
    assert_sample(
        &metrics,
        &format!("{CLOSED}{{reason=\"tls_handshake\"}}"),
        7.0,
    );
}

#[test]
fn client_auth_types_and_allowed_sans() {
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let dir = tmp.path().join("metrics");
    let base = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n";
    let status = |https: &str, client: Option<&str>| {
        curl_with(&format!("{https}/-/healthy"), &curl_tls(&pki, client), &[]).status
    };

    // VerifyClientCertIfGiven: anonymous clients pass, a given certificate must verify.
    let (exporter, https) = start(
        &pki,
        &dir,
        &format!("{base}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.pem\n"),
        &[],
    );
    assert_eq!(status(&https, None), 200);
    assert_eq!(status(&https, Some("client")), 200);
    assert_eq!(status(&https, Some("untrusted-client")), 0);
    drop(exporter);

    // RequireAnyClientCert: a certificate is required but not verified (as in Go).
    let (exporter, https) = start(
        &pki,
        &dir,
        &format!("{base}  client_auth_type: RequireAnyClientCert\n"),
        &[],
    );
    assert_eq!(status(&https, None), 0);
    assert_eq!(status(&https, Some("self-signed-client")), 200);
    drop(exporter);

    // client_allowed_sans: a verified certificate must also carry a listed name.
    let (_exporter, https) = start(
        &pki,
        &dir,
        &format!(
            "{base}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  \
             client_allowed_sans: [\"spiffe://cluster/prometheus\"]\n"
        ),
        &[],
    );
    assert_eq!(status(&https, Some("client")), 200);
    assert_eq!(status(&https, Some("client-other")), 0);
    assert_eq!(status(&https, Some("untrusted-client")), 0);
}

#[test]
fn inline_pem_certificates_keys_and_cas_work() {
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let dir = tmp.path().join("metrics");
    let block = |file: &str| {
        std::fs::read_to_string(pki.path(file))
            .unwrap()
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    let yaml = format!(
        "tls_server_config:\n  cert: |\n{}  key: |\n{}  client_ca: |\n{}  \
         client_auth_type: RequireAndVerifyClientCert\n",
        block("server.pem"),
        block("server.key"),
        block("ca.pem")
    );
    let (_exporter, https) = start(&pki, &dir, &yaml, &[]);
    let url = format!("{https}/-/healthy");
    assert_eq!(
        curl_with(&url, &curl_tls(&pki, Some("client")), &[]).status,
        200
    );
    assert_eq!(
        curl_with(&url, &curl_tls(&pki, Some("untrusted-client")), &[]).status,
        0
    );
}

#[test]
fn passwords_are_checked_with_real_clients_and_cached() {
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let Some(python) = python() else { return };
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    let hash = bcrypt_hash("s3cret");
    // A hash made by Go's bcrypt (exporter-toolkit's, of "fakepassword").
    let go_hash = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";
    let (_exporter, https) = start(
        &pki,
        &dir,
        &format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             basic_auth_users:\n  alice: {hash}\n  bob: {go_hash}\n"
        ),
        &[],
    );
    let tls = curl_tls(&pki, None);
    for path in ["/metrics", "/-/healthy", "/-/ready", "/"] {
        let url = format!("{https}{path}");
        assert_eq!(
            curl_with(&url, &tls, &["-u", "alice:s3cret"]).status,
            200,
            "{path}"
        );
        assert_eq!(
            curl_with(&url, &tls, &["-u", "bob:fakepassword"]).status,
            200,
            "{path}"
        );
        assert_eq!(
            curl_with(&url, &tls, &["-u", "alice:wrong"]).status,
            401,
            "{path}"
        );
        assert_eq!(
            curl_with(&url, &tls, &["-u", "carol:s3cret"]).status,
            401,
            "{path}"
        );
        assert_eq!(curl_with(&url, &tls, &[]).status, 401, "{path}");
    }
    let url = format!("{https}/-/healthy");
    let denied = ureq_get(&url, &pki, None, &[]).unwrap();
    assert_eq!(denied.status, 401);
    assert_eq!(denied.header("www-authenticate"), Some("Basic"));
    assert_eq!(
        python_get(&python, &url, &pki, None, "", Some(("alice", "s3cret"))),
        "200 Healthy."
    );
    assert_eq!(
        python_get(&python, &url, &pki, None, "", Some(("alice", "nope"))),
        "401 Basic"
    );

    // Each distinct (user, password) pair cost one bcrypt check, however
    // often it was sent: alice:s3cret, bob:fakepassword, alice:wrong,
    // carol:s3cret, alice:nope.
    let metrics = curl_with(&format!("{https}/metrics"), &tls, &["-u", "alice:s3cret"]).body;
    assert_sample(&metrics, "multiproc_exporter_http_bcrypt_checks_total", 5.0);
    assert_sample(
        &metrics,
        "multiproc_exporter_http_requests_rejected_total{reason=\"unauthorized\"}",
        4.0 * 3.0 + 2.0,
    );
}

#[test]
fn plain_http_to_the_tls_port_gets_400_and_the_server_keeps_serving() {
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let dir = tmp.path().join("metrics");
    let (exporter, https) = start(
        &pki,
        &dir,
        "tls_server_config: {cert_file: server.pem, key_file: server.key}\n",
        &["--web.read-header-timeout", "1s"],
    );
    let address = exporter.base.trim_start_matches("http://").to_owned();
    // A connection that never starts its handshake is closed by the header
    // timeout.
    let silent = std::thread::spawn({
        let address = address.clone();
        move || {
            use std::io::Read as _;
            let mut socket = std::net::TcpStream::connect(address).unwrap();
            socket.set_read_timeout(Some(support::TIMEOUT)).unwrap();
            let mut buffer = [0u8; 16];
            matches!(socket.read(&mut buffer), Ok(0))
        }
    });
    for _ in 0..2 {
        let plain = curl(&format!("{}/metrics", exporter.base), &[]);
        assert_eq!(plain.status, 400, "{plain:?}");
        assert_eq!(
            plain.body,
            "Client sent an HTTP request to an HTTPS server.\n"
        );
    }
    // Bytes that are neither TLS nor HTTP: the handshake fails, quietly.
    {
        use std::io::{Read as _, Write as _};
        let mut socket = std::net::TcpStream::connect(&address).unwrap();
        socket.set_read_timeout(Some(support::TIMEOUT)).unwrap();
        socket
            .write_all(&[0x00, 0x01, 0x02, 0x03, 0x04, 0x05])
            .unwrap();
        let mut rest = Vec::new();
        let _ = socket.read_to_end(&mut rest);
    }
    let reply = curl_with(&format!("{https}/-/healthy"), &curl_tls(&pki, None), &[]);
    assert_eq!((reply.status, reply.body.as_str()), (200, "Healthy.\n"));
    assert!(
        silent.join().unwrap(),
        "the silent connection was not closed"
    );
    let metrics = curl_with(&format!("{https}/metrics"), &curl_tls(&pki, None), &[]).body;
    assert_sample(&metrics, &format!("{CLOSED}{{reason=\"plain_http\"}}"), 2.0);
    assert_sample(
        &metrics,
        &format!("{CLOSED}{{reason=\"tls_handshake\"}}"),
        1.0,
    );
    assert_sample(
        &metrics,
        &format!("{CLOSED}{{reason=\"header_timeout\"}}"),
        1.0,
    );
}

#[test]
fn min_and_max_versions_are_enforced() {
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let Some(python) = python() else { return };
    let dir = tmp.path().join("metrics");
    let tls = curl_tls(&pki, None);

    let (exporter, https) = start(
        &pki,
        &dir,
        "tls_server_config: {cert_file: server.pem, key_file: server.key, min_version: TLS13}\n",
        &[],
    );
    let url = format!("{https}/-/healthy");
    assert_eq!(curl_with(&url, &tls, &[]).status, 200);
    let old = curl_with(&url, &tls, &["--tls-max", "1.2"]);
    assert_eq!(old.status, 0, "{old:?}");
    let answer = python_get(&python, &url, &pki, None, "TLSv1_2", None);
    assert!(answer.starts_with("error "), "{answer}");
    assert_eq!(
        python_get(&python, &url, &pki, None, "TLSv1_3", None),
        "200 Healthy."
    );
    drop(exporter);

    let (_exporter, https) = start(
        &pki,
        &dir,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  max_version: TLS12\n  \
         cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n  curve_preferences: [CurveP384]\n",
        &[],
    );
    let url = format!("{https}/-/healthy");
    assert_eq!(curl_with(&url, &tls, &["--tls-max", "1.2"]).status, 200);
    assert_eq!(curl_with(&url, &tls, &["--tlsv1.3"]).status, 0);
    // The only suite offered is the one configured.
    let other_suite = curl_with(
        &url,
        &tls,
        &[
            "--tls-max",
            "1.2",
            "--ciphers",
            "ECDHE-ECDSA-AES128-GCM-SHA256",
        ],
    );
    assert_eq!(other_suite.status, 0, "{other_suite:?}");
    let same_suite = curl_with(
        &url,
        &tls,
        &[
            "--tls-max",
            "1.2",
            "--ciphers",
            "ECDHE-ECDSA-AES256-GCM-SHA384",
        ],
    );
    assert_eq!(same_suite.status, 200, "{same_suite:?}");
}

/// The common name of the certificate the server presents to a new
/// connection (read by Python's `ssl`).
fn served_common_name(python: &Path, address: &str, ca: &Path) -> String {
    let script = r#"
import socket, ssl, sys
host, port = sys.argv[1].rsplit(":", 1)
context = ssl.create_default_context(cafile=sys.argv[2])
with socket.create_connection((host, int(port)), timeout=20) as raw:
    with context.wrap_socket(raw, server_hostname="localhost") as tls:
        subject = dict(item[0] for item in tls.getpeercert()["subject"])
        print(subject["commonName"])
"#;
    support::run_python(python, script, &[address, ca.to_str().unwrap()], &[])
        .trim()
        .to_owned()
}

#[test]
fn a_rotated_certificate_is_served_without_a_restart() {
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let Some(python) = python() else { return };
    let dir = tmp.path().join("metrics");
    // A Kubernetes Secret volume: the files are symbolic links through
    // `..data`, which the kubelet swaps atomically to a new directory.
    let secret = tmp.path().join("secret");
    let first = secret.join("..2024_01");
    std::fs::create_dir_all(&first).unwrap();
    for file in ["server.pem", "server.key"] {
        std::fs::copy(pki.path(file), first.join(file)).unwrap();
    }
    std::os::unix::fs::symlink("..2024_01", secret.join("..data")).unwrap();
    for file in ["server.pem", "server.key"] {
        std::os::unix::fs::symlink(format!("..data/{file}"), secret.join(file)).unwrap();
    }
    let config = secret.join("web.yml");
    std::fs::write(
        &config,
        "tls_server_config: {cert_file: server.pem, key_file: server.key}\n",
    )
    .unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--web.config.file",
        config.to_str().unwrap(),
    ]);
    let address = exporter.base.trim_start_matches("http://").to_owned();
    let ca = pki.path("ca.pem");
    assert_eq!(served_common_name(&python, &address, &ca), "localhost");

    // A new key and certificate arrive.
    pki.leaf(
        "rotated",
        "ca",
        "localhost-rotated",
        "DNS:localhost,IP:127.0.0.1",
        "serverAuth",
    );
    let second = secret.join("..2024_02");
    std::fs::create_dir_all(&second).unwrap();
    std::fs::copy(pki.path("rotated.pem"), second.join("server.pem")).unwrap();
    std::fs::copy(pki.path("rotated.key"), second.join("server.key")).unwrap();
    std::os::unix::fs::symlink("..2024_02", secret.join("..data_tmp")).unwrap();
    std::fs::rename(secret.join("..data_tmp"), secret.join("..data")).unwrap();

    wait_for("the rotated certificate to be served", || {
        (served_common_name(&python, &address, &ca) == "localhost-rotated").then_some(())
    });
    let https = exporter.base.replacen("http://", "https://", 1);
    let metrics = curl_with(&format!("{https}/metrics"), &curl_tls(&pki, None), &[]).body;
    assert_sample(
        &metrics,
        "multiproc_exporter_web_config_reloads_total{result=\"success\"}",
        1.0,
    );
    assert_sample(
        &metrics,
        "multiproc_exporter_web_config_reloads_total{result=\"failure\"}",
        0.0,
    );
}

#[test]
fn a_tls_port_with_a_bad_certificate_does_not_start() {
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let config = pki.path("web.yml");
    for (yaml, expected) in [
        (
            "tls_server_config: {cert_file: missing.pem, key_file: server.key}\n",
            "cannot read cert_file",
        ),
        (
            "tls_server_config: {cert_file: server.pem, key_file: client.key}\n",
            "failed to load X509KeyPair",
        ),
        (
            "tls_server_config: {cert_file: server.pem, key_file: server.key, client_ca_file: ca.pem}\n",
            "client CA's have been configured without a Client Auth Policy",
        ),
        (
            "tls_server_config: {cert_file: server.pem, key_file: server.key, client_auth_type: RequireAndVerifyClientCert}\n",
            "needs client_ca_file",
        ),
        (
            "tls_server_config: {cert_file: server.pem, key_file: server.key, client_auth_type: VerifyClientCertIfGiven, client_ca_file: ca.pem, client_allowed_sans: [a]}\n",
            "client_allowed_sans requires client_auth_type",
        ),
        (
            "tls_server_config: {cert_file: server.pem, key_file: server.key, max_version: TLS11}\n",
            "only TLS 1.2 and TLS 1.3",
        ),
    ] {
        assert_web_config_rejected(tmp.path(), &config, yaml, expected);
    }
}

#[test]
fn prometheus_scrapes_over_tls_with_a_client_certificate_and_basic_auth() {
    let Some(binary) = tool("prometheus") else {
        return;
    };
    let Some((tmp, pki)) = setup() else {
        return;
    };
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_counter(&dir, "1", 1234.0);
    let hash = bcrypt_hash("scrape-secret");
    let (exporter, _https) = start(
        &pki,
        &dir,
        &format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n\
             basic_auth_users:\n  prometheus: {hash}\n"
        ),
        &[],
    );
    let target = exporter.base.trim_start_matches("http://");
    let tls = format!(
        "    tls_config: {{ca_file: '{}', cert_file: '{}', key_file: '{}', server_name: localhost}}\n",
        pki.arg("ca.pem"),
        pki.arg("client.pem"),
        pki.arg("client.key")
    );
    let jobs = format!(
        "  - job_name: good\n    scheme: https\n{tls}    basic_auth: {{username: prometheus, password: scrape-secret}}\n    static_configs: [{{targets: ['{target}']}}]\n\
         \x20 - job_name: wrong_password\n    scheme: https\n{tls}    basic_auth: {{username: prometheus, password: guess}}\n    static_configs: [{{targets: ['{target}']}}]\n\
         \x20 - job_name: plain_http\n    static_configs: [{{targets: ['{target}']}}]\n"
    );
    let work = tmp.path().join("prometheus");
    std::fs::create_dir(&work).unwrap();
    let prometheus = Prometheus::start(
        &binary,
        &work,
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n{jobs}"
        ),
    );
    let targets = || support::get(&format!("{}/api/v1/targets", prometheus.base), &[]).text();
    let started = std::time::Instant::now();
    // Prometheus 2.x asks for OpenMetrics, where prometheus_client writes
    // the name with `_` for `:`: match either spelling.
    let promql = "{__name__=~\"vllm.prompt_tokens_total\", job=\"good\"}";
    while prometheus.query_one(promql) != Some(1234.0) {
        assert!(
            started.elapsed() < support::TIMEOUT,
            "Prometheus did not scrape the exporter over TLS: {}",
            targets()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(prometheus.query_one("up{job=\"good\"}"), Some(1.0));
    wait_for("the failing jobs to be down", || {
        (prometheus.query_one("up{job=\"wrong_password\"}") == Some(0.0)
            && prometheus.query_one("up{job=\"plain_http\"}") == Some(0.0))
        .then_some(())
    });
    // The wrong password was answered 401, the plain-HTTP scrape 400.
    let errors = targets();
    assert!(errors.contains("401 Unauthorized"), "{errors}");
    assert!(errors.contains("400 Bad Request"), "{errors}");
}
