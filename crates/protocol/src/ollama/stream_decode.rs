//! Decodes Ollama's newline-delimited JSON stream (`/api/chat` or `/api/generate`) into stream
//! events. Ollama sends each tool call whole, in one line.

use super::chat_request::decode_tool_calls;
use super::response::{stop_reason_of, WireLine};
use crate::chat::{ResponseContext, StreamDecoder, StreamEvent};
use crate::error::{ApiError, ErrorKind, TranslateError};
use crate::frames::LineSplitter;
use crate::json::{At, Text};

/// Decodes an Ollama stream as it arrives.
#[derive(Debug, Default)]
pub struct NdjsonDecoder {
    lines: LineSplitter,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    context: ResponseContext,
    started: bool,
    /// The text block receiving deltas, if one is open.
    open_text: Option<u32>,
    next_block: u32,
    tool_calls: usize,
    done: bool,
}

impl NdjsonDecoder {
    pub fn new(context: ResponseContext) -> Self {
        NdjsonDecoder { lines: LineSplitter::default(), state: State { context, ..State::default() } }
    }
}

impl StreamDecoder for NdjsonDecoder {
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        self.lines.feed(bytes, |line| self.state.line(line, events))
    }

    fn finish(&mut self, events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        self.lines.finish(|line| self.state.line(line, events))?;
        if self.state.done {
            return Ok(());
        }
        Err(TranslateError::invalid("the backend's stream ended before the response was complete"))
    }
}

impl State {
    fn line(&mut self, line: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let wire: WireLine<'_> = serde_json::from_slice(line)
            .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid stream line: {e}")))?;
        if let Some(error) = wire.error {
            events.push(StreamEvent::Error(ApiError::new(ErrorKind::Server, error.into_owned())));
            self.done = true;
            return Ok(());
        }
        if !self.started {
            self.started = true;
            events.push(StreamEvent::Start {
                id: self.context.id.clone(),
                model: wire.model.as_ref().map_or_else(String::new, |m| m.as_str().to_owned()),
                created: wire.created(&self.context),
            });
        }
        if !wire.text().is_empty() {
            let index = match self.open_text {
                Some(index) => index,
                None => {
                    let index = self.new_block();
                    self.open_text = Some(index);
                    index
                }
            };
            events.push(StreamEvent::TextDelta { index, text: wire.text().to_owned() });
        }
        if let Some(raw) = wire.message.as_ref().and_then(|m| m.tool_calls) {
            let prefix = format!("call_{}_{}", self.context.id, self.tool_calls);
            for call in decode_tool_calls(raw, &At::Root.key("message"), &prefix)? {
                self.close_text(events);
                let index = self.new_block();
                self.tool_calls += 1;
                events.push(StreamEvent::ToolCallStart { index, id: call.id, name: call.name });
                events.push(StreamEvent::ToolCallDelta { index, arguments_fragment: call.arguments });
                events.push(StreamEvent::BlockStop { index });
            }
        }
        if wire.done {
            self.close_text(events);
            let reason = stop_reason_of(wire.done_reason.as_ref().map(Text::as_str), self.tool_calls > 0);
            events.push(StreamEvent::Stop { reason, stop_sequence: None });
            events.push(StreamEvent::Usage(wire.usage()));
            events.push(StreamEvent::Done);
            self.done = true;
        }
        Ok(())
    }

    fn new_block(&mut self) -> u32 {
        let index = self.next_block;
        self.next_block += 1;
        index
    }

    fn close_text(&mut self, events: &mut Vec<StreamEvent>) {
        if let Some(index) = self.open_text.take() {
            events.push(StreamEvent::BlockStop { index });
        }
    }
}
