//! Model routing: requested model → alias → backends that serve it → available ones → policy.
//! The model table is rebuilt whenever discovery changes a backend's model list and swapped in
//! atomically, so the request path only does a hash lookup and a scan of a few candidates.

pub mod backend;
pub mod health;
pub mod policy;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::Config;
use backend::{now_ms, Backend};
use policy::RoutingPolicy;

type ModelTable = HashMap<String, Vec<Arc<Backend>>>;

#[derive(Debug, PartialEq, Eq)]
pub enum SelectError {
    /// No backend has ever said it serves this model.
    UnknownModel,
    /// Backends serve it, but none is available (down, breaker open, or already tried).
    NoneAvailable,
}

pub struct Router {
    pub backends: Vec<Arc<Backend>>,
    policy: Box<dyn RoutingPolicy>,
    table: ArcSwap<ModelTable>,
    rebuild_lock: Mutex<()>,
}

impl Router {
    pub fn new(config: &Config) -> Result<Router, String> {
        let backends = config
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| Backend::new(i, b.clone(), &config.health).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let router = Router {
            policy: policy::for_strategy(config.strategy, backends.len()),
            backends,
            table: ArcSwap::from_pointee(HashMap::new()),
            rebuild_lock: Mutex::new(()),
        };
        router.rebuild_table();
        Ok(router)
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Recompute model → backends from every backend's current model list.
    pub fn rebuild_table(&self) {
        let _serialised = self.rebuild_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut table: ModelTable = HashMap::new();
        for b in &self.backends {
            for m in b.models().iter() {
                table.entry(m.clone()).or_default().push(b.clone());
            }
        }
        self.table.store(Arc::new(table));
    }

    pub fn knows_model(&self, model: &str) -> bool {
        self.table.load().contains_key(model)
    }

    /// Pick a backend for `model`, skipping ids in `tried`.
    pub fn select(&self, model: &str, tried: &[usize]) -> Result<Arc<Backend>, SelectError> {
        let table = self.table.load();
        let all = table.get(model).ok_or(SelectError::UnknownModel)?;
        let now = now_ms();
        let mut candidates: Vec<&Arc<Backend>> =
            all.iter().filter(|b| !tried.contains(&b.id) && b.health.available(now)).collect();
        while let Some(i) = self.policy.select(&candidates) {
            let chosen = candidates[i];
            // Only one request wins the half-open trial of a recovering breaker.
            if chosen.health.claim(now) {
                return Ok(chosen.clone());
            }
            candidates.swap_remove(i);
        }
        Err(SelectError::NoneAvailable)
    }

    /// De-duplicated catalogue of every model served by a backend that is up: model → backend names.
    pub fn catalogue(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for b in self.backends.iter().filter(|b| b.health.is_up()) {
            for m in b.models().iter() {
                out.entry(m.clone()).or_default().push(b.name().to_owned());
            }
        }
        out
    }

    pub fn healthy_count(&self) -> usize {
        self.backends.iter().filter(|b| b.health.is_up()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(yaml: &str) -> Router {
        let cfg = Config::from_yaml(yaml, &HashMap::<String, String>::new()).unwrap();
        let r = Router::new(&cfg).unwrap();
        for b in &r.backends {
            b.health.set_up(true);
        }
        r
    }

    #[test]
    fn selects_only_backends_serving_the_model() {
        let r = router(
            "routing: {strategy: round-robin}\nbackends:\n - {name: a, url: 'http://a:1', models: [x]}\n - {name: b, url: 'http://b:1', models: [x, y]}",
        );
        for _ in 0..5 {
            assert_eq!(r.select("y", &[]).unwrap().name(), "b");
        }
        assert_eq!(r.select("z", &[]).err().unwrap(), SelectError::UnknownModel);
        assert_eq!(r.select("y", &[1]).err().unwrap(), SelectError::NoneAvailable);
        assert_eq!(r.select("x", &[0]).unwrap().name(), "b");
    }

    #[test]
    fn skips_down_backends_and_lists_only_up_ones() {
        let r = router(
            "backends:\n - {name: a, url: 'http://a:1', models: [x]}\n - {name: b, url: 'http://b:1', models: [x, y]}",
        );
        r.backends[1].health.set_up(false);
        for _ in 0..5 {
            assert_eq!(r.select("x", &[]).unwrap().name(), "a");
        }
        assert_eq!(r.select("y", &[]).err().unwrap(), SelectError::NoneAvailable);
        let cat = r.catalogue();
        assert_eq!(cat.keys().collect::<Vec<_>>(), vec!["x"]);
    }

    #[test]
    fn discovery_updates_the_table() {
        let r = router("backends:\n - {name: a, url: 'http://a:1'}");
        assert!(!r.knows_model("new"));
        assert!(r.backends[0].set_models(vec!["new".into(), "new".into()]));
        assert!(!r.backends[0].set_models(vec!["new".into()]));
        r.rebuild_table();
        assert!(r.knows_model("new"));
    }
}
