//! An `InferencePool`'s ready Pods through the Kubernetes API (placeholder until the watcher lands).

use tokio::sync::watch;

/// Watch pool `name` in `namespace` (the Pod's own namespace when None).
pub fn watch(name: String, namespace: Option<String>) -> Result<watch::Receiver<Vec<String>>, String> {
    Err(format!("InferencePool {name} ({namespace:?}): Kubernetes discovery is not built in"))
}
