//! The OpenAI-compatible API's endpoints beyond chat, completions and embeddings, in the shapes
//! vLLM and OpenAI answer: rerank (`/v1/rerank`, `/rerank`, `/v2/rerank`), score (`/v1/score`,
//! `/score`), moderations, image generation, vLLM's `/tokenize` and `/detokenize`, and routing
//! of the audio endpoints (served by [`super::audio`]). Every answer is deterministic: scores are
//! the share of the query's words found in a text, ids derive from the request body.

use std::collections::HashSet;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Map, Value};

use super::audio::{self, Task};
use super::body::MockBody;
use super::handlers::{body_id, gate, Model, Rejection, State};
use super::openai;
use super::render::{self, CREATED};
use super::tokens;

/// A tiny valid PNG (1x1, RGBA), base64: every generated image.
const PNG_1X1_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// The model moderations name when the request names none.
const MODERATION_MODEL: &str = "omni-moderation-latest";
/// Every category of OpenAI's moderation results.
const CATEGORIES: [&str; 13] = [
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
];
/// vLLM's `max_model_len` as `/tokenize` reports it.
const MAX_MODEL_LEN: u64 = 8192;

/// An endpoint served here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extra {
    Rerank,
    Score,
    Moderations,
    Images,
    /// `/v1/images/edits`: a multipart form, answered as a generation.
    ImageEdits,
    Tokenize,
    Detokenize,
    Audio(Task),
    Speech,
}

/// The endpoint a POST to `path` reaches, if it is one of these.
pub(crate) fn route(path: &str) -> Option<Extra> {
    Some(match path {
        "/v1/rerank" | "/rerank" | "/v2/rerank" => Extra::Rerank,
        "/v1/score" | "/score" => Extra::Score,
        "/v1/moderations" => Extra::Moderations,
        "/v1/images/generations" => Extra::Images,
        "/v1/images/edits" => Extra::ImageEdits,
        "/tokenize" => Extra::Tokenize,
        "/detokenize" => Extra::Detokenize,
        "/v1/audio/transcriptions" => Extra::Audio(Task::Transcribe),
        "/v1/audio/translations" => Extra::Audio(Task::Translate),
        "/v1/audio/speech" => Extra::Speech,
        _ => return None,
    })
}

/// Answers a POST of `extra` whose body is `bytes`.
pub(crate) async fn serve(state: &State, extra: Extra, headers: &HeaderMap, bytes: &Bytes) -> Response<MockBody> {
    let answer = match extra {
        Extra::Rerank => rerank(state, bytes).await,
        Extra::Score => score(state, bytes).await,
        Extra::Moderations => moderations(state, bytes).await,
        Extra::Images => images(state, bytes).await,
        Extra::ImageEdits => image_edits(state, headers, bytes).await,
        Extra::Tokenize => tokenize(state, bytes).await,
        Extra::Detokenize => detokenize(state, bytes).await,
        Extra::Audio(task) => audio::transcribe(state, headers, bytes, task).await,
        Extra::Speech => audio::speech(state, bytes).await,
    };
    answer.unwrap_or_else(|rejection| *rejection)
}

/// A 400 in OpenAI's shape naming the offending `param`.
pub(super) fn invalid(state: &State, message: &str, param: Option<&str>) -> Rejection {
    Box::new(openai::bad_request(state, message, param))
}

/// The body as a JSON object.
pub(super) fn object(state: &State, bytes: &[u8]) -> Result<Map<String, Value>, Rejection> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(body)) => Ok(body),
        _ => Err(invalid(state, "request body is not a valid JSON object", None)),
    }
}

/// A served model named by `model` (400 when it is not a string, 404 when it is not served).
pub(super) fn model<'s>(state: &'s State, model: Option<&Value>) -> Result<&'s Model, Rejection> {
    let raw = model.and_then(|m| serde_json::value::to_raw_value(m).ok());
    openai::resolve_model(state, raw.as_deref())
}

/// A required string field.
pub(super) fn required_str<'b>(state: &State, body: &'b Map<String, Value>, field: &str) -> Result<&'b str, Rejection> {
    body.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(state, &format!("you must provide a `{field}` parameter (a string)"), Some(field)))
}

/// A string or an array of strings.
fn strings(value: &Value) -> Option<Vec<&str>> {
    match value {
        Value::String(s) => Some(vec![s.as_str()]),
        Value::Array(items) => items.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

/// Rerank documents: strings, or objects carrying their `text`.
fn documents(value: &Value) -> Option<Vec<&str>> {
    let items = value.as_array()?;
    items.iter().map(|d| d.as_str().or_else(|| d.get("text").and_then(Value::as_str))).collect()
}

/// The token estimate of one text, as embeddings count it.
fn text_tokens(text: &str) -> u64 {
    render::prompt_tokens(text.len())
}

/// Lower-cased alphanumeric words of `text`.
fn words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// The share (0..=1) of the query's distinct words found in `text`.
pub(super) fn relevance(query: &str, text: &str) -> f64 {
    let query = words(query);
    if query.is_empty() {
        return 0.0;
    }
    let text = words(text);
    query.iter().filter(|w| text.contains(*w)).count() as f64 / query.len() as f64
}

fn ok_json(state: &State, body: &Value) -> Response<MockBody> {
    state.json(StatusCode::OK, serde_json::to_vec(body).unwrap_or_default())
}

/// An optional non-negative integer field.
fn optional_u64(state: &State, body: &Map<String, Value>, field: &str) -> Result<Option<u64>, Rejection> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| invalid(state, &format!("`{field}` must be a non-negative integer"), Some(field))),
    }
}

async fn rerank(state: &State, bytes: &[u8]) -> Result<Response<MockBody>, Rejection> {
    let body = object(state, bytes)?;
    let model = model(state, body.get("model"))?;
    let query = required_str(state, &body, "query")?;
    let docs = body.get("documents").and_then(documents).ok_or_else(|| {
        let msg = "`documents` must be an array of strings or of {\"text\": string} objects";
        invalid(state, msg, Some("documents"))
    })?;
    // As vLLM: 0 (or none) means every document.
    let top_n = match optional_u64(state, &body, "top_n")? {
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX).min(docs.len()),
        _ => docs.len(),
    };
    let return_documents = match body.get("return_documents") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid(state, "`return_documents` must be a boolean", Some("return_documents"))),
    };
    gate(state, render::FAIL_BODY).await?;
    let mut ranked: Vec<(usize, f64)> = docs.iter().enumerate().map(|(i, d)| (i, relevance(query, d))).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(top_n);
    let results: Vec<Value> = ranked
        .iter()
        .map(|&(index, score)| {
            let mut result = json!({"index": index, "relevance_score": score});
            if return_documents {
                result["document"] = json!({"text": docs.get(index).copied().unwrap_or_default()});
            }
            result
        })
        .collect();
    let tokens = text_tokens(query) + docs.iter().map(|d| text_tokens(d)).sum::<u64>();
    Ok(ok_json(
        state,
        &json!({
            "id": format!("rerank-{}", body_id(bytes)),
            "model": model.name,
            "usage": {"total_tokens": tokens},
            "results": results,
        }),
    ))
}

/// The first of the fields present (the old spelling, then the new).
fn either<'b>(body: &'b Map<String, Value>, old: &str, new: &str) -> Option<&'b Value> {
    body.get(old).filter(|v| !v.is_null()).or_else(|| body.get(new))
}

async fn score(state: &State, bytes: &[u8]) -> Result<Response<MockBody>, Rejection> {
    let body = object(state, bytes)?;
    let model = model(state, body.get("model"))?;
    let texts = |old: &str, new: &str| {
        either(&body, old, new).and_then(strings).filter(|t| !t.is_empty()).ok_or_else(|| {
            invalid(state, &format!("`{old}` must be a string or a non-empty array of strings"), Some(old))
        })
    };
    let (left, right) = (texts("text_1", "queries")?, texts("text_2", "documents")?);
    let pairs: Vec<(&str, &str)> = match left.as_slice() {
        [one] => right.iter().map(|r| (*one, *r)).collect(),
        _ if left.len() == right.len() => left.iter().copied().zip(right.iter().copied()).collect(),
        _ => {
            let msg = "`text_1` must hold one text or as many texts as `text_2`";
            return Err(invalid(state, msg, Some("text_1")));
        }
    };
    gate(state, render::FAIL_BODY).await?;
    let data: Vec<Value> = pairs
        .iter()
        .enumerate()
        .map(|(index, (l, r))| json!({"index": index, "object": "score", "score": relevance(l, r)}))
        .collect();
    let tokens: u64 = pairs.iter().map(|(l, r)| text_tokens(l) + text_tokens(r)).sum();
    Ok(ok_json(
        state,
        &json!({
            "id": format!("score-{}", body_id(bytes)),
            "object": "list",
            "created": CREATED,
            "model": model.name,
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
    ))
}

/// One moderation result: violence flagged when the text speaks of attacking or killing.
pub(super) fn moderation(text: &str) -> Value {
    let lower = text.to_lowercase();
    let violent = lower.contains("attack") || lower.contains("kill");
    let (mut categories, mut scores, mut applied) = (Map::new(), Map::new(), Map::new());
    for category in CATEGORIES {
        let hit = violent && category == "violence";
        categories.insert(category.to_owned(), json!(hit));
        scores.insert(category.to_owned(), json!(if hit { 0.9 } else { 0.01 }));
        applied.insert(category.to_owned(), json!(["text"]));
    }
    json!({
        "flagged": violent,
        "categories": categories,
        "category_scores": scores,
        "category_applied_input_types": applied,
    })
}

async fn moderations(state: &State, bytes: &[u8]) -> Result<Response<MockBody>, Rejection> {
    let body = object(state, bytes)?;
    let name = match body.get("model") {
        None | Some(Value::Null) => MODERATION_MODEL,
        named => model(state, named)?.name.as_str(),
    };
    let inputs = body
        .get("input")
        .and_then(strings)
        .ok_or_else(|| invalid(state, "`input` must be a string or an array of strings", Some("input")))?;
    gate(state, render::FAIL_BODY).await?;
    let results: Vec<Value> = inputs.iter().map(|text| moderation(text)).collect();
    Ok(ok_json(state, &json!({"id": format!("modr-{}", body_id(bytes)), "model": name, "results": results})))
}

async fn images(state: &State, bytes: &[u8]) -> Result<Response<MockBody>, Rejection> {
    let body = object(state, bytes)?;
    let model = model(state, body.get("model"))?;
    let prompt = required_str(state, &body, "prompt")?;
    let n = optional_u64(state, &body, "n")?.unwrap_or(1);
    if !(1..=10).contains(&n) {
        return Err(invalid(state, "`n` must be between 1 and 10", Some("n")));
    }
    let url = match body.get("response_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "b64_json" => false,
        Some(Value::String(f)) if f == "url" => true,
        Some(_) => {
            return Err(invalid(state, "`response_format` must be `url` or `b64_json`", Some("response_format")))
        }
    };
    gate(state, render::FAIL_BODY).await?;
    let data: Vec<Value> = (0..n)
        .map(|i| {
            if url {
                json!({"url": format!("https://mock.invalid/image/{i}.png"), "revised_prompt": prompt})
            } else {
                json!({"b64_json": PNG_1X1_B64, "revised_prompt": prompt})
            }
        })
        .collect();
    let mut answer = json!({"created": CREATED, "data": data});
    if model.name.starts_with("gpt-image") {
        let tokens = text_tokens(prompt);
        answer["usage"] = json!({"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens});
    }
    Ok(ok_json(state, &answer))
}

/// An image edit: a multipart form with the image(s), a `prompt` and a `model`, answered as the
/// generation its fields describe.
async fn image_edits(state: &State, headers: &HeaderMap, bytes: &[u8]) -> Result<Response<MockBody>, Rejection> {
    let content_type = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let parts = content_type.and_then(audio::boundary).and_then(|b| audio::multipart(bytes, b));
    let Some(parts) = parts else { return Err(invalid(state, "the request must be a multipart/form-data form", None)) };
    if !parts.iter().any(|p| p.name == "image" || p.name == "image[]") {
        return Err(invalid(state, "you must provide an `image`", Some("image")));
    }
    let mut fields = Map::new();
    for part in parts.iter().filter(|p| ["model", "prompt", "n", "response_format"].contains(&p.name.as_str())) {
        let text = String::from_utf8_lossy(part.data).into_owned();
        let value = match part.name.as_str() {
            "n" => text.trim().parse::<u64>().map_or(Value::String(text), Value::from),
            _ => Value::String(text),
        };
        fields.insert(part.name.clone(), value);
    }
    images(state, &serde_json::to_vec(&Value::Object(fields)).unwrap_or_default()).await
}

/// vLLM's `/tokenize` and `/detokenize` name a model optionally; a named one must be served.
fn optional_model(state: &State, body: &Map<String, Value>) -> Result<(), Rejection> {
    match body.get("model") {
        None | Some(Value::Null) => Ok(()),
        named => model(state, named).map(|_| ()),
    }
}

async fn tokenize(state: &State, bytes: &[u8]) -> Result<Response<MockBody>, Rejection> {
    let body = object(state, bytes)?;
    optional_model(state, &body)?;
    let prompt_ok = body.get("prompt").and_then(strings).is_some();
    let messages_ok = body.get("messages").is_some_and(Value::is_array);
    if !prompt_ok && !messages_ok {
        let msg = "you must provide a `prompt` (a string) or `messages` (an array)";
        return Err(invalid(state, msg, Some("prompt")));
    }
    gate(state, render::FAIL_BODY).await?;
    // The KV-cache mock's tokeniser: a message's tokens are its role separator then 4-byte chunks.
    let ids = tokens::prompt_tokens(&Value::Object(body));
    Ok(ok_json(state, &json!({"count": ids.len(), "max_model_len": MAX_MODEL_LEN, "tokens": ids})))
}

/// The text of token ids as [`tokens`] makes them: each id's little-endian bytes up to the first
/// NUL, role separators left out.
pub(super) fn detokenized(ids: &[u32]) -> String {
    let mut bytes = Vec::with_capacity(ids.len() * tokens::BYTES_PER_TOKEN);
    for id in ids {
        let chunk = id.to_le_bytes();
        if chunk[0] == 0xFF {
            continue;
        }
        bytes.extend(chunk.iter().take_while(|b| **b != 0));
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn detokenize(state: &State, bytes: &[u8]) -> Result<Response<MockBody>, Rejection> {
    let body = object(state, bytes)?;
    optional_model(state, &body)?;
    let ids: Option<Vec<u32>> = body
        .get("tokens")
        .and_then(Value::as_array)
        .and_then(|ids| ids.iter().map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok())).collect());
    let Some(ids) = ids else {
        return Err(invalid(state, "`tokens` must be an array of token ids (0..2^32)", Some("tokens")));
    };
    gate(state, render::FAIL_BODY).await?;
    Ok(ok_json(state, &json!({"prompt": detokenized(&ids)})))
}
