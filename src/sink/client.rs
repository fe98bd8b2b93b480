//! The HTTP side of pushing: one POST of a remote-write 1.0 or OTLP/HTTP
//! request (hyper's client over rustls with *ring*, the TLS stack the server
//! already uses; the Mozilla roots of `webpki-roots` plus
//! `--push.tls.ca-file`), with the headers the protocol asks for, the
//! `--push.header`s, and the credentials read from their files at every
//! request (so rotated secrets apply), and the answer sorted into success
//! (with its body: OTLP's partial success) or a [`FailureReason`] (with the
//! receiver's `Retry-After`, if any).

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
use crate::sink::protocol::Protocol;

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

/// Sends one protocol's requests to one URL.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Body>,
    url: Uri,
    protocol: Protocol,
    authorization: Option<Authorization>,
    headers: Vec<(header::HeaderName, HeaderValue)>,
    timeout: Duration,
}

/// Why a request failed, with a detail for the log.
pub(crate) type Failure = (FailureReason, String);

/// A failed request: why, and how long the receiver asked to wait
/// (`Retry-After`).
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) reason: FailureReason,
    pub(crate) detail: String,
    pub(crate) retry_after: Option<Duration>,
    /// The HTTP status, if the receiver answered.
    pub(crate) status: Option<u16>,
    /// Whether the same request may be sent again (the protocol's rules:
    /// [`Protocol::retries_status`]; transport errors and timeouts are).
    pub(crate) retried: bool,
}

impl From<Failure> for Failed {
    fn from((reason, detail): Failure) -> Self {
        Self {
            retried: reason.retried(),
            reason,
            detail,
            retry_after: None,
            status: None,
        }
    }
}

/// `Retry-After` as seconds or an HTTP date, from now (the sender bounds
/// it by its backoff: `sink::push`).
pub(crate) fn retry_after(value: Option<&HeaderValue>) -> Option<Duration> {
    parse_retry_after(value?.as_bytes(), std::time::SystemTime::now())
}

/// `Retry-After`'s value (delay-seconds or an HTTP date) as a wait from
/// `now`; `None` when it is neither. Public for the fuzz target.
pub fn parse_retry_after(value: &[u8], now: std::time::SystemTime) -> Option<Duration> {
    let value = std::str::from_utf8(value).ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Longer than u64: wait as long as anything may.
        return Some(Duration::from_secs(
            value.parse::<u64>().unwrap_or(u64::MAX),
        ));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or_default())
}

impl Client {
    /// A client for `url`, trusting `ca_file`'s certificates besides the
    /// usual roots.
    pub(crate) fn new(
        url: Uri,
        protocol: Protocol,
        authorization: Option<Authorization>,
        headers: &[(String, String)],
        ca_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let headers = headers
            .iter()
            .map(|(name, value)| {
                let name = header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("--push.header {name:?}: not a header name"))?;
                let mut value = HeaderValue::from_str(value)
                    .map_err(|_| format!("--push.header {name}: not a header value"))?;
                value.set_sensitive(true);
                Ok((name, value))
            })
            .collect::<Result<Vec<_>, String>>()?;
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
            protocol,
            authorization,
            headers,
            timeout,
        })
    }

    /// POSTs one encoded request (a snappy-compressed `WriteRequest` or a
    /// gzipped `ExportMetricsServiceRequest`); the answer's body on success.
    pub(crate) async fn send(&self, body: Bytes) -> Result<Bytes, Failed> {
        let request = self.request(body)?;
        let answer = tokio::time::timeout(self.timeout, async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| (FailureReason::Connection, error_chain(&e)))?;
            let status = response.status();
            let wait = retry_after(response.headers().get(header::RETRY_AFTER));
            // The answer (OTLP's partial success; an excerpt for the log).
            let body = axum::body::to_bytes(Body::new(response.into_body()), 64 * 1024)
                .await
                .unwrap_or_default();
            Ok::<_, Failure>((status, wait, body))
        })
        .await;
        let (status, wait, body) = match answer {
            Err(_) => {
                return Err(Failed::from((
                    FailureReason::Timeout,
                    format!("no answer within {:?}", self.timeout),
                )))
            }
            Ok(answer) => answer?,
        };
        if status.is_success() {
            return Ok(body);
        }
        let reason = if status == StatusCode::TOO_MANY_REQUESTS {
            FailureReason::TooManyRequests
        } else if status.is_server_error() {
            FailureReason::ServerError
        } else {
            FailureReason::Rejected
        };
        let retried = self.protocol.retries_status(status.as_u16());
        // OTLP answers errors with a protobuf `Status`: only text is logged.
        let text = match std::str::from_utf8(&body[..body.len().min(512)]) {
            Ok(text) => text.trim().to_owned(),
            Err(_) => format!("({} bytes)", body.len()),
        };
        Err(Failed {
            reason,
            detail: format!("HTTP {status}: {text}"),
            retry_after: wait.filter(|_| retried),
            status: Some(status.as_u16()),
            retried,
        })
    }

    fn request(&self, body: Bytes) -> Result<Request<Body>, Failure> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(header::CONTENT_TYPE, "application/x-protobuf")
            .header(
                header::USER_AGENT,
                concat!("multiproc-exporter/", env!("CARGO_PKG_VERSION")),
            );
        builder = match self.protocol {
            Protocol::RemoteWrite => builder
                .header(header::CONTENT_ENCODING, "snappy")
                .header("X-Prometheus-Remote-Write-Version", "0.1.0"),
            Protocol::Otlp => builder.header(header::CONTENT_ENCODING, "gzip"),
        };
        let mut request = builder
            .body(Body::from(body))
            .map_err(|e| (FailureReason::Rejected, e.to_string()))?;
        for (name, value) in &self.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
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
