//! The outgoing side: one way to make the HTTP(S) connector that fetches
//! upstreams (`crate::source::upstream`) and pushes with remote write
//! ([`crate::sink::push`]): rustls with *ring*, HTTP/1, `http://` or
//! `https://`, trusting Mozilla's roots (webpki-roots: the image has no
//! certificate store) and/or the certificates of a PEM file.

use std::sync::Arc;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::CertificateDer;

/// Which certificates a connector trusts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Trust<'a> {
    /// Mozilla's roots.
    PublicRoots,
    /// Only the certificates of this PEM.
    Only(&'a [u8]),
    /// Mozilla's roots and the certificates of this PEM.
    PublicRootsAnd(&'a [u8]),
}

/// A connector for `http://` and `https://` URLs trusting `trust`; `Err`
/// says what is wrong with the PEM (no certificate, a bad one).
pub(crate) fn connector(trust: Trust<'_>) -> Result<HttpsConnector<HttpConnector>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = match trust {
        Trust::PublicRoots => None,
        Trust::Only(pem) => Some(pem),
        Trust::PublicRootsAnd(pem) => {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            Some(pem)
        }
    };
    match pem {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(pem) => {
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
                added += 1;
            }
            if added == 0 {
                return Err("no PEM certificate in it".to_owned());
            }
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

/// An error and its sources, as one line joined with `: ` (hyper's errors
/// say "client error (Connect)" and keep the cause in their sources).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
