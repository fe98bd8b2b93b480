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
}
