//! `experiments:` — experiments on live traffic (issue 57), checked against the models the
//! configuration serves. The spec's shape and checks are the `switchyard-experiments` crate's.

use std::collections::BTreeMap;
use std::sync::Arc;

use switchyard_experiments::{Experiment, RawExperiment};

use super::{BackendConfig, ConfigError, FastMap};

pub type RawExperiments = BTreeMap<String, RawExperiment>;

/// Whether `model` is one the configuration serves: a backend's listed model (globs allowed),
/// an alias, or anything at all when some backend discovers its models.
pub fn model_known(backends: &[BackendConfig], aliases: &FastMap<String, String>, model: &str) -> bool {
    aliases.contains_key(model)
        || backends.iter().any(|b| match &b.models {
            None => true,
            Some(models) => crate::glob::any(models, model),
        })
}

pub fn validate(
    raw: RawExperiments,
    backends: &[BackendConfig],
    aliases: &FastMap<String, String>,
) -> Result<Vec<Arc<Experiment>>, ConfigError> {
    let known = |model: &str| model_known(backends, aliases, model);
    let mut checked = Vec::with_capacity(raw.len());
    for (name, spec) in raw {
        let experiment = spec.check(&name, &known).map_err(|e| ConfigError::at(e.path, e.message))?;
        checked.push(Arc::new(experiment));
    }
    Ok(checked)
}
