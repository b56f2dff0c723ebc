//! A DNS name's addresses as a pool's endpoints: a headless Service's A (and AAAA) records, one
//! endpoint per ready Pod, re-resolved every `interval`. The name server is the system's
//! (`/etc/resolv.conf`, the cluster's DNS inside a Pod) or the one given.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver, TokioResolver};
use tokio::sync::watch;

/// What to resolve, and how often.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsTarget {
    pub name: String,
    pub port: u16,
    pub interval: Duration,
    /// A name server to ask instead of the system's.
    pub nameserver: Option<SocketAddr>,
}

/// Resolve `target` now and every `interval` after (on a task that ends when every receiver is
/// dropped). A lookup that fails or finds nothing keeps the endpoints last known: a name server
/// that is briefly unreachable does not empty a pool.
pub fn watch(target: DnsTarget) -> Result<watch::Receiver<Vec<String>>, String> {
    let resolver = resolver(&target)?;
    let (tx, rx) = watch::channel(Vec::new());
    tokio::spawn(async move {
        loop {
            match resolver.lookup_ip(target.name.as_str()).await {
                Ok(found) => {
                    let endpoints = super::sorted(found.iter().map(|ip| super::endpoint(ip, target.port)).collect());
                    if !endpoints.is_empty() {
                        tx.send_if_modified(|known| {
                            let changed = *known != endpoints;
                            if changed {
                                tracing::info!(name = %target.name, endpoints = ?endpoints, "DNS endpoints changed");
                                *known = endpoints;
                            }
                            changed
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!(name = %target.name, error = %e, "DNS lookup failed; the endpoints known stay")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(target.interval) => {}
                _ = tx.closed() => return,
            }
        }
    });
    Ok(rx)
}

fn resolver(target: &DnsTarget) -> Result<TokioResolver, String> {
    let provider = TokioRuntimeProvider::default();
    let mut builder = match target.nameserver {
        Some(server) => {
            let mut ns = NameServerConfig::udp_and_tcp(server.ip());
            for c in &mut ns.connections {
                c.port = server.port();
            }
            Resolver::builder_with_config(ResolverConfig::from_name_servers(vec![ns]), provider)
        }
        None => Resolver::builder(provider).map_err(|e| format!("the system's DNS configuration: {e}"))?,
    };
    // Every round asks again: a cached answer would hide a Pod that came or went.
    builder.options_mut().cache_size = 0;
    builder.build().map_err(|e| format!("a DNS resolver: {e}"))
}
