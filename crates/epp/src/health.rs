//! gRPC health as the Endpoint Picker protocol asks: `liveness` serves while the process runs;
//! `readiness`, the ext_proc service's name and the server as a whole ("") serve once the
//! picker knows endpoints, and stop serving when it knows none.

use tokio::sync::watch;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;

/// The statuses, followed from the picker's readiness.
pub struct Health {
    reporter: HealthReporter,
}

impl Health {
    /// Report `ready` as it changes (on a task of its own, until the sender is dropped).
    pub fn start(mut ready: watch::Receiver<bool>) -> Health {
        let reporter = HealthReporter::new();
        let follow = reporter.clone();
        tokio::spawn(async move {
            follow.set_service_status("liveness", ServingStatus::Serving).await;
            loop {
                let status =
                    if *ready.borrow_and_update() { ServingStatus::Serving } else { ServingStatus::NotServing };
                for service in ["readiness", crate::SERVICE, ""] {
                    follow.set_service_status(service, status).await;
                }
                if ready.changed().await.is_err() {
                    return;
                }
            }
        });
        Health { reporter }
    }

    /// A `grpc.health.v1.Health` service over these statuses (one per listener).
    pub fn service(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService::from_health_reporter(self.reporter.clone()))
    }
}
