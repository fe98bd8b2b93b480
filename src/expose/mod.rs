//! Exposing merged families: the exact bytes of prometheus_client's text and
//! OpenMetrics encoders ([`encode`]), HTTP content negotiation as
//! prometheus_client does it ([`negotiate`]), the families as typed JSON
//! ([`json`]), and as a Prometheus remote-write request ([`remote_write`]).
//! No I/O.

pub mod encode;
pub mod json;
pub mod negotiate;
pub mod remote_write;
