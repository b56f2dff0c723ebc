//! Decodes a Bedrock `ConverseStream` answer: an AWS event stream (binary frames: a prelude with
//! the frame's length, headers, a JSON payload, CRC32 checks, read by the AWS SDK's own
//! `aws-smithy-eventstream`) whose `:event-type` header names each event — `messageStart`,
//! `contentBlockStart` (a tool call's id and name), `contentBlockDelta` (text or a piece of a tool
//! call's input), `contentBlockStop`, `messageStop` (the stop reason) and `metadata` (usage, last).
//! A frame whose `:message-type` is `exception` is an error mid-stream.

use aws_smithy_eventstream::frame::read_message_from;
use aws_smithy_types::event_stream::Message;
use serde::Deserialize;

use super::{error_kind_of, stop_reason_of, WireUsage};
use crate::chat::{ApiError, ResponseContext, StopReason, StreamDecoder, StreamEvent};
use crate::error::TranslateError;
use crate::frames::MAX_LINE_BYTES;
use crate::json::Text;

/// A frame's prelude: total length, headers length, prelude CRC.
const PRELUDE: usize = 12;

#[derive(Debug, Default)]
pub struct EventStreamDecoder {
    /// Bytes of frames not yet complete.
    partial: Vec<u8>,
    context: ResponseContext,
    started: bool,
    /// Content blocks started and not yet stopped (text blocks start at their first delta).
    open: Vec<u32>,
    calls: usize,
    stopped: bool,
    done: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEvent<'a> {
    #[serde(default)]
    content_block_index: u32,
    #[serde(borrow)]
    start: Option<WireStart<'a>>,
    #[serde(borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(borrow)]
    stop_reason: Option<Text<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    message: Option<Text<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStart<'a> {
    #[serde(borrow)]
    tool_use: Option<WireToolUseStart<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireToolUseStart<'a> {
    #[serde(borrow)]
    tool_use_id: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireDelta<'a> {
    #[serde(borrow)]
    text: Option<Text<'a>>,
    #[serde(borrow)]
    tool_use: Option<WireToolUseDelta<'a>>,
}

#[derive(Deserialize)]
struct WireToolUseDelta<'a> {
    #[serde(borrow)]
    input: Option<Text<'a>>,
}

impl EventStreamDecoder {
    pub fn new(context: ResponseContext) -> Self {
        EventStreamDecoder { context, ..EventStreamDecoder::default() }
    }

    fn frame(&mut self, message: &Message, events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        let header = |name: &str| {
            message
                .headers()
                .iter()
                .find(|h| h.name().as_str() == name)
                .and_then(|h| h.value().as_string().ok())
                .map(|s| s.as_str().to_owned())
        };
        let payload = message.payload();
        let wire: WireEvent<'_> =
            if payload.is_empty() { serde_json::from_slice(b"{}") } else { serde_json::from_slice(payload) }
                .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid stream event: {e}")))?;
        match header(":message-type").as_deref() {
            Some("event") | None => {}
            Some("exception") => {
                let exception = header(":exception-type").unwrap_or_default();
                let message = wire.message.as_ref().map_or(exception.as_str(), Text::as_str).to_owned();
                events.push(StreamEvent::Error(ApiError::new(error_kind_of(&exception), message)));
                return Ok(());
            }
            Some(_) => {
                let code = header(":error-code").unwrap_or_default();
                let message = header(":error-message").unwrap_or_else(|| code.clone());
                events.push(StreamEvent::Error(ApiError::new(error_kind_of(&code), message)));
                return Ok(());
            }
        }
        if !self.started {
            self.started = true;
            events.push(StreamEvent::Start {
                id: self.context.id.clone(),
                model: self.context.model.clone(),
                created: self.context.created,
            });
        }
        let index = wire.content_block_index;
        match header(":event-type").as_deref() {
            Some("contentBlockStart") => {
                if let Some(tool) = wire.start.and_then(|s| s.tool_use) {
                    self.calls += 1;
                    self.open.push(index);
                    events.push(StreamEvent::ToolCallStart {
                        index,
                        id: tool.tool_use_id.into_owned(),
                        name: tool.name.into_owned(),
                    });
                }
            }
            Some("contentBlockDelta") => {
                let Some(delta) = wire.delta else { return Ok(()) };
                if let Some(text) = delta.text.filter(|t| !t.as_str().is_empty()) {
                    if !self.open.contains(&index) {
                        self.open.push(index);
                    }
                    events.push(StreamEvent::TextDelta { index, text: text.into_owned() });
                } else if let Some(input) = delta.tool_use.and_then(|t| t.input).filter(|i| !i.as_str().is_empty()) {
                    events.push(StreamEvent::ToolCallDelta { index, arguments_fragment: input.into_owned() });
                }
            }
            Some("contentBlockStop") => {
                // Blocks that said nothing the internal model carries (reasoning) were never opened.
                if let Some(at) = self.open.iter().position(|&i| i == index) {
                    self.open.swap_remove(at);
                    events.push(StreamEvent::BlockStop { index });
                }
            }
            Some("messageStop") => {
                let reason = wire
                    .stop_reason
                    .as_ref()
                    .map_or(StopReason::EndTurn.or_tool_use(self.calls > 0), |r| stop_reason_of(r.as_str()));
                self.close_all(events);
                self.stopped = true;
                events.push(StreamEvent::Stop { reason, stop_sequence: None });
            }
            Some("metadata") => {
                if let Some(usage) = wire.usage {
                    events.push(StreamEvent::Usage(usage.to_usage()));
                }
                // The last event of the stream.
                if self.stopped && !self.done {
                    self.done = true;
                    events.push(StreamEvent::Done);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn close_all(&mut self, events: &mut Vec<StreamEvent>) {
        for index in self.open.drain(..) {
            events.push(StreamEvent::BlockStop { index });
        }
    }
}

impl StreamDecoder for EventStreamDecoder {
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        self.partial.extend_from_slice(bytes);
        let mut at = 0;
        while self.partial.len() - at >= PRELUDE {
            let head = &self.partial[at..at + 4];
            let total = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if total > MAX_LINE_BYTES {
                return Err(TranslateError::invalid(format!(
                    "the backend sent a stream frame longer than {MAX_LINE_BYTES} bytes"
                )));
            }
            if self.partial.len() - at < total {
                break;
            }
            let message = read_message_from(&self.partial[at..at + total])
                .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid event-stream frame: {e}")))?;
            at += total;
            self.frame(&message, events)?;
        }
        self.partial.drain(..at);
        Ok(())
    }

    fn finish(&mut self, events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        if !self.partial.is_empty() || !self.stopped {
            return Err(TranslateError::invalid("the backend's stream ended before the response was complete"));
        }
        // Stopped, but the usage event never came.
        self.done = true;
        events.push(StreamEvent::Done);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::chat::{ErrorKind, Usage};
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, HeaderValue};

    /// One event-stream frame, as Bedrock sends it.
    pub(crate) fn frame(event_type: &str, payload: &str) -> Vec<u8> {
        let message = Message::new(payload.as_bytes().to_vec())
            .add_header(Header::new(":event-type", HeaderValue::String(event_type.to_owned().into())))
            .add_header(Header::new(":content-type", HeaderValue::String("application/json".into())))
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())));
        let mut out = Vec::new();
        write_message_to(&message, &mut out).unwrap();
        out
    }

    fn exception(kind: &str, message: &str) -> Vec<u8> {
        let message = Message::new(format!(r#"{{"message":"{message}"}}"#).into_bytes())
            .add_header(Header::new(":exception-type", HeaderValue::String(kind.to_owned().into())))
            .add_header(Header::new(":content-type", HeaderValue::String("application/json".into())))
            .add_header(Header::new(":message-type", HeaderValue::String("exception".into())));
        let mut out = Vec::new();
        write_message_to(&message, &mut out).unwrap();
        out
    }

    /// A stream with reasoning, text and a tool call, with the padding field (`p`) Bedrock adds.
    pub(crate) fn tool_stream() -> Vec<u8> {
        [
            frame("messageStart", r#"{"p":"abcdefgh","role":"assistant"}"#),
            frame("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"hmm"}},"p":"ab"}"#),
            frame("contentBlockStop", r#"{"contentBlockIndex":0,"p":"abcd"}"#),
            frame("contentBlockDelta", r#"{"contentBlockIndex":1,"delta":{"text":"Let me "},"p":"a"}"#),
            frame("contentBlockDelta", r#"{"contentBlockIndex":1,"delta":{"text":"check."},"p":"abc"}"#),
            frame("contentBlockStop", r#"{"contentBlockIndex":1,"p":"abcdef"}"#),
            frame("contentBlockStart", r#"{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"tooluse_1","name":"get_weather"}},"p":"ab"}"#),
            frame("contentBlockDelta", r#"{"contentBlockIndex":2,"delta":{"toolUse":{"input":"{\"location\":"}},"p":"a"}"#),
            frame("contentBlockDelta", r#"{"contentBlockIndex":2,"delta":{"toolUse":{"input":"\"Paris\"}"}},"p":"a"}"#),
            frame("contentBlockStop", r#"{"contentBlockIndex":2,"p":"abc"}"#),
            frame("messageStop", r#"{"stopReason":"tool_use","p":"abcdefg"}"#),
            frame("metadata", r#"{"usage":{"inputTokens":30,"outputTokens":12,"totalTokens":42},"metrics":{"latencyMs":300},"p":"ab"}"#),
        ]
        .concat()
    }

    fn decode(bytes: &[u8], chunk: usize) -> Result<Vec<StreamEvent>, TranslateError> {
        let mut decoder =
            EventStreamDecoder::new(ResponseContext { created: 5, id: "req1".into(), ..ResponseContext::default() });
        let mut events = Vec::new();
        for piece in bytes.chunks(chunk) {
            decoder.feed(piece, &mut events)?;
        }
        decoder.finish(&mut events)?;
        Ok(events)
    }

    #[test]
    fn a_tool_stream_decodes_the_same_however_it_is_cut() {
        let bytes = tool_stream();
        let whole = decode(&bytes, bytes.len()).unwrap();
        assert_eq!(
            whole,
            vec![
                StreamEvent::Start { id: "req1".into(), model: String::new(), created: 5 },
                StreamEvent::TextDelta { index: 1, text: "Let me ".into() },
                StreamEvent::TextDelta { index: 1, text: "check.".into() },
                StreamEvent::BlockStop { index: 1 },
                StreamEvent::ToolCallStart { index: 2, id: "tooluse_1".into(), name: "get_weather".into() },
                StreamEvent::ToolCallDelta { index: 2, arguments_fragment: r#"{"location":"#.into() },
                StreamEvent::ToolCallDelta { index: 2, arguments_fragment: r#""Paris"}"#.into() },
                StreamEvent::BlockStop { index: 2 },
                StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None },
                StreamEvent::Usage(Usage::new(30, 12)),
                StreamEvent::Done,
            ]
        );
        for chunk in [1, 2, 7, 13, 100] {
            assert_eq!(decode(&bytes, chunk).unwrap(), whole, "cut every {chunk} bytes");
        }
    }

    #[test]
    fn exceptions_cuts_and_corruption_are_reported() {
        let mut bytes = frame("messageStart", r#"{"role":"assistant"}"#);
        bytes.extend(exception("throttlingException", "Too many requests"));
        let events = decode(&bytes, 5).unwrap_err();
        // No stop: the stream is incomplete, but the error event came first.
        assert!(events.to_string().contains("ended before"));
        let mut decoder = EventStreamDecoder::new(ResponseContext::default());
        let mut events = Vec::new();
        decoder.feed(&bytes, &mut events).unwrap();
        assert!(
            matches!(&events[1], StreamEvent::Error(e) if e.kind == ErrorKind::RateLimited && e.message == "Too many requests")
        );
        // A flipped byte fails the frame's CRC.
        let mut bad = tool_stream();
        bad[20] ^= 0xff;
        assert!(decode(&bad, 64).is_err());
        // A frame that claims to be larger than any line may be is refused before it is buffered.
        let mut huge = vec![0x7f, 0, 0, 0];
        huge.extend([0u8; 12]);
        assert!(decode(&huge, 16).is_err());
        // A stream cut mid-frame is incomplete.
        let whole = tool_stream();
        assert!(decode(&whole[..whole.len() - 3], 50).is_err());
    }
}
