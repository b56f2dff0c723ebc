//! A streamed answer on its way through: the backend's stream decoded incrementally into
//! internal events and each event encoded in the client's API (translate), or only decoded to
//! read the usage it reports while the bytes pass untouched (observe: same API, not OpenAI's).
//! A continuation (stream resume) is a translator whose encoder has been replayed what the
//! client was already sent, so the new backend's events carry on the same answer: no second
//! start, the open text block continued, usage counted as one answer.

use bytes::Bytes;
use switchyard_protocol::chat::{
    ApiError, ErrorKind, ResponseContext, StreamDecoder, StreamEncoder, StreamEvent, TranslateError, Usage,
};
use switchyard_protocol::{anthropic, bedrock, gemini, ollama, openai_chat, responses};

use super::{Decoded, Wire};
use crate::endpoint::Endpoint;

pub struct StreamTranslator {
    decoder: Box<dyn StreamDecoder + Send>,
    /// `None`: observe only.
    encoder: Option<Box<dyn StreamEncoder + Send>>,
    events: Vec<StreamEvent>,
    usage: Option<Usage>,
    /// Characters of generated text seen, to estimate completion tokens when no usage comes.
    text_chars: usize,
    failed: bool,
    /// Set on a continuation: how its events are fitted onto what the client already has.
    splice: Option<Splice>,
}

/// What the client was sent of a stream before its backend failed, read back as events.
pub struct Emitted {
    pub events: Vec<StreamEvent>,
    /// The text the client has (every text delta, concatenated): the continuation's prefill.
    pub text: String,
    /// Characters generated before the failure, the ones held back from the client included.
    pub generated_chars: usize,
}

/// Read back what a client of `endpoint` was sent (`emitted`, whole events only) and what was
/// generated but held back (`discarded`: a tool call not yet complete). `None` if unreadable.
pub fn read_emitted(endpoint: Endpoint, emitted: &[u8], discarded: &[u8]) -> Option<Emitted> {
    let context = ResponseContext::default();
    let mut decoder: Box<dyn StreamDecoder + Send> = match endpoint {
        Endpoint::ChatCompletions => Box::new(openai_chat::SseDecoder::new(context)),
        Endpoint::Messages => Box::new(anthropic::SseDecoder::new(context)),
        Endpoint::Responses => Box::new(responses::SseDecoder::new(context)),
        Endpoint::OllamaChat | Endpoint::OllamaGenerate => Box::new(ollama::NdjsonDecoder::new(context)),
        _ => return None,
    };
    let mut events = Vec::new();
    decoder.feed(emitted, &mut events).ok()?;
    let mut text = String::new();
    let mut generated_chars = 0;
    for event in &events {
        match event {
            StreamEvent::TextDelta { text: t, .. } => {
                text.push_str(t);
                generated_chars += t.chars().count();
            }
            StreamEvent::ToolCallDelta { arguments_fragment, .. } => {
                generated_chars += arguments_fragment.chars().count()
            }
            _ => {}
        }
    }
    let mut more = Vec::new();
    // Best effort: the held-back part only adds to the count of what was consumed.
    let _ = decoder.feed(discarded, &mut more);
    for event in &more {
        match event {
            StreamEvent::TextDelta { text, .. } => generated_chars += text.chars().count(),
            StreamEvent::ToolCallDelta { arguments_fragment, .. } => {
                generated_chars += arguments_fragment.chars().count()
            }
            _ => {}
        }
    }
    Some(Emitted { events, text, generated_chars })
}

/// How a continuation's events are renumbered and adjusted to follow what the client has.
struct Splice {
    /// The text block left open when the stream broke (its index as the client's encoder knows it).
    open_text: Option<u32>,
    /// Indices of the continuation's other blocks start here (past every index already used).
    base: u32,
    /// The continuation's block that carries on the open text block, once seen.
    continuing: Option<u32>,
    /// Whether the continuation has started any block yet.
    seen_block: bool,
    /// Drop leading whitespace of the continuation's text (the prefill lost its trailing
    /// whitespace, which the client already has).
    trim_leading_ws: bool,
    /// Completion tokens generated before the failure: the client sees one answer's usage.
    earlier_completion: u64,
}

impl Splice {
    fn index(&mut self, index: u32, text: bool) -> u32 {
        if self.continuing == Some(index) {
            if let Some(open) = self.open_text {
                return open;
            }
        }
        if !self.seen_block {
            self.seen_block = true;
            if let (true, Some(open)) = (text, self.open_text) {
                self.continuing = Some(index);
                return open;
            }
        }
        self.base + index
    }

    /// The event as the client's encoder should see it; `None` to drop it.
    fn fit(&mut self, event: StreamEvent) -> Option<StreamEvent> {
        Some(match event {
            StreamEvent::Start { .. } => return None,
            StreamEvent::TextDelta { index, mut text } => {
                if self.trim_leading_ws {
                    let trimmed = text.trim_start();
                    if trimmed.is_empty() {
                        return None;
                    }
                    text = trimmed.to_owned();
                    self.trim_leading_ws = false;
                }
                StreamEvent::TextDelta { index: self.index(index, true), text }
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                StreamEvent::ToolCallStart { index: self.index(index, false), id, name }
            }
            StreamEvent::ToolCallDelta { index, arguments_fragment } => {
                StreamEvent::ToolCallDelta { index: self.index(index, false), arguments_fragment }
            }
            StreamEvent::BlockStop { index } => StreamEvent::BlockStop { index: self.index(index, false) },
            StreamEvent::Usage(u) => {
                let mut u = u;
                u.prompt_tokens = u.prompt_tokens.saturating_sub(self.earlier_completion);
                u.completion_tokens += self.earlier_completion;
                StreamEvent::Usage(u)
            }
            other => other,
        })
    }
}

fn decoder(wire: Wire, context: ResponseContext) -> Option<Box<dyn StreamDecoder + Send>> {
    Some(match wire {
        Wire::OpenAiChat => Box::new(openai_chat::SseDecoder::new(context)),
        Wire::Anthropic => Box::new(anthropic::SseDecoder::new(context)),
        Wire::OllamaChat | Wire::OllamaGenerate => Box::new(ollama::NdjsonDecoder::new(context)),
        Wire::Gemini => Box::new(gemini::SseDecoder::new(context)),
        Wire::Bedrock => Box::new(bedrock::EventStreamDecoder::new(context)),
        _ => return None,
    })
}

/// An error event that ends a stream in the client's own API shape (an OpenAI `error` data event,
/// Responses' and Anthropic's `error` events, Gemini's error object, Ollama's `{"error": …}`
/// line), for a stream stopped by the gateway itself (a guard's block). `None`: not a stream API.
pub fn error_event(endpoint: Endpoint, error: ApiError) -> Option<Bytes> {
    let mut encoder = client_encoder(endpoint, None)?;
    let mut out = Vec::new();
    encoder.encode(&StreamEvent::Error(error), &mut out);
    Some(Bytes::from(out))
}

/// The encoder of a client of `endpoint`'s stream; `request` gives what the answer repeats of it
/// (Responses' settings, whether OpenAI Chat usage was asked for). Without one (an error event
/// alone), the defaults. `None` if the endpoint has no stream, or Responses' settings are unreadable.
pub(super) fn client_encoder(endpoint: Endpoint, request: Option<&Decoded>) -> Option<Box<dyn StreamEncoder + Send>> {
    Some(match endpoint {
        Endpoint::ChatCompletions => {
            Box::new(openai_chat::SseEncoder::new(request.is_some_and(Decoded::include_usage)))
        }
        Endpoint::Messages => Box::new(anthropic::SseEncoder::new()),
        Endpoint::Responses => match request {
            Some(request) => Box::new(responses::SseEncoder::new(request.echo()?)),
            None => Box::<responses::SseEncoder>::default(),
        },
        Endpoint::OllamaChat => Box::new(ollama::NdjsonEncoder::new(ollama::Endpoint::Chat)),
        Endpoint::OllamaGenerate => Box::new(ollama::NdjsonEncoder::new(ollama::Endpoint::Generate)),
        Endpoint::GeminiStream => Box::new(gemini::SseEncoder::new()),
        _ => return None,
    })
}

impl StreamTranslator {
    /// Translate a `wire` stream for a client of `endpoint`; `None` if there is no such pair.
    pub fn translate(
        endpoint: Endpoint,
        wire: Wire,
        context: ResponseContext,
        request: &Decoded,
    ) -> Option<StreamTranslator> {
        let encoder = client_encoder(endpoint, Some(request))?;
        Some(StreamTranslator::new(decoder(wire, context)?, Some(encoder)))
    }

    /// Read the usage of a `wire` stream that passes through unchanged (Anthropic, Ollama, Gemini).
    pub fn observe(wire: Wire, context: ResponseContext) -> Option<StreamTranslator> {
        Some(StreamTranslator::new(decoder(wire, context)?, None))
    }

    fn new(decoder: Box<dyn StreamDecoder + Send>, encoder: Option<Box<dyn StreamEncoder + Send>>) -> Self {
        StreamTranslator {
            decoder,
            encoder,
            events: Vec::new(),
            usage: None,
            text_chars: 0,
            failed: false,
            splice: None,
        }
    }

    /// A continuation: `wire`'s stream carrying on, for a client of `endpoint`, the answer of
    /// which the client has `emitted`. `trim_leading_ws`: the prefill was sent without its
    /// trailing whitespace. `earlier_completion`: tokens generated before, for the usage shown.
    pub fn continuation(
        endpoint: Endpoint,
        wire: Wire,
        context: ResponseContext,
        request: &Decoded,
        emitted: &Emitted,
        trim_leading_ws: bool,
        earlier_completion: u64,
    ) -> Option<StreamTranslator> {
        let mut translator = StreamTranslator::translate(endpoint, wire, context, request)?;
        let encoder = translator.encoder.as_mut()?;
        let mut sink = Vec::new();
        let (mut open_text, mut max_index) = (None, None::<u32>);
        for event in &emitted.events {
            encoder.encode(event, &mut sink);
            match event {
                StreamEvent::TextDelta { index, .. } => open_text = Some(*index),
                StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallDelta { .. } => open_text = None,
                StreamEvent::BlockStop { index } if open_text == Some(*index) => open_text = None,
                _ => {}
            }
            if let StreamEvent::TextDelta { index, .. }
            | StreamEvent::ToolCallStart { index, .. }
            | StreamEvent::ToolCallDelta { index, .. }
            | StreamEvent::BlockStop { index } = event
            {
                max_index = Some(max_index.map_or(*index, |m| m.max(*index)));
            }
        }
        translator.splice = Some(Splice {
            open_text,
            base: max_index.map_or(0, |m| m + 1),
            continuing: None,
            seen_block: false,
            trim_leading_ws,
            earlier_completion,
        });
        Some(translator)
    }

    /// The backend's stream could not be read (the client has been sent an error event).
    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn translates(&self) -> bool {
        self.encoder.is_some()
    }

    /// Feed backend bytes; returns the client's bytes for them (translate mode; may be empty).
    /// Bytes the decoder cannot read end the translation with an error event.
    pub fn push(&mut self, bytes: &[u8]) -> Bytes {
        if self.failed {
            return Bytes::new();
        }
        let result = self.decoder.feed(bytes, &mut self.events);
        let mut out = self.drain();
        if let Err(e) = result {
            out.extend_from_slice(&self.fail_with(&e));
        }
        Bytes::from(out)
    }

    /// The backend's stream ended: whatever the client is still owed (the final events).
    pub fn finish(&mut self) -> Bytes {
        if self.failed {
            return Bytes::new();
        }
        let result = self.decoder.finish(&mut self.events);
        let mut out = self.drain();
        match result {
            Err(e) => out.extend_from_slice(&self.fail_with(&e)),
            Ok(()) => {
                if let Some(encoder) = self.encoder.as_mut() {
                    encoder.finish(&mut out);
                }
            }
        }
        Bytes::from(out)
    }

    /// The stream broke off (upstream error, stall): an error event in the client's shape.
    pub fn fail(&mut self, message: &str) -> Bytes {
        if self.failed {
            return Bytes::new();
        }
        Bytes::from(self.fail_with(&TranslateError::Invalid(message.to_owned())))
    }

    fn fail_with(&mut self, error: &TranslateError) -> Vec<u8> {
        self.failed = true;
        let mut out = Vec::new();
        if let Some(encoder) = self.encoder.as_mut() {
            let api_error = match error {
                TranslateError::Invalid(m) => ApiError::new(ErrorKind::Server, m.clone()),
                other => other.to_api_error(),
            };
            encoder.encode(&StreamEvent::Error(api_error), &mut out);
            encoder.finish(&mut out);
        }
        out
    }

    fn drain(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for event in self.events.drain(..) {
            // The backend's own count (a continuation adjusts the one the client sees).
            if let StreamEvent::Usage(u) = &event {
                self.usage = Some(*u);
            }
            let event = match self.splice.as_mut() {
                Some(splice) => match splice.fit(event) {
                    Some(event) => event,
                    None => continue,
                },
                None => event,
            };
            match &event {
                StreamEvent::TextDelta { text, .. } => self.text_chars += text.chars().count(),
                StreamEvent::ToolCallDelta { arguments_fragment, .. } => {
                    self.text_chars += arguments_fragment.chars().count()
                }
                _ => {}
            }
            if let Some(encoder) = self.encoder.as_mut() {
                encoder.encode(&event, &mut out);
            }
        }
        out
    }

    /// The usage the backend reported, if it did.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    pub fn text_chars(&self) -> usize {
        self.text_chars
    }
}
