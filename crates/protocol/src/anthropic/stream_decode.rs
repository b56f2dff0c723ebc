//! Decodes an Anthropic Messages SSE stream (message_start, content_block_start/delta/stop,
//! message_delta, message_stop, ping, error) into stream events.

use serde::Deserialize;

use super::response::{WireBlockIn, WireUsage};
use super::{stop_reason_of, WireErrorDetailIn};
use crate::chat::{ResponseContext, StreamDecoder, StreamEvent};
use crate::error::TranslateError;
use crate::frames::SseParser;
use crate::json::Text;

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow)]
    message: Option<WireMessageStart<'a>>,
    index: Option<u32>,
    #[serde(borrow)]
    content_block: Option<WireBlockIn<'a>>,
    #[serde(borrow)]
    delta: Option<WireDelta<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    error: Option<WireErrorDetailIn<'a>>,
}

#[derive(Deserialize)]
struct WireMessageStart<'a> {
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    text: Option<Text<'a>>,
    #[serde(borrow)]
    partial_json: Option<Text<'a>>,
    #[serde(borrow)]
    stop_reason: Option<Text<'a>>,
    #[serde(borrow)]
    stop_sequence: Option<Text<'a>>,
}

/// Decodes an Anthropic Messages stream as it arrives.
#[derive(Debug, Default)]
pub struct SseDecoder {
    sse: SseParser,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    context: ResponseContext,
    usage: WireUsage,
    /// Blocks with nothing to translate (thinking), whose deltas are skipped.
    skipped_blocks: Vec<u32>,
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
            self.state.done = true;
            events.push(StreamEvent::Done);
            return Ok(());
        }
        Err(TranslateError::invalid("the backend's stream ended before the message was complete"))
    }
}

impl State {
    fn data(&mut self, data: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        let event: WireEvent<'_> = serde_json::from_slice(data)
            .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid stream event: {e}")))?;
        let index = event.index.unwrap_or(0);
        match event.kind.as_str() {
            "message_start" => {
                let message = event.message.unwrap_or(WireMessageStart { id: None, model: None, usage: None });
                events.push(StreamEvent::Start {
                    id: message.id.map(Text::into_owned).unwrap_or_else(|| self.context.id.clone()),
                    model: message.model.map(Text::into_owned).unwrap_or_default(),
                    created: self.context.created,
                });
                // The prompt's size is known from the start; encoders that report it early can.
                if let Some(usage) = message.usage {
                    self.usage = usage;
                    events.push(StreamEvent::Usage(usage.to_usage()));
                }
            }
            "content_block_start" => {
                let Some(block) = event.content_block else { return Ok(()) };
                match block.kind.as_str() {
                    "text" => {
                        if let Some(text) = block.text.filter(|t| !t.as_str().is_empty()) {
                            events.push(StreamEvent::TextDelta { index, text: text.into_owned() });
                        }
                    }
                    "tool_use" => {
                        events.push(StreamEvent::ToolCallStart {
                            index,
                            id: block.id.map(Text::into_owned).unwrap_or_default(),
                            name: block.name.map(Text::into_owned).unwrap_or_default(),
                        });
                        // Anthropic starts with `{}` and streams the input; anything else is input.
                        if let Some(input) = block.input.filter(|raw| !matches!(raw.get(), "{}" | "")) {
                            let arguments_fragment = input.get().to_owned();
                            events.push(StreamEvent::ToolCallDelta { index, arguments_fragment });
                        }
                    }
                    _ => self.skipped_blocks.push(index),
                }
            }
            "content_block_delta" if !self.skipped_blocks.contains(&index) => {
                let Some(delta) = event.delta else { return Ok(()) };
                match delta.kind.as_ref().map(Text::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.text {
                            events.push(StreamEvent::TextDelta { index, text: text.into_owned() });
                        }
                    }
                    Some("input_json_delta") => {
                        if let Some(fragment) = delta.partial_json.filter(|p| !p.as_str().is_empty()) {
                            events
                                .push(StreamEvent::ToolCallDelta { index, arguments_fragment: fragment.into_owned() });
                        }
                    }
                    _ => {} // citations, thinking, signatures
                }
            }
            "content_block_stop" if !self.skipped_blocks.contains(&index) => {
                events.push(StreamEvent::BlockStop { index });
            }
            "message_delta" => {
                if let Some(usage) = event.usage {
                    self.usage.update(usage);
                }
                let (reason, stop_sequence) = match event.delta {
                    Some(delta) => stop_reason_of(
                        delta.stop_reason.as_ref().map(Text::as_str),
                        delta.stop_sequence.map(Text::into_owned),
                    ),
                    None => stop_reason_of(None, None),
                };
                self.stopped = true;
                events.push(StreamEvent::Stop { reason, stop_sequence });
                events.push(StreamEvent::Usage(self.usage.to_usage()));
            }
            "message_stop" => {
                self.done = true;
                events.push(StreamEvent::Done);
            }
            "error" => {
                if let Some(error) = event.error {
                    events.push(StreamEvent::Error(error.to_api_error()));
                }
            }
            _ => {} // ping, and events of skipped blocks
        }
        Ok(())
    }
}
