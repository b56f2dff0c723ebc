//! Small pieces several APIs' wire formats share: passed-through extra fields, data URLs, image
//! type sniffing, a default tool schema, and id prefixes.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use crate::chat::{Image, RawJson, ToolCall};
use crate::error::TranslateError;
use crate::json::{self, Kind};

/// Extra request fields written back as top-level fields (with `#[serde(flatten)]`), less those
/// the encoder writes itself.
pub(crate) struct ExtraFields<'a> {
    fields: &'a [(String, RawJson)],
    skip: &'static [&'static str],
}

impl<'a> ExtraFields<'a> {
    pub(crate) fn all(fields: &'a [(String, RawJson)]) -> Self {
        ExtraFields { fields, skip: &[] }
    }

    pub(crate) fn except(fields: &'a [(String, RawJson)], skip: &'static [&'static str]) -> Self {
        ExtraFields { fields, skip }
    }
}

impl Serialize for ExtraFields<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in self.fields.iter().filter(|(name, _)| !self.skip.contains(&name.as_str())) {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// The schema of a tool that takes no arguments, for tools declared without one.
pub(crate) fn empty_schema() -> &'static RawValue {
    serde_json::from_str(r#"{"type":"object","properties":{}}"#).unwrap_or(RawValue::NULL)
}

/// `{}`, the arguments of a call without any.
pub(crate) fn empty_object() -> &'static RawValue {
    serde_json::from_str("{}").unwrap_or(RawValue::NULL)
}

/// A tool call's arguments as the JSON object Anthropic's `input` and Ollama's `arguments` must be.
pub(crate) fn arguments_object(call: &ToolCall) -> Result<&RawValue, TranslateError> {
    if call.arguments.trim().is_empty() {
        return Ok(empty_object());
    }
    match serde_json::from_str::<&RawValue>(call.arguments.trim()) {
        Ok(raw) if json::kind(raw) == Kind::Object => Ok(raw),
        _ => Err(TranslateError::invalid(format!(
            "the arguments of tool call `{}` ({}) are not a JSON object",
            call.id, call.name
        ))),
    }
}

/// JSON text without line breaks between tokens, for line-framed streams (SSE `data:` lines,
/// NDJSON) that carry raw JSON the client wrote pretty-printed. Only whitespace outside strings is
/// removed, so key order and every value stay as they were.
pub(crate) fn single_line(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.contains(['\n', '\r']) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if c.is_ascii_whitespace() {
            continue;
        }
        out.push(c);
    }
    std::borrow::Cow::Owned(out)
}

/// `data:image/png;base64,AAAA` as an inline image; `None` for any other URL.
pub(crate) fn parse_data_url(url: &str) -> Option<Image> {
    let rest = url.strip_prefix("data:")?;
    let (header, data) = rest.split_once(',')?;
    let media_type = header.strip_suffix(";base64")?;
    Some(Image::Base64 { media_type: media_type.to_owned(), data: data.to_owned() })
}

pub(crate) fn data_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

/// The media type of base64 image data, from its first bytes (Ollama sends images without one).
pub(crate) fn sniff_image_type(base64: &str) -> Option<&'static str> {
    const SIGNATURES: [(&str, &str); 4] =
        [("iVBORw0KGgo", "image/png"), ("/9j/", "image/jpeg"), ("R0lGOD", "image/gif"), ("UklGR", "image/webp")];
    SIGNATURES.iter().find(|(prefix, _)| base64.starts_with(prefix)).map(|(_, media_type)| *media_type)
}

/// `id` with `prefix` in front unless it already starts with it (clients check `msg_`, `resp_`).
pub(crate) fn prefixed(prefix: &str, id: &str) -> String {
    if id.starts_with(prefix) {
        id.to_owned()
    } else {
        format!("{prefix}{id}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_round_trip() {
        let image = parse_data_url("data:image/png;base64,iVBORw0KGgo=").unwrap();
        assert_eq!(image, Image::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() });
        assert_eq!(data_url("image/png", "iVBORw0KGgo="), "data:image/png;base64,iVBORw0KGgo=");
        assert!(parse_data_url("https://example.com/a.png").is_none());
    }

    #[test]
    fn sniffs_image_types() {
        assert_eq!(sniff_image_type("iVBORw0KGgoAAA"), Some("image/png"));
        assert_eq!(sniff_image_type("/9j/4AAQ"), Some("image/jpeg"));
        assert_eq!(sniff_image_type("AAAA"), None);
    }

    #[test]
    fn single_line_keeps_strings_and_order() {
        let pretty = "{\n  \"z\": \"a \\\" b\\n c\",\r\n  \"a\": [1, 2]\n}";
        assert_eq!(single_line(pretty), r#"{"z":"a \" b\n c","a":[1,2]}"#);
        assert!(matches!(single_line("{\"a\": 1}"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn empty_schema_is_an_object_schema() {
        assert_eq!(empty_schema().get(), r#"{"type":"object","properties":{}}"#);
    }
}
