//! Ollama's `options` (sampling and runtime settings) and `format`, shared by `/api/chat` and
//! `/api/generate`.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use crate::chat::{Api, ChatRequest, RawJson, ResponseFormat};
use crate::error::TranslateError;
use crate::json::{self, At, Kind};

/// Options the internal model holds; an Ollama backend also gets the client's other options
/// (`num_ctx`, `repeat_penalty`, ...) as they were.
const MODELLED: [&str; 8] =
    ["temperature", "top_p", "top_k", "num_predict", "stop", "seed", "frequency_penalty", "presence_penalty"];

pub(crate) fn decode_options(raw: &RawValue, at: &At<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    let options = json::object(raw, at)?;
    for (name, value) in options.fields() {
        if json::kind(value) == Kind::Null {
            continue;
        }
        let at = at.key(name);
        match name {
            "temperature" => req.temperature = Some(json::f64_field(value, &at)?),
            "top_p" => req.top_p = Some(json::f64_field(value, &at)?),
            "top_k" => req.top_k = Some(json::u64_field(value, &at)?),
            // -1 (no limit) and -2 (fill the context) have no counterpart: no limit.
            "num_predict" => req.max_tokens = u64::try_from(json::i64_field(value, &at)?).ok(),
            "stop" => req.stop = json::string_or_strings(value, &at)?,
            "seed" => req.seed = Some(json::i64_field(value, &at)?),
            "frequency_penalty" => req.frequency_penalty = Some(json::f64_field(value, &at)?),
            "presence_penalty" => req.presence_penalty = Some(json::f64_field(value, &at)?),
            _ => {}
        }
    }
    req.extra.keep("options", raw);
    Ok(())
}

/// `format`: `"json"` or a JSON schema.
pub(crate) fn decode_format(raw: &RawValue, at: &At<'_>) -> Result<Option<ResponseFormat>, TranslateError> {
    if json::kind(raw) == Kind::Object {
        return Ok(Some(ResponseFormat::JsonSchema { name: None, schema: RawJson::from_raw(raw), strict: None }));
    }
    match json::string(raw, at)?.as_ref() {
        "json" => Ok(Some(ResponseFormat::JsonObject)),
        "" => Ok(None),
        other => Err(TranslateError::invalid(format!("`{at}` must be \"json\" or a JSON schema (got `{other}`)"))),
    }
}

pub(crate) fn encode_format(req: &ChatRequest) -> Option<&RawValue> {
    match &req.response_format {
        None => None,
        Some(ResponseFormat::JsonObject) => serde_json::from_str("\"json\"").ok(),
        Some(ResponseFormat::JsonSchema { schema, .. }) => Some(schema.as_raw()),
    }
}

/// The `options` object for a request, `None` when it would be empty.
pub(crate) struct WireOptions<'a> {
    req: &'a ChatRequest,
    /// The client's own options object, when it came from an Ollama client.
    passthrough: Option<json::Object<'a>>,
}

impl<'a> WireOptions<'a> {
    pub(crate) fn new(req: &'a ChatRequest) -> Option<Self> {
        let passthrough = req
            .extra
            .for_api(Api::Ollama)
            .iter()
            .find(|(name, _)| name == "options")
            .and_then(|(_, raw)| json::object(raw.as_raw(), &At::Root).ok());
        let has_modelled = req.temperature.is_some()
            || req.top_p.is_some()
            || req.top_k.is_some()
            || req.max_tokens.is_some()
            || !req.stop.is_empty()
            || req.seed.is_some()
            || req.frequency_penalty.is_some()
            || req.presence_penalty.is_some();
        (has_modelled || passthrough.is_some()).then_some(WireOptions { req, passthrough })
    }
}

impl Serialize for WireOptions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let req = self.req;
        let mut map = serializer.serialize_map(None)?;
        if let Some(temperature) = req.temperature {
            map.serialize_entry("temperature", &temperature)?;
        }
        if let Some(top_p) = req.top_p {
            map.serialize_entry("top_p", &top_p)?;
        }
        if let Some(top_k) = req.top_k {
            map.serialize_entry("top_k", &top_k)?;
        }
        if let Some(max_tokens) = req.max_tokens {
            map.serialize_entry("num_predict", &max_tokens)?;
        }
        if !req.stop.is_empty() {
            map.serialize_entry("stop", &req.stop)?;
        }
        if let Some(seed) = req.seed {
            map.serialize_entry("seed", &seed)?;
        }
        if let Some(penalty) = req.frequency_penalty {
            map.serialize_entry("frequency_penalty", &penalty)?;
        }
        if let Some(penalty) = req.presence_penalty {
            map.serialize_entry("presence_penalty", &penalty)?;
        }
        if let Some(passthrough) = &self.passthrough {
            for (name, value) in passthrough.fields().filter(|(name, _)| !MODELLED.contains(name)) {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}
