//! HTTP plumbing of the server: connections, limits and deadlines
//! ([`limits`]) and the hyper accept loop that applies them ([`listen`]).
//! The outgoing side (upstreams, push) is [`crate::http_client`].

pub(crate) mod limits;
pub(crate) mod listen;
