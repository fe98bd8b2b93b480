//! The web configuration file's schema, exactly as written (exporter-toolkit's
//! format; unknown keys are rejected), and the error every step of loading it
//! reports. Validation is [`super`]'s, reloading [`super::reload`]'s.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

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

/// Why a web configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebConfigError(pub(crate) String);

impl fmt::Display for WebConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WebConfigError {}

/// A [`WebConfigError`] with this message.
pub(crate) fn error(message: impl Into<String>) -> WebConfigError {
    WebConfigError(message.into())
}
