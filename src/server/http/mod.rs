//! HTTP plumbing: connections, limits and deadlines ([`limits`]) and the
//! hyper accept loop that applies them ([`listen`]).

pub(crate) mod limits;
pub(crate) mod listen;
