//! Webhook guards (`type: webhook`): a request's texts are POSTed to an HTTP service of the
//! operator's, which answers `{"action": "allow" | "mask" | "block", "replacements": [...],
//! "reason": "..."}`. `replacements` is aligned with the `texts` sent (a string replaces that
//! text, `null` keeps it). The webhook is asked once per request, before routing
//! (`guard/remote.rs`): a failover's retries reuse the masked body, so a verdict is never applied
//! twice. It must answer within its `timeout` and the request's own deadline; when it cannot
//! (down, slow, an error status, an answer that is not the contract), `on_error: closed` refuses
//! the request (503 `guardrail_unavailable`) and `open` lets it through. `action: log` makes a
//! webhook's verdicts counted only, never applied.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use serde::Deserialize;

use super::content::ContentGuards;
use super::json_text::{not_text, rewrite_texts};
use super::GuardedRequest;
use crate::config::guardrails::{GuardAction, Webhook};
use crate::error::GatewayError;
use crate::upstream::UpstreamClient;

/// The largest answer read from a webhook (its replacements included).
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// What a webhook answers.
#[derive(Deserialize)]
pub(super) struct Answer {
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

/// Ask one webhook about a request's `texts`, within its timeout and the request's deadline.
pub(super) async fn ask(
    client: &UpstreamClient,
    hook: &Webhook,
    guard: &str,
    request: &GuardedRequest<'_>,
    texts: &[String],
    direction: &str,
    deadline: Instant,
) -> Result<Answer, String> {
    let mut payload = serde_json::json!({
        "guard": guard,
        "direction": direction,
        "model": request.requested,
        "key": request.key,
        "team": request.team,
        "texts": texts,
    });
    if let Some(tool) = request.tool {
        payload["tool"] = tool.into();
    }
    let mut req = http::Request::post(hook.url.clone())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(payload.to_string())))
        .map_err(|e| e.to_string())?;
    req.headers_mut().extend(hook.headers.iter().cloned());
    let wait = hook.timeout.min(deadline.saturating_duration_since(Instant::now()));
    let asked = async {
        let resp = client.request(req).await.map_err(|e| format!("unreachable: {e}"))?;
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
        Err(_) => Err(super::remote::no_answer_within(wait)),
    }
}

/// One webhook's verdict on the body: counted, and applied unless the guard only logs.
pub(super) fn apply(
    content: &ContentGuards,
    request: &GuardedRequest<'_>,
    guard: &str,
    action: GuardAction,
    answer: Answer,
    body: &mut Bytes,
) -> Result<(), GatewayError> {
    if let Some(replacements) = decide(content, request, guard, action, answer)? {
        let mut replacements = replacements.into_iter();
        if let Some(masked) = rewrite_texts(body, not_text, |_| replacements.next().flatten()) {
            *body = Bytes::from(masked);
        }
    }
    Ok(())
}

/// One webhook's verdict, counted: the replacements to make when it masks (and the guard does
/// not only log), or the block.
pub(super) fn decide(
    content: &ContentGuards,
    request: &GuardedRequest<'_>,
    guard: &str,
    action: GuardAction,
    answer: Answer,
) -> Result<Option<Vec<Option<String>>>, GatewayError> {
    let logging = action == GuardAction::Log;
    match answer.action {
        Action::Allow => Ok(None),
        Action::Block => {
            content.count(request, guard, "webhook", if logging { "log" } else { "block" });
            if logging {
                return Ok(None);
            }
            let reason = answer.reason.as_deref().map(|r| r.chars().take(200).collect::<String>());
            let reason = crate::error::guard_reason(guard, reason.as_deref().filter(|r| !r.is_empty()));
            Err(super::blocked("", &reason))
        }
        Action::Mask => {
            content.count(request, guard, "webhook", if logging { "log" } else { "mask" });
            Ok((!logging).then_some(answer.replacements))
        }
    }
}
