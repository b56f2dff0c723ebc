//! Experiments on live traffic (issue 57), as the gateway runs them: the live set (the
//! configuration's and the admin API's), which request gets which variant, each experiment's
//! state (shares, stopped variants, a winner), and the requests assigned lately (for feedback).
//! The request path's phase is `proxy/experiment.rs`; results are `experiments/results.rs`;
//! `experiments/refresh.rs` moves adaptive shares and stops failing variants.

pub mod refresh;
pub mod results;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use switchyard_experiments::spec::SHADOW;
use switchyard_experiments::{assign, Allocation, Arm, Experiment, Unit};

/// Requests remembered for feedback in memory (older ones are looked up in the store).
const RECENT: usize = 100_000;

/// Where an experiment was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Config,
    Api,
}

/// One experiment and what it has learned.
#[derive(Debug)]
pub struct Live {
    pub spec: Arc<Experiment>,
    pub source: Source,
    state: Mutex<State>,
    /// Requests assigned per variant (since this spec went live), for `/metrics`.
    assigned: Vec<AtomicU64>,
    /// Shadow calls by outcome: answered, failed, refused (no slot to spare).
    shadows: [AtomicU64; 3],
}

/// What changes while an experiment runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct State {
    /// Each variant's share of units now (its weight, or the adaptive allocation's).
    pub shares: Vec<f64>,
    /// Why a variant was stopped (its error rate), per variant.
    pub stopped: Vec<Option<String>>,
    pub shadow_stopped: Option<String>,
    /// The variant declared the winner (adaptive): every unit gets it from then on.
    pub winner: Option<usize>,
    /// The adaptive metric's observations per variant, scaled into [0, 1].
    #[serde(skip)]
    pub arms: Vec<Arm>,
}

impl Live {
    fn new(spec: Arc<Experiment>, source: Source) -> Live {
        let k = spec.variants.len();
        let state = State {
            shares: spec.variants.iter().map(|v| v.share).collect(),
            stopped: vec![None; k],
            shadow_stopped: None,
            winner: None,
            arms: vec![Arm::default(); k],
        };
        let assigned = (0..k).map(|_| AtomicU64::new(0)).collect();
        Live { spec, source, state: Mutex::new(state), assigned, shadows: Default::default() }
    }

    pub fn state(&self) -> State {
        self.state.lock().map(|s| s.clone()).unwrap_or_else(|e| e.into_inner().clone())
    }

    pub fn update(&self, change: impl FnOnce(&mut State)) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut state);
    }

    /// The shares assignment uses: the winner alone once there is one, stopped variants none.
    fn effective_shares(&self) -> Vec<f64> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(winner) = state.winner {
            return (0..state.shares.len()).map(|i| if i == winner { 1.0 } else { 0.0 }).collect();
        }
        state.shares.iter().zip(&state.stopped).map(|(s, stopped)| if stopped.is_some() { 0.0 } else { *s }).collect()
    }

    /// A shadow call ended with `status` (429 and 503: refused, the backend had no slot to spare).
    pub fn count_shadow(&self, status: u16) {
        let outcome = match status {
            200..=299 => 0,
            429 | 503 => 2,
            _ => 1,
        };
        self.shadows[outcome].fetch_add(1, Relaxed);
    }

    fn shadow_running(&self) -> bool {
        self.state.lock().is_ok_and(|s| s.shadow_stopped.is_none())
    }
}

/// The unit a request is hashed by, as the request gives it.
pub struct Units<'a> {
    pub key: Option<&'a str>,
    /// The body's `user`, else the key's user.
    pub user: Option<&'a str>,
    pub session: Option<&'a str>,
    pub request_id: &'a str,
}

impl Units<'_> {
    fn of(&self, unit: Unit) -> &str {
        match unit {
            Unit::Key => self.key.unwrap_or(""),
            Unit::User => self.user.or(self.key).unwrap_or(""),
            Unit::Session => self.session.or(self.key).unwrap_or(""),
            Unit::Request => self.request_id,
        }
    }
}

/// A request's variant, and whether a shadow goes too.
#[derive(Debug, Clone)]
pub struct Assignment {
    pub live: Arc<Live>,
    pub variant: usize,
    pub shadow: bool,
}

impl Assignment {
    pub fn experiment(&self) -> &str {
        &self.live.spec.name
    }
    pub fn variant_name(&self) -> &str {
        &self.live.spec.variants[self.variant].name
    }
    pub fn model(&self) -> &str {
        &self.live.spec.variants[self.variant].model
    }
    pub fn shadow_model(&self) -> Option<&str> {
        self.shadow.then(|| self.live.spec.shadow.as_ref().map(|s| s.model.as_str())).flatten()
    }
}

/// A request an experiment assigned, remembered for its feedback.
#[derive(Debug, Clone, PartialEq)]
pub struct Assigned {
    pub experiment: String,
    pub variant: String,
    pub key: Option<String>,
}

#[derive(Default)]
struct Table {
    by_model: HashMap<String, Vec<Arc<Live>>>,
    by_name: BTreeMap<String, Arc<Live>>,
}

/// Every live experiment.
#[derive(Default)]
pub struct Experiments {
    /// Whether any experiment is live: what a request checks first (one atomic load).
    any: AtomicBool,
    table: ArcSwap<Table>,
    /// Those made through the admin API (the configuration's come with each config).
    api: Mutex<Vec<Arc<Experiment>>>,
    configured: Mutex<Vec<Arc<Experiment>>>,
    recent: Mutex<(HashMap<String, Assigned>, VecDeque<String>)>,
}

impl Experiments {
    /// The configuration's experiments (at start and at each reload); state carries over for
    /// an experiment whose spec did not change.
    pub fn configure(&self, configured: &[Arc<Experiment>]) {
        *self.configured.lock().unwrap_or_else(|e| e.into_inner()) = configured.to_vec();
        self.rebuild();
    }

    /// The admin API's experiments (read from the store).
    pub fn set_api(&self, api: Vec<Arc<Experiment>>) {
        let mut held = self.api.lock().unwrap_or_else(|e| e.into_inner());
        if *held == api {
            return;
        }
        *held = api;
        drop(held);
        self.rebuild();
    }

    fn rebuild(&self) {
        let old = self.table.load();
        let mut table = Table::default();
        let configured = self.configured.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let api = self.api.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let all = configured.into_iter().map(|e| (e, Source::Config)).chain(api.into_iter().map(|e| (e, Source::Api)));
        for (spec, source) in all {
            if table.by_name.contains_key(&spec.name) {
                continue; // the configuration's wins over the API's of the same name
            }
            let live = match old.by_name.get(&spec.name) {
                Some(live) if live.spec == spec && live.source == source => live.clone(),
                _ => Arc::new(Live::new(spec.clone(), source)),
            };
            table.by_model.entry(spec.model.clone()).or_default().push(live.clone());
            table.by_name.insert(spec.name.clone(), live);
        }
        self.any.store(!table.by_name.is_empty(), Relaxed);
        self.table.store(Arc::new(table));
    }

    pub fn is_empty(&self) -> bool {
        !self.any.load(Relaxed)
    }

    pub fn get(&self, name: &str) -> Option<Arc<Live>> {
        self.table.load().by_name.get(name).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Live>> {
        self.table.load().by_name.values().cloned().collect()
    }

    /// Whether an experiment runs on requests for `requested` (or the model it resolves to).
    pub fn covers(&self, requested: &str, model: &str) -> bool {
        let table = self.table.load();
        table.by_model.contains_key(requested) || table.by_model.contains_key(model)
    }

    /// The variant of a request for `requested` (resolved to `model`) from `team`: the first
    /// running experiment on that model; none where the variant's model is not `allowed`.
    pub fn assign(
        &self,
        (requested, model): (&str, &str),
        team: Option<&str>,
        units: &Units<'_>,
        allowed: &dyn Fn(&str) -> bool,
        now_ms: i64,
    ) -> Option<Assignment> {
        let table = self.table.load();
        let candidates = table.by_model.get(requested).or_else(|| table.by_model.get(model))?;
        let live = candidates.iter().find(|l| {
            l.spec.until_ms.is_none_or(|until| now_ms < until) && l.spec.team.as_deref().is_none_or(|t| Some(t) == team)
        })?;
        let spec = &live.spec;
        let variant = assign::pick(&live.effective_shares(), assign::point(&spec.name, units.of(spec.unit)))?;
        if !allowed(&spec.variants[variant].model) {
            return None;
        }
        let shadow = spec.shadow.as_ref().is_some_and(|s| {
            assign::point(&format!("{}#{SHADOW}", spec.name), units.request_id) < s.sample
                && allowed(&s.model)
                && live.shadow_running()
        });
        live.assigned[variant].fetch_add(1, Relaxed);
        let assignment = Assignment { live: live.clone(), variant, shadow };
        self.remember(units.request_id, &assignment, units.key);
        Some(assignment)
    }

    fn remember(&self, request_id: &str, a: &Assignment, key: Option<&str>) {
        let assigned = Assigned {
            experiment: a.experiment().to_owned(),
            variant: a.variant_name().to_owned(),
            key: key.map(str::to_owned),
        };
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *recent;
        if map.insert(request_id.to_owned(), assigned).is_none() {
            order.push_back(request_id.to_owned());
        }
        while order.len() > RECENT {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    /// A request assigned lately by this instance.
    pub fn recent(&self, request_id: &str) -> Option<Assigned> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner()).0.get(request_id).cloned()
    }

    /// The metric names feedback may carry: every experiment's listed metrics.
    pub fn knows_metric(&self, name: &str) -> bool {
        self.table.load().by_name.values().any(|l| l.spec.metrics.iter().any(|m| m == name))
    }

    /// Adaptive experiments (for the refresh task).
    pub fn adaptive(&self) -> Vec<Arc<Live>> {
        self.all().into_iter().filter(|l| l.spec.allocation == Allocation::Adaptive).collect()
    }

    /// The experiments' lines of `/metrics`.
    pub fn render(&self, out: &mut String) {
        let all = self.all();
        if all.is_empty() {
            return;
        }
        out.push_str(
            "# HELP switchyard_experiment_requests_total Requests an experiment assigned, by variant.\n\
             # TYPE switchyard_experiment_requests_total counter\n",
        );
        for live in &all {
            for (v, n) in live.spec.variants.iter().zip(&live.assigned) {
                let (e, v, n) = (&live.spec.name, &v.name, n.load(Relaxed));
                let _ = writeln!(out, "switchyard_experiment_requests_total{{experiment=\"{e}\",variant=\"{v}\"}} {n}");
            }
        }
        out.push_str(
            "# HELP switchyard_experiment_variant_share The share of units a variant gets now (adaptive allocation moves it; 0 once stopped or another won).\n\
             # TYPE switchyard_experiment_variant_share gauge\n",
        );
        for live in &all {
            for (v, share) in live.spec.variants.iter().zip(live.effective_shares()) {
                let (e, v) = (&live.spec.name, &v.name);
                let _ =
                    writeln!(out, "switchyard_experiment_variant_share{{experiment=\"{e}\",variant=\"{v}\"}} {share}");
            }
        }
        out.push_str(
            "# HELP switchyard_experiment_shadows_total Shadow calls, by outcome (refused: no slot to spare).\n\
             # TYPE switchyard_experiment_shadows_total counter\n",
        );
        for live in all.iter().filter(|l| l.spec.shadow.is_some()) {
            for (outcome, n) in ["ok", "failed", "refused"].iter().zip(&live.shadows) {
                let (e, n) = (&live.spec.name, n.load(Relaxed));
                let _ = writeln!(
                    out,
                    "switchyard_experiment_shadows_total{{experiment=\"{e}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
    }
}
