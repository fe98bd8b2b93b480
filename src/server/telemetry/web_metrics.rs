//! The exporter's own metrics about its HTTP side: connections open and
//! closed by the server, requests refused (503 over `--web.max-requests`, 401)
//! and web configuration reloads. Part of the self-metrics
//! ([`crate::server::telemetry::self_metrics`]); documented in `docs/metrics.md`.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::model::family_list::FamilyList;
use crate::model::MetricType;

/// The `result` label values of the reload counters.
const RESULTS: [&str; 2] = ["success", "failure"];

type ReasonLabel = Vec<(&'static str, &'static str)>;

/// Why the server closed or refused a connection (the `reason` label of
/// `multiproc_exporter_http_connections_closed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// Refused at accept: `--web.max-connections` reached and no idle
    /// connection to close instead.
    MaxConnections,
    /// An idle connection closed to make room for a new one.
    Evicted,
    /// The request headers (or the TLS handshake) did not arrive within
    /// `--web.read-header-timeout`.
    HeaderTimeout,
    /// No new request within `--web.idle-timeout`.
    IdleTimeout,
    /// The response was not written within `--web.write-timeout`.
    WriteTimeout,
    /// The TLS handshake failed (bad or missing client certificate, no
    /// common version or cipher suite, not TLS at all).
    TlsHandshake,
    /// Plain HTTP on a TLS port (answered with 400).
    PlainHttp,
}

impl CloseReason {
    const ALL: [Self; 7] = [
        Self::MaxConnections,
        Self::Evicted,
        Self::HeaderTimeout,
        Self::IdleTimeout,
        Self::WriteTimeout,
        Self::TlsHandshake,
        Self::PlainHttp,
    ];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::MaxConnections => "max_connections",
            Self::Evicted => "evicted",
            Self::HeaderTimeout => "header_timeout",
            Self::IdleTimeout => "idle_timeout",
            Self::WriteTimeout => "write_timeout",
            Self::TlsHandshake => "tls_handshake",
            Self::PlainHttp => "plain_http",
        }
    }
}

/// Why a request was refused (the `reason` label of
/// `multiproc_exporter_http_requests_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RejectReason {
    /// 503: `--web.max-requests` scrapes already in flight.
    MaxRequests,
    /// 401: missing or wrong basic-authentication credentials.
    Unauthorized,
}

impl RejectReason {
    const ALL: [Self; 2] = [Self::MaxRequests, Self::Unauthorized];

    fn label(self) -> &'static str {
        match self {
            Self::MaxRequests => "max_requests",
            Self::Unauthorized => "unauthorized",
        }
    }
}

/// Handles to the HTTP self-metrics (cheap to clone).
#[derive(Debug, Clone, Default)]
pub(crate) struct WebMetrics {
    connections_open: Gauge,
    connections_closed: Family<ReasonLabel, Counter>,
    requests_rejected: Family<ReasonLabel, Counter>,
    scrapes_in_flight: Gauge,
    bcrypt_checks: Counter,
    reload_successful: Gauge,
    reload_success_time: Gauge<f64, std::sync::atomic::AtomicU64>,
    reloads: Family<ReasonLabel, Counter>,
}

impl WebMetrics {
    /// Creates the metrics and registers them (every label value present
    /// from the start, at 0).
    pub(crate) fn new() -> Self {
        let m = Self::default();
        for reason in CloseReason::ALL {
            m.connections_closed
                .get_or_create(&vec![("reason", reason.label())])
                .inc_by(0);
        }
        for reason in RejectReason::ALL {
            m.requests_rejected
                .get_or_create(&vec![("reason", reason.label())])
                .inc_by(0);
        }
        for result in RESULTS {
            m.reloads.get_or_create(&vec![("result", result)]).inc_by(0);
        }
        m
    }

    /// Adds these metrics' families, with their current values.
    pub(crate) fn add_families(&self, out: &mut FamilyList) {
        let p = "multiproc_exporter_";
        let by_reason = |family: &Family<ReasonLabel, Counter>, reasons: &[&'static str]| {
            reasons
                .iter()
                .map(|&r| (r, family.get_or_create(&vec![("reason", r)]).get() as f64))
                .collect::<Vec<_>>()
        };
        out.gauge(
            &format!("{p}http_connections_open"),
            "HTTP connections open now.",
            self.connections_open.get() as f64,
        );
        out.by_label(
            &format!("{p}http_connections_closed"),
            "HTTP connections the exporter closed or refused, by reason.",
            MetricType::Counter,
            "reason",
            by_reason(
                &self.connections_closed,
                &CloseReason::ALL.map(CloseReason::label),
            ),
        );
        out.by_label(
            &format!("{p}http_requests_rejected"),
            "HTTP requests refused before reaching a handler, by reason (max_requests: 503, unauthorized: 401).",
            MetricType::Counter,
            "reason",
            by_reason(&self.requests_rejected, &RejectReason::ALL.map(RejectReason::label)),
        );
        out.gauge(
            &format!("{p}http_scrapes_in_flight"),
            "Scrapes of the metrics path being served now, this one included.",
            self.scrapes_in_flight.get() as f64,
        );
        out.counter(
            &format!("{p}http_bcrypt_checks"),
            "bcrypt password checks computed (requests answered from the cache of earlier checks not included).",
            self.bcrypt_checks.get() as f64,
        );
        out.gauge(
            &format!("{p}web_config_last_reload_successful"),
            "Whether the last web configuration load or reload succeeded (1) or failed (0).",
            self.reload_successful.get() as f64,
        );
        out.gauge(
            &format!("{p}web_config_last_reload_success_timestamp_seconds"),
            "Time of the last successful web configuration load, in seconds since the Unix epoch.",
            self.reload_success_time.get(),
        );
        out.by_label(
            &format!("{p}web_config_reloads"),
            "Web configuration reload attempts, by result.",
            MetricType::Counter,
            "result",
            RESULTS.map(|r| {
                (
                    r,
                    self.reloads.get_or_create(&vec![("result", r)]).get() as f64,
                )
            }),
        );
    }

    /// A connection was accepted (`open`) or ended.
    pub(crate) fn connection_opened(&self, open: bool) {
        if open {
            self.connections_open.inc();
        } else {
            self.connections_open.dec();
        }
    }

    /// The server closed or refused a connection.
    pub(crate) fn connection_closed(&self, reason: CloseReason) {
        self.connections_closed
            .get_or_create(&vec![("reason", reason.label())])
            .inc();
    }

    /// A request was refused.
    pub(super) fn request_rejected(&self, reason: RejectReason) {
        self.requests_rejected
            .get_or_create(&vec![("reason", reason.label())])
            .inc();
    }

    /// A scrape started (`true`) or ended.
    pub(crate) fn scrape_in_flight(&self, started: bool) {
        if started {
            self.scrapes_in_flight.inc();
        } else {
            self.scrapes_in_flight.dec();
        }
    }

    /// A bcrypt check was computed.
    pub(crate) fn bcrypt_checked(&self) {
        self.bcrypt_checks.inc();
    }

    /// The web configuration in force at start-up (not counted as a reload).
    pub(crate) fn observe_initial_web_config(&self) {
        self.reload_successful.set(1);
        self.reload_success_time.set(now());
    }

    /// A web configuration reload.
    pub(super) fn observe_web_config_reload(&self, success: bool) {
        let result = if success { "success" } else { "failure" };
        self.reloads.get_or_create(&vec![("result", result)]).inc();
        self.reload_successful.set(i64::from(success));
        if success {
            self.reload_success_time.set(now());
        }
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
