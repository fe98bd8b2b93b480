//! One upstream fetch: an HTTP/1.1 `GET` with a deadline, a body size limit
//! and gzip, through hyper-util's pooling client (hyper is what the server
//! side runs on already) with hyper-rustls for `https://` (rustls with
//! *ring*, as the server side; Mozilla's roots from webpki-roots, or the
//! upstream's `ca_file`).
//!
//! What can go wrong is a [`FailReason`] with a stable label, never a panic
//! or an error that reaches the scrape.

use std::io::Read as _;
use std::time::{Duration, Instant};

use hyper_rustls::HttpsConnector;

use http_body_util::BodyExt as _;
use hyper::header;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::http_client::{connector, error_chain, Trust};
use crate::transform::config::Upstream;

/// A client (pooled keep-alive connections), for `http://` and `https://`.
pub(crate) type HttpClient =
    Client<HttpsConnector<HttpConnector>, http_body_util::Empty<hyper::body::Bytes>>;

/// A new client trusting the CA certificates of `ca_pem` (PEM), or
/// Mozilla's roots.
pub(crate) fn client(ca_pem: Option<&[u8]>) -> Result<HttpClient, String> {
    let trust = ca_pem.map_or(Trust::PublicRoots, Trust::Only);
    let connector = connector(trust).map_err(|e| format!("ca_file: {e}"))?;
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(4)
        .build(connector))
}

/// What the exporter asks upstreams for: the text format 0.0.4 first, which
/// every client writes the same way, then OpenMetrics with names unchanged.
/// (prometheus_client 0.26.0 answers a plain OpenMetrics request with `:`
/// rewritten to `_` in its sample names but not in `# TYPE`, client_python
/// #1177; vLLM's Rust frontend answers OpenMetrics whatever is asked.)
const ACCEPT: &str = "text/plain;version=0.0.4;q=0.6,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,*/*;q=0.1";

/// Why an upstream was left out of a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FailReason {
    /// No answer within the deadline.
    Timeout,
    /// The connection could not be made (refused, unknown host, TLS
    /// handshake failed, `ca_file` unusable).
    Connect,
    /// The answer's status was not 2xx.
    HttpStatus,
    /// The connection failed while the answer was read (reset, closed).
    Read,
    /// The body is larger than `max_body_bytes`, or gzip that does not decode.
    Body,
    /// The body is not the Prometheus text format or OpenMetrics.
    Parse,
}

impl FailReason {
    /// Every reason, in a fixed order.
    pub(crate) const ALL: [Self; 6] = [
        Self::Timeout,
        Self::Connect,
        Self::HttpStatus,
        Self::Read,
        Self::Body,
        Self::Parse,
    ];

    /// The `reason` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::HttpStatus => "http_status",
            Self::Read => "read",
            Self::Body => "body",
            Self::Parse => "parse",
        }
    }
}

/// A failed fetch: why, and the details for the log.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) reason: FailReason,
    pub(crate) detail: String,
}

/// A successful fetch's body (decompressed) and its `Content-Type`.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) body: Vec<u8>,
    pub(crate) content_type: Option<String>,
}

/// Fetches `upstream` within `deadline`; returns the result and how long it
/// took.
pub(crate) async fn fetch(
    client: &HttpClient,
    upstream: &Upstream,
    deadline: Duration,
) -> (Result<Answer, Failure>, Duration) {
    let start = Instant::now();
    let result = match tokio::time::timeout(deadline, fetch_inner(client, upstream, deadline)).await
    {
        Ok(result) => result,
        Err(_) => Err(Failure {
            reason: FailReason::Timeout,
            detail: format!("no complete answer within {deadline:?}"),
        }),
    };
    (result, start.elapsed())
}

async fn fetch_inner(
    client: &HttpClient,
    upstream: &Upstream,
    deadline: Duration,
) -> Result<Answer, Failure> {
    let fail = |reason, detail: String| Failure { reason, detail };
    let request = hyper::Request::get(&*upstream.url)
        .header(header::ACCEPT, ACCEPT)
        .header(header::ACCEPT_ENCODING, "gzip")
        .header(
            header::USER_AGENT,
            concat!("multiproc-exporter/", env!("CARGO_PKG_VERSION")),
        )
        .header(
            "X-Prometheus-Scrape-Timeout-Seconds",
            format!("{:.3}", deadline.as_secs_f64()),
        )
        .body(http_body_util::Empty::new())
        .map_err(|e| fail(FailReason::Connect, format!("invalid request: {e}")))?;
    let response = client.request(request).await.map_err(|e| {
        let reason = if e.is_connect() {
            FailReason::Connect
        } else {
            FailReason::Read
        };
        fail(reason, error_chain(&e))
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(fail(
            FailReason::HttpStatus,
            format!("HTTP status {status}"),
        ));
    }
    let header_text = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v: &hyper::header::HeaderValue| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header_text(header::CONTENT_TYPE);
    let encoding = header_text(header::CONTENT_ENCODING);
    let limit = upstream.max_body_bytes;
    let too_large = || fail(FailReason::Body, format!("body larger than {limit} bytes"));
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| fail(FailReason::Read, error_chain(&e)))?;
        if let Some(data) = frame.data_ref() {
            if (bytes.len() + data.len()) as u64 > limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(data);
        }
    }
    let body = match encoding.as_deref().map(str::trim) {
        None | Some("") | Some("identity") => bytes,
        Some(e) if e.eq_ignore_ascii_case("gzip") => {
            let mut decoded = Vec::new();
            flate2::read::GzDecoder::new(bytes.as_slice())
                .take(limit + 1)
                .read_to_end(&mut decoded)
                .map_err(|e| fail(FailReason::Body, format!("bad gzip: {e}")))?;
            if decoded.len() as u64 > limit {
                return Err(too_large());
            }
            decoded
        }
        Some(other) => {
            return Err(fail(
                FailReason::Body,
                format!("unsupported Content-Encoding {other:?}"),
            ))
        }
    };
    Ok(Answer { body, content_type })
}
