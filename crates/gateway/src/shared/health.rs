//! Backend health seen by one instance informs the others: an instance whose view of a backend
//! changes (down after a failed request or probe, up again after a probe) publishes it, and
//! every other instance probes that backend at once instead of at its next interval. Each still
//! trusts only its own probe, so a network fault between one instance and a backend cannot take
//! the backend away from the rest: a hint costs one probe, never a wrong verdict. A lost message
//! costs only speed (the regular probes still run).

use std::sync::Arc;

use super::{listen, Shared, PREFIX};

fn channel() -> String {
    format!("{PREFIX}health")
}

/// Tell the fleet that this instance now sees backend `name` as up (or down).
pub async fn announce(shared: &Shared, name: &str, up: bool) {
    let payload = format!("{} {} {name}", shared.instance, if up { "up" } else { "down" });
    let channel = channel();
    let sent = shared
        .call(|mut c| {
            let mut publish = redis::cmd("PUBLISH");
            publish.arg(&channel).arg(&payload);
            async move { publish.query_async::<i64>(&mut c).await }
        })
        .await;
    if let Err(e) = sent {
        tracing::debug!(error = ?e, backend = name, "could not tell the fleet about a backend's health");
    }
}

/// Probe the named backend now.
pub type Probe = Arc<dyn Fn(&str) + Send + Sync>;

/// Listen for other instances' health changes until the process ends.
pub fn spawn(shared: Arc<Shared>, probe: Probe) -> tokio::task::JoinHandle<()> {
    let me = shared.instance.clone();
    let on_message = move |payload: &str| {
        let mut parts = payload.splitn(3, ' ');
        let (Some(from), Some(_), Some(name)) = (parts.next(), parts.next(), parts.next()) else { return };
        if from != me {
            probe(name);
        }
    };
    tokio::spawn(listen(shared, channel(), on_message, || {}))
}
