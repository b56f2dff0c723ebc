//! The Gateway API Inference Extension's Endpoint Picker protocol (its proposal 004) over Envoy's
//! `ext_proc`, both ways: `server` is a picker Envoy-based gateways call (the pick decided by a
//! `Picker`, the gateway's router), `client` follows another picker, `health` answers gRPC health
//! (`liveness`, `readiness`, the ext_proc service), `message` builds and reads the protocol's
//! messages, and `discover` finds a pool's endpoints (a static list, DNS, or an `InferencePool`'s
//! ready Pods through the Kubernetes API). No gateway types: the gateway composes it.

pub mod client;
pub mod discover;
pub mod health;
pub mod message;
pub mod server;

use std::future::Future;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::ExternalProcessorServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;

pub use client::{Answer, Follower, Session, Unanswered};
pub use server::{ExtProc, Limits, PickRequest, Picked, Picker, Refusal};

/// The gRPC service name Envoy's ext_proc filter calls (and gRPC health reports on).
pub const SERVICE: &str = "envoy.service.ext_proc.v3.ExternalProcessor";

/// Serve the picker on `listener` (ext_proc, with gRPC health beside it) and gRPC health alone on
/// `health_listener`, until `shutdown`. `ready` says whether endpoints are known.
pub async fn serve<P: Picker>(
    picker: Arc<P>,
    limits: Limits,
    listener: TcpListener,
    health_listener: Option<TcpListener>,
    ready: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let health = health::Health::start(ready);
    let (stop, stopped) = watch::channel(false);
    let health_server = health_listener.map(|listener| {
        let service = health.service();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let until = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), until)
                .await
        })
    });
    let ext_proc = ExternalProcessorServer::new(ExtProc::new(picker, limits));
    let served = tonic::transport::Server::builder()
        .add_service(health.service())
        .add_service(ext_proc)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown)
        .await;
    let _ = stop.send(true);
    if let Some(health_server) = health_server {
        let _ = health_server.await;
    }
    served.map_err(|e| format!("the endpoint picker's listener failed: {e}"))
}
