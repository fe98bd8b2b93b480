//! Listen addresses in the exporter-toolkit style (`host:port`,
//! `[ipv6]:port`, `:port`) and binding them.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::TcpListener;

/// The default `--web.listen-address`.
///
/// Port 9089 collides with neither vLLM (8000), nor the Prometheus core
/// components (9090-9094), nor the exporter port range 9100-9999 (which
/// Prometheus's default-port-allocations list has filled completely, so any
/// port in it belongs to some exporter), nor the ports commonly found next to
/// vLLM on a GPU node: Triton 8000-8002, Ray 8080/8265, Dynamo 8081,
/// cAdvisor 8080, DCGM exporter 9400, OpenTelemetry's Prometheus exporter
/// 9464, Knative's queue-proxy 9090/9091, kubelet 10250.
pub const DEFAULT_LISTEN_ADDRESS: &str = ":9089";

/// Binds every address; an error names the address that failed.
pub(super) async fn bind_all(addresses: &[String]) -> Result<Vec<TcpListener>, String> {
    let mut listeners = Vec::with_capacity(addresses.len());
    for address in addresses {
        let listener = bind(address)
            .await
            .map_err(|e| format!("Cannot listen on {address:?}: {e}"))?;
        listeners.push(listener);
    }
    Ok(listeners)
}

async fn bind(address: &str) -> io::Result<TcpListener> {
    let address = address.trim();
    if let Some(port) = address.strip_prefix(':') {
        // All interfaces: IPv6 (dual-stack where the system allows it), else IPv4.
        let port: u16 = port
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "invalid port"))?;
        return match TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))).await {
            Ok(l) => Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(e),
            Err(_) => TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))).await,
        };
    }
    if let Ok(socket) = address.parse::<SocketAddr>() {
        return TcpListener::bind(socket).await;
    }
    // A host name: bind the first address it resolves to.
    let mut resolved = tokio::net::lookup_host(address).await?;
    let first = resolved.next().ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "the host name resolves to nothing")
    })?;
    TcpListener::bind(first).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn address_forms() {
        let l = bind("127.0.0.1:0").await.unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
        let l = bind(":0").await.unwrap();
        assert!(l.local_addr().unwrap().ip().is_unspecified());
        let l = bind("localhost:0").await.unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
        assert!(bind(":x").await.is_err());
        assert!(bind("nonsense").await.is_err());
        let e = bind_all(&["127.0.0.1:0".into(), ":99999".into()])
            .await
            .unwrap_err();
        assert!(e.contains("\":99999\""), "{e}");
    }
}
