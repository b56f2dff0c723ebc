//! Encodes stream events as an Anthropic Messages SSE stream, event for event as Anthropic sends
//! it: message_start, ping, content_block_start/delta/stop per block, message_delta (stop reason
//! and usage), message_stop.

use super::stop_reason_name;
use crate::chat::{StopReason, StreamEncoder, StreamEvent, Usage};
use crate::json::{push_str, push_u64};
use crate::wire::prefixed;

/// Writes an Anthropic Messages stream.
#[derive(Debug, Default)]
pub struct SseEncoder {
    /// From the `Start` event; message_start is written with the first content (or the end), so
    /// a usage report that follows `Start` still makes it into message_start.
    head: Option<(String, String)>,
    started: bool,
    /// Source block index → output block index (Anthropic's are contiguous from 0).
    blocks: Vec<(u32, u32)>,
    /// The source index of the block now open.
    open: Option<u32>,
    saw_tool_call: bool,
    stop: Option<(StopReason, Option<String>)>,
    usage: Option<Usage>,
    done: bool,
}

impl SseEncoder {
    pub fn new() -> Self {
        SseEncoder::default()
    }

    fn ensure_started(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let (id, model) = self.head.take().unwrap_or_else(|| ("msg_switchyard".to_owned(), String::new()));
        out.extend_from_slice(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":");
        push_str(out, &prefixed("msg_", &id));
        out.extend_from_slice(b",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
        push_str(out, &model);
        out.extend_from_slice(b",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
        // Sources that report usage only at the end leave input_tokens 0 here; message_delta
        // carries it then (the SDKs take input_tokens from there too).
        let usage = self.usage.unwrap_or_default();
        write_usage(out, &usage);
        out.extend_from_slice(b"}}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n");
    }

    fn output_index(&self, index: u32) -> Option<u32> {
        self.blocks.iter().find(|(source, _)| *source == index).map(|(_, output)| *output)
    }

    /// Closes the open block and starts a new one; `content_block` is its JSON.
    fn open_block(&mut self, out: &mut Vec<u8>, index: u32, content_block: impl FnOnce(&mut Vec<u8>)) -> u32 {
        self.ensure_started(out);
        self.close_block(out);
        let output = self.blocks.len() as u32;
        self.blocks.push((index, output));
        self.open = Some(index);
        out.extend_from_slice(b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":");
        push_u64(out, output.into());
        out.extend_from_slice(b",\"content_block\":");
        content_block(out);
        out.extend_from_slice(b"}\n\n");
        output
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        let Some(index) = self.open.take() else { return };
        let Some(output) = self.output_index(index) else { return };
        out.extend_from_slice(b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":");
        push_u64(out, output.into());
        out.extend_from_slice(b"}\n\n");
    }

    fn delta(out: &mut Vec<u8>, output: u32, delta: impl FnOnce(&mut Vec<u8>)) {
        out.extend_from_slice(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":");
        push_u64(out, output.into());
        out.extend_from_slice(b",\"delta\":");
        delta(out);
        out.extend_from_slice(b"}\n\n");
    }

    fn done(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.done = true;
        self.ensure_started(out);
        self.close_block(out);
        let (reason, stop_sequence) = self.stop.take().unwrap_or((StopReason::EndTurn, None));
        let reason = reason.or_tool_use(self.saw_tool_call);
        out.extend_from_slice(b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":");
        push_str(out, stop_reason_name(&reason));
        out.extend_from_slice(b",\"stop_sequence\":");
        match stop_sequence {
            Some(sequence) if reason == StopReason::StopSequence => push_str(out, &sequence),
            _ => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b"},\"usage\":");
        match self.usage {
            Some(usage) => write_usage(out, &usage),
            None => out.extend_from_slice(b"{\"output_tokens\":0}"),
        }
        out.extend_from_slice(b"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    }
}

/// Anthropic's usage object: cached prompt tokens apart from `input_tokens`.
fn write_usage(out: &mut Vec<u8>, usage: &Usage) {
    let (read, written) = (usage.cached_prompt_tokens.unwrap_or(0), usage.cache_write_tokens.unwrap_or(0));
    out.extend_from_slice(b"{\"input_tokens\":");
    push_u64(out, usage.prompt_tokens.saturating_sub(read + written));
    out.extend_from_slice(b",\"cache_creation_input_tokens\":");
    push_u64(out, written);
    out.extend_from_slice(b",\"cache_read_input_tokens\":");
    push_u64(out, read);
    out.extend_from_slice(b",\"output_tokens\":");
    push_u64(out, usage.completion_tokens);
    out.push(b'}');
}

impl StreamEncoder for SseEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        match event {
            StreamEvent::Start { id, model, .. } => {
                if !self.started {
                    self.head = Some((id.clone(), model.clone()));
                }
            }
            StreamEvent::TextDelta { index, text } => {
                // A late delta for a closed block still names its block.
                let output = match self.output_index(*index) {
                    Some(output) => output,
                    None => {
                        self.open_block(out, *index, |out| out.extend_from_slice(b"{\"type\":\"text\",\"text\":\"\"}"))
                    }
                };
                Self::delta(out, output, |out| {
                    out.extend_from_slice(b"{\"type\":\"text_delta\",\"text\":");
                    push_str(out, text);
                    out.push(b'}');
                });
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.saw_tool_call = true;
                self.open_block(out, *index, |out| {
                    out.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":");
                    push_str(out, id);
                    out.extend_from_slice(b",\"name\":");
                    push_str(out, name);
                    out.extend_from_slice(b",\"input\":{}}");
                });
            }
            StreamEvent::ToolCallDelta { index, arguments_fragment } => {
                let Some(output) = self.output_index(*index) else { return };
                Self::delta(out, output, |out| {
                    out.extend_from_slice(b"{\"type\":\"input_json_delta\",\"partial_json\":");
                    push_str(out, arguments_fragment);
                    out.push(b'}');
                });
            }
            StreamEvent::BlockStop { index } => {
                if self.open == Some(*index) {
                    self.close_block(out);
                }
            }
            StreamEvent::Stop { reason, stop_sequence } => self.stop = Some((reason.clone(), stop_sequence.clone())),
            StreamEvent::Usage(usage) => self.usage = Some(*usage),
            StreamEvent::Error(error) => {
                out.extend_from_slice(b"event: error\ndata: ");
                out.extend_from_slice(&super::encode_error(error));
                out.extend_from_slice(b"\n\n");
                // Anthropic ends a stream with its error event.
                self.done = true;
            }
            StreamEvent::Done => self.done(out),
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.done(out);
    }
}
