//! Listen addresses in the exporter-toolkit style (`host:port`,
//! `[ipv6]:port`, `:port`), binding them, and serving connections: the accept
//! loop, TLS (with a `400` answer to plain HTTP on a TLS port, as Go gives),
//! HTTP/1.1 through hyper with the limits and deadlines of [`crate::server::http::limits`],
//! and graceful shutdown (stop accepting, let requests in progress finish,
//! close idle connections).

use std::convert::Infallible;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt as _;

use crate::server::http::limits::{Activity, ConnectionSlot, Connections, TimedIo, TrackedBody};
use crate::server::telemetry::web_metrics::CloseReason;
use crate::server::web_config::tls::{looks_like_plain_http, PLAIN_HTTP_RESPONSE};
use crate::server::web_config::WebSettings;

/// The default `--web.listen-address`.
///
/// Port 9089 collides with neither vLLM (8000), nor the Prometheus core
/// components (9090-9094), nor the exporter port range 9100-9999 (which
/// Prometheus's default-port-allocations list has filled completely, so any
/// port in it belongs to some exporter), nor the ports commonly found next to
/// vLLM on a GPU node: Triton 8000-8002, Ray 8080/8265, Dynamo 8081,
/// cAdvisor 8080, DCGM exporter 9400, OpenTelemetry's Prometheus exporter
/// 9464, Knative's queue-proxy 9090/9091, kubelet 10250.
pub const DEFAULT_LISTEN_ADDRESS: &str = ":9089";

/// Binds every address; an error names the address that failed.
pub(crate) async fn bind_all(addresses: &[String]) -> Result<Vec<TcpListener>, String> {
    let mut listeners = Vec::with_capacity(addresses.len());
    for address in addresses {
        let listener = bind(address)
            .await
            .map_err(|e| format!("Cannot listen on {address:?}: {e}"))?;
        listeners.push(listener);
    }
    Ok(listeners)
}

async fn bind(address: &str) -> io::Result<TcpListener> {
    let address = address.trim();
    if let Some(port) = address.strip_prefix(':') {
        // All interfaces: IPv6 (dual-stack where the system allows it), else IPv4.
        let port: u16 = port
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "invalid port"))?;
        return match TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))).await {
            Ok(l) => Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(e),
            Err(_) => TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))).await,
        };
    }
    if let Ok(socket) = address.parse::<SocketAddr>() {
        return TcpListener::bind(socket).await;
    }
    // A host name: bind the first address it resolves to.
    let mut resolved = tokio::net::lookup_host(address).await?;
    let first = resolved.next().ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "the host name resolves to nothing")
    })?;
    TcpListener::bind(first).await
}

/// What every connection needs.
#[derive(Debug)]
pub(crate) struct ServeContext {
    /// The routes, with the web layers (authentication, limits, headers).
    pub(crate) router: Router,
    /// The web configuration in force (TLS, users, headers).
    pub(crate) web: Arc<WebSettings>,
    /// The connection table (limit and eviction).
    pub(crate) connections: Arc<Connections>,
}

/// Accepts and serves connections until `shutdown` turns true, then waits for
/// the connections to finish (in-flight requests complete; idle connections
/// close at once).
pub(crate) async fn serve_listener(
    listener: TcpListener,
    context: Arc<ServeContext>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    let mut last_error: Option<io::ErrorKind> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        match accepted {
            Ok((stream, _peer)) => {
                last_error = None;
                let Some(slot) = context.connections.admit() else {
                    drop(stream);
                    continue;
                };
                let context = context.clone();
                let shutdown = shutdown.clone();
                let done = done_tx.clone();
                tokio::spawn(async move {
                    serve_connection(stream, slot, &context, shutdown).await;
                    drop(done);
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: log once per kind of
                // error, back off a little and go on.
                if last_error != Some(e.kind()) {
                    tracing::warn!(error = %e, "Cannot accept a connection; retrying.");
                    last_error = Some(e.kind());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    drop(done_tx);
    // Completes once every connection task has dropped its sender.
    let _ = done_rx.recv().await;
}

/// Serves one connection until it ends, is closed by a deadline, is evicted
/// to make room, or the server shuts down.
async fn serve_connection(
    stream: TcpStream,
    slot: ConnectionSlot,
    context: &ServeContext,
    shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let activity = slot.activity.clone();
    tokio::select! {
        () = connection(stream, &activity, context, shutdown.clone()) => {}
        () = activity.evicted() => {}
        () = activity.read_deadline_passed() => {}
        () = activity.closable_at_shutdown(shutdown) => {}
    }
    match activity.close_reason() {
        // Counted when it was chosen.
        None | Some(CloseReason::Evicted) => {}
        Some(reason) => {
            context.web.metrics().connection_closed(reason);
            tracing::debug!(reason = reason.label(), "Closed a connection.");
        }
    }
    drop(slot);
}

async fn connection(
    stream: TcpStream,
    activity: &Arc<Activity>,
    context: &ServeContext,
    shutdown: watch::Receiver<bool>,
) {
    let Some(tls) = context.web.current().tls.clone() else {
        let io = TimedIo::new(stream, activity.clone());
        return http(io, activity, &context.router, shutdown).await;
    };
    // The header deadline and shutdown are watched by `serve_connection`.
    let mut first = [0u8; 3];
    match stream.peek(&mut first).await {
        Err(_) | Ok(0) => return,
        Ok(n) if looks_like_plain_http(&first[..n]) => {
            answer_plain_http(stream).await;
            context
                .web
                .metrics()
                .connection_closed(CloseReason::PlainHttp);
            tracing::debug!("Answered plain HTTP on a TLS port with 400.");
            return;
        }
        Ok(_) => {}
    }
    let io = TimedIo::new(stream, activity.clone());
    match tokio_rustls::TlsAcceptor::from(tls).accept(io).await {
        Ok(tls_stream) => http(tls_stream, activity, &context.router, shutdown).await,
        Err(e) => {
            context
                .web
                .metrics()
                .connection_closed(CloseReason::TlsHandshake);
            tracing::debug!(error = %e, "TLS handshake failed.");
        }
    }
}

/// Writes Go's `400` answer, then reads (and discards) what the client sent
/// for a moment, so that closing does not reset the connection before the
/// client has read the answer.
async fn answer_plain_http(mut stream: TcpStream) {
    const LINGER: Duration = Duration::from_secs(1);
    let _ = tokio::time::timeout(LINGER, async {
        stream.write_all(PLAIN_HTTP_RESPONSE).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut total = 0usize;
        while total < 64 * 1024 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => total += n,
            }
        }
        Ok::<(), io::Error>(())
    })
    .await;
}

/// Serves HTTP/1.1 on an established (plain or TLS) stream.
async fn http<I>(
    io: I,
    activity: &Arc<Activity>,
    router: &Router,
    mut shutdown: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let router = router.clone();
    let tracked = activity.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let guard = tracked.begin_request();
        let router = router.clone();
        async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(
                response.map(|body| axum::body::Body::new(TrackedBody::new(body, guard))),
            )
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Deadlines are enforced by `TimedIo`, which also covers the TLS
    // handshake and separates idle waiting from reading headers.
    builder.keep_alive(true).header_read_timeout(None);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    if activity.close_reason().is_none() {
                        tracing::debug!(error = %e, "HTTP connection error.");
                    }
                }
                return;
            }
            _ = shutdown.wait_for(|stop| *stop), if !shutting_down => {
                connection.as_mut().graceful_shutdown();
                shutting_down = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn address_forms() {
        let l = bind("127.0.0.1:0").await.unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
        let l = bind(":0").await.unwrap();
        assert!(l.local_addr().unwrap().ip().is_unspecified());
        let l = bind("localhost:0").await.unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
        assert!(bind(":x").await.is_err());
        assert!(bind("nonsense").await.is_err());
        let e = bind_all(&["127.0.0.1:0".into(), ":99999".into()])
            .await
            .unwrap_err();
        assert!(e.contains("\":99999\""), "{e}");
    }
}
