//! The web configuration file (`--web.config.file`), in the format of
//! Prometheus's exporter-toolkit: TLS (`tls_server_config`), HTTP response
//! headers (`http_server_config`) and basic authentication
//! (`basic_auth_users`).
//!
//! As with the main configuration file, loading is two-phase: the YAML is
//! parsed into [`WebConfigFile`], which mirrors it exactly and rejects unknown
//! keys (the toolkit parses strictly too), then validated into a
//! [`WebConfig`]: certificate, key and CA files are read (paths relative to
//! the configuration file's directory, as the toolkit resolves them), the
//! rustls server configuration is built ([`crate::server::web_config::tls`]) and every bcrypt hash
//! is checked. The doc comments below are the reference for the format;
//! `docs/configuration.md` repeats them with what differs from the toolkit.
//!
//! [`WebSettings`] keeps the configuration in force and reloads it: a
//! background task looks at the configuration file and every file it names
//! once a second ([`RELOAD_CHECK_INTERVAL`]) and reloads when one of them
//! changed, so that certificate rotation and password changes apply to new
//! connections and requests without a restart (the toolkit re-reads the file
//! on every handshake and request). A file that turns invalid is logged,
//! counted, and the previous configuration stays in force.

pub(crate) mod auth;
pub(crate) mod tls;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;

use crate::server::telemetry::web_metrics::WebMetrics;

/// How often the configuration file and the files it names are checked for
/// changes.
pub(crate) const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The web configuration file as written. Every key is optional; an empty file
/// serves plain HTTP without authentication.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfigFile {
    /// TLS. Serving switches to HTTPS (on every listen address) when any of
    /// `cert`, `cert_file`, `key`, `key_file`, `client_ca`, `client_ca_file`
    /// or `client_auth_type` is set, as in the toolkit.
    #[serde(default)]
    pub tls_server_config: TlsServerConfig,
    /// HTTP server settings.
    #[serde(default)]
    pub http_server_config: HttpServerConfig,
    /// User names and their bcrypt password hashes (`$2a$`, `$2b$`, `$2y$`);
    /// when not empty, every request needs HTTP basic authentication with
    /// one of them. Generate a hash with `htpasswd -nBC 10 "" | tr -d ':\n'`.
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
}

/// The `tls_server_config` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    /// The server certificate (chain) as inline PEM text, instead of
    /// `cert_file`.
    #[serde(default)]
    pub cert: String,
    /// The server's private key as inline PEM text, instead of `key_file`.
    #[serde(default)]
    pub key: String,
    /// CA certificates for client certificates, as inline PEM text, instead
    /// of `client_ca_file`.
    #[serde(default)]
    pub client_ca: String,
    /// File with the server certificate, then any intermediates (PEM).
    #[serde(default)]
    pub cert_file: String,
    /// File with the server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key_file: String,
    /// Client certificate policy: `NoClientCert` (the default),
    /// `RequestClientCert`, `RequireAnyClientCert` (also spelled
    /// `RequireClientCert`), `VerifyClientCertIfGiven` or
    /// `RequireAndVerifyClientCert`. Only `RequireAndVerifyClientCert`
    /// authenticates clients.
    #[serde(default)]
    pub client_auth_type: String,
    /// File with the CA certificates that client certificates must chain to
    /// (PEM).
    #[serde(default)]
    pub client_ca_file: String,
    /// Accept only client certificates with a Subject Alternative Name (DNS
    /// name, e-mail address, IP address or URI) exactly equal to one of
    /// these. Requires `client_auth_type` `RequireAnyClientCert` or
    /// `RequireAndVerifyClientCert`.
    #[serde(default)]
    pub client_allowed_sans: Option<Vec<String>>,
    /// Lowest TLS version accepted: `TLS12` (the default) or `TLS13`.
    /// `TLS10` and `TLS11` are accepted for compatibility but TLS 1.2
    /// stays the minimum (the TLS library implements nothing older).
    #[serde(default)]
    pub min_version: Option<String>,
    /// Highest TLS version accepted: `TLS13` (the default) or `TLS12`.
    #[serde(default)]
    pub max_version: Option<String>,
    /// TLS 1.2 cipher suites, by their Go names, in order of preference
    /// (empty: the defaults). Only ECDHE suites with AES-GCM or
    /// ChaCha20-Poly1305 exist here; naming another Go suite is an error.
    /// TLS 1.3 suite names are accepted and ignored, as Go ignores them.
    #[serde(default)]
    pub cipher_suites: Vec<String>,
    /// Key-exchange groups in order of preference: `X25519`, `CurveP256`,
    /// `CurveP384` (empty: the defaults). `CurveP521` is not available.
    #[serde(default)]
    pub curve_preferences: Vec<String>,
    /// Choose the cipher suite by the server's order of preference (the
    /// default) instead of the client's.
    #[serde(default = "yes")]
    pub prefer_server_cipher_suites: bool,
}

impl Default for TlsServerConfig {
    fn default() -> Self {
        Self {
            cert: String::new(),
            key: String::new(),
            client_ca: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            client_auth_type: String::new(),
            client_ca_file: String::new(),
            client_allowed_sans: None,
            min_version: None,
            max_version: None,
            cipher_suites: Vec::new(),
            curve_preferences: Vec::new(),
            prefer_server_cipher_suites: true,
        }
    }
}

fn yes() -> bool {
    true
}

impl TlsServerConfig {
    /// Whether TLS is switched on (the toolkit's `IsEnabled`).
    pub fn is_enabled(&self) -> bool {
        [
            &self.cert,
            &self.cert_file,
            &self.key,
            &self.key_file,
            &self.client_ca,
            &self.client_ca_file,
            &self.client_auth_type,
        ]
        .iter()
        .any(|s| !s.is_empty())
    }
}

/// The `http_server_config` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpServerConfig {
    /// Accepted for compatibility; the exporter speaks HTTP/1.1 only (over
    /// TLS it offers `http/1.1` by ALPN), whatever the value.
    #[serde(default = "yes")]
    pub http2: bool,
    /// Headers added to every response. Only these names are allowed, as in
    /// the toolkit: `Content-Security-Policy`, `X-Frame-Options` (`deny` or
    /// `sameorigin`), `X-Content-Type-Options` (`nosniff`),
    /// `X-XSS-Protection`, `Strict-Transport-Security`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        Self {
            http2: true,
            headers: BTreeMap::new(),
        }
    }
}

/// Response headers that `http_server_config.headers` may set, with their
/// allowed values (empty: any value). The toolkit's list.
const ALLOWED_HEADERS: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// A validated web configuration.
#[derive(Debug, Default)]
pub(crate) struct WebConfig {
    /// The TLS server configuration; `None` serves plain HTTP.
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    /// User name → bcrypt hash; empty: no authentication.
    pub(crate) users: HashMap<String, String>,
    /// Headers added to every response.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// Settings accepted but not honoured exactly (logged at each load).
    pub(crate) warnings: Vec<String>,
}

/// Why a web configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebConfigError(pub(crate) String);

impl fmt::Display for WebConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WebConfigError {}

fn error(message: impl Into<String>) -> WebConfigError {
    WebConfigError(message.into())
}

/// A parsed file and the files it names (paths resolved against the file's
/// directory).
#[derive(Debug)]
struct Parsed {
    file: WebConfigFile,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_ca_file: Option<PathBuf>,
}

impl Parsed {
    fn referenced(&self) -> Vec<PathBuf> {
        [&self.cert_file, &self.key_file, &self.client_ca_file]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}

/// Parses YAML text (an empty document is the default configuration).
fn parse(text: &str, base: &Path) -> Result<Parsed, WebConfigError> {
    let file: Option<WebConfigFile> =
        serde_yaml::from_str(text).map_err(|e| error(format!("invalid web configuration: {e}")))?;
    let file = file.unwrap_or_default();
    let resolve = |p: &str| (!p.is_empty()).then(|| base.join(p));
    Ok(Parsed {
        cert_file: resolve(&file.tls_server_config.cert_file),
        key_file: resolve(&file.tls_server_config.key_file),
        client_ca_file: resolve(&file.tls_server_config.client_ca_file),
        file,
    })
}

/// The bytes of every file a configuration consists of, to tell a real change
/// from a touch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contents(Vec<(PathBuf, Result<Vec<u8>, String>)>);

fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| e.to_string())
}

impl WebConfig {
    /// Parses and validates YAML text whose relative paths are relative to
    /// `base`.
    #[cfg(test)]
    pub(crate) fn from_yaml(text: &str, base: &Path) -> Result<Self, WebConfigError> {
        let parsed = parse(text, base)?;
        let files = parsed
            .referenced()
            .into_iter()
            .map(|p| {
                let bytes = read_file(&p);
                (p, bytes)
            })
            .collect();
        Self::validate(&parsed, &Contents(files))
    }

    /// Validates a parsed file, with the contents of the files it names.
    fn validate(parsed: &Parsed, contents: &Contents) -> Result<Self, WebConfigError> {
        let file = &parsed.file;
        let read = |path: &Option<PathBuf>, key: &str| -> Result<Option<Vec<u8>>, WebConfigError> {
            let Some(path) = path else { return Ok(None) };
            match contents.0.iter().find(|(p, _)| p == path) {
                Some((_, Ok(bytes))) => Ok(Some(bytes.clone())),
                Some((_, Err(e))) => {
                    Err(error(format!("cannot read {key} {}: {e}", path.display())))
                }
                None => Err(error(format!("{key} {} was not read", path.display()))),
            }
        };
        let tls_section = &file.tls_server_config;
        let tls = tls_section;
        let tls = if tls.is_enabled() {
            // The toolkit checks both are given before reading either.
            if tls.cert_file.is_empty() && tls.cert.is_empty() {
                return Err(error("missing one of cert or cert_file"));
            }
            if tls.key_file.is_empty() && tls.key.is_empty() {
                return Err(error("missing one of key or key_file"));
            }
            let material = crate::server::web_config::tls::Material {
                cert: pick(read(&parsed.cert_file, "cert_file")?, &tls.cert, "cert")?,
                key: pick(read(&parsed.key_file, "key_file")?, &tls.key, "key")?,
                client_ca: match read(&parsed.client_ca_file, "client_ca_file")? {
                    Some(bytes) if !tls.client_ca.is_empty() => {
                        let _ = bytes;
                        return Err(error(
                            "both client_ca and client_ca_file are set; use one of them",
                        ));
                    }
                    Some(bytes) => Some(bytes),
                    None if !tls.client_ca.is_empty() => Some(tls.client_ca.as_bytes().to_vec()),
                    None => None,
                },
            };
            Some(Arc::new(crate::server::web_config::tls::server_config(
                tls, &material,
            )?))
        } else {
            None
        };
        let mut users = HashMap::with_capacity(file.basic_auth_users.len());
        for (user, hash) in &file.basic_auth_users {
            if let Err(e) = hash.parse::<bcrypt::HashParts>() {
                return Err(error(format!(
                    "basic_auth_users: the password of user {user:?} is not a bcrypt hash: {e}"
                )));
            }
            users.insert(user.clone(), hash.clone());
        }
        let mut headers = Vec::new();
        for (name, value) in &file.http_server_config.headers {
            let Some((_, allowed)) = ALLOWED_HEADERS.iter().find(|(n, _)| n == name) else {
                return Err(error(format!(
                    "http_server_config.headers: HTTP header {name:?} can not be configured"
                )));
            };
            if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
                return Err(error(format!(
                    "http_server_config.headers: invalid value for {name}. Expected one of: {allowed:?}, but got: {value:?}"
                )));
            }
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                error(format!(
                    "http_server_config.headers: the value of {name} is not a valid header value"
                ))
            })?;
            let header_name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| error(format!("invalid header name {name:?}")))?;
            if !value.is_empty() {
                headers.push((header_name, header_value));
            }
        }
        let mut warnings = Vec::new();
        if matches!(tls_section.min_version.as_deref(), Some("TLS10" | "TLS11")) {
            warnings.push(
                "tls_server_config.min_version asks for TLS 1.0 or 1.1; TLS 1.2 is the lowest version available, so older clients cannot connect.".to_owned(),
            );
        }
        if tls.is_none() && *tls_section != TlsServerConfig::default() {
            warnings.push(
                "tls_server_config has settings but no certificate: TLS is off and the exporter serves plain HTTP.".to_owned(),
            );
        }
        Ok(Self {
            tls,
            users,
            headers,
            warnings,
        })
    }
}

/// The PEM text from a file or inline; exactly one must be set.
fn pick(from_file: Option<Vec<u8>>, inline: &str, key: &str) -> Result<Vec<u8>, WebConfigError> {
    match (from_file, inline.is_empty()) {
        (Some(_), false) => Err(error(format!(
            "both {key} and {key}_file are set; use one of them"
        ))),
        (Some(bytes), true) => Ok(bytes),
        (None, false) => Ok(inline.as_bytes().to_vec()),
        (None, true) => Err(error(format!("missing one of {key} or {key}_file"))),
    }
}

/// What `stat` says about one file: enough to notice a rewrite, a rename
/// over it, or a Kubernetes Secret's symlink swap.
type Stamp = Option<(u64, u64, u64, i64, i64, i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path).ok().map(|m| {
        (
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        )
    })
}

/// What the reload check remembers between runs.
#[derive(Debug)]
struct LastSeen {
    /// The configuration file and the files the last parseable version named.
    watched: Vec<PathBuf>,
    /// Their stamps at the last check.
    stamps: Vec<Stamp>,
    /// The contents at the last load attempt.
    contents: Contents,
}

/// The web configuration in force, and how to reload it.
#[derive(Debug)]
pub(crate) struct WebSettings {
    path: Option<PathBuf>,
    current: RwLock<Arc<WebConfig>>,
    last: Mutex<Option<LastSeen>>,
    metrics: WebMetrics,
}

impl WebSettings {
    /// Loads `path` (no file: plain HTTP, no authentication). An error is
    /// fatal at start-up.
    pub(crate) fn load(
        path: Option<PathBuf>,
        metrics: WebMetrics,
    ) -> Result<Arc<Self>, WebConfigError> {
        let settings = Self {
            path,
            current: RwLock::new(Arc::new(WebConfig::default())),
            last: Mutex::new(None),
            metrics,
        };
        if let Some(path) = &settings.path {
            let (seen, loaded) = attempt(path);
            let config = loaded?;
            for warning in &config.warnings {
                tracing::warn!(path = %path.display(), "{warning}");
            }
            *settings.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
            *settings.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(seen);
        }
        settings.metrics.observe_initial_web_config();
        Ok(Arc::new(settings))
    }

    /// The configuration in force.
    pub(crate) fn current(&self) -> Arc<WebConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the server speaks TLS (decided at start-up).
    pub(crate) fn tls_enabled(&self) -> bool {
        self.current().tls.is_some()
    }

    /// The exporter's own HTTP metrics.
    pub(crate) fn metrics(&self) -> &WebMetrics {
        &self.metrics
    }

    /// Reloads when the file or a file it names changed. Blocking (`stat`,
    /// and reads when something changed).
    pub(crate) fn check_for_changes(&self) {
        let Some(path) = &self.path else { return };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(seen) = last.as_ref() {
            let stamps: Vec<Stamp> = seen.watched.iter().map(|p| stamp(p)).collect();
            if stamps == seen.stamps {
                return;
            }
        }
        let (seen, loaded) = attempt(path);
        let unchanged = last.as_ref().is_some_and(|l| l.contents == seen.contents);
        *last = Some(seen);
        drop(last);
        if unchanged {
            return;
        }
        let loaded = loaded.and_then(|config| {
            if config.tls.is_some() != self.tls_enabled() {
                Err(error(
                    "switching TLS on or off needs a restart (the listeners keep their protocol)",
                ))
            } else {
                Ok(config)
            }
        });
        match loaded {
            Ok(config) => {
                for warning in &config.warnings {
                    tracing::warn!(path = %path.display(), "{warning}");
                }
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                self.metrics.observe_web_config_reload(true);
                tracing::info!(path = %path.display(), "Web configuration reloaded.");
            }
            Err(e) => {
                self.metrics.observe_web_config_reload(false);
                tracing::error!(
                    path = %path.display(),
                    error = %e,
                    "Web configuration reload failed; keeping the previous web configuration."
                );
            }
        }
    }

    /// Checks for changes every [`RELOAD_CHECK_INTERVAL`] until `shutdown`
    /// turns true.
    pub(crate) async fn watch(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        if self.path.is_none() {
            return;
        }
        let mut interval = tokio::time::interval(RELOAD_CHECK_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            let settings = self.clone();
            let _ = tokio::task::spawn_blocking(move || settings.check_for_changes()).await;
        }
    }
}

/// Reads and validates the file at `path`; what was seen, and the result.
fn attempt(path: &Path) -> (LastSeen, Result<WebConfig, WebConfigError>) {
    let base = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let config_stamp = stamp(path);
    let config_bytes = read_file(path);
    let parsed = match &config_bytes {
        Ok(bytes) => std::str::from_utf8(bytes)
            .map_err(|e| error(format!("invalid web configuration: not UTF-8: {e}")))
            .and_then(|text| parse(text, &base)),
        Err(e) => Err(error(format!("cannot read {}: {e}", path.display()))),
    };
    let mut watched = vec![path.to_path_buf()];
    let mut stamps = vec![config_stamp];
    let mut contents = vec![(path.to_path_buf(), config_bytes)];
    if let Ok(parsed) = &parsed {
        for file in parsed.referenced() {
            stamps.push(stamp(&file));
            let bytes = read_file(&file);
            contents.push((file.clone(), bytes));
            watched.push(file);
        }
    }
    let contents = Contents(contents);
    let result = parsed.and_then(|p| WebConfig::validate(&p, &contents));
    (
        LastSeen {
            watched,
            stamps,
            contents,
        },
        result,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_minimal_files() {
        let config = WebConfig::from_yaml("", Path::new("/")).unwrap();
        assert!(config.tls.is_none() && config.users.is_empty() && config.headers.is_empty());
        let config = WebConfig::from_yaml("# nothing\n", Path::new("/")).unwrap();
        assert!(config.tls.is_none());
    }

    #[test]
    fn unknown_keys_are_errors_that_name_the_key() {
        for (yaml, key) in [
            ("tls_server_config:\n  cert_fil: x\n", "cert_fil"),
            ("basic_auth_user: {}\n", "basic_auth_user"),
            ("rate_limit: {interval: 1s, burst: 2}\n", "rate_limit"),
            ("http_server_config: {http3: true}\n", "http3"),
        ] {
            let e = WebConfig::from_yaml(yaml, Path::new("/")).unwrap_err();
            assert!(e.0.contains(key), "{yaml}: {e}");
        }
    }

    #[test]
    fn users_need_bcrypt_hashes() {
        // The toolkit's fixed hash of "fakepassword" (made by Go's bcrypt).
        let good = "basic_auth_users:\n  alice: $2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n";
        let config = WebConfig::from_yaml(good, Path::new("/")).unwrap();
        assert_eq!(config.users.len(), 1);
        let e =
            WebConfig::from_yaml("basic_auth_users: {bob: secret}\n", Path::new("/")).unwrap_err();
        assert!(e.0.contains("\"bob\"") && e.0.contains("bcrypt"), "{e}");
    }

    #[test]
    fn headers_follow_the_toolkit_list() {
        let config = WebConfig::from_yaml(
            "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    Strict-Transport-Security: max-age=31536000\n",
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(config.headers.len(), 2);
        for yaml in [
            "http_server_config: {headers: {X-Frame-Options: allow}}\n",
            "http_server_config: {headers: {X-Powered-By: rust}}\n",
            "http_server_config: {headers: {X-Content-Type-Options: sniff}}\n",
        ] {
            assert!(
                WebConfig::from_yaml(yaml, Path::new("/")).is_err(),
                "{yaml}"
            );
        }
    }

    #[test]
    fn tls_needs_a_certificate_and_a_key() {
        let e = WebConfig::from_yaml(
            "tls_server_config: {client_auth_type: RequireAndVerifyClientCert}\n",
            Path::new("/"),
        )
        .unwrap_err();
        assert_eq!(e.0, "missing one of cert or cert_file");
        let e = WebConfig::from_yaml("tls_server_config: {cert_file: c.pem}\n", Path::new("/x"))
            .unwrap_err();
        assert_eq!(e.0, "missing one of key or key_file");
        let e = WebConfig::from_yaml(
            "tls_server_config: {cert_file: c.pem, key_file: k.pem}\n",
            Path::new("/x"),
        )
        .unwrap_err();
        assert!(e.0.starts_with("cannot read cert_file /x/c.pem: "), "{e}");
        // Only a version: TLS stays off, as in the toolkit.
        let config =
            WebConfig::from_yaml("tls_server_config: {min_version: TLS13}\n", Path::new("/"))
                .unwrap();
        assert!(config.tls.is_none());
    }
}
