//! Encoded answers: a body ([`Rendered`]), gzipped when the client accepts
//! it and it is large enough to be worth it ([`GZIP_MIN_BYTES`]), shared
//! without a copy by every request that asked for the same one
//! ([`SharedBody`]). Made by the scrapes of `/metrics` and by the views
//! ([`super::views`]), sent by the HTTP layer as they are.

use std::sync::{Arc, OnceLock};

use crate::expose::encode::{encode, Escaping, Format};
use crate::expose::memo::Gzipper;
use crate::model::MetricFamily;

/// Bodies shorter than this are sent uncompressed even to a client that
/// accepts gzip: compressing a small answer costs more CPU than sending the
/// bytes it saves (measured: docs/performance.md, "Compressing small
/// answers").
pub const GZIP_MIN_BYTES: usize = 4096;

/// An encoded body, gzipped if the request asked for it and gzip worked.
#[derive(Debug)]
pub struct Rendered {
    /// The bytes to send.
    pub body: Vec<u8>,
    /// Whether `body` is gzipped.
    pub gzipped: bool,
}

/// A shared [`Rendered`] body, as HTTP body bytes without a copy.
#[derive(Debug, Clone)]
pub struct SharedBody(pub(crate) Arc<OnceLock<Rendered>>);

impl SharedBody {
    /// A body that is not shared.
    pub fn alone(rendered: Rendered) -> Self {
        Self(Arc::new(OnceLock::from(rendered)))
    }

    /// Whether the body is gzipped.
    pub fn gzipped(&self) -> bool {
        self.0.get().is_some_and(|r| r.gzipped)
    }
}

impl AsRef<[u8]> for SharedBody {
    fn as_ref(&self) -> &[u8] {
        self.0.get().map_or(&[], |r| r.body.as_slice())
    }
}

/// `families` encoded in `format` and `escaping`, gzipped by `gzipper` when
/// `gzip` is asked and the body is at least [`GZIP_MIN_BYTES`].
pub fn encoded(
    families: &[MetricFamily],
    format: Format,
    escaping: Escaping,
    gzip: bool,
    gzipper: &mut Gzipper,
) -> Rendered {
    let body = encode(families, format, escaping);
    if !gzip || body.len() < GZIP_MIN_BYTES {
        return Rendered {
            body,
            gzipped: false,
        };
    }
    let gzipped = gzipper.gzip(&body);
    gzipped_or_plain(body, gzipped)
}

/// The gzipped body, or `body` as it is if gzip failed (logged).
pub fn gzipped_or_plain(body: Vec<u8>, gzipped: std::io::Result<Vec<u8>>) -> Rendered {
    match gzipped {
        Ok(body) => Rendered {
            body,
            gzipped: true,
        },
        Err(e) => {
            tracing::error!(error = %e, "Cannot gzip the response; sending it uncompressed.");
            Rendered {
                body,
                gzipped: false,
            }
        }
    }
}
