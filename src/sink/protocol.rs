//! The protocols a push destination speaks: Prometheus remote write and
//! OTLP/HTTP, with the names the logs and the self-metrics give them.

/// The protocol a destination speaks (the `protocol` label of the push
/// self-metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Prometheus remote write 1.0 (protobuf, snappy).
    RemoteWrite,
    /// OTLP/HTTP (protobuf, gzip).
    Otlp,
}

impl Protocol {
    pub(crate) const ALL: [Self; 2] = [Self::Otlp, Self::RemoteWrite];

    pub(crate) fn index(self) -> usize {
        match self {
            Self::RemoteWrite => 0,
            Self::Otlp => 1,
        }
    }

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::RemoteWrite => "remote_write",
            Self::Otlp => "otlp",
        }
    }

    /// What the logs call the receiver.
    pub(crate) fn receiver(self) -> &'static str {
        match self {
            Self::RemoteWrite => "the remote-write receiver",
            Self::Otlp => "the OTLP receiver",
        }
    }

    /// Whether a request answered with HTTP `status` (not 2xx) may be sent
    /// again. Remote write: 429 and every 5xx, as Prometheus retries them.
    /// OTLP/HTTP: only 429, 502, 503 and 504, as the OTLP specification
    /// says ("Failures"); after any other status the same data will not be
    /// accepted, so it is dropped.
    pub(crate) fn retries_status(self, status: u16) -> bool {
        match self {
            Self::RemoteWrite => status == 429 || (500..600).contains(&status),
            Self::Otlp => matches!(status, 429 | 502 | 503 | 504),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_retries_only_429_502_503_504_and_remote_write_every_5xx() {
        for status in [429, 502, 503, 504] {
            assert!(Protocol::Otlp.retries_status(status), "{status}");
            assert!(Protocol::RemoteWrite.retries_status(status), "{status}");
        }
        for status in [500, 501, 505, 400, 404, 413] {
            assert!(!Protocol::Otlp.retries_status(status), "{status}");
        }
        for status in [500, 501, 505] {
            assert!(Protocol::RemoteWrite.retries_status(status), "{status}");
        }
        for status in [400, 404, 413] {
            assert!(!Protocol::RemoteWrite.retries_status(status), "{status}");
        }
    }
}
