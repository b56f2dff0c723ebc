//! Ollama `/api/generate` requests (a prompt, an optional system prompt and images) to and from
//! a `ChatRequest` of one user turn.

use serde::Serialize;
use serde_json::value::RawValue;

use super::chat_request::{decode_images, encode_images, joined_text};
use super::options::{decode_format, decode_options, encode_format, WireOptions};
use super::API;
use crate::chat::{Api, ChatRequest, Extras, Message, Part, Role};
use crate::error::TranslateError;
use crate::json::{self, At, Kind};
use crate::wire::ExtraFields;

pub fn decode_generate_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let root = At::Root;
    let obj = json::body(body)?;
    let mut req = ChatRequest { extra: Extras::new(Api::Ollama), stream: true, ..ChatRequest::default() };
    req.model = json::required_string(&obj, "model", &root)?.into_owned();
    let mut parts = Vec::new();
    for (name, raw) in obj.fields() {
        if json::kind(raw) == Kind::Null {
            continue;
        }
        let at = root.key(name);
        match name {
            "model" => {}
            "prompt" => parts.insert(0, Part::Text(json::string(raw, &at)?.into_owned())),
            "system" => req.system.push(json::string(raw, &at)?.into_owned()),
            "images" => parts.extend(decode_images(raw, &at)?),
            "format" => req.response_format = decode_format(raw, &at)?,
            "options" => decode_options(raw, &at, &mut req)?,
            "stream" => req.stream = json::bool_field(raw, &at)?,
            "suffix" => {
                if !json::string(raw, &at)?.is_empty() {
                    return Err(TranslateError::unsupported("fill-in-the-middle (`suffix`)"));
                }
            }
            "raw" => {
                if json::bool_field(raw, &at)? {
                    return Err(TranslateError::unsupported("raw prompts (`raw`)"));
                }
            }
            "template" | "context" => return Err(TranslateError::unsupported(format!("Ollama's `{name}`"))),
            _ => req.extra.keep(name, raw),
        }
    }
    if !parts.is_empty() {
        req.messages.push(Message { role: Role::User, content: parts });
    }
    Ok(req)
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    images: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<WireOptions<'a>>,
    stream: bool,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

/// A request of at most one user turn, without tools, as a generate request.
pub fn encode_generate_request(req: &ChatRequest) -> Result<Vec<u8>, TranslateError> {
    if !req.tools.is_empty() {
        return Err(TranslateError::unsupported_by("tools on /api/generate", API));
    }
    let (prompt, images) = match req.messages.as_slice() {
        [] => (String::new(), Vec::new()),
        [message] if message.role == Role::User => (joined_text(&message.content), encode_images(&message.content)?),
        _ => return Err(TranslateError::unsupported_by("a conversation on /api/generate (use /api/chat)", API)),
    };
    let wire = WireRequest {
        model: &req.model,
        prompt,
        system: (!req.system.is_empty()).then(|| req.system.join("\n\n")),
        images,
        format: encode_format(req),
        options: WireOptions::new(req),
        stream: req.stream,
        extra: ExtraFields::except(req.extra.for_api(Api::Ollama), &["options"]),
    };
    json::to_vec(&wire)
}
