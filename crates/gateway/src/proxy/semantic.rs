//! The cache phase's second layer, on an exact miss: the question embedded with
//! `cache.semantic.embedding_model` through the gateway's own routing and accounting, the
//! nearest stored questions of its partition found, and the first that passes the checks
//! (`switchyard_semcache::verify`, word embeddings for words only one side has, and the
//! verifying model when one is configured) answers, rendered for the client's API. A miss
//! leaves what stores its answer once relayed whole.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::HeaderValue;
use serde_json::{json, Value};
use switchyard_semcache::verify::Side;
use switchyard_semcache::{compare, terms_match, Candidate, Check, Comparison};

use super::cached::{Cached, Stored};
use super::internal::{call_internal, InternalCall};
use super::{Call, Exchange};
use crate::app::App;
use crate::auth::{Identity, Principal};
use crate::cache::semantic::{Pending, Probe, SemanticCache, StoredAnswer};
use crate::config::{SemanticConfig, VerifyApi};
use crate::endpoint::Endpoint;

/// `x-switchyard-cache-threshold`: this request's own threshold, where the operator allows it.
static THRESHOLD_HEADER: &str = "x-switchyard-cache-threshold";
/// Marks the layer's own calls (embeddings, verification) in their usage records.
const OWN_CALLS: &str = "cache.semantic";

/// Look the request up; a hit comes back ready to send. On a miss, `cached` is left with what
/// stores the answer and what `x-switchyard-cache` says.
pub(super) async fn lookup(
    call: &Call<'_>,
    identity: &Identity,
    exchange: &mut Exchange,
    cached: &mut Cached,
) -> Option<Stored> {
    let app = call.app;
    let (cache, config) = (app.semantic.as_ref()?, app.config.cache.semantic.as_deref()?);
    let model = exchange.routed.model.clone();
    let probe =
        Probe::of(config, call.endpoint, exchange.bodies.decoded().ok()?.chat()?, identity.key(), &model).ok()?;
    let vector = match embed(app, config, &[probe.question.as_str()], call.deadline).await {
        Ok(mut vectors) if vectors.len() == 1 => vectors.remove(0),
        other => {
            cache.counters.errors.fetch_add(1, Relaxed);
            tracing::debug!(error = ?other.err(), "semantic cache: the question could not be embedded");
            return None;
        }
    };
    if cached.reads() {
        let found = search(call, cache, config, &probe, &vector).await;
        if let Some((candidate, answer)) = found.hit {
            cache.counters.hits.fetch_add(1, Relaxed);
            return respond(call, exchange, cache, &candidate, answer);
        }
        cache.counters.misses.fetch_add(1, Relaxed);
        cached.miss_note = found.rejected.and_then(|(similarity, check)| {
            HeaderValue::try_from(format!("miss; similarity={similarity:.3}; rejected={}", check.name())).ok()
        });
    }
    if cached.stores() {
        let ttl_ms = config.ttl.as_millis() as i64;
        let pending =
            Pending { cache: cache.clone(), probe, vector, ttl_ms, store_tool_calls: config.store_tool_calls };
        *cached.semantic.lock().unwrap_or_else(|p| p.into_inner()) = Some(pending);
    }
    None
}

#[derive(Default)]
struct Found {
    hit: Option<(Candidate, StoredAnswer)>,
    /// The most similar candidate refused, and by which check.
    rejected: Option<(f32, Check)>,
}

/// The nearest candidates of the partition, checked most similar first.
async fn search(
    call: &Call<'_>,
    cache: &Arc<SemanticCache>,
    config: &SemanticConfig,
    probe: &Probe,
    vector: &[f32],
) -> Found {
    let threshold = request_threshold(call, config);
    let now = call.app.clock.unix_ms();
    let candidates = match cache.store.search(&probe.partition, vector, config.candidates, threshold, now).await {
        Ok(c) => c,
        Err(e) => {
            cache.counters.errors.fetch_add(1, Relaxed);
            tracing::warn!(error = %e, "semantic cache: the store could not be searched");
            return Found::default();
        }
    };
    let mut found = Found::default();
    for candidate in candidates {
        match check(call.app, config, &probe.question, &candidate.entry.question, call.deadline).await {
            Ok(()) => {
                if let Ok(answer) = serde_json::from_slice::<StoredAnswer>(&candidate.entry.answer) {
                    found.hit = Some((candidate, answer));
                    return found;
                }
            }
            Err(failed) => {
                cache.counters.reject(failed);
                found.rejected.get_or_insert((candidate.similarity, failed));
            }
        }
    }
    found
}

fn request_threshold(call: &Call<'_>, config: &SemanticConfig) -> f32 {
    let asked = call.headers.get(THRESHOLD_HEADER).and_then(|v| v.to_str().ok()?.trim().parse::<f32>().ok());
    match asked {
        Some(t) if config.threshold_header && (-1.0..=1.0).contains(&t) => t,
        _ => config.threshold,
    }
}

/// Whether `question` may be given the answer stored for `stored`: the lexical checks, word
/// embeddings for the content words only one has, then the verifying model.
pub(crate) async fn check(
    app: &Arc<App>,
    config: &SemanticConfig,
    question: &str,
    stored: &str,
    deadline: Instant,
) -> Result<(), Check> {
    if config.verify.lexical {
        let comparison = compare(question, stored);
        if let Some(failed) = comparison.failed {
            return Err(failed);
        }
        if comparison.needs_terms() && !terms_pass(app, config, &comparison, deadline).await {
            return Err(Check::Terms);
        }
    }
    match &config.verify.model {
        Some(model) if !verified_by_model(app, config, model, question, stored, deadline).await => Err(Check::Model),
        _ => Ok(()),
    }
}

/// The terms check, with one embedding call: both questions, each without each word only it
/// has, and every content word.
async fn terms_pass(app: &Arc<App>, config: &SemanticConfig, comparison: &Comparison, deadline: Instant) -> bool {
    let words = comparison.term_words();
    let unmatched: Vec<(Side, &String)> = comparison.unmatched().collect();
    let mut inputs: Vec<String> = vec![comparison.without(Side::A, ""), comparison.without(Side::B, "")];
    inputs.extend(unmatched.iter().map(|(side, w)| comparison.without(*side, w)));
    let words_at = inputs.len();
    inputs.extend(words.iter().map(|(_, written)| written.clone()));
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let Ok(vectors) = embed(app, config, &refs, deadline).await else { return false };
    let dot = switchyard_semcache::store::dot;
    let similarity = |a: &str, b: &str| {
        let (i, j) = (words.iter().position(|w| w.0 == a)?, words.iter().position(|w| w.0 == b)?);
        Some(dot(vectors.get(words_at + i)?, vectors.get(words_at + j)?))
    };
    let kept = |side: Side, word: &str| {
        let at = unmatched.iter().position(|(s, w)| *s == side && w.as_str() == word)?;
        let whole = if side == Side::A { &vectors[0] } else { &vectors[1] };
        Some(dot(whole, vectors.get(2 + at)?))
    };
    let (terms, salience) = (config.verify.terms, config.verify.salience);
    let passed = terms_match(comparison, terms, salience, &similarity, &kept);
    if !passed {
        let closest = |side: Side, w: &str| {
            let other = if side == Side::A { &comparison.content_b } else { &comparison.content_a };
            other.iter().filter(|o| o.as_str() != w).filter_map(|o| similarity(w, o)).fold(-1.0f32, f32::max)
        };
        let scores: Vec<String> = unmatched
            .iter()
            .map(|(side, w)| format!("{w}:{:.2}/{:.2}", closest(*side, w), kept(*side, w).unwrap_or(-1.0)))
            .collect();
        tracing::debug!(question = %inputs[0], stored = %inputs[1], only = ?scores, "semantic cache: terms refused");
    }
    passed
}

/// Ask the verifying model: a reranker's relevance score, or a chat model's SAME/DIFFERENT.
async fn verified_by_model(
    app: &Arc<App>,
    config: &SemanticConfig,
    model: &str,
    question: &str,
    stored: &str,
    deadline: Instant,
) -> bool {
    let (endpoint, body) = match config.verify.api {
        VerifyApi::Rerank => (Endpoint::Rerank, json!({"model": model, "query": question, "documents": [stored]})),
        VerifyApi::Chat => (
            Endpoint::ChatCompletions,
            json!({"model": model, "temperature": 0, "max_tokens": 4, "messages": [
                {"role": "system", "content": "You decide whether two user questions ask for the same answer. Reply with one word: SAME or DIFFERENT."},
                {"role": "user", "content": format!("Question 1: {question}\nQuestion 2: {stored}")}
            ]}),
        ),
    };
    let Ok(answer) = own_call(app, endpoint, body, deadline).await else { return false };
    match config.verify.api {
        VerifyApi::Rerank => {
            answer["results"][0]["relevance_score"].as_f64().is_some_and(|s| s >= config.verify.min_score)
        }
        VerifyApi::Chat => answer["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|t| t.trim_start().to_ascii_uppercase().starts_with("SAME")),
    }
}

/// Unit-length embeddings of `inputs`, in order.
pub(crate) async fn embed(
    app: &Arc<App>,
    config: &SemanticConfig,
    inputs: &[&str],
    deadline: Instant,
) -> Result<Vec<Vec<f32>>, String> {
    let body = json!({"model": config.embedding_model, "input": inputs, "encoding_format": "float"});
    let answer = own_call(app, Endpoint::Embeddings, body, deadline).await?;
    let mut data: Vec<&Value> = answer["data"].as_array().ok_or("no data in the embeddings answer")?.iter().collect();
    data.sort_by_key(|d| d["index"].as_u64().unwrap_or(0));
    let vectors: Vec<Vec<f32>> = data
        .iter()
        .map(|d| {
            let mut v: Vec<f32> = d["embedding"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_f64()).map(|x| x as f32).collect())
                .unwrap_or_default();
            switchyard_semcache::store::normalize(&mut v);
            v
        })
        .collect();
    if vectors.len() != inputs.len() || vectors.iter().any(Vec::is_empty) {
        return Err(format!("{} embeddings for {} inputs", vectors.len(), inputs.len()));
    }
    Ok(vectors)
}

/// One of the layer's own calls through the whole pipeline, as the gateway itself.
async fn own_call(app: &Arc<App>, endpoint: Endpoint, body: Value, deadline: Instant) -> Result<Value, String> {
    let call = InternalCall {
        endpoint,
        identity: Identity::from(Principal::Master),
        body: Bytes::from(body.to_string()),
        deadline,
        request_id: crate::http::request_id::generate(),
        guard_call: Some(OWN_CALLS),
        batch: None,
        experiment: None,
    };
    match call_internal(app, call).await {
        (status, body) if status.is_success() => serde_json::from_slice(&body).map_err(|e| e.to_string()),
        (status, _) => Err(format!("{endpoint:?} answered {status}")),
    }
}

/// The hit, rendered for the client's API (whole or streamed).
fn respond(
    call: &Call<'_>,
    exchange: &mut Exchange,
    cache: &SemanticCache,
    candidate: &Candidate,
    answer: StoredAnswer,
) -> Option<Stored> {
    let id: String =
        call.request_id.to_str().unwrap_or_default().chars().filter(char::is_ascii_alphanumeric).take(32).collect();
    let created = call.app.clock.unix_secs().max(0) as u64;
    let response = answer.response(id, created);
    let request = exchange.bodies.decoded().ok()?;
    let body = crate::translate::replay::render(call.endpoint, call.stream, &response, request)?;
    cache.counters.saved_tokens.fetch_add(answer.prompt_tokens + answer.completion_tokens, Relaxed);
    let saved_usd = call.app.config.cost(
        &answer.model,
        &crate::config::Counted {
            prompt: answer.prompt_tokens,
            cache_read: 0,
            cache_write: 0,
            completion: answer.completion_tokens,
        },
    );
    cache.counters.saved_micro_usd.fetch_add((saved_usd * 1e6) as u64, Relaxed);
    let verdict = format!("semantic-hit; similarity={:.3}; entry={:016x}", candidate.similarity, candidate.entry.id);
    Some(Stored {
        body: Bytes::from(body),
        content_type: Some(super::translation::content_type(call.endpoint, call.stream)),
        model: answer.model.clone().into(),
        stored_ms: candidate.entry.stored_ms,
        verdict: HeaderValue::try_from(verdict).ok()?,
        from_redis: false,
        saved: Some((answer.prompt_tokens, answer.completion_tokens)),
    })
}

/// One labelled pair as the layer judges it (`switchyard cache calibrate`): the two questions'
/// cosine similarity, and whether the checks would let one be served the other's answer.
pub async fn score_pair(app: &Arc<App>, a: &str, b: &str) -> Result<switchyard_semcache::calibrate::Scored, String> {
    let config = app.config.cache.semantic.as_deref().ok_or("the config has no cache.semantic")?;
    let deadline = Instant::now() + app.config.timeouts.request;
    let vectors = embed(app, config, &[a, b], deadline).await?;
    let similarity = switchyard_semcache::store::dot(&vectors[0], &vectors[1]);
    let verified = check(app, config, a, b, deadline).await;
    Ok(switchyard_semcache::calibrate::Scored { same: false, similarity, verified })
}
