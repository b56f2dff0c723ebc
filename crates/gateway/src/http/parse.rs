//! Request bodies: read with a size limit, parse only the fields routing needs, and rewrite
//! `model` in place (a byte splice, never a re-serialisation) when an alias resolved.

use std::borrow::Cow;
use std::future::{poll_fn, Future};
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::value::RawValue;
use switchyard_protocol::openai::RoutingFields;

use crate::config::{Config, Strategy};
use crate::endpoint::Endpoint;
use crate::error::GatewayError;

/// Read the whole request body, refusing more than `limit` bytes (early, by content-length, when
/// sent) and a body that takes longer than `deadline` to arrive (a slow POST holding a connection).
pub async fn read_body(
    headers: &http::HeaderMap,
    body: Incoming,
    limit: usize,
    deadline: std::time::Duration,
) -> Result<Bytes, GatewayError> {
    let declared =
        headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(GatewayError::PayloadTooLarge { limit });
    }
    let collected = collect_whole(body, limit, || deadline).await.map_err(|_| GatewayError::BodyTimeout)?;
    match collected {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(GatewayError::PayloadTooLarge { limit }),
        Err(_) => Err(GatewayError::bad_request("the request body could not be read", None)),
    }
}

/// `body` read whole, at most `limit` bytes. A body that is already here (the usual small request
/// read with its head, a whole answer ready with its headers) needs no timer: arming one costs more
/// than the rest of reading it. Only a body still on its way is given `wait()` more.
pub async fn collect_whole<B>(
    body: B,
    limit: usize,
    wait: impl FnOnce() -> std::time::Duration,
) -> Result<Result<Bytes, BoxError>, tokio::time::error::Elapsed>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut collect = std::pin::pin!(Limited::new(body, limit).collect());
    let first = poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await;
    let collected = match first {
        Poll::Ready(collected) => collected,
        Poll::Pending => tokio::time::timeout(wait(), collect).await?,
    };
    Ok(collected.map(|collected| collected.to_bytes()))
}

/// What a body's read fails with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What routing needs from a request.
#[derive(Debug)]
pub struct RoutedRequest {
    /// The model name after alias resolution: what backends are asked for.
    pub model: String,
    /// The model name the client sent (an alias, or the same as `model`).
    pub requested: String,
    /// `max_tokens` / `max_completion_tokens` when the client set one.
    pub max_tokens: Option<u64>,
    pub stream: bool,
    /// The body to send upstream (rewritten only when an alias resolved).
    pub body: Bytes,
    /// A session key from the body (`prompt_cache_key`, `user`, `metadata.session_id`,
    /// `metadata.user_id`), when sticky sessions are on.
    pub session: Option<String>,
    /// Chained block hashes of the prompt, when the routing strategy uses them.
    pub chain: Vec<u64>,
    /// What identifies the conversation at every turn (`conversation_root`), when a fleet shares
    /// cache affinity (`redis` with the cache-aware strategy).
    pub root: Option<u64>,
}

pub fn parse_request(endpoint: Endpoint, body: Bytes, config: &Config) -> Result<RoutedRequest, GatewayError> {
    parse_request_at(endpoint, None, body, config)
}

/// `parse_request` for a request whose path names the model (Gemini's
/// `/v1beta/models/{model}:generateContent`): `path_model`, not the body's, is routed, and an
/// alias is resolved without touching the body.
pub fn parse_request_at(
    endpoint: Endpoint,
    path_model: Option<&str>,
    body: Bytes,
    config: &Config,
) -> Result<RoutedRequest, GatewayError> {
    // serde would also accept a JSON array as a struct in sequence form; only objects are requests.
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(GatewayError::bad_request("the request body must be a JSON object", None));
    }
    let fields: RoutingFields = serde_json::from_slice(&body).map_err(|e| {
        let what =
            if e.is_data() { "the request body must be a JSON object" } else { "the request body is not valid JSON" };
        GatewayError::bad_request(format!("{what}: {e}"), None)
    })?;
    // The body's `model` (kept raw for an alias's splice), or the one the path names.
    let (model, raw_model): (Cow<str>, Option<&RawValue>) = match path_model {
        Some(model) => (Cow::Borrowed(model), None),
        None => {
            let raw = fields
                .model
                .ok_or_else(|| GatewayError::bad_request("you must provide a model parameter", Some("model")))?;
            let model = serde_json::from_str(raw.get())
                .map_err(|_| GatewayError::bad_request("`model` must be a string", Some("model")))?;
            (model, Some(raw))
        }
    };
    if model.is_empty() {
        return Err(GatewayError::bad_request("`model` must not be empty", Some("model")));
    }
    // Ollama streams unless told not to; every other API only when asked.
    let stream_default = matches!(endpoint, Endpoint::OllamaChat | Endpoint::OllamaGenerate);
    let stream = match &fields.stream {
        // Gemini streams by path, not by a field.
        _ if path_model.is_some() => endpoint == Endpoint::GeminiStream,
        None | Some(serde_json::Value::Null) => stream_default,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(_) => return Err(GatewayError::bad_request("`stream` must be a boolean", Some("stream"))),
    };
    let (field, name, must_be_array) = match endpoint {
        Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::CountTokens | Endpoint::OllamaChat => {
            (fields.messages, "messages", true)
        }
        Endpoint::Completions | Endpoint::ImagesGenerations => (fields.prompt, "prompt", false),
        Endpoint::Embeddings | Endpoint::OllamaEmbed | Endpoint::Responses | Endpoint::Moderations => {
            (fields.input, "input", false)
        }
        Endpoint::Rerank => (fields.documents, "documents", true),
        Endpoint::AudioSpeech => (fields.input, "input", false),
        Endpoint::GeminiGenerate | Endpoint::GeminiStream => (fields.contents, "contents", true),
        // `contents`, or a whole `generateContentRequest`.
        Endpoint::GeminiCountTokens => (None, "", false),
        // Ollama's generate may come without a prompt (it loads the model).
        Endpoint::OllamaGenerate
        | Endpoint::Models
        | Endpoint::Score
        | Endpoint::Tokenize
        | Endpoint::Detokenize
        | Endpoint::AudioTranscriptions
        | Endpoint::AudioTranslations
        | Endpoint::ImagesEdits
        | Endpoint::Passthrough
        | Endpoint::Realtime
        | Endpoint::Other => (None, "", false),
    };
    if !name.is_empty() {
        check_required(field, name, must_be_array)?;
    }
    if endpoint == Endpoint::Rerank {
        check_required(fields.query, "query", false)?;
    }
    let session = if config.affinity.sticky_sessions { body_session(&fields) } else { None };
    let chain = prompt_chain(endpoint, &fields, config);
    let root = (config.redis.is_some() && config.strategy == Strategy::CacheAware)
        .then(|| conversation_root(endpoint, &fields))
        .flatten();
    let resolved = config.resolve_alias(&model).to_owned();
    let body = match raw_model {
        Some(raw) if resolved != model => rewrite_model(&body, raw, &resolved)?,
        _ => body.clone(),
    };
    let max_tokens = [&fields.max_tokens, &fields.max_completion_tokens, &fields.max_output_tokens]
        .into_iter()
        .flatten()
        .find_map(|v| v.as_u64());
    Ok(RoutedRequest { model: resolved, requested: model.into_owned(), max_tokens, stream, body, session, chain, root })
}

/// A digest of what a conversation re-sends unchanged at every turn: its system prompt and its
/// messages up to the end of the first user message. Every turn of one conversation has the same
/// root, whichever instance receives it; conversations that share only a system prompt do not.
/// `None` where the request carries no such history (completions, a string `input`).
fn conversation_root(endpoint: Endpoint, fields: &RoutingFields<'_>) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Role<'a> {
        #[serde(borrow)]
        role: Option<Cow<'a, str>>,
    }
    let (system, messages) = match endpoint {
        Endpoint::Messages => (fields.system, fields.messages?),
        Endpoint::ChatCompletions | Endpoint::OllamaChat => (None, fields.messages?),
        Endpoint::Responses => (fields.instructions, fields.input?),
        _ => return None,
    };
    let all = messages.get();
    let items: Vec<&RawValue> = serde_json::from_str(all).ok()?;
    let first_user = items
        .iter()
        .find(|m| serde_json::from_str::<Role>(m.get()).ok().and_then(|r| r.role).as_deref() == Some("user"))?;
    // The item borrows from `all`: where it ends there is where the root ends.
    let start = (first_user.get().as_ptr() as usize).checked_sub(all.as_ptr() as usize)?;
    let root = all.as_bytes().get(..start + first_user.get().len())?;
    Some(crate::route::prefix::digest(&[system.map_or(&b""[..], |s| s.get().as_bytes()), root]))
}

/// The first session hint in the body: `prompt_cache_key`, `user`, `metadata.session_id`,
/// `metadata.user_id` (strings only).
fn body_session(fields: &RoutingFields<'_>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Metadata {
        session_id: Option<String>,
        user_id: Option<String>,
    }
    let text = |raw: Option<&RawValue>| raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok());
    text(fields.prompt_cache_key).or_else(|| text(fields.user)).filter(|s| !s.is_empty()).or_else(|| {
        let metadata: Metadata = serde_json::from_str(fields.metadata?.get()).ok()?;
        metadata.session_id.or(metadata.user_id).filter(|s| !s.is_empty())
    })
}

/// The prompt's chained block hashes (its system prompt, then its messages, as the client's
/// bytes), for the cache-aware strategy; the first 512 bytes' for the prefix-hash one.
fn prompt_chain(endpoint: Endpoint, fields: &RoutingFields<'_>, config: &Config) -> Vec<u64> {
    let Some(limit) = (match config.strategy {
        Strategy::CacheAware => Some(usize::MAX),
        Strategy::PrefixHash => Some(512),
        _ => None,
    }) else {
        return Vec::new();
    };
    let parts: [Option<&RawValue>; 2] = match endpoint {
        Endpoint::Messages | Endpoint::CountTokens => [fields.system, fields.messages],
        Endpoint::Responses => [fields.instructions, fields.input],
        Endpoint::OllamaGenerate => [fields.system, fields.prompt],
        Endpoint::ChatCompletions | Endpoint::OllamaChat => [None, fields.messages],
        Endpoint::Completions => [None, fields.prompt],
        _ => [None, None],
    };
    let mut left = limit;
    let bytes: Vec<&[u8]> = parts
        .iter()
        .flatten()
        .map(|raw| {
            let b = raw.get().as_bytes();
            let take = b.len().min(left);
            left -= take;
            &b[..take]
        })
        .collect();
    crate::route::prefix::chain(&bytes)
}

fn check_required(field: Option<&RawValue>, name: &'static str, must_be_array: bool) -> Result<(), GatewayError> {
    let param = Some(name);
    match field.map(|r| r.get().as_bytes().first().copied()) {
        None | Some(Some(b'n')) => Err(GatewayError::bad_request(format!("you must provide `{name}`"), param)),
        Some(Some(b'[')) => Ok(()),
        Some(_) if must_be_array => Err(GatewayError::bad_request(format!("`{name}` must be an array"), param)),
        Some(Some(b'"')) => Ok(()),
        Some(_) => Err(GatewayError::bad_request(format!("`{name}` must be a string or an array"), param)),
    }
}

/// `body` asking for `model` instead (a fallback model): only the `model` value's bytes change.
pub fn with_model(body: &Bytes, model: &str) -> Result<Bytes, GatewayError> {
    #[derive(serde::Deserialize)]
    struct Model<'a> {
        #[serde(borrow)]
        model: &'a RawValue,
    }
    let found: Model<'_> = serde_json::from_slice(body)
        .map_err(|_| GatewayError::bad_request("the request body could not be routed", Some("model")))?;
    rewrite_model(body, found.model, model)
}

/// Replace the bytes of the `model` value, found by where serde's borrowed `RawValue` points.
fn rewrite_model(body: &Bytes, raw: &RawValue, new_model: &str) -> Result<Bytes, GatewayError> {
    let value = raw.get().as_bytes();
    let start = (value.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize);
    let end = start.wrapping_add(value.len());
    if body.get(start..end) != Some(value) {
        // Not a sub-slice of the body: cannot happen with a borrowed RawValue, but never guess.
        return Err(GatewayError::bad_request("the request body could not be routed", None));
    }
    let quoted = serde_json::to_string(new_model).unwrap_or_default();
    let mut out = BytesMut::with_capacity(body.len() - value.len() + quoted.len());
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[end..]);
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config() -> Config {
        Config::from_yaml("aliases: {fast: \"llama3.2:1b\"}", &HashMap::<String, String>::new()).unwrap()
    }

    fn parse(body: &str) -> Result<RoutedRequest, GatewayError> {
        parse_request(Endpoint::ChatCompletions, Bytes::from(body.to_owned()), &config())
    }

    #[test]
    fn alias_rewrites_only_the_model_bytes() {
        let body = r#"{"messages":[{"role":"user","content":"model: fast"}], "model" : "fast","stream":true}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.model, "llama3.2:1b");
        assert!(r.stream);
        assert_eq!(
            std::str::from_utf8(&r.body).unwrap(),
            r#"{"messages":[{"role":"user","content":"model: fast"}], "model" : "llama3.2:1b","stream":true}"#
        );
    }

    #[test]
    fn no_alias_keeps_the_same_bytes() {
        let body = Bytes::from_static(br#"{"model":"m","messages":[]}"#);
        let r = parse_request(Endpoint::ChatCompletions, body.clone(), &config()).unwrap();
        assert_eq!(r.body.as_ptr(), body.as_ptr(), "forwarded without a copy");
    }

    #[test]
    fn escaped_model_names_are_decoded() {
        let r = parse(r#"{"model":"f\u0061st","messages":[]}"#).unwrap();
        assert_eq!(r.model, "llama3.2:1b");
    }

    #[test]
    fn bad_input_is_a_400_with_param() {
        let cases = [
            ("not json", None),
            ("[1,2]", None),
            ("{\"model\": 5, \"messages\": []}", Some("model")),
            ("{\"messages\": []}", Some("model")),
            ("{\"model\": \"\", \"messages\": []}", Some("model")),
            ("{\"model\": \"m\"}", Some("messages")),
            ("{\"model\": \"m\", \"messages\": null}", Some("messages")),
            ("{\"model\": \"m\", \"messages\": \"hi\"}", Some("messages")),
            ("{\"model\": \"m\", \"messages\": [], \"stream\": \"yes\"}", Some("stream")),
            ("{\"model\": \"m\", \"messages\": []", None),
        ];
        for (body, param) in cases {
            match parse(body) {
                Err(GatewayError::BadRequest { param: p, .. }) => assert_eq!(p, param, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn completions_and_embeddings_take_strings_or_arrays() {
        let c = config();
        for (ep, ok, bad) in [
            (Endpoint::Completions, r#"{"model":"m","prompt":"hi"}"#, r#"{"model":"m","prompt":3}"#),
            (Endpoint::Embeddings, r#"{"model":"m","input":["a"]}"#, r#"{"model":"m"}"#),
        ] {
            assert!(parse_request(ep, Bytes::from(ok), &c).is_ok());
            assert!(parse_request(ep, Bytes::from(bad), &c).is_err());
        }
    }
}
