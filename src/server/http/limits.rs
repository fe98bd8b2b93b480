//! Limits that keep slow or hostile clients from exhausting the server.
//!
//! * [`ScrapeLimit`]: at most `--web.max-requests` scrapes of the metrics path
//!   in flight (like node_exporter's flag of the same name); the excess is
//!   answered at once with `503`. A scrape that joins a collection already in
//!   flight (see `scrape.rs`) is an HTTP request in flight and counts.
//! * [`Connections`]: at most `--web.max-connections` connections. When the
//!   limit is reached, the connection that has waited longest without a
//!   request in progress (idle keep-alive, or still sending its request) is
//!   closed to make room, so idle or trickling sockets cannot lock out a
//!   scraper; only when every connection is busy is the new one refused.
//! * Per-connection deadlines in the manner of Go's `http.Server`, kept by
//!   each connection's [`Activity`] (what the connection is doing, and
//!   since when):
//!   - the TLS handshake and the request headers must arrive within
//!     `--web.read-header-timeout`, counted from the connection's start or,
//!     on a kept-alive connection, from the first byte of the request (a
//!     request trickled byte by byte is cut off);
//!   - a kept-alive connection may wait at most `--web.idle-timeout` for its
//!     next request;
//!
//!   both enforced by a timer beside the connection
//!   ([`Activity::read_deadline_passed`]), since hyper does not read an idle
//!   connection until data arrives; and
//!   - a response write that cannot proceed fails once `--web.write-timeout`
//!     has passed since the request's headers were read (a client that stops
//!     reading is cut off), enforced on the socket by [`TimedIo`], which also
//!     reports incoming bytes to the [`Activity`].
//!
//! Each closure is counted in `multiproc_exporter_http_connections_closed_total`
//! with its reason.

use crate::server::telemetry::operational::RequestRejected;
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::server::telemetry::web_metrics::{CloseReason, WebMetrics};

/// Connection deadlines; `None` disables one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// TLS handshake plus request headers.
    pub(crate) read_header: Option<Duration>,
    /// Wait for the next request on a kept-alive connection.
    pub(crate) idle: Option<Duration>,
    /// From the request's headers to the response's last byte.
    pub(crate) write: Option<Duration>,
}

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Handshaking or receiving request headers, since `since`.
    Head,
    /// At least one request in progress (handler running or response being
    /// written).
    Busy,
    /// Waiting for the next request, since `since`.
    Idle,
}

#[derive(Debug)]
struct ActivityState {
    phase: Phase,
    since: Instant,
    requests_in_progress: usize,
    /// When the latest request's headers were read.
    request_started: Option<Instant>,
    /// Why the connection was closed by a deadline or eviction.
    closed: Option<CloseReason>,
}

/// The state of one connection, shared by its socket wrapper, its requests
/// and the connection table.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<ActivityState>,
    timeouts: Timeouts,
    evict: Notify,
    changed: Notify,
}

impl Activity {
    fn new(timeouts: Timeouts) -> Self {
        Self {
            state: Mutex::new(ActivityState {
                phase: Phase::Head,
                since: Instant::now(),
                requests_in_progress: 0,
                request_started: None,
                closed: None,
            }),
            timeouts,
            evict: Notify::new(),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request's headers were read; the returned guard ends it when the
    /// response has been written (or abandoned).
    pub(crate) fn begin_request(self: &Arc<Self>) -> RequestGuard {
        let mut state = self.lock();
        let now = Instant::now();
        state.requests_in_progress += 1;
        state.phase = Phase::Busy;
        state.request_started = Some(now);
        state.since = now;
        drop(state);
        self.changed.notify_waiters();
        RequestGuard(self.clone())
    }

    fn end_request(&self) {
        let mut state = self.lock();
        state.requests_in_progress = state.requests_in_progress.saturating_sub(1);
        if state.requests_in_progress == 0 {
            state.phase = Phase::Idle;
            state.since = Instant::now();
            drop(state);
            self.changed.notify_waiters();
        }
    }

    fn bytes_read(&self) {
        let mut state = self.lock();
        if state.phase == Phase::Idle {
            state.phase = Phase::Head;
            state.since = Instant::now();
            drop(state);
            self.changed.notify_waiters();
        }
    }

    /// Completes when the connection is to be closed because its request
    /// headers (or TLS handshake) took too long or it stayed idle too long;
    /// the reason is recorded. These deadlines are kept outside the socket
    /// because hyper does not read from an idle kept-alive connection until
    /// data arrives.
    pub(crate) async fn read_deadline_passed(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read, so no change is missed.
            changed.as_mut().enable();
            match self.read_deadline() {
                None => changed.await,
                Some((at, reason)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {
                            if self.read_deadline() == Some((at, reason)) {
                                self.closed_by(reason);
                                return;
                            }
                        }
                        () = &mut changed => {}
                    }
                }
            }
        }
    }

    /// Completes once the server is shutting down and the connection is
    /// between requests with part of a new one received, or has not sent a
    /// whole first request: such connections are closed at once, while hyper
    /// lets a request in progress finish and closes idle ones itself.
    pub(crate) async fn closable_at_shutdown(&self, mut shutdown: watch::Receiver<bool>) {
        let _ = shutdown.wait_for(|stop| *stop).await;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.lock().phase == Phase::Head {
                return;
            }
            changed.await;
        }
    }

    /// The read deadline now, with the reason it would close the connection.
    fn read_deadline(&self) -> Option<(Instant, CloseReason)> {
        let state = self.lock();
        match state.phase {
            Phase::Busy => None,
            Phase::Head => self
                .timeouts
                .read_header
                .map(|t| (state.since + t, CloseReason::HeaderTimeout)),
            Phase::Idle => self
                .timeouts
                .idle
                .map(|t| (state.since + t, CloseReason::IdleTimeout)),
        }
    }

    /// The deadline of a response write that cannot proceed: the latest
    /// request's start plus the write timeout. It also applies just after
    /// the request has ended, since hyper may still be flushing the response
    /// then. (Before any request, the handshake is bounded by the header
    /// deadline.)
    fn write_deadline(&self) -> Option<(Instant, CloseReason)> {
        let state = self.lock();
        let started = state.request_started?;
        self.timeouts
            .write
            .map(|t| (started + t, CloseReason::WriteTimeout))
    }

    /// Records why the server closed the connection (the first reason wins).
    pub(crate) fn closed_by(&self, reason: CloseReason) {
        self.lock().closed.get_or_insert(reason);
    }

    /// Why the connection was closed by the server, if it was.
    pub(crate) fn close_reason(&self) -> Option<CloseReason> {
        self.lock().closed
    }

    /// Closes the connection if no request is in progress; whether it did.
    fn try_evict(&self) -> bool {
        let mut state = self.lock();
        if state.phase == Phase::Busy || state.closed.is_some() {
            return false;
        }
        state.closed = Some(CloseReason::Evicted);
        drop(state);
        self.evict.notify_one();
        true
    }

    /// Completes when the connection is to be closed to make room.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await;
    }
}

/// Ends a request when dropped (see [`Activity::begin_request`]).
#[derive(Debug)]
pub(crate) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.end_request();
    }
}

/// A response body that ends its request (and so starts the idle timeout)
/// when it has been sent or dropped.
#[derive(Debug)]
pub(crate) struct TrackedBody {
    inner: Body,
    _guard: RequestGuard,
}

impl TrackedBody {
    /// Wraps `inner`.
    pub(crate) fn new(inner: Body, guard: RequestGuard) -> Self {
        Self {
            inner,
            _guard: guard,
        }
    }
}

impl http_body::Body for TrackedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that reports incoming bytes to the connection's [`Activity`] and
/// fails writes that stay blocked past the write deadline.
#[derive(Debug)]
pub(crate) struct TimedIo<T> {
    inner: T,
    activity: Arc<Activity>,
    write_timer: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl<T> TimedIo<T> {
    /// Wraps a socket.
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            write_timer: None,
        }
    }
}

/// Polls the timer for `deadline`; an error once it has passed.
fn check_deadline(
    timer: &mut Option<(Instant, Pin<Box<Sleep>>)>,
    deadline: Option<(Instant, CloseReason)>,
    activity: &Activity,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    let Some((at, reason)) = deadline else {
        *timer = None;
        return Poll::Pending;
    };
    match timer {
        Some((current, sleep)) if *current == at => {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        Some((current, sleep)) => {
            *current = at;
            sleep.as_mut().reset(at);
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        None => {
            let mut sleep = Box::pin(tokio::time::sleep_until(at));
            let pending = sleep.as_mut().poll(cx).is_pending();
            *timer = Some((at, sleep));
            if pending {
                return Poll::Pending;
            }
        }
    }
    activity.closed_by(reason);
    Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, reason.label())))
}

use std::future::Future as _;

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.bytes_read();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> TimedIo<T> {
    fn on_pending_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let deadline = self.activity.write_deadline();
        match check_deadline(&mut self.write_timer, deadline, &self.activity, cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            _ => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.on_pending_write(cx).map(|r| r.map(|()| 0)),
            ready => ready,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.on_pending_write(cx).map(|r| r.map(|()| 0)),
            ready => ready,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.on_pending_write(cx),
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Pending => this.on_pending_write(cx),
            ready => ready,
        }
    }
}

/// The open connections, and the limit on them.
#[derive(Debug)]
pub(crate) struct Connections {
    max: usize,
    timeouts: Timeouts,
    open: Mutex<HashMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
    /// Whether "limit reached" was logged since the count was last below it.
    limit_logged: AtomicBool,
    metrics: WebMetrics,
}

/// A registered connection; unregisters it when dropped.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    id: u64,
    table: Arc<Connections>,
    /// The connection's state.
    pub(crate) activity: Arc<Activity>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let removed = self
            .table
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        if removed.is_some() {
            self.table.metrics.connection_opened(false);
        }
    }
}

impl Connections {
    /// A table for at most `max` connections (0: no limit).
    pub(crate) fn new(max: usize, timeouts: Timeouts, metrics: WebMetrics) -> Arc<Self> {
        Arc::new(Self {
            max,
            timeouts,
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            limit_logged: AtomicBool::new(false),
            metrics,
        })
    }

    /// Registers a new connection, closing the longest-waiting one without a
    /// request in progress when the table is full; `None` (and counted) when
    /// every connection is busy.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<ConnectionSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if self.max > 0 && open.len() >= self.max {
            if !self.limit_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    max_connections = self.max,
                    "Connection limit reached: closing idle connections to make room, refusing new ones while all are busy."
                );
            }
            let mut candidates: Vec<(Instant, u64)> = open
                .iter()
                .filter_map(|(id, a)| {
                    let state = a.lock();
                    (state.phase != Phase::Busy && state.closed.is_none())
                        .then_some((state.since, *id))
                })
                .collect();
            candidates.sort_unstable();
            let evicted = candidates.into_iter().find_map(|(_, id)| {
                let activity = open.get(&id)?;
                activity.try_evict().then_some(id)
            });
            match evicted {
                Some(id) => {
                    // The evicted connection's task closes it and drops its
                    // slot; take it out of the count now.
                    if open.remove(&id).is_some() {
                        self.metrics.connection_opened(false);
                    }
                    self.metrics.connection_closed(CloseReason::Evicted);
                    tracing::debug!("Closed an idle connection to make room for a new one.");
                }
                None => {
                    self.metrics.connection_closed(CloseReason::MaxConnections);
                    tracing::debug!("Refused a connection: every connection is busy.");
                    return None;
                }
            }
        } else if self.max > 0 && open.len() + 1 < self.max {
            self.limit_logged.store(false, Ordering::Relaxed);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new(self.timeouts));
        open.insert(id, activity.clone());
        self.metrics.connection_opened(true);
        Some(ConnectionSlot {
            id,
            table: self.clone(),
            activity,
        })
    }
}

/// The `--web.max-requests` limit on scrapes of the metrics path.
#[derive(Debug)]
pub(crate) struct ScrapeLimit {
    telemetry_path: String,
    max: usize,
    slots: Option<Semaphore>,
    metrics: WebMetrics,
}

impl ScrapeLimit {
    /// At most `max` scrapes of `telemetry_path` at once (0: no limit).
    pub(crate) fn new(telemetry_path: String, max: usize, metrics: WebMetrics) -> Arc<Self> {
        Arc::new(Self {
            telemetry_path,
            max,
            slots: (max > 0).then(|| Semaphore::new(max)),
            metrics,
        })
    }
}

/// Ends an in-flight scrape when dropped.
struct InFlight<'a>(&'a WebMetrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.scrape_in_flight(false);
    }
}

/// Middleware: answers `503` when `--web.max-requests` scrapes are in flight.
pub(crate) async fn limit_scrapes(
    State(limit): State<Arc<ScrapeLimit>>,
    request: Request,
    next: Next,
) -> Response {
    // The metrics path and the views under it.
    let path = request.uri().path();
    let scrape = path == limit.telemetry_path
        || (limit.telemetry_path != "/"
            && path
                .strip_prefix(limit.telemetry_path.as_str())
                .is_some_and(|rest| rest.starts_with('/')));
    if !scrape {
        return next.run(request).await;
    }
    let _permit = match &limit.slots {
        None => None,
        Some(slots) => match slots.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => {
                RequestRejected::TooManyScrapes { max: limit.max }.emit(&limit.metrics);
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "Limit of concurrent requests reached ({}), try again later.\n",
                        limit.max
                    ),
                )
                    .into_response();
            }
        },
    };
    limit.metrics.scrape_in_flight(true);
    let _in_flight = InFlight(&limit.metrics);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> Timeouts {
        Timeouts {
            read_header: Some(Duration::from_secs(10)),
            idle: Some(Duration::from_secs(300)),
            write: Some(Duration::from_secs(120)),
        }
    }

    #[tokio::test]
    async fn deadlines_follow_the_phase() {
        let activity = Arc::new(Activity::new(timeouts()));
        let start = activity.lock().since;
        assert_eq!(
            activity.read_deadline(),
            Some((start + Duration::from_secs(10), CloseReason::HeaderTimeout))
        );
        let guard = activity.begin_request();
        assert_eq!(activity.read_deadline(), None);
        let started = activity.lock().request_started.unwrap();
        assert_eq!(
            activity.write_deadline(),
            Some((
                started + Duration::from_secs(120),
                CloseReason::WriteTimeout
            ))
        );
        assert!(!activity.try_evict(), "a busy connection is not evicted");
        drop(guard);
        let idle_since = activity.lock().since;
        assert_eq!(
            activity.read_deadline(),
            Some((
                idle_since + Duration::from_secs(300),
                CloseReason::IdleTimeout
            ))
        );
        activity.bytes_read();
        assert_eq!(
            activity.read_deadline().unwrap().1,
            CloseReason::HeaderTimeout
        );
        assert!(activity.try_evict());
        assert_eq!(activity.close_reason(), Some(CloseReason::Evicted));
    }

    #[tokio::test]
    async fn a_full_table_evicts_the_longest_waiting_idle_connection() {
        let table = Connections::new(2, timeouts(), WebMetrics::default());
        let first = table.admit().unwrap();
        let second = table.admit().unwrap();
        let _busy = second.activity.begin_request();
        let third = table.admit().expect("room made by closing the idle one");
        assert_eq!(first.activity.close_reason(), Some(CloseReason::Evicted));
        let _busy_too = third.activity.begin_request();
        assert!(table.admit().is_none(), "every connection is busy");
        drop(first);
        assert_eq!(table.open.lock().unwrap().len(), 2);
    }
}
