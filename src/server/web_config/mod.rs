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
//! rustls server configuration is built ([`tls`]) and every bcrypt hash
//! is checked. The doc comments below are the reference for the format;
//! `docs/configuration.md` repeats them with what differs from the toolkit.
//!
//! [`WebSettings`] ([`reload`]) keeps the configuration in force and reloads it: a
//! background task looks at the configuration file and every file it names
//! once a second ([`reload::RELOAD_CHECK_INTERVAL`]) and reloads when one of them
//! changed, so that certificate rotation and password changes apply to new
//! connections and requests without a restart (the toolkit re-reads the file
//! on every handshake and request). A file that turns invalid is logged,
//! counted, and the previous configuration stays in force.

pub(crate) mod auth;
pub(crate) mod reload;
pub(crate) mod schema;
pub(crate) mod tls;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};

pub(crate) use reload::WebSettings;
pub(crate) use schema::{error, WebConfigError};
pub use schema::{HttpServerConfig, TlsServerConfig, WebConfigFile};

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

/// A parsed file and the files it names (paths resolved against the file's
/// directory).
#[derive(Debug)]
pub(super) struct Parsed {
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
pub(super) fn parse(text: &str, base: &Path) -> Result<Parsed, WebConfigError> {
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
pub(super) struct Contents(Vec<(PathBuf, Result<Vec<u8>, String>)>);

pub(super) fn read_file(path: &Path) -> Result<Vec<u8>, String> {
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
