//! Decodes a Gemini `streamGenerateContent?alt=sse` stream: each event's data is a whole
//! `GenerateContentResponse` carrying the next piece of text (or whole `functionCall`s), the last
//! one a `finishReason` and the final `usageMetadata`. The stream has no end marker of its own:
//! it is complete once a finish reason came and the connection ended.

use super::response::{WireResponse, WireUsage};
use super::stop_reason_of;
use crate::chat::{ResponseContext, StreamDecoder, StreamEvent};
use crate::error::TranslateError;
use crate::frames::SseParser;
use crate::json::Text;

#[derive(Debug, Default)]
pub struct SseDecoder {
    sse: SseParser,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    context: ResponseContext,
    started: bool,
    /// The text block open now.
    open_text: Option<u32>,
    next_block: u32,
    calls: usize,
    stopped: bool,
    done: bool,
    usage: Option<crate::chat::Usage>,
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
        if !self.state.stopped {
            return Err(TranslateError::invalid("the backend's stream ended before the response was complete"));
        }
        if let Some(usage) = self.state.usage.take() {
            events.push(StreamEvent::Usage(usage));
        }
        self.state.done = true;
        events.push(StreamEvent::Done);
        Ok(())
    }
}

impl State {
    fn data(&mut self, data: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
        let chunk: WireResponse<'_> = serde_json::from_slice(data)
            .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid stream chunk: {e}")))?;
        if let Some(error) = chunk.error {
            events.push(StreamEvent::Error(error.to_api_error()));
            return Ok(());
        }
        if !self.started {
            self.started = true;
            events.push(StreamEvent::Start {
                id: chunk.response_id.as_ref().map_or_else(|| self.context.id.clone(), |id| id.as_str().to_owned()),
                model: chunk
                    .model_version
                    .as_ref()
                    .map_or_else(|| self.context.model.clone(), |m| m.as_str().to_owned()),
                created: self.context.created,
            });
        }
        if let Some(usage) = chunk.usage_metadata {
            self.usage = Some(WireUsage::to_usage(usage));
        }
        let blocked = chunk.prompt_feedback.and_then(|f| f.block_reason).is_some();
        for candidate in chunk.candidates.into_iter().filter(|c| c.index == 0) {
            for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
                if let Some(call) = &part.function_call {
                    self.close_text(events);
                    let call = call.to_tool_call(&self.context, self.calls);
                    self.calls += 1;
                    let index = self.next_block;
                    self.next_block += 1;
                    events.push(StreamEvent::ToolCallStart { index, id: call.id, name: call.name });
                    events.push(StreamEvent::ToolCallDelta { index, arguments_fragment: call.arguments });
                    events.push(StreamEvent::BlockStop { index });
                } else if let Some(text) = part.text.filter(|t| !part.thought && !t.as_str().is_empty()) {
                    let index = self.text_block();
                    events.push(StreamEvent::TextDelta { index, text: text.into_owned() });
                }
            }
            if let Some(finish) = candidate.finish_reason.as_ref().map(Text::as_str) {
                self.stop(stop_reason_of(finish, self.calls > 0), events);
            }
        }
        if blocked && !self.stopped {
            self.stop(crate::chat::StopReason::ContentFilter, events);
        }
        Ok(())
    }

    fn stop(&mut self, reason: crate::chat::StopReason, events: &mut Vec<StreamEvent>) {
        self.close_text(events);
        self.stopped = true;
        events.push(StreamEvent::Stop { reason, stop_sequence: None });
    }

    fn text_block(&mut self) -> u32 {
        *self.open_text.get_or_insert_with(|| {
            let index = self.next_block;
            self.next_block += 1;
            index
        })
    }

    fn close_text(&mut self, events: &mut Vec<StreamEvent>) {
        if let Some(index) = self.open_text.take() {
            events.push(StreamEvent::BlockStop { index });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{StopReason, Usage};

    /// The shape of the API reference's streamed answer (`alt=sse`, CRLF line ends).
    const STREAM: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hel\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 9},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r1\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"lo\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"candidatesTokenCount\": 2,\"totalTokenCount\": 11},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r1\"}\r\n\r\n";

    fn decode(chunks: &[&[u8]]) -> Result<Vec<StreamEvent>, TranslateError> {
        let mut d = SseDecoder::new(ResponseContext { created: 7, id: "ctx".into(), ..ResponseContext::default() });
        let mut events = Vec::new();
        for c in chunks {
            d.feed(c, &mut events)?;
        }
        d.finish(&mut events)?;
        Ok(events)
    }

    #[test]
    fn any_split_of_a_stream_decodes_the_same() {
        let whole = decode(&[STREAM.as_bytes()]).unwrap();
        assert_eq!(
            whole,
            vec![
                StreamEvent::Start { id: "r1".into(), model: "gemini-2.5-flash".into(), created: 7 },
                StreamEvent::TextDelta { index: 0, text: "Hel".into() },
                StreamEvent::TextDelta { index: 0, text: "lo".into() },
                StreamEvent::BlockStop { index: 0 },
                StreamEvent::Stop { reason: StopReason::EndTurn, stop_sequence: None },
                StreamEvent::Usage(Usage::new(9, 2)),
                StreamEvent::Done,
            ]
        );
        let bytes = STREAM.as_bytes();
        for at in 0..bytes.len() {
            assert_eq!(decode(&[&bytes[..at], &bytes[at..]]).unwrap(), whole, "split at {at}");
        }
    }

    #[test]
    fn function_calls_come_whole_and_a_cut_stream_is_an_error() {
        let call = b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":1}}}]},\"finishReason\":\"STOP\"}]}\n\n";
        let events = decode(&[call]).unwrap();
        assert!(events.contains(&StreamEvent::ToolCallStart { index: 0, id: "call_ctx_0".into(), name: "f".into() }));
        assert!(events.contains(&StreamEvent::ToolCallDelta { index: 0, arguments_fragment: "{\"a\":1}".into() }));
        assert!(events.contains(&StreamEvent::Stop { reason: StopReason::ToolUse, stop_sequence: None }));
        let cut = &STREAM.as_bytes()[..STREAM.len() / 2];
        assert!(decode(&[cut]).is_err());
    }
}
