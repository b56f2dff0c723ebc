//! Stream events as a Gemini `streamGenerateContent?alt=sse` stream: each piece of text one
//! `GenerateContentResponse` event, a tool call one event with its whole `functionCall` (Gemini
//! never splits arguments), and a last event with `finishReason` and `usageMetadata`.

use serde_json::{json, Value};

use super::response_encode::{finish_reason, function_call, usage_metadata};
use crate::chat::{StopReason, StreamEncoder, StreamEvent, Usage};

#[derive(Debug, Default)]
pub struct SseEncoder {
    id: String,
    model: String,
    /// The tool call being received: id, name, arguments so far.
    call: Option<(String, String, String)>,
    stop: Option<StopReason>,
    usage: Option<Usage>,
    done: bool,
}

impl SseEncoder {
    pub fn new() -> Self {
        SseEncoder::default()
    }

    fn event(&self, parts: Value, last: bool, out: &mut Vec<u8>) {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut chunk = json!({"candidates": [], "modelVersion": self.model, "responseId": self.id});
        if last {
            candidate["finishReason"] = json!(finish_reason(self.stop.as_ref().unwrap_or(&StopReason::EndTurn)));
            chunk["usageMetadata"] = usage_metadata(&self.usage.unwrap_or_default());
        }
        chunk["candidates"] = json!([candidate]);
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(chunk.to_string().as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
    }

    fn flush_call(&mut self, out: &mut Vec<u8>) {
        if let Some((id, name, arguments)) = self.call.take() {
            self.event(json!([function_call(&id, &name, &arguments)]), false, out);
        }
    }
}

impl StreamEncoder for SseEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        match event {
            StreamEvent::Start { id, model, .. } => {
                self.id.clone_from(id);
                self.model.clone_from(model);
            }
            StreamEvent::TextDelta { text, .. } => {
                self.flush_call(out);
                self.event(json!([{ "text": text }]), false, out);
            }
            StreamEvent::ToolCallStart { id, name, .. } => {
                self.flush_call(out);
                self.call = Some((id.clone(), name.clone(), String::new()));
            }
            StreamEvent::ToolCallDelta { arguments_fragment, .. } => {
                if let Some(call) = self.call.as_mut() {
                    call.2.push_str(arguments_fragment);
                }
            }
            StreamEvent::BlockStop { .. } => self.flush_call(out),
            StreamEvent::Stop { reason, .. } => {
                self.flush_call(out);
                self.stop = Some(reason.clone());
            }
            StreamEvent::Usage(usage) => self.usage = Some(*usage),
            StreamEvent::Error(error) => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&super::response_encode::encode_error(error));
                out.extend_from_slice(b"\r\n\r\n");
                self.done = true;
            }
            StreamEvent::Done => {
                if !self.done {
                    self.flush_call(out);
                    self.event(json!([{ "text": "" }]), true, out);
                    self.done = true;
                }
            }
        }
    }

    /// A Gemini stream has no closing event besides its last answer: a cut stream just ends.
    fn finish(&mut self, _out: &mut Vec<u8>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{ResponseContext, StreamDecoder};

    #[test]
    fn what_the_encoder_writes_the_decoder_reads_back() {
        let events = vec![
            StreamEvent::Start { id: "r1".into(), model: "m".into(), created: 0 },
            StreamEvent::TextDelta { index: 0, text: "Hel".into() },
            StreamEvent::TextDelta { index: 0, text: "lo".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::ToolCallStart { index: 1, id: "c1".into(), name: "f".into() },
            StreamEvent::ToolCallDelta { index: 1, arguments_fragment: "{\"a\":".into() },
            StreamEvent::ToolCallDelta { index: 1, arguments_fragment: "1}".into() },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None },
            StreamEvent::Usage(Usage::new(3, 4)),
            StreamEvent::Done,
        ];
        let mut encoder = SseEncoder::new();
        let mut out = Vec::new();
        for e in &events {
            encoder.encode(e, &mut out);
        }
        let mut decoder = super::super::SseDecoder::new(ResponseContext::default());
        let mut back = Vec::new();
        decoder.feed(&out, &mut back).unwrap();
        decoder.finish(&mut back).unwrap();
        // Gemini sends a call's arguments whole: the two fragments come back as one.
        let mut expected = events.clone();
        expected.splice(5..7, [StreamEvent::ToolCallDelta { index: 1, arguments_fragment: "{\"a\":1}".into() }]);
        assert_eq!(back, expected);
    }
}
