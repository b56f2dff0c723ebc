//! The guardrails a gateway serves with, built from its configuration at start-up and again at
//! each reload (so `guardrails:` changes apply without a restart): the configured guards ahead of
//! an embedder's own, the remote ones (webhooks, classifiers) among them, and the MCP hub's tool
//! guards. Classifiers reach their model through the running gateway (`SelfCaller`).

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::app::App;
use crate::guard::content::ContentGuards;
use crate::guard::remote::RemoteGuards;
use crate::guard::Guards;

/// What building the guards needs besides the configuration.
pub(super) struct Guarding {
    /// An embedder's own guards (none for the binary).
    base: Guards,
    metrics: Arc<GuardrailMetrics>,
    caller: Arc<SelfCaller>,
}

impl Guarding {
    pub(super) fn new(base: Guards, app: &App) -> Guarding {
        Guarding { base, metrics: Arc::new(GuardrailMetrics(app.metrics.clone())), caller: Arc::default() }
    }

    /// The guards for `app`'s configuration; the MCP hub's tool guards follow it.
    pub(super) fn build(&self, app: &App) -> Result<Guards, String> {
        let configured = ContentGuards::build(&app.config.guardrails, self.metrics.clone())?;
        let guards = match configured {
            Some(configured) => {
                let remote = RemoteGuards::build(&configured, app.client.clone(), self.caller.clone());
                self.base.clone().configured(configured, remote)
            }
            None => self.base.clone(),
        };
        if let Some(front) = &app.mcp {
            front.hub().guard_tools(guards.tools());
        }
        Ok(guards)
    }

    /// Classifiers call the gateway as it is being served (after any reload).
    pub(super) fn serve(&self, current: &Arc<ArcSwap<App>>) {
        let _ = self.caller.0.set(Arc::downgrade(current));
    }
}

/// The guardrails' verdicts and check times, in `/metrics` (the guard layer sits beside metrics,
/// so it is handed this rather than importing it).
struct GuardrailMetrics(Arc<crate::metrics::Metrics>);

impl crate::guard::content::GuardMetrics for GuardrailMetrics {
    fn count(&self, guard: &str, kind: &'static str, action: &'static str) {
        self.0.count_guardrail(guard, kind, action);
    }

    fn time(&self, guard: &str, took: std::time::Duration) {
        self.0.time_guardrail(guard, took);
    }

    fn time_builtin(&self, took: std::time::Duration) {
        self.0.time_builtin_guardrails(took);
    }
}

/// How model guards reach their classifier: through the running gateway's own pipeline, as it
/// is after any reload. Weak, as the gateway holds its guards.
#[derive(Default)]
struct SelfCaller(std::sync::OnceLock<std::sync::Weak<ArcSwap<App>>>);

impl crate::guard::model::ModelCaller for SelfCaller {
    fn call(
        &self,
        guard: &str,
        endpoint: crate::endpoint::Endpoint,
        body: bytes::Bytes,
        deadline: std::time::Instant,
    ) -> futures_util::future::BoxFuture<'static, Result<bytes::Bytes, String>> {
        let app = self.0.get().and_then(std::sync::Weak::upgrade).map(|current| current.load_full());
        let guard = guard.to_owned();
        Box::pin(async move {
            let app = app.ok_or_else(|| "the gateway is stopping".to_owned())?;
            crate::proxy::call_for_guard(&app, &guard, endpoint, body, deadline).await
        })
    }
}
