//! Helpers for the tests of the HTTP side (TLS, authentication, limits):
//! certificates made at test time with the `openssl` command, the real TLS
//! clients (`curl`, Python's `ssl`, ureq with rustls), web configuration
//! files and bcrypt hashes. Generic helpers (finding a tool, reading a
//! self-metric) are in `tests/support/mod.rs`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{read_reply, Reply, TIMEOUT};

/// Runs `openssl ARGS` in `dir`, asserting success.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A small PKI written by `openssl` into a directory: a CA, a server
/// certificate for `localhost` and `127.0.0.1`, and client certificates
/// (trusted, from another CA, self-signed).
#[derive(Debug, Clone)]
pub(crate) struct Pki {
    /// Where the files are.
    pub(crate) dir: PathBuf,
}

impl Pki {
    /// Makes every certificate (P-256 keys; a few hundred milliseconds).
    pub(crate) fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let pki = Self {
            dir: dir.to_path_buf(),
        };
        pki.ca("ca");
        pki.ca("other-ca");
        pki.leaf(
            "server",
            "ca",
            "localhost",
            "DNS:localhost,IP:127.0.0.1",
            "serverAuth",
        );
        pki.leaf(
            "client",
            "ca",
            "prometheus",
            "DNS:prometheus.example,URI:spiffe://cluster/prometheus",
            "clientAuth",
        );
        pki.leaf(
            "client-other",
            "ca",
            "other",
            "DNS:other.example",
            "clientAuth",
        );
        pki.leaf(
            "untrusted-client",
            "other-ca",
            "prometheus",
            "DNS:prometheus.example",
            "clientAuth",
        );
        pki.self_signed(
            "self-signed-client",
            "prometheus",
            &["-addext", "subjectAltName=DNS:prometheus.example"],
        );
        pki
    }

    fn ca(&self, name: &str) {
        self.self_signed(name, name, &[]);
    }

    /// A self-signed certificate `name.pem`/`name.key` for `/CN=cn`, with
    /// `extra` arguments to `openssl req`.
    fn self_signed(&self, name: &str, cn: &str, extra: &[&str]) {
        let (key, pem, subject) = (
            format!("{name}.key"),
            format!("{name}.pem"),
            format!("/CN={cn}"),
        );
        let mut args = vec![
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "2",
            "-subj",
            &subject,
        ];
        args.extend_from_slice(extra);
        openssl(&self.dir, &args);
    }

    /// A certificate `name.pem`/`name.key` signed by `ca`.
    pub(crate) fn leaf(&self, name: &str, ca: &str, cn: &str, san: &str, usage: &str) {
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        let ext = format!("{name}.ext");
        std::fs::write(
            self.dir.join(&ext),
            format!("subjectAltName={san}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"),
        )
        .unwrap();
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-out",
                &format!("{name}.pem"),
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }

    /// The path of a file of the PKI.
    pub(crate) fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The path as a string.
    pub(crate) fn arg(&self, file: &str) -> String {
        self.path(file).to_str().unwrap().to_owned()
    }
}

/// Writes a file atomically (a temporary file renamed over it), as
/// configuration management tools do.
pub(crate) fn write_atomically(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Asserts that `serve --dir DIR --web.listen-address 127.0.0.1:0
/// --web.config.file CONFIG` with `yaml` written to `config` exits with
/// code 2 and a message containing `expected`.
pub(crate) fn assert_web_config_rejected(dir: &Path, config: &Path, yaml: &str, expected: &str) {
    std::fs::write(config, yaml).unwrap();
    let (code, _, stderr) = crate::support::run_exporter(&[
        "serve",
        "--dir",
        dir.to_str().unwrap(),
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.config.file",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{yaml}: {stderr}");
    let stderr = crate::support::logfmt_unescaped(&stderr);
    assert!(stderr.contains(expected), "{yaml}: {stderr}");
}

/// A bcrypt hash of `password` (cost 4, the lowest, to keep tests quick).
pub(crate) fn bcrypt_hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

/// What `curl` got: the HTTP status (0 when there was no HTTP answer), the
/// body, and curl's exit code.
#[derive(Debug)]
pub(crate) struct CurlResult {
    /// HTTP status, 0 if none.
    pub(crate) status: u16,
    /// Response body.
    pub(crate) body: String,
    /// curl's exit code (35: TLS handshake failure, 56: receive failure).
    pub(crate) exit: i32,
}

/// `curl -s ARGS URL`, writing out the status code.
pub(crate) fn curl(url: &str, args: &[&str]) -> CurlResult {
    let output = Command::new("curl")
        .args(["-s", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("run curl");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    CurlResult {
        status: code.trim().parse().unwrap_or(0),
        body: body.to_owned(),
        exit: output.status.code().unwrap_or(-1),
    }
}

/// A GET with ureq over rustls, trusting `ca` and presenting `client`
/// (`name` of a `name.pem`/`name.key` pair) if given; an error is a string.
pub(crate) fn ureq_get(
    url: &str,
    pki: &Pki,
    client: Option<&str>,
    headers: &[(&str, &str)],
) -> Result<Reply, String> {
    use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};
    let ca_pem = std::fs::read(pki.path("ca.pem")).unwrap();
    let ca = Certificate::from_pem(&ca_pem).unwrap().to_owned();
    let mut tls = TlsConfig::builder().root_certs(RootCerts::new_with_certs(&[ca]));
    if let Some(name) = client {
        let cert_pem = std::fs::read(pki.path(&format!("{name}.pem"))).unwrap();
        let key_pem = std::fs::read(pki.path(&format!("{name}.key"))).unwrap();
        let cert = Certificate::from_pem(&cert_pem).unwrap().to_owned();
        let key = PrivateKey::from_pem(&key_pem).unwrap().to_owned();
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&[cert], key)));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .timeout_global(Some(TIMEOUT))
        .build()
        .into();
    let mut request = agent.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
        .call()
        .and_then(read_reply)
        .map_err(|e| e.to_string())
}

/// Python's `ssl` + `urllib` as the client: prints `status body` or
/// `error <exception>`. Arguments: url, CA file, client cert or "", client key
/// or "", maximum TLS version ("" or "TLSv1_2"), user or "", password.
pub(crate) const PYTHON_CLIENT: &str = r#"
import base64, ssl, sys, urllib.error, urllib.request
url, ca, cert, key, max_version, user, password = sys.argv[1:8]
context = ssl.create_default_context(cafile=ca)
if cert:
    context.load_cert_chain(cert, key)
if max_version:
    context.maximum_version = getattr(ssl.TLSVersion, max_version)
request = urllib.request.Request(url)
if user:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", "Basic " + token)
try:
    with urllib.request.urlopen(request, context=context, timeout=20) as response:
        print(response.status, response.read().decode().splitlines()[0] if response.length != 0 else "")
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("WWW-Authenticate"))
except Exception as e:
    print("error", type(e).__name__, e)
"#;
