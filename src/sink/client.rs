//! The HTTP side of pushing: one remote-write 1.0 POST (hyper's client over
//! rustls with *ring*, the TLS stack the server already uses; the Mozilla
//! roots of `webpki-roots` plus `--push.tls.ca-file`), with the headers the
//! protocol asks for and the credentials read from their files at every
//! request (so rotated secrets apply), and the answer sorted into success or
//! a [`FailureReason`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, Method, Request, StatusCode, Uri};
use base64::Engine as _;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::http_client::{connector, error_chain, Trust};
use crate::sink::metrics::FailureReason;

/// How requests authenticate, as Prometheus's `remote_write` does it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    /// HTTP basic authentication; the password is read from a file.
    Basic {
        /// User name.
        username: String,
        /// File holding the password (a trailing newline is ignored).
        password_file: PathBuf,
    },
    /// `Authorization: Bearer <token>`, the token read from a file.
    BearerTokenFile(PathBuf),
}

/// Sends remote-write requests to one URL.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Body>,
    url: Uri,
    authorization: Option<Authorization>,
    timeout: Duration,
}

/// Why a request failed, with a detail for the log.
pub(crate) type Failure = (FailureReason, String);

impl Client {
    /// A client for `url`, trusting `ca_file`'s certificates besides the
    /// usual roots.
    pub(crate) fn new(
        url: Uri,
        authorization: Option<Authorization>,
        ca_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let connector = match ca_file {
            None => connector(Trust::PublicRoots),
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    format!("cannot read --push.tls.ca-file {}: {e}", path.display())
                })?;
                connector(Trust::PublicRootsAnd(&pem))
                    .map_err(|e| format!("--push.tls.ca-file {}: {e}", path.display()))
            }
        }?;
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Self {
            http,
            url,
            authorization,
            timeout,
        })
    }

    /// POSTs one snappy-compressed `WriteRequest`.
    pub(crate) async fn send(&self, body: Bytes) -> Result<(), Failure> {
        let request = self.request(body)?;
        let answer = tokio::time::timeout(self.timeout, async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| (FailureReason::Connection, error_chain(&e)))?;
            let status = response.status();
            // A short excerpt of the answer for the log.
            let body = axum::body::to_bytes(Body::new(response.into_body()), 64 * 1024)
                .await
                .unwrap_or_default();
            Ok::<_, Failure>((status, body))
        })
        .await;
        let (status, body) = match answer {
            Err(_) => {
                return Err((
                    FailureReason::Timeout,
                    format!("no answer within {:?}", self.timeout),
                ))
            }
            Ok(answer) => answer?,
        };
        if status.is_success() {
            return Ok(());
        }
        let reason = if status == StatusCode::TOO_MANY_REQUESTS {
            FailureReason::TooManyRequests
        } else if status.is_server_error() {
            FailureReason::ServerError
        } else {
            FailureReason::Rejected
        };
        let text = String::from_utf8_lossy(&body[..body.len().min(512)]);
        Err((reason, format!("HTTP {status}: {}", text.trim())))
    }

    fn request(&self, body: Bytes) -> Result<Request<Body>, Failure> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(header::CONTENT_ENCODING, "snappy")
            .header(header::CONTENT_TYPE, "application/x-protobuf")
            .header(
                header::USER_AGENT,
                concat!("multiproc-exporter/", env!("CARGO_PKG_VERSION")),
            )
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .body(Body::from(body))
            .map_err(|e| (FailureReason::Rejected, e.to_string()))?;
        if let Some(value) = self.authorization_header()? {
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
        Ok(request)
    }

    /// The `Authorization` header, from the credential files as they are
    /// now (a file that cannot be read fails the request as a connection
    /// problem: retried, logged, counted).
    fn authorization_header(&self) -> Result<Option<HeaderValue>, Failure> {
        let read = |path: &Path| {
            std::fs::read_to_string(path)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
                .map_err(|e| {
                    (
                        FailureReason::Connection,
                        format!("cannot read {}: {e}", path.display()),
                    )
                })
        };
        let value = match &self.authorization {
            None => return Ok(None),
            Some(Authorization::Basic {
                username,
                password_file,
            }) => {
                let password = read(password_file)?;
                let encoded = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{password}"));
                format!("Basic {encoded}")
            }
            Some(Authorization::BearerTokenFile(path)) => format!("Bearer {}", read(path)?),
        };
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            (
                FailureReason::Rejected,
                "the credentials are not a valid header value".to_owned(),
            )
        })?;
        value.set_sensitive(true);
        Ok(Some(value))
    }
}
