//! Pools whose members are discovered (a DNS name's records; an `InferencePool`'s ready Pods)
//! applied to routing: each change is kept in `Found` and the configuration rebuilt through the
//! reload path, its members expanded as found (`Config::expand_pools`). A static pool's members
//! are the configuration's own and never come here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::app::ReloadRequest;
use crate::config::pools::Members;
use crate::config::Config;

/// The members last found, by pool.
#[derive(Default)]
pub struct Found(Mutex<HashMap<String, Vec<String>>>);

impl Found {
    pub fn snapshot(&self) -> HashMap<String, Vec<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, pool: &str, endpoints: Vec<String>) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(pool.to_owned(), endpoints);
    }
}

/// Follow every discovered pool of `config`; on each change, ask for a reload.
pub fn spawn(config: &Config, found: Arc<Found>, reload: mpsc::Sender<ReloadRequest>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for pool in &config.pools {
        let source = match &pool.members {
            Members::Static(_) => continue,
            Members::Dns(target) => switchyard_epp::discover::dns::watch(target.clone()),
            Members::InferencePool { name, namespace } => {
                switchyard_epp::discover::kube::watch(name.clone(), namespace.clone())
            }
        };
        match source {
            Ok(members) => tasks.push(tokio::spawn(follow(pool.name.clone(), members, found.clone(), reload.clone()))),
            Err(e) => tracing::error!(pool = %pool.name, error = %e, "cannot discover the pool's endpoints"),
        }
    }
    tasks
}

async fn follow(
    pool: String,
    mut members: watch::Receiver<Vec<String>>,
    found: Arc<Found>,
    reload: mpsc::Sender<ReloadRequest>,
) {
    loop {
        let endpoints = members.borrow_and_update().clone();
        if !endpoints.is_empty() || found.snapshot().contains_key(&pool) {
            found.set(&pool, endpoints);
            match crate::app::request_reload(&reload).await {
                Ok(_) => tracing::info!(pool = %pool, "pool members applied"),
                Err(e) => tracing::warn!(pool = %pool, error = %e, "pool members not applied"),
            }
        }
        if members.changed().await.is_err() {
            return;
        }
    }
}
