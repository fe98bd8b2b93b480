//! HTTP plumbing: connections, limits and deadlines ([`limits`]), the
//! hyper accept loop that applies them ([`listen`]), and the outgoing
//! connector of upstreams and pushes ([`client`]).

pub(crate) mod client;
pub(crate) mod limits;
pub(crate) mod listen;
