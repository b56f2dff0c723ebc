//! Decodes an OpenAI Chat Completions SSE stream (`chat.completion.chunk` events, tool call
//! deltas keyed by index, a usage chunk with no choices, `[DONE]`) into stream events.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::response::{WireFunctionIn, WireUsage};
use super::stop_reason_of;
use crate::chat::{ResponseContext, StreamDecoder, StreamEvent};
use crate::error::TranslateError;
use crate::frames::SseParser;
use crate::json::Text;

#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    created: Option<u64>,
    #[serde(borrow, default)]
    choices: Vec<WireChunkChoice<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    error: Option<super::WireErrorDetail<'a>>,
}

#[derive(Deserialize)]
struct WireChunkChoice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Text<'a>>,
    #[serde(borrow)]
    stop_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(borrow)]
    content: Option<Text<'a>>,
    #[serde(borrow)]
    refusal: Option<Text<'a>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<WireToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCallDelta<'a> {
    index: Option<u32>,
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    function: Option<WireFunctionIn<'a>>,
}

/// Decodes an OpenAI Chat Completions stream as it arrives.
#[derive(Debug, Default)]
pub struct SseDecoder {
    sse: SseParser,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    context: ResponseContext,
    started: bool,
    /// The block receiving deltas now, and whether it is text.
    open: Option<(u32, bool)>,
    next_block: u32,
    /// Tool call index in the stream → block index.
    tool_blocks: Vec<(u32, u32)>,
    stopped: bool,
    done: bool,
}

impl SseDecoder {
    pub fn new(context: ResponseContext) -> Self {
        SseDecoder { sse: SseParser::default(), state: State { context, ..State::default() } }
    }
}

impl StreamDecoder for SseDecoder {
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        self.sse.feed(bytes, |_, data| self.state.data(data, events))
    }

    fn finish(&mut self, events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        self.sse.finish(|_, data| self.state.data(data, events))?;
        if self.state.done {
            return Ok(());
        }
        if self.state.stopped {
            // Some servers end without `[DONE]` once they have sent a finish reason.
            self.state.close_block(events);
            self.state.done = true;
            events.push(StreamEvent::Done);
            return Ok(());
        }
        Err(TranslateError::invalid("the backend's stream ended before the response was complete"))
    }
}

impl State {
    fn data(&mut self, data: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        if data == b"[DONE]" {
            self.close_block(events);
            self.done = true;
            events.push(StreamEvent::Done);
            return Ok(());
        }
        let chunk: WireChunk<'_> = serde_json::from_slice(data)
            .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid stream chunk: {e}")))?;
        if let Some(error) = chunk.error {
            events.push(StreamEvent::Error(error.to_api_error()));
            return Ok(());
        }
        if !self.started {
            self.started = true;
            events.push(StreamEvent::Start {
                id: chunk.id.map(Text::into_owned).unwrap_or_else(|| self.context.id.clone()),
                model: chunk.model.map(Text::into_owned).unwrap_or_default(),
                created: chunk.created.unwrap_or(self.context.created),
            });
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.or(delta.refusal).filter(|t| !t.as_str().is_empty()) {
                    let index = self.text_block(events);
                    events.push(StreamEvent::TextDelta { index, text: text.into_owned() });
                }
                for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                    self.tool_call_delta(call.index.unwrap_or(position as u32), call, events);
                }
            }
            if let Some(finish) = choice.finish_reason {
                self.close_block(events);
                let (reason, stop_sequence) =
                    stop_reason_of(Some(finish.as_str()), choice.stop_reason, !self.tool_blocks.is_empty());
                self.stopped = true;
                events.push(StreamEvent::Stop { reason, stop_sequence });
            }
        }
        if let Some(usage) = chunk.usage {
            events.push(StreamEvent::Usage(usage.to_usage()));
        }
        Ok(())
    }

    fn text_block(&mut self, events: &mut Vec<StreamEvent>) -> u32 {
        match self.open {
            Some((index, true)) => index,
            _ => self.open_block(true, events),
        }
    }

    fn open_block(&mut self, is_text: bool, events: &mut Vec<StreamEvent>) -> u32 {
        self.close_block(events);
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some((index, is_text));
        index
    }

    fn close_block(&mut self, events: &mut Vec<StreamEvent>) {
        if let Some((index, _)) = self.open.take() {
            events.push(StreamEvent::BlockStop { index });
        }
    }

    fn tool_call_delta(&mut self, tool_index: u32, call: WireToolCallDelta<'_>, events: &mut Vec<StreamEvent>) {
        let (name, arguments) = match call.function {
            Some(function) => (function.name, function.arguments),
            None => (None, None),
        };
        let known = self.tool_blocks.iter().find(|(t, _)| *t == tool_index).map(|(_, block)| *block);
        let index = match known {
            Some(index) => index,
            None => {
                let index = self.open_block(false, events);
                self.tool_blocks.push((tool_index, index));
                let id =
                    call.id.map(Text::into_owned).unwrap_or_else(|| format!("call_{}_{tool_index}", self.context.id));
                let name = name.map(Text::into_owned).unwrap_or_default();
                events.push(StreamEvent::ToolCallStart { index, id, name });
                index
            }
        };
        if let Some(fragment) = arguments.filter(|a| !a.as_str().is_empty()) {
            events.push(StreamEvent::ToolCallDelta { index, arguments_fragment: fragment.into_owned() });
        }
    }
}
