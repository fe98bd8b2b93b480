//! Exposing merged families: the exact bytes of prometheus_client's text and
//! OpenMetrics encoders ([`encode`]), HTTP content negotiation as
//! prometheus_client does it ([`negotiate`]), the families as typed JSON
//! ([`json`]), re-encoding only what changed since the last body
//! ([`memo`]), as a Prometheus remote-write request ([`remote_write`]) or an
//! OTLP export request mapped as the Collector's Prometheus receiver would
//! map a scrape ([`otlp`]), and
//! the inverse of the encoders, parsing an upstream's exposition back into
//! families ([`parse`]). No I/O.

pub mod encode;
pub mod json;
pub mod memo;
pub mod negotiate;
pub mod otlp;
pub mod parse;
pub mod remote_write;
