//! Decodes an OpenAI Responses SSE stream (typed `response.*` events) into stream events.

use serde::Deserialize;

use super::response::{WireItem, WireResponse};
use crate::chat::{ResponseContext, StreamDecoder, StreamEvent};
use crate::error::{ApiError, ErrorKind, TranslateError};
use crate::frames::SseParser;
use crate::json::Text;

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow)]
    response: Option<WireResponse<'a>>,
    output_index: Option<u32>,
    #[serde(borrow)]
    item: Option<WireItem<'a>>,
    #[serde(borrow)]
    delta: Option<Text<'a>>,
    #[serde(borrow)]
    message: Option<Text<'a>>,
    #[serde(borrow)]
    code: Option<Text<'a>>,
}

/// Decodes an OpenAI Responses stream as it arrives.
#[derive(Debug, Default)]
pub struct SseDecoder {
    sse: SseParser,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    context: ResponseContext,
    started: bool,
    /// Function call items seen (by output index), and whether their arguments streamed.
    calls: Vec<(u32, bool)>,
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
        Err(TranslateError::invalid("the backend's stream ended before the response was complete"))
    }
}

impl State {
    fn data(&mut self, data: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        if data == b"[DONE]" {
            return Ok(());
        }
        let event: WireEvent<'_> = serde_json::from_slice(data)
            .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid stream event: {e}")))?;
        let index = event.output_index.unwrap_or(0);
        match event.kind.as_str() {
            "response.created" | "response.in_progress" | "response.queued" => {
                if let (false, Some(response)) = (self.started, event.response) {
                    self.started = true;
                    events.push(StreamEvent::Start {
                        id: response.id.map(Text::into_owned).unwrap_or_else(|| self.context.id.clone()),
                        model: response.model.map(Text::into_owned).unwrap_or_default(),
                        created: response.created_at.map_or(self.context.created, |t| t as u64),
                    });
                }
            }
            "response.output_item.added" => {
                if let Some(item) = event.item.filter(|item| item.kind.as_str() == "function_call") {
                    self.call_started(index, &item, events);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(text) = event.delta.filter(|t| !t.as_str().is_empty()) {
                    events.push(StreamEvent::TextDelta { index, text: text.into_owned() });
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(fragment) = event.delta.filter(|t| !t.as_str().is_empty()) {
                    if let Some(call) = self.calls.iter_mut().find(|(i, _)| *i == index) {
                        call.1 = true;
                    }
                    events.push(StreamEvent::ToolCallDelta { index, arguments_fragment: fragment.into_owned() });
                }
            }
            "response.output_item.done" => {
                if let Some(item) = event.item.as_ref().filter(|item| item.kind.as_str() == "function_call") {
                    // Arguments that arrived only whole, with the finished item.
                    let streamed = match self.calls.iter().find(|(i, _)| *i == index) {
                        Some((_, streamed)) => *streamed,
                        None => self.call_started(index, item, events),
                    };
                    if let Some(arguments) = item.arguments.as_ref().filter(|a| !streamed && !a.as_str().is_empty()) {
                        let arguments_fragment = arguments.as_str().to_owned();
                        events.push(StreamEvent::ToolCallDelta { index, arguments_fragment });
                    }
                }
                events.push(StreamEvent::BlockStop { index });
            }
            "response.completed" | "response.incomplete" => {
                if let Some(response) = event.response {
                    let reason = response.stop_reason(!self.calls.is_empty());
                    events.push(StreamEvent::Stop { reason, stop_sequence: None });
                    if let Some(usage) = response.usage {
                        events.push(StreamEvent::Usage(usage.to_usage()));
                    }
                }
                self.done = true;
                events.push(StreamEvent::Done);
            }
            "response.failed" => {
                let error = event.response.and_then(|r| r.error).map_or_else(
                    || ApiError::new(ErrorKind::Server, "the backend's response failed"),
                    |e| e.to_api_error(),
                );
                self.done = true;
                events.push(StreamEvent::Error(error));
            }
            "error" => {
                let mut error =
                    ApiError::new(ErrorKind::Server, event.message.map(Text::into_owned).unwrap_or_default());
                error.code = event.code.map(Text::into_owned);
                events.push(StreamEvent::Error(error));
            }
            _ => {}
        }
        Ok(())
    }

    /// Starts a tool call block; says whether its arguments came with it.
    fn call_started(&mut self, index: u32, item: &WireItem<'_>, events: &mut Vec<StreamEvent>) -> bool {
        events.push(StreamEvent::ToolCallStart {
            index,
            id: item.call_id.as_ref().map_or_else(String::new, |t| t.as_str().to_owned()),
            name: item.name.as_ref().map_or_else(String::new, |t| t.as_str().to_owned()),
        });
        let arguments = item.arguments.as_ref().filter(|a| !a.as_str().is_empty());
        if let Some(arguments) = arguments {
            events.push(StreamEvent::ToolCallDelta { index, arguments_fragment: arguments.as_str().to_owned() });
        }
        self.calls.push((index, arguments.is_some()));
        arguments.is_some()
    }
}
