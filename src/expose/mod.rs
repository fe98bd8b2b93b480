//! Exposing merged families: the exact bytes of prometheus_client's text and
//! OpenMetrics encoders ([`encode`]) and HTTP content negotiation as
//! prometheus_client does it ([`negotiate`]). No I/O.

pub mod encode;
pub mod negotiate;
