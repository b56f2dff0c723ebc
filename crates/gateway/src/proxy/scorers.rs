//! Scorers of an experiment's answers, off the request path, on a sample: a judge model (asked
//! with the request and the answer, or both answers of a shadow pair, through the gateway) and a
//! webhook. Their scores are stored per request and variant, like feedback.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderValue;
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{json, Value};
use switchyard_experiments::spec::SHADOW;
use switchyard_experiments::{JudgeSpec, WebhookSpec};

use super::experiment::{Compared, Context};
use super::internal::{call_internal, InternalCall};
use crate::auth::{Identity, Principal};
use crate::endpoint::Endpoint;
use crate::store::ScoreRow;

const MAX_ANSWER_BYTES: usize = 1 << 20;

pub(super) async fn score(ctx: &Context, compared: &Compared, judge: bool, webhook: bool) {
    let spec = &ctx.assignment.live.spec;
    if let Some(j) = spec.judge.as_ref().filter(|_| judge) {
        match ask_judge(ctx, j, compared).await {
            Ok(scores) => store_scores(ctx, "judge", &j.name, scores).await,
            Err(why) => tracing::warn!(experiment = %spec.name, "the judge gave no score: {why}"),
        }
    }
    if let Some(w) = spec.webhook.as_ref().filter(|_| webhook) {
        match ask_webhook(ctx, w, compared).await {
            Ok(scores) => {
                for (name, primary, shadow) in scores {
                    store_scores(ctx, "webhook", &name, (primary, shadow)).await;
                }
            }
            Err(why) => tracing::warn!(experiment = %spec.name, "the scoring webhook gave no score: {why}"),
        }
    }
}

/// The primary's score and, for a pair, the shadow's.
type Scores = (Option<f64>, Option<f64>);

async fn store_scores(ctx: &Context, source: &str, name: &str, (primary, shadow): Scores) {
    let Some(store) = &ctx.app.store else { return };
    let a = &ctx.assignment;
    let key = ctx.app.experiments.recent(&ctx.request_id).and_then(|r| r.key);
    let rows = [
        primary.map(|v| (ctx.request_id.clone(), a.variant_name().to_owned(), v)),
        shadow.map(|v| (format!("{}-{SHADOW}", ctx.request_id), SHADOW.to_owned(), v)),
    ];
    for (request_id, variant, value) in rows.into_iter().flatten() {
        let row = ScoreRow {
            request_id,
            name: name.to_owned(),
            source: source.to_owned(),
            experiment: a.experiment().to_owned(),
            variant,
            value,
            key_id: key.clone(),
            ts_ms: ctx.app.clock.unix_ms(),
        };
        if let Err(e) = store.put_score(&row).await {
            tracing::warn!(error = %e, "a score could not be stored");
        }
    }
}

/// Ask the judge: one answer scored `{"score": S}`, or a pair `{"a": A, "b": B}`, each in [0, 1].
async fn ask_judge(ctx: &Context, judge: &JudgeSpec, compared: &Compared) -> Result<Scores, String> {
    let request = compared.request.as_deref().ok_or("the request has no text to judge")?;
    let primary = compared.primary.as_deref().ok_or("the answer did not end whole")?;
    let (task, reply) = match compared.shadow.as_deref() {
        Some(shadow) => (
            format!("Request:\n{request}\nAnswer A:\n{primary}\n\nAnswer B:\n{shadow}\n"),
            "Score each answer from 0 to 1. Reply with JSON only: {\"a\": SCORE_A, \"b\": SCORE_B}",
        ),
        None => (
            format!("Request:\n{request}\nAnswer:\n{primary}\n"),
            "Score the answer from 0 to 1. Reply with JSON only: {\"score\": SCORE}",
        ),
    };
    let body = json!({
        "model": judge.model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": format!("{}\n\n{reply}", judge.rubric)},
            {"role": "user", "content": task},
        ],
    });
    let started = Instant::now();
    let call = InternalCall {
        endpoint: Endpoint::ChatCompletions,
        identity: Identity::from(Principal::Master),
        body: Bytes::from(body.to_string()),
        deadline: started + ctx.app.config.timeouts.request,
        request_id: HeaderValue::from_str(&format!("{}-judge", ctx.request_id))
            .unwrap_or_else(|_| HeaderValue::from_static("judge")),
        guard_call: None,
        batch: None,
        experiment: Some((ctx.assignment.experiment(), "judge")),
    };
    let (status, answer) = call_internal(&ctx.app, call).await;
    if !status.is_success() {
        return Err(format!("the judge answered {status}"));
    }
    let reply: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
    let content = reply["choices"][0]["message"]["content"].as_str().ok_or("the judge's reply has no text")?;
    let verdict = json_in(content).ok_or_else(|| format!("no JSON in the judge's reply `{content}`"))?;
    let unit = |v: &Value| v.as_f64().map(|x| x.clamp(0.0, 1.0));
    match compared.shadow {
        Some(_) => Ok((unit(&verdict["a"]), unit(&verdict["b"]))),
        None => Ok((unit(&verdict["score"]), None)),
    }
}

/// The first JSON object in a model's reply (which may wrap it in prose or a code fence).
fn json_in(text: &str) -> Option<Value> {
    let (start, end) = (text.find('{')?, text.rfind('}')?);
    serde_json::from_str(text.get(start..=end)?).ok()
}

/// POST the request and answers; it answers `{"score": x}` (the hook's own name),
/// `{"scores": {NAME: x}}`, and for a pair optionally `{"shadow": {"score": y}}` or
/// `{"shadow": {"scores": {...}}}`.
async fn ask_webhook(
    ctx: &Context,
    hook: &WebhookSpec,
    compared: &Compared,
) -> Result<Vec<(String, Option<f64>, Option<f64>)>, String> {
    let a = &ctx.assignment;
    let mut payload = json!({
        "experiment": a.experiment(),
        "request_id": ctx.request_id,
        "variant": a.variant_name(),
        "model": a.model(),
        "request": compared.request,
        "answer": compared.primary,
    });
    if let Some(model) = a.shadow_model() {
        payload["shadow"] = json!({"model": model, "answer": compared.shadow});
    }
    let mut req = http::Request::post(hook.url.as_str()).header(http::header::CONTENT_TYPE, "application/json");
    for (name, value) in &hook.headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let req = req.body(Full::new(Bytes::from(payload.to_string()))).map_err(|e| e.to_string())?;
    let wait =
        hook.timeout.as_deref().and_then(|t| humantime::parse_duration(t).ok()).unwrap_or(Duration::from_secs(10));
    let asked = async {
        let resp = ctx.app.client.request(req).await.map_err(|e| format!("unreachable: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("answered {}", resp.status()));
        }
        let bytes = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        serde_json::from_slice::<Value>(&bytes).map_err(|e| format!("an answer outside the contract: {e}"))
    };
    let answer = tokio::time::timeout(wait, asked).await.map_err(|_| format!("no answer within {wait:?}"))??;
    let named = |v: &Value| -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = Vec::new();
        if let Some(x) = v["score"].as_f64() {
            out.push((hook.name.clone(), x));
        }
        if let Some(map) = v["scores"].as_object() {
            out.extend(map.iter().filter_map(|(k, x)| Some((k.clone(), x.as_f64()?))));
        }
        out
    };
    let shadow = named(&answer["shadow"]);
    let mut scores: Vec<(String, Option<f64>, Option<f64>)> =
        named(&answer).into_iter().map(|(name, x)| (name, Some(x), None)).collect();
    for (name, y) in shadow {
        match scores.iter_mut().find(|(n, _, _)| *n == name) {
            Some(entry) => entry.2 = Some(y),
            None => scores.push((name, None, Some(y))),
        }
    }
    Ok(scores)
}
