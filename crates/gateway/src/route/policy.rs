//! Routing policies: pick one backend among the available candidates for a request.
//! One file per policy; `for_strategy` is the factory from config.

mod least_connections;
mod priority;
mod round_robin;
mod weighted;

use std::sync::Arc;

use super::backend::Backend;
use crate::config::Strategy;

pub use least_connections::LeastConnections;
pub use priority::Priority;
pub use round_robin::RoundRobin;
pub use weighted::Weighted;

/// Selection over candidates that are already filtered to available, not-yet-tried backends
/// serving the model. A retry calls `select` again with the tried ones removed.
pub trait RoutingPolicy: Send + Sync {
    fn name(&self) -> &'static str;
    /// Index into `candidates`; `None` only when `candidates` is empty.
    fn select(&self, candidates: &[&Arc<Backend>]) -> Option<usize>;
}

pub fn for_strategy(strategy: Strategy, backend_count: usize) -> Box<dyn RoutingPolicy> {
    match strategy {
        Strategy::RoundRobin => Box::new(RoundRobin::default()),
        Strategy::LeastConnections => Box::new(LeastConnections::default()),
        Strategy::Priority => Box::new(Priority::default()),
        Strategy::Weighted => Box::new(Weighted::new(backend_count)),
        // These two choose in the router (they need the prompt); least-connections breaks ties
        // and serves requests that carry no prompt prefix.
        Strategy::CacheAware | Strategy::PrefixHash => Box::new(LeastConnections::default()),
    }
}

/// Index of the least-loaded candidate among `indices`, ties broken by rotating from `turn`
/// so that equally idle backends share the work instead of the first one taking it all.
pub(super) fn least_loaded(
    candidates: &[&Arc<Backend>],
    indices: impl Iterator<Item = usize> + Clone,
    turn: usize,
) -> Option<usize> {
    least_loaded_by(candidates, indices, turn, |b| b.in_flight())
}

/// [`least_loaded`] with the load measured by `load`.
pub(super) fn least_loaded_by(
    candidates: &[&Arc<Backend>],
    indices: impl Iterator<Item = usize> + Clone,
    turn: usize,
    load: impl Fn(&Backend) -> usize,
) -> Option<usize> {
    let n = indices.clone().count();
    if n == 0 {
        return None;
    }
    let start = turn % n;
    indices.cycle().skip(start).take(n).min_by_key(|&i| load(candidates[i]))
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;

    use crate::config::{BackendConfig, BackendKind, Config};
    use crate::route::backend::Backend;

    pub fn backend(id: usize, priority: i32, weight: u32) -> Arc<Backend> {
        let cfg = BackendConfig {
            name: format!("b{id}"),
            url: "http://127.0.0.1:1".into(),
            kind: BackendKind::OpenAi,
            provider: None,
            api_key: None,
            api_keys: Vec::new(),
            models: Some(vec!["m".into()]),
            capabilities: None,
            priority,
            weight,
            cache_tokens: 65_536,
            max_concurrency: None,
            api_version: None,
            aws: None,
            kv_events: None,
            member: None,
        };
        let config = Config::empty().unwrap();
        let admission = Arc::new(crate::route::admission::Admission::new(1, std::time::Duration::from_secs(1), 2));
        let pool = crate::upstream::pool::PoolSettings::of(&config);
        Arc::new(Backend::new(id, cfg, &config.health, admission, pool).unwrap())
    }

    /// Pick `n` times and count picks per candidate index.
    pub fn distribution(policy: &dyn super::RoutingPolicy, backends: &[Arc<Backend>], n: usize) -> Vec<usize> {
        let refs: Vec<&Arc<Backend>> = backends.iter().collect();
        let mut counts = vec![0; backends.len()];
        for _ in 0..n {
            counts[policy.select(&refs).unwrap()] += 1;
        }
        counts
    }
}
