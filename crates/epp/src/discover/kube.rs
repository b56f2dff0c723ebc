//! An `InferencePool`'s endpoints through the Kubernetes API: the pool (inference.networking.k8s.io
//! v1) is watched for its label selector and `targetPorts`, and the Pods it selects are watched
//! (a reflector's store); every ready Pod's IP on every target port is an endpoint. A change of
//! the pool's selector restarts the Pods' watch. A Pod counts while it is Running, its `Ready`
//! condition true, not being deleted, and has an IP.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::watch;

/// What the pool says: which Pods, on which ports.
#[derive(Debug, Clone, PartialEq, Default)]
struct PoolSpec {
    selector: BTreeMap<String, String>,
    ports: Vec<u16>,
}

fn inference_pool() -> ApiResource {
    ApiResource {
        group: "inference.networking.k8s.io".into(),
        version: "v1".into(),
        api_version: "inference.networking.k8s.io/v1".into(),
        kind: "InferencePool".into(),
        plural: "inferencepools".into(),
    }
}

/// Watch pool `name` in `namespace` (else the client's: the Pod's own in a cluster) with the
/// in-cluster (or kubeconfig) client.
pub fn watch(name: String, namespace: Option<String>) -> Result<watch::Receiver<Vec<String>>, String> {
    let (tx, rx) = watch::channel(Vec::new());
    tokio::spawn(async move {
        match Client::try_default().await {
            Ok(client) => follow(client, name, namespace, tx).await,
            Err(e) => tracing::error!(pool = %name, error = %e, "no Kubernetes API to watch the InferencePool through"),
        }
    });
    Ok(rx)
}

/// Watch pool `name` through `client` (a test's client talks to a fake API service).
pub fn watch_with(client: Client, name: String, namespace: Option<String>) -> watch::Receiver<Vec<String>> {
    let (tx, rx) = watch::channel(Vec::new());
    tokio::spawn(follow(client, name, namespace, tx));
    rx
}

async fn follow(client: Client, name: String, namespace: Option<String>, tx: watch::Sender<Vec<String>>) {
    let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    let pools: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &inference_pool());
    let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut specs = std::pin::pin!(watcher(pools, by_name).default_backoff().applied_objects());
    let mut pods_task: Option<tokio::task::JoinHandle<()>> = None;
    let mut current = None;
    loop {
        tokio::select! {
            event = specs.next() => match event {
                Some(Ok(pool)) => {
                    let spec = pool_spec(&pool.data);
                    if current.as_ref() != Some(&spec) {
                        tracing::info!(pool = %name, selector = ?spec.selector, ports = ?spec.ports, "InferencePool seen");
                        if let Some(task) = pods_task.take() {
                            task.abort();
                        }
                        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                        pods_task = Some(tokio::spawn(follow_pods(pods, spec.clone(), tx.clone())));
                        current = Some(spec);
                    }
                }
                Some(Err(e)) => tracing::warn!(pool = %name, error = %e, "watching the InferencePool"),
                None => break,
            },
            _ = tx.closed() => break,
        }
    }
    if let Some(task) = pods_task {
        task.abort();
    }
}

/// `spec.selector.matchLabels` and `spec.targetPorts[].number`.
fn pool_spec(data: &serde_json::Value) -> PoolSpec {
    let spec = &data["spec"];
    let labels = spec["selector"]["matchLabels"].as_object().into_iter().flatten();
    let selector = labels.filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect();
    let ports = spec["targetPorts"].as_array().into_iter().flatten();
    let ports = ports.filter_map(|p| u16::try_from(p["number"].as_u64()?).ok()).collect();
    PoolSpec { selector, ports }
}

async fn follow_pods(pods: Api<Pod>, spec: PoolSpec, tx: watch::Sender<Vec<String>>) {
    let labels = spec.selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    let (reader, writer) = reflector::store();
    let events = watcher(pods, watcher::Config::default().labels(&labels)).default_backoff();
    let mut events = std::pin::pin!(reflector(writer, events));
    while let Some(event) = events.next().await {
        match event {
            Err(e) => {
                tracing::warn!(error = %e, "watching the pool's Pods");
                continue;
            }
            // The store is whole once the first list is in: nothing to say before.
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
            Ok(_) => {}
        }
        let endpoints = ready_endpoints(&reader.state(), &spec.ports);
        tx.send_if_modified(|known| {
            let changed = *known != endpoints;
            if changed {
                tracing::info!(endpoints = ?endpoints, "InferencePool endpoints changed");
                *known = endpoints;
            }
            changed
        });
    }
}

/// Every ready Pod's IP on every target port, sorted.
fn ready_endpoints(pods: &[Arc<Pod>], ports: &[u16]) -> Vec<String> {
    let mut out = Vec::new();
    for pod in pods.iter().filter(|p| is_ready(p)) {
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).and_then(|ip| ip.parse().ok()) else {
            continue;
        };
        out.extend(ports.iter().map(|&port| super::endpoint(ip, port)));
    }
    super::sorted(out)
}

fn is_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else { return false };
    pod.metadata.deletion_timestamp.is_none()
        && status.phase.as_deref() == Some("Running")
        && status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pools_selector_and_ports_are_read() {
        let data = serde_json::json!({"spec": {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 8000}, {"number": 8001}]}});
        let spec = pool_spec(&data);
        assert_eq!(spec.selector.get("app").map(String::as_str), Some("vllm"));
        assert_eq!(spec.ports, [8000, 8001]);
    }

    #[test]
    fn only_ready_running_pods_with_an_ip_count() {
        let pod = |phase: &str, ready: &str, ip: Option<&str>, deleting: bool| {
            let mut json = serde_json::json!({
                "metadata": {"name": "p"},
                "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
            });
            if let Some(ip) = ip {
                json["status"]["podIP"] = ip.into();
            }
            if deleting {
                json["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            Arc::new(serde_json::from_value::<Pod>(json).unwrap())
        };
        let pods = [
            pod("Running", "True", Some("10.0.0.2"), false),
            pod("Running", "False", Some("10.0.0.3"), false),
            pod("Pending", "True", Some("10.0.0.4"), false),
            pod("Running", "True", None, false),
            pod("Running", "True", Some("10.0.0.6"), true),
            pod("Running", "True", Some("10.0.0.1"), false),
        ];
        assert_eq!(ready_endpoints(&pods, &[8000]), ["10.0.0.1:8000", "10.0.0.2:8000"]);
    }
}
