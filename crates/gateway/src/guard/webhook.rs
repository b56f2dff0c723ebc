//! Webhook guards (`type: webhook`): a request's texts are POSTed to an HTTP service of the
//! operator's, which answers `{"action": "allow" | "mask" | "block", "replacements": [...],
//! "reason": "..."}`. `replacements` is aligned with the `texts` sent (a string replaces that
//! text, `null` keeps it). The webhook is asked once per request, before routing: a failover's
//! retries reuse the masked body, so a verdict is never applied twice. It must answer within its
//! `timeout` and the request's own deadline; when it cannot (down, slow, an error status, an
//! answer that is not the contract), `on_error: closed` refuses the request (503
//! `guardrail_unavailable`) and `open` lets it through. `action: log` makes a webhook's verdicts
//! counted only, never applied.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use serde::Deserialize;

use super::content::ContentGuards;
use super::json_text::{rewrite_texts, NOT_TEXT};
use super::GuardedRequest;
use crate::config::guardrails::{GuardAction, GuardKind, Webhook};
use crate::error::GatewayError;
use crate::upstream::UpstreamClient;

/// The largest answer read from a webhook (its replacements included).
const MAX_ANSWER_BYTES: usize = 4 << 20;

pub struct WebhookGuards {
    content: ContentGuards,
    /// (index among the configured guards, its settings)
    hooks: Vec<(usize, Webhook)>,
    client: UpstreamClient,
}

#[derive(Deserialize)]
struct Answer {
    action: Action,
    #[serde(default)]
    replacements: Vec<Option<String>>,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Action {
    Allow,
    Mask,
    Block,
}

impl WebhookGuards {
    /// The webhook guards among the configured ones; `None` when there are none.
    pub fn build(content: &ContentGuards, client: UpstreamClient) -> Option<WebhookGuards> {
        let hooks: Vec<(usize, Webhook)> = content
            .configs()
            .iter()
            .enumerate()
            .filter_map(|(i, g)| match &g.kind {
                GuardKind::Webhook(w) => Some((i, w.clone())),
                _ => None,
            })
            .collect();
        (!hooks.is_empty()).then(|| WebhookGuards { content: content.clone(), hooks, client })
    }

    /// Ask every webhook that applies to this request, in name order; `body` becomes what the
    /// last one left (masked), or the first block or unreachable closed webhook refuses it.
    pub async fn check(
        &self,
        request: &GuardedRequest<'_>,
        body: &mut Bytes,
        deadline: Instant,
    ) -> Result<(), GatewayError> {
        let active = self.content.active_on_request(request);
        for (index, hook) in self.hooks.iter().filter(|(i, _)| active & (1 << i) != 0) {
            let guard = &self.content.configs()[*index];
            let mut texts = Vec::new();
            let _ = rewrite_texts(body, NOT_TEXT, |t| {
                texts.push(t.to_owned());
                None
            });
            if texts.is_empty() {
                continue;
            }
            let started = Instant::now();
            let asked = self.ask(hook, &guard.name, request, &texts, deadline).await;
            self.content.time(&guard.name, started.elapsed());
            let answer = match asked {
                Ok(answer) => answer,
                Err(e) if hook.fail_open => {
                    tracing::warn!(guard = %guard.name, error = %e, "webhook guard failed; letting the request through (on_error: open)");
                    self.content.count(request, &guard.name, "webhook", "error");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(guard = %guard.name, error = %e, "webhook guard failed; refusing the request (on_error: closed)");
                    self.content.count(request, &guard.name, "webhook", "error");
                    return Err(GatewayError::GuardrailUnavailable);
                }
            };
            apply(&self.content, request, &guard.name, guard.action, answer, body)?;
        }
        Ok(())
    }

    async fn ask(
        &self,
        hook: &Webhook,
        guard: &str,
        request: &GuardedRequest<'_>,
        texts: &[String],
        deadline: Instant,
    ) -> Result<Answer, String> {
        let payload = serde_json::json!({
            "guard": guard,
            "direction": "request",
            "model": request.requested,
            "key": request.key,
            "team": request.team,
            "texts": texts,
        });
        let mut req = http::Request::post(hook.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(payload.to_string())))
            .map_err(|e| e.to_string())?;
        req.headers_mut().extend(hook.headers.iter().cloned());
        let wait = hook.timeout.min(deadline.saturating_duration_since(Instant::now()));
        let asked = async {
            let resp = self.client.request(req).await.map_err(|e| format!("unreachable: {e}"))?;
            if !resp.status().is_success() {
                return Err(format!("answered {}", resp.status()));
            }
            let bytes = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            serde_json::from_slice::<Answer>(&bytes).map_err(|e| format!("an answer outside the contract: {e}"))
        };
        match tokio::time::timeout(wait, asked).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {}", humantime::format_duration(round_ms(wait)))),
        }
    }
}

/// One webhook's verdict on the body: counted, and applied unless the guard only logs.
fn apply(
    content: &ContentGuards,
    request: &GuardedRequest<'_>,
    guard: &str,
    action: GuardAction,
    answer: Answer,
    body: &mut Bytes,
) -> Result<(), GatewayError> {
    let logging = action == GuardAction::Log;
    match answer.action {
        Action::Allow => Ok(()),
        Action::Block => {
            content.count(request, guard, "webhook", if logging { "log" } else { "block" });
            if logging {
                return Ok(());
            }
            let reason = answer.reason.as_deref().map(|r| r.chars().take(200).collect::<String>());
            let reason = match reason {
                Some(r) if !r.is_empty() => format!("guardrail `{guard}` ({r})"),
                _ => format!("guardrail `{guard}`"),
            };
            Err(super::blocked("", &reason))
        }
        Action::Mask => {
            content.count(request, guard, "webhook", if logging { "log" } else { "mask" });
            if logging {
                return Ok(());
            }
            let mut replacements = answer.replacements.into_iter();
            if let Some(masked) = rewrite_texts(body, NOT_TEXT, |_| replacements.next().flatten()) {
                *body = Bytes::from(masked);
            }
            Ok(())
        }
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}
