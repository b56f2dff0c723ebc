//! Encodes stream events as an OpenAI Chat Completions SSE stream: `chat.completion.chunk`
//! events, tool calls numbered from 0, a final usage chunk when the client asked for one, `[DONE]`.

use super::{error_body, finish_reason};
use crate::chat::{StopReason, StreamEncoder, StreamEvent, Usage};
use crate::json::{push_str, push_u64};

/// Writes an OpenAI Chat Completions stream.
#[derive(Debug, Default)]
pub struct SseEncoder {
    include_usage: bool,
    /// `data: {"id":...,"object":"chat.completion.chunk","created":...,"model":...,"choices":[`,
    /// the same for every chunk, so written once.
    prefix: Vec<u8>,
    /// Block index of each tool call, in the order they started (their OpenAI index).
    tool_blocks: Vec<u32>,
    stop_sent: bool,
    usage: Option<Usage>,
    done: bool,
}

impl SseEncoder {
    /// `include_usage`: the client sent `stream_options.include_usage`.
    pub fn new(include_usage: bool) -> Self {
        SseEncoder { include_usage, ..SseEncoder::default() }
    }

    fn set_prefix(&mut self, id: &str, model: &str, created: u64) {
        self.prefix.clear();
        self.prefix.extend_from_slice(b"data: {\"id\":");
        push_str(&mut self.prefix, id);
        self.prefix.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        push_u64(&mut self.prefix, created);
        self.prefix.extend_from_slice(b",\"model\":");
        push_str(&mut self.prefix, model);
        self.prefix.extend_from_slice(b",\"choices\":[");
    }

    /// One chunk with one choice; `delta` writes the delta object's fields.
    fn chunk(&mut self, out: &mut Vec<u8>, finish: Option<&str>, delta: impl FnOnce(&mut Vec<u8>)) {
        if self.prefix.is_empty() {
            self.set_prefix("chatcmpl-switchyard", "", 0);
        }
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(b"{\"index\":0,\"delta\":{");
        delta(out);
        out.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":");
        match finish {
            Some(reason) => push_str(out, reason),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b"}]}\n\n");
    }

    fn tool_position(&self, index: u32) -> Option<usize> {
        self.tool_blocks.iter().position(|&block| block == index)
    }

    fn stop(&mut self, reason: &StopReason, out: &mut Vec<u8>) {
        if self.stop_sent {
            return;
        }
        self.stop_sent = true;
        let reason = reason.clone().or_tool_use(!self.tool_blocks.is_empty());
        self.chunk(out, Some(finish_reason(&reason)), |_| {});
    }

    fn done(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.stop(&StopReason::EndTurn, out);
        if self.include_usage {
            let usage = self.usage.unwrap_or_default();
            out.extend_from_slice(&self.prefix);
            out.extend_from_slice(b"],\"usage\":{\"prompt_tokens\":");
            push_u64(out, usage.prompt_tokens);
            out.extend_from_slice(b",\"completion_tokens\":");
            push_u64(out, usage.completion_tokens);
            out.extend_from_slice(b",\"total_tokens\":");
            push_u64(out, usage.total_tokens);
            if usage.cached_prompt_tokens.is_some() || usage.cache_write_tokens.is_some() {
                out.extend_from_slice(b",\"prompt_tokens_details\":{\"cached_tokens\":");
                push_u64(out, usage.cached_prompt_tokens.unwrap_or(0));
                if let Some(written) = usage.cache_write_tokens {
                    out.extend_from_slice(b",\"cache_write_tokens\":");
                    push_u64(out, written);
                }
                out.push(b'}');
            }
            out.extend_from_slice(b"}}\n\n");
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        self.done = true;
    }
}

impl StreamEncoder for SseEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        match event {
            StreamEvent::Start { id, model, created } => {
                self.set_prefix(id, model, *created);
                self.chunk(out, None, |out| out.extend_from_slice(b"\"role\":\"assistant\",\"content\":\"\""));
            }
            StreamEvent::TextDelta { text, .. } => {
                self.chunk(out, None, |out| {
                    out.extend_from_slice(b"\"content\":");
                    push_str(out, text);
                });
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                let position = self.tool_blocks.len();
                self.tool_blocks.push(*index);
                self.chunk(out, None, |out| {
                    out.extend_from_slice(b"\"tool_calls\":[{\"index\":");
                    push_u64(out, position as u64);
                    out.extend_from_slice(b",\"id\":");
                    push_str(out, id);
                    out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
                    push_str(out, name);
                    out.extend_from_slice(b",\"arguments\":\"\"}}]");
                });
            }
            StreamEvent::ToolCallDelta { index, arguments_fragment } => {
                let Some(position) = self.tool_position(*index) else { return };
                self.chunk(out, None, |out| {
                    out.extend_from_slice(b"\"tool_calls\":[{\"index\":");
                    push_u64(out, position as u64);
                    out.extend_from_slice(b",\"function\":{\"arguments\":");
                    push_str(out, arguments_fragment);
                    out.extend_from_slice(b"}}]");
                });
            }
            StreamEvent::BlockStop { .. } => {}
            StreamEvent::Stop { reason, .. } => self.stop(reason, out),
            StreamEvent::Usage(usage) => self.usage = Some(*usage),
            StreamEvent::Error(error) => {
                out.extend_from_slice(b"data: ");
                out.extend(serde_json::to_vec(&error_body(error)).unwrap_or_default());
                out.extend_from_slice(b"\n\n");
                // The error is the stream's end: nothing may follow it.
                self.done = true;
            }
            StreamEvent::Done => self.done(out),
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.done(out);
    }
}
