//! Encodes stream events as an OpenAI Responses SSE stream: response.created and .in_progress,
//! per item output_item.added, content_part.added, output_text.delta/.done or
//! function_call_arguments.delta/.done, content_part.done, output_item.done; then
//! response.completed (or .incomplete), every event numbered by `sequence_number`.

use super::output::{item_id, status_of, write_response, write_text_part, Echo, Head, Item};
use crate::chat::{StopReason, StreamEncoder, StreamEvent, Usage};
use crate::json::{push_str, push_u64};
use crate::wire::prefixed;

/// Writes an OpenAI Responses stream. It keeps each item's text and arguments, which the `.done`
/// events and the final response repeat in full.
#[derive(Debug, Default)]
pub struct SseEncoder {
    echo: Echo,
    sequence: u64,
    id: String,
    model: String,
    created: u64,
    started: bool,
    items: Vec<Item>,
    /// Source block index → item position.
    blocks: Vec<(u32, usize)>,
    /// The source index of the item receiving deltas.
    open: Option<u32>,
    stop: Option<StopReason>,
    usage: Option<Usage>,
    done: bool,
}

impl SseEncoder {
    /// `echo`: the request's settings, which every `response` object repeats.
    pub fn new(echo: Echo) -> Self {
        SseEncoder { echo, ..SseEncoder::default() }
    }

    /// `event: <kind>` and a data object starting with its type and sequence number; `body`
    /// writes the remaining members, each starting with a comma.
    fn event(&mut self, out: &mut Vec<u8>, kind: &str, body: impl FnOnce(&Self, &mut Vec<u8>)) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: {\"type\":");
        push_str(out, kind);
        out.extend_from_slice(b",\"sequence_number\":");
        push_u64(out, self.sequence);
        self.sequence += 1;
        body(self, out);
        out.extend_from_slice(b"}\n\n");
    }

    fn response_event(&mut self, out: &mut Vec<u8>, kind: &str, status: &str, incomplete: Option<&str>) {
        self.event(out, kind, |this, out| {
            out.extend_from_slice(b",\"response\":");
            let head = Head { id: &this.id, created: this.created, model: &this.model };
            let usage = if status == "in_progress" { None } else { Some(this.usage.unwrap_or_default()) };
            write_response(out, &head, status, incomplete, &this.items, usage.as_ref(), &this.echo);
        });
    }

    fn start(&mut self, out: &mut Vec<u8>, id: &str, model: &str, created: u64) {
        self.started = true;
        self.id = prefixed("resp_", id);
        self.model = model.to_owned();
        self.created = created;
        self.response_event(out, "response.created", "in_progress", None);
        self.response_event(out, "response.in_progress", "in_progress", None);
    }

    fn ensure_started(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.start(out, "resp_switchyard", "", 0);
        }
    }

    fn position(&self, index: u32) -> Option<usize> {
        self.blocks.iter().find(|(source, _)| *source == index).map(|(_, position)| *position)
    }

    /// Members naming an item: `,"item_id":...,"output_index":N`.
    fn item_ref(&self, out: &mut Vec<u8>, position: usize) {
        let id = match &self.items[position] {
            Item::Message { id, .. } | Item::FunctionCall { id, .. } => id,
        };
        out.extend_from_slice(b",\"item_id\":");
        push_str(out, id);
        out.extend_from_slice(b",\"output_index\":");
        push_u64(out, position as u64);
    }

    fn open_item(&mut self, out: &mut Vec<u8>, index: u32, item: Item) -> usize {
        self.ensure_started(out);
        self.close_item(out);
        let position = self.items.len();
        let is_message = matches!(item, Item::Message { .. });
        self.items.push(item);
        self.blocks.push((index, position));
        self.open = Some(index);
        self.event(out, "response.output_item.added", |this, out| {
            out.extend_from_slice(b",\"output_index\":");
            push_u64(out, position as u64);
            out.extend_from_slice(b",\"item\":");
            this.items[position].write(out, "in_progress");
        });
        if is_message {
            self.event(out, "response.content_part.added", |this, out| {
                this.item_ref(out, position);
                out.extend_from_slice(b",\"content_index\":0,\"part\":");
                write_text_part(out, "");
            });
        }
        position
    }

    fn close_item(&mut self, out: &mut Vec<u8>) {
        let Some(position) = self.open.take().and_then(|index| self.position(index)) else { return };
        match &self.items[position] {
            Item::Message { .. } => {
                self.event(out, "response.output_text.done", |this, out| {
                    this.item_ref(out, position);
                    out.extend_from_slice(b",\"content_index\":0,\"text\":");
                    if let Item::Message { text, .. } = &this.items[position] {
                        push_str(out, text);
                    }
                    out.extend_from_slice(b",\"logprobs\":[]");
                });
                self.event(out, "response.content_part.done", |this, out| {
                    this.item_ref(out, position);
                    out.extend_from_slice(b",\"content_index\":0,\"part\":");
                    if let Item::Message { text, .. } = &this.items[position] {
                        write_text_part(out, text);
                    }
                });
            }
            Item::FunctionCall { .. } => {
                self.event(out, "response.function_call_arguments.done", |this, out| {
                    this.item_ref(out, position);
                    if let Item::FunctionCall { name, arguments, .. } = &this.items[position] {
                        out.extend_from_slice(b",\"name\":");
                        push_str(out, name);
                        out.extend_from_slice(b",\"arguments\":");
                        push_str(out, arguments);
                    }
                });
            }
        }
        self.event(out, "response.output_item.done", |this, out| {
            out.extend_from_slice(b",\"output_index\":");
            push_u64(out, position as u64);
            out.extend_from_slice(b",\"item\":");
            this.items[position].write(out, "completed");
        });
    }

    fn done(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.done = true;
        self.ensure_started(out);
        self.close_item(out);
        let has_calls = self.items.iter().any(|item| matches!(item, Item::FunctionCall { .. }));
        let reason = self.stop.take().unwrap_or(StopReason::EndTurn).or_tool_use(has_calls);
        let (status, incomplete) = status_of(&reason);
        let kind = if status == "completed" { "response.completed" } else { "response.incomplete" };
        self.response_event(out, kind, status, incomplete);
    }
}

impl StreamEncoder for SseEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        match event {
            StreamEvent::Start { id, model, created } => {
                if !self.started {
                    self.start(out, id, model, *created);
                }
            }
            StreamEvent::TextDelta { index, text } => {
                let position = match self.position(*index) {
                    Some(position) => position,
                    None => {
                        let id = item_id("msg", &self.id, self.items.len());
                        self.open_item(out, *index, Item::Message { id, text: String::new() })
                    }
                };
                if let Item::Message { text: so_far, .. } = &mut self.items[position] {
                    so_far.push_str(text);
                }
                self.event(out, "response.output_text.delta", |this, out| {
                    this.item_ref(out, position);
                    out.extend_from_slice(b",\"content_index\":0,\"delta\":");
                    push_str(out, text);
                    out.extend_from_slice(b",\"logprobs\":[]");
                });
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                let item_id = item_id("fc", &self.id, self.items.len());
                let item = Item::FunctionCall {
                    id: item_id,
                    call_id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                };
                self.open_item(out, *index, item);
            }
            StreamEvent::ToolCallDelta { index, arguments_fragment } => {
                let Some(position) = self.position(*index) else { return };
                if let Item::FunctionCall { arguments, .. } = &mut self.items[position] {
                    arguments.push_str(arguments_fragment);
                }
                self.event(out, "response.function_call_arguments.delta", |this, out| {
                    this.item_ref(out, position);
                    out.extend_from_slice(b",\"delta\":");
                    push_str(out, arguments_fragment);
                });
            }
            StreamEvent::BlockStop { index } => {
                if self.open == Some(*index) {
                    self.close_item(out);
                }
            }
            StreamEvent::Stop { reason, .. } => self.stop = Some(reason.clone()),
            StreamEvent::Usage(usage) => self.usage = Some(*usage),
            StreamEvent::Error(error) => {
                self.event(out, "error", |_, out| {
                    out.extend_from_slice(b",\"code\":");
                    match &error.code {
                        Some(code) => push_str(out, code),
                        None => push_str(out, crate::openai_chat::error_type(error.kind)),
                    }
                    out.extend_from_slice(b",\"message\":");
                    push_str(out, &error.message);
                    out.extend_from_slice(b",\"param\":");
                    match &error.param {
                        Some(param) => push_str(out, param),
                        None => out.extend_from_slice(b"null"),
                    }
                });
                self.done = true;
            }
            StreamEvent::Done => self.done(out),
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.done(out);
    }
}
