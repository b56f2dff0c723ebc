//! Encodes stream events as Ollama's newline-delimited JSON: a `done: false` line per text delta,
//! each tool call whole in one line once its arguments are complete, and a last `done: true` line
//! with `done_reason` and the token counts.

use super::chat_request::{WireFunctionCall, WireToolCall};
use super::response::{write_content, write_done, write_head, Endpoint};
use super::time::format_rfc3339;
use crate::chat::{StopReason, StreamEncoder, StreamEvent, ToolCall, Usage};
use crate::json::push_str;
use std::borrow::Cow;

use crate::wire::{arguments_object, single_line};

/// Writes an Ollama stream for `/api/chat` or `/api/generate`.
#[derive(Debug)]
pub struct NdjsonEncoder {
    endpoint: Endpoint,
    model: String,
    created_at: String,
    /// Tool calls whose arguments are still arriving, by source block index. Ollama sends calls
    /// whole, so they wait here until complete.
    pending: Vec<(u32, ToolCall)>,
    calls_sent: usize,
    stop: Option<StopReason>,
    usage: Usage,
    done: bool,
}

impl NdjsonEncoder {
    pub fn new(endpoint: Endpoint) -> Self {
        NdjsonEncoder {
            endpoint,
            model: String::new(),
            created_at: format_rfc3339(0),
            pending: Vec::new(),
            calls_sent: 0,
            stop: None,
            usage: Usage::default(),
            done: false,
        }
    }

    fn flush_call(&mut self, position: usize, out: &mut Vec<u8>) {
        let (_, mut call) = self.pending.remove(position);
        // One call is one line: pretty-printed arguments would break the framing.
        if let Cow::Owned(one_line) = single_line(&call.arguments) {
            call.arguments = one_line;
        }
        let arguments = match arguments_object(&call) {
            Ok(arguments) => arguments,
            Err(error) => {
                self.error_line(out, &error.to_string());
                return;
            }
        };
        let wire = [WireToolCall {
            id: &call.id,
            function: WireFunctionCall { index: self.calls_sent, name: &call.name, arguments },
        }];
        self.calls_sent += 1;
        write_head(out, &self.model, &self.created_at);
        write_content(out, self.endpoint, "", &wire);
        out.extend_from_slice(b"false}\n");
    }

    fn error_line(&mut self, out: &mut Vec<u8>, message: &str) {
        out.extend_from_slice(b"{\"error\":");
        push_str(out, message);
        out.extend_from_slice(b"}\n");
        self.done = true;
    }

    fn done(&mut self, out: &mut Vec<u8>) {
        while !self.pending.is_empty() && !self.done {
            self.flush_call(0, out);
        }
        if self.done {
            return;
        }
        self.done = true;
        let reason = self.stop.take().unwrap_or(StopReason::EndTurn);
        write_head(out, &self.model, &self.created_at);
        write_content(out, self.endpoint, "", &[]);
        write_done(out, &reason, &self.usage);
        out.push(b'\n');
    }
}

impl StreamEncoder for NdjsonEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        match event {
            StreamEvent::Start { model, created, .. } => {
                self.model.clone_from(model);
                self.created_at = format_rfc3339(*created);
            }
            StreamEvent::TextDelta { text, .. } => {
                write_head(out, &self.model, &self.created_at);
                write_content(out, self.endpoint, text, &[]);
                out.extend_from_slice(b"false}\n");
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                if self.endpoint == Endpoint::Generate {
                    self.error_line(out, "the model called a tool, which /api/generate cannot carry");
                    return;
                }
                let call = ToolCall { id: id.clone(), name: name.clone(), arguments: String::new() };
                self.pending.push((*index, call));
            }
            StreamEvent::ToolCallDelta { index, arguments_fragment } => {
                if let Some((_, call)) = self.pending.iter_mut().find(|(i, _)| i == index) {
                    call.arguments.push_str(arguments_fragment);
                }
            }
            StreamEvent::BlockStop { index } => {
                if let Some(position) = self.pending.iter().position(|(i, _)| i == index) {
                    self.flush_call(position, out);
                }
            }
            StreamEvent::Stop { reason, .. } => self.stop = Some(reason.clone()),
            StreamEvent::Usage(usage) => self.usage = *usage,
            StreamEvent::Error(error) => self.error_line(out, &super::error_text(error)),
            StreamEvent::Done => self.done(out),
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.done(out);
    }
}
