//! Where a streamed answer's events carry its text, in the client's API: OpenAI Chat's
//! `choices[0].delta.content`, Responses' `response.output_text.delta`, Anthropic's
//! `content_block_delta` text, Gemini's `candidates[0].content.parts[0].text`, and Ollama's NDJSON
//! lines (`message.content` for chat, `response` for generate). A guard reads the text of each
//! event in order as one text, and writes back what it releases; text it held back past the last
//! text event goes out in an event made like that one.

use bytes::Bytes;
use serde_json::Value;

use crate::endpoint::Endpoint;

/// The stream shapes whose text a guard can follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    OpenAiChat,
    Responses,
    Anthropic,
    Gemini,
    /// Ollama's streams are JSON lines, not server-sent events.
    OllamaChat,
    OllamaGenerate,
}

impl Shape {
    /// The shape of an endpoint's streamed answers; `None` for those that are not followed.
    pub fn of(endpoint: Endpoint) -> Option<Shape> {
        match endpoint {
            Endpoint::ChatCompletions => Some(Shape::OpenAiChat),
            Endpoint::Responses => Some(Shape::Responses),
            Endpoint::Messages => Some(Shape::Anthropic),
            Endpoint::GeminiStream => Some(Shape::Gemini),
            Endpoint::OllamaChat => Some(Shape::OllamaChat),
            Endpoint::OllamaGenerate => Some(Shape::OllamaGenerate),
            _ => None,
        }
    }

    /// Whether this shape's events are JSON lines (else server-sent events).
    pub fn is_ndjson(self) -> bool {
        matches!(self, Shape::OllamaChat | Shape::OllamaGenerate)
    }

    /// Where this event's answer text is (a JSON pointer into its data), if it has any.
    fn pointer(self, data: &Value) -> Option<&'static str> {
        let found = match self {
            Shape::OpenAiChat => data
                .pointer("/choices/0/delta/content")
                .is_some_and(Value::is_string)
                .then_some("/choices/0/delta/content"),
            Shape::Responses => (data["type"] == "response.output_text.delta").then_some("/delta"),
            Shape::Anthropic => (data["type"] == "content_block_delta" && data["delta"]["type"] == "text_delta")
                .then_some("/delta/text"),
            Shape::Gemini => data
                .pointer("/candidates/0/content/parts/0/text")
                .is_some_and(Value::is_string)
                .then_some("/candidates/0/content/parts/0/text"),
            // The last line (`done: true`) ends the text: held text goes out before it.
            Shape::OllamaChat => (data["done"] != true).then_some("/message/content"),
            Shape::OllamaGenerate => (data["done"] != true).then_some("/response"),
        };
        found.filter(|p| data.pointer(p).is_some_and(Value::is_string))
    }
}

/// One server-sent event, split into the lines around its `data:` and the data itself (or one
/// JSON line of an NDJSON stream).
pub struct TextEvent {
    /// The lines before `data:` (`event: …`), as they came.
    head: String,
    data: Value,
    pointer: &'static str,
    ndjson: bool,
}

impl TextEvent {
    /// The event's answer text and where to put text back, if it carries some.
    pub fn parse(shape: Shape, event: &[u8]) -> Option<TextEvent> {
        let text = std::str::from_utf8(event).ok()?;
        if shape.is_ndjson() {
            let data: Value = serde_json::from_str(text.trim()).ok()?;
            let pointer = shape.pointer(&data)?;
            return Some(TextEvent { head: String::new(), data, pointer, ndjson: true });
        }
        let (head, rest) = match text.find("data:") {
            Some(0) => ("", text),
            Some(i) => text.split_at(i),
            None => return None,
        };
        let json = rest.strip_prefix("data:")?.trim();
        let data: Value = serde_json::from_str(json).ok()?;
        let pointer = shape.pointer(&data)?;
        Some(TextEvent { head: head.to_owned(), data, pointer, ndjson: false })
    }

    pub fn text(&self) -> &str {
        self.data.pointer(self.pointer).and_then(Value::as_str).unwrap_or("")
    }

    /// The event again, its text replaced.
    pub fn with_text(&self, text: &str) -> Bytes {
        let mut data = self.data.clone();
        if let Some(slot) = data.pointer_mut(self.pointer) {
            *slot = Value::String(text.to_owned());
        }
        if self.ndjson {
            let mut out = serde_json::to_vec(&data).unwrap_or_default();
            out.push(b'\n');
            return Bytes::from(out);
        }
        let mut out = self.head.clone().into_bytes();
        out.extend_from_slice(b"data: ");
        out.extend(serde_json::to_vec(&data).unwrap_or_default());
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }
}

/// A held stream's events (or JSON lines), as they came.
fn events(shape: Shape, body: &[u8]) -> Vec<&[u8]> {
    let end_of = if shape.is_ndjson() { super::line_end } else { super::event_end };
    let mut rest = body;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let end = end_of(rest).unwrap_or(rest.len());
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

/// A whole stream's answer text: its text events' texts, joined.
pub fn whole_text(shape: Shape, body: &[u8]) -> String {
    events(shape, body).into_iter().filter_map(|e| TextEvent::parse(shape, e)).map(|e| e.text().to_owned()).collect()
}

/// The stream again with `text` as its whole answer text instead of `was`: the first text event
/// carries all of it and the later ones none; an event that repeats the whole text (Responses'
/// `output_text.done`, `response.completed`) repeats the new one; every other event as it was.
pub fn with_whole_text(shape: Shape, body: &[u8], was: &str, text: &str) -> Bytes {
    let mut out = Vec::with_capacity(body.len());
    let mut first = true;
    for event in events(shape, body) {
        match TextEvent::parse(shape, event) {
            Some(parsed) => {
                out.extend_from_slice(&parsed.with_text(if first { text } else { "" }));
                first = false;
            }
            None => out.extend_from_slice(&repeated_text_replaced(event, was, text)),
        }
    }
    Bytes::from(out)
}

/// `event` with each string of its data that is exactly `was` replaced by `text`.
fn repeated_text_replaced(event: &[u8], was: &str, text: &str) -> Vec<u8> {
    let start = match memchr::memmem::find(event, b"data:") {
        Some(i) => i + 5,
        None if event.first() == Some(&b'{') => 0,
        None => return event.to_vec(),
    };
    let end = memchr::memchr(b'\n', &event[start..]).map_or(event.len(), |i| start + i);
    let swap = |t: &str| (t == was).then(|| text.to_owned());
    match super::json_text::rewrite_texts(&event[start..end], super::json_text::not_text, swap) {
        Some(data) => [&event[..start], &data[..], &event[end..]].concat(),
        None => event.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shapes_text_is_found_and_replaced() {
        let cases: [(Shape, &str); 4] = [
            (Shape::OpenAiChat, r#"data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}"#),
            (Shape::Responses, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}"),
            (Shape::Anthropic, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}"),
            (Shape::Gemini, r#"data: {"candidates":[{"content":{"parts":[{"text":"hi"}],"role":"model"}}]}"#),
        ];
        for (shape, event) in cases {
            let e = TextEvent::parse(shape, format!("{event}\n\n").as_bytes()).unwrap();
            assert_eq!(e.text(), "hi", "{shape:?}");
            let again = String::from_utf8(e.with_text("[EMAIL]").to_vec()).unwrap();
            assert!(again.contains("[EMAIL]") && again.ends_with("\n\n") && !again.contains("\"hi\""), "{again}");
            if event.starts_with("event:") {
                assert!(again.starts_with("event: "), "{again}");
            }
        }
        assert!(TextEvent::parse(Shape::OpenAiChat, b"data: [DONE]\n\n").is_none());
        let line = br#"{"model":"m","message":{"role":"assistant","content":"hi"},"done":false}"#;
        let e = TextEvent::parse(Shape::OllamaChat, &[&line[..], b"\n"].concat()).unwrap();
        assert_eq!(e.text(), "hi");
        let again = String::from_utf8(e.with_text("[EMAIL]").to_vec()).unwrap();
        assert!(again.starts_with('{') && again.ends_with("}\n") && again.contains("[EMAIL]"), "{again}");
        let e = TextEvent::parse(Shape::OllamaGenerate, br#"{"response":"hi","done":false}"#).unwrap();
        assert_eq!(e.text(), "hi");
        let finish = br#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert!(TextEvent::parse(Shape::OpenAiChat, finish).is_none());
    }
}
