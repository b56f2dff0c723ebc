//! A pool's endpoints (`ip:port`), as they change: a static list, a DNS name's A/AAAA records
//! re-resolved (a headless Service), or an `InferencePool`'s ready Pods (`kube.rs`). Each source
//! is a `watch` of the sorted list; a failed lookup keeps the last list known.

pub mod dns;
pub mod kube;

use tokio::sync::watch;

/// A fixed list of endpoints.
pub fn fixed(endpoints: Vec<String>) -> watch::Receiver<Vec<String>> {
    let (tx, rx) = watch::channel(sorted(endpoints));
    // Nobody sends again; the receiver keeps the value once the sender is gone.
    drop(tx);
    rx
}

/// Sorted and without repeats, so that an unchanged set compares equal.
pub fn sorted(mut endpoints: Vec<String>) -> Vec<String> {
    endpoints.sort_unstable();
    endpoints.dedup();
    endpoints
}

/// `ip:port` for an address (IPv6 in brackets).
pub fn endpoint(ip: std::net::IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}
