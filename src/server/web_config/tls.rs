//! TLS for the listeners: the rustls server configuration built from the web
//! configuration's `tls_server_config`, as exporter-toolkit builds Go's
//! `tls.Config` from it, and the answer to plain HTTP on a TLS port.
//!
//! Client certificate policies map onto rustls verifiers:
//!
//! | `client_auth_type` | verifier |
//! |---|---|
//! | `NoClientCert` | none (no certificate requested) |
//! | `RequestClientCert` | any certificate accepted, none required (not verified) |
//! | `RequireAnyClientCert` | any certificate, required (not verified) |
//! | `VerifyClientCertIfGiven` | `WebPkiClientVerifier` against the client CAs, anonymous clients allowed |
//! | `RequireAndVerifyClientCert` | `WebPkiClientVerifier` against the client CAs |
//!
//! "Not verified" means the chain is not checked, exactly as in Go; the client
//! must still prove it holds the certificate's key. `client_allowed_sans`
//! wraps the verifier and also requires one of the listed Subject Alternative
//! Names. The crypto provider is *ring* (no cmake or NASM needed to build).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{ring, CryptoProvider, SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    SupportedCipherSuite, SupportedProtocolVersion,
};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use crate::server::web_config::schema::{error, TlsServerConfig, WebConfigError};

/// PEM text of the server certificate, its key and the client CAs, read from
/// files or taken inline.
#[derive(Debug)]
pub(crate) struct Material {
    /// Certificate chain (PEM).
    pub(crate) cert: Vec<u8>,
    /// Private key (PEM).
    pub(crate) key: Vec<u8>,
    /// Client CA certificates (PEM), if any.
    pub(crate) client_ca: Option<Vec<u8>>,
}

/// Client certificate policies (Go's `tls.ClientAuthType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    None,
    Request,
    RequireAny,
    VerifyIfGiven,
    RequireAndVerify,
}

fn client_auth(name: &str) -> Result<ClientAuth, WebConfigError> {
    Ok(match name {
        "" | "NoClientCert" => ClientAuth::None,
        "RequestClientCert" => ClientAuth::Request,
        "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAny,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerify,
        other => return Err(error(format!("invalid ClientAuth: {other}"))),
    })
}

/// TLS versions by their toolkit names, in increasing order; TLS 1.0 and 1.1
/// do not exist here.
fn version_rank(name: &str) -> Result<u8, WebConfigError> {
    match name {
        "TLS10" => Ok(10),
        "TLS11" => Ok(11),
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        other => Err(error(format!("unknown TLS version: {other}"))),
    }
}

fn versions(
    tls: &TlsServerConfig,
) -> Result<Vec<&'static SupportedProtocolVersion>, WebConfigError> {
    let min = version_rank(tls.min_version.as_deref().unwrap_or("TLS12"))?;
    let max = version_rank(tls.max_version.as_deref().unwrap_or("TLS13"))?;
    if max < 12 {
        return Err(error(format!(
            "max_version {} is not available: only TLS 1.2 and TLS 1.3 are implemented",
            tls.max_version.as_deref().unwrap_or_default()
        )));
    }
    if min > max {
        return Err(error("min_version is higher than max_version"));
    }
    let mut versions = Vec::new();
    if min <= 12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        versions.push(&rustls::version::TLS13);
    }
    Ok(versions)
}

/// Go's names of the TLS 1.3 suites (not configurable in Go, ignored here too).
const TLS13_SUITE_NAMES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// Go's names of TLS 1.2 suites that rustls does not implement (CBC and RSA
/// key exchange).
const UNAVAILABLE_SUITE_NAMES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

fn tls12_suite(name: &str) -> Result<Option<SupportedCipherSuite>, WebConfigError> {
    use ring::cipher_suite as cs;
    Ok(Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        n if TLS13_SUITE_NAMES.contains(&n) => return Ok(None),
        n if UNAVAILABLE_SUITE_NAMES.contains(&n) => {
            return Err(error(format!(
                "cipher suite {n} is not available (only ECDHE suites with AES-GCM or ChaCha20-Poly1305 are implemented)"
            )))
        }
        other => return Err(error(format!("unknown cipher: {other}"))),
    }))
}

fn kx_group(name: &str) -> Result<&'static dyn SupportedKxGroup, WebConfigError> {
    match name {
        "X25519" => Ok(ring::kx_group::X25519),
        "CurveP256" => Ok(ring::kx_group::SECP256R1),
        "CurveP384" => Ok(ring::kx_group::SECP384R1),
        "CurveP521" => Err(error(
            "curve CurveP521 is not available (use X25519, CurveP256 or CurveP384)",
        )),
        other => Err(error(format!("unknown curve: {other}"))),
    }
}

/// The crypto provider: *ring*, restricted to the configured suites and
/// groups.
fn provider(tls: &TlsServerConfig) -> Result<CryptoProvider, WebConfigError> {
    let mut provider = ring::default_provider();
    let mut tls12 = Vec::new();
    for name in &tls.cipher_suites {
        if let Some(suite) = tls12_suite(name)? {
            if !tls12.contains(&suite) {
                tls12.push(suite);
            }
        }
    }
    if !tls12.is_empty() {
        provider
            .cipher_suites
            .retain(|s| s.version() == &rustls::version::TLS13);
        provider.cipher_suites.extend(tls12);
    }
    if !tls.curve_preferences.is_empty() {
        let mut groups: Vec<&'static dyn SupportedKxGroup> = Vec::new();
        for name in &tls.curve_preferences {
            let group = kx_group(name)?;
            if !groups.iter().any(|g| g.name() == group.name()) {
                groups.push(group);
            }
        }
        provider.kx_groups = groups;
    }
    Ok(provider)
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, WebConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(format!("invalid {what}: {e}")))?;
    if certs.is_empty() {
        return Err(error(format!("{what} holds no PEM certificate")));
    }
    Ok(certs)
}

/// Builds the rustls server configuration.
pub(crate) fn server_config(
    tls: &TlsServerConfig,
    material: &Material,
) -> Result<ServerConfig, WebConfigError> {
    let provider = Arc::new(provider(tls)?);
    let certs = certificates(&material.cert, "certificate")?;
    let key = PrivateKeyDer::from_pem_slice(&material.key)
        .map_err(|e| error(format!("invalid private key: {e}")))?;
    let auth = client_auth(&tls.client_auth_type)?;
    let roots = match &material.client_ca {
        None => None,
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(pem, "client CA file")? {
                roots
                    .add(cert)
                    .map_err(|e| error(format!("invalid client CA certificate: {e}")))?;
            }
            Some(Arc::new(roots))
        }
    };
    if roots.is_some() && auth == ClientAuth::None {
        return Err(error(
            "client CA's have been configured without a Client Auth Policy",
        ));
    }
    if tls.client_allowed_sans.is_some()
        && !matches!(auth, ClientAuth::RequireAny | ClientAuth::RequireAndVerify)
    {
        return Err(error("client_allowed_sans requires client_auth_type to be one of RequireAnyClientCert or RequireAndVerifyClientCert"));
    }
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Option<Arc<dyn ClientCertVerifier>> = match auth {
        ClientAuth::None => None,
        ClientAuth::Request | ClientAuth::RequireAny => Some(Arc::new(AnyClientCert {
            mandatory: auth == ClientAuth::RequireAny,
            algorithms,
            hints: roots.as_ref().map(|r| r.subjects()).unwrap_or_default(),
        })),
        ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify => {
            let Some(roots) = roots else {
                return Err(error(format!(
                    "client_auth_type {} needs client_ca_file (or client_ca) to verify client certificates against",
                    tls.client_auth_type
                )));
            };
            let builder = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
            let builder = if auth == ClientAuth::VerifyIfGiven {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            Some(
                builder
                    .build()
                    .map_err(|e| error(format!("cannot verify client certificates: {e}")))?,
            )
        }
    };
    let verifier = match (&tls.client_allowed_sans, verifier) {
        (Some(sans), Some(inner)) => Some(Arc::new(AllowedSans {
            inner,
            allowed: sans.clone(),
        }) as Arc<dyn ClientCertVerifier>),
        (_, verifier) => verifier,
    };
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions(tls)?)
        .map_err(|e| error(format!("inconsistent TLS settings: {e}")))?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| error(format!("failed to load X509KeyPair: {e}")))?;
    config.ignore_client_order = tls.prefer_server_cipher_suites;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Requests (and optionally requires) a client certificate without checking
/// its chain, like Go's `RequestClientCert` and `RequireAnyClientCert`. The
/// handshake signature is still verified, so the client must hold the key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
    hints: Vec<DistinguishedName>,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Another verifier, plus: the certificate must carry one of the allowed
/// Subject Alternative Names (compared as strings, as the toolkit does).
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let sans = subject_alt_names(end_entity).map_err(|e| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
                Arc::new(SanError(e)),
            )))
        })?;
        if sans.iter().any(|san| self.allowed.contains(san)) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(SanError(format!(
                    "could not find allowed SANs in client cert, found: {sans:?}"
                ))))),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Why a client certificate's names were refused.
#[derive(Debug)]
struct SanError(String);

impl std::fmt::Display for SanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SanError {}

/// The DNS names, e-mail addresses, IP addresses and URIs of a certificate's
/// Subject Alternative Name extension, written as Go writes them.
fn subject_alt_names(cert: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    use x509_parser::extensions::GeneralName;
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| format!("error parsing client certificate: {e}"))?;
    let Some(extension) = parsed
        .subject_alternative_name()
        .map_err(|e| format!("error parsing client certificate: {e}"))?
    else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for name in &extension.value.general_names {
        match name {
            GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                names.push((*s).to_owned())
            }
            GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes)
                        .ok()
                        .map(|b| IpAddr::from(Ipv4Addr::from(b))),
                    16 => <[u8; 16]>::try_from(*bytes).ok().map(|b| {
                        let v6 = Ipv6Addr::from(b);
                        v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
                    }),
                    _ => None,
                };
                if let Some(ip) = ip {
                    names.push(ip.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Whether the first bytes received on a TLS port are a plain HTTP request
/// (an upper-case method such as `GET /`), as Go's server checks.
pub(crate) fn looks_like_plain_http(first: &[u8]) -> bool {
    !first.is_empty()
        && first[0] != TLS_HANDSHAKE_RECORD
        && first.iter().take(3).all(u8::is_ascii_uppercase)
}

/// The answer to plain HTTP on a TLS port (Go's words).
pub(crate) const PLAIN_HTTP_RESPONSE: &[u8] = b"HTTP/1.0 400 Bad Request\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
Connection: close\r\n\r\n\
Client sent an HTTP request to an HTTPS server.\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(yaml: &str) -> TlsServerConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn versions_map_to_tls12_and_tls13() {
        let names = |yaml: &str| {
            versions(&tls(yaml)).map(|v| v.iter().map(|v| v.version).collect::<Vec<_>>())
        };
        use rustls::ProtocolVersion::{TLSv1_2, TLSv1_3};
        assert_eq!(names("{}").unwrap(), [TLSv1_2, TLSv1_3]);
        assert_eq!(names("{min_version: TLS13}").unwrap(), [TLSv1_3]);
        assert_eq!(names("{max_version: TLS12}").unwrap(), [TLSv1_2]);
        assert_eq!(names("{min_version: TLS10}").unwrap(), [TLSv1_2, TLSv1_3]);
        assert!(names("{max_version: TLS11}").is_err());
        assert!(names("{min_version: TLS13, max_version: TLS12}").is_err());
        assert_eq!(
            names("{min_version: SSL3}").unwrap_err().0,
            "unknown TLS version: SSL3"
        );
    }

    #[test]
    fn cipher_suites_and_curves() {
        let p = provider(&tls(
            "{cipher_suites: [TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, TLS_AES_128_GCM_SHA256], curve_preferences: [CurveP384, X25519]}",
        ))
        .unwrap();
        let tls12: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .collect();
        assert_eq!(tls12.len(), 1);
        assert_eq!(
            p.cipher_suites
                .iter()
                .filter(|s| s.version() == &rustls::version::TLS13)
                .count(),
            3
        );
        assert_eq!(p.kx_groups.len(), 2);
        assert_eq!(p.kx_groups[0].name(), rustls::NamedGroup::secp384r1);
        let e = provider(&tls("{cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]}")).unwrap_err();
        assert!(e.0.contains("not available"), "{e}");
        let e = provider(&tls("{cipher_suites: [NOPE]}")).unwrap_err();
        assert_eq!(e.0, "unknown cipher: NOPE");
        assert!(provider(&tls("{curve_preferences: [CurveP521]}")).is_err());
    }

    #[test]
    fn plain_http_detection() {
        assert!(looks_like_plain_http(b"GET /"));
        assert!(looks_like_plain_http(b"HEAD "));
        assert!(looks_like_plain_http(b"POST "));
        assert!(!looks_like_plain_http(&[0x16, 3, 1, 0, 200]));
        assert!(!looks_like_plain_http(b""));
        assert!(!looks_like_plain_http(b"get /"));
    }
}
