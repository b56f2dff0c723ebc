//! A streamed answer on its way through: the backend's stream decoded incrementally into
//! internal events and each event encoded in the client's API (translate), or only decoded to
//! read the usage it reports while the bytes pass untouched (observe: same API, not OpenAI's).

use bytes::Bytes;
use switchyard_protocol::chat::{
    ApiError, ErrorKind, ResponseContext, StreamDecoder, StreamEncoder, StreamEvent, TranslateError, Usage,
};
use switchyard_protocol::{anthropic, ollama, openai_chat, responses};

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
}

fn decoder(wire: Wire, context: ResponseContext) -> Option<Box<dyn StreamDecoder + Send>> {
    Some(match wire {
        Wire::OpenAiChat => Box::new(openai_chat::SseDecoder::new(context)),
        Wire::Anthropic => Box::new(anthropic::SseDecoder::new(context)),
        Wire::OllamaChat | Wire::OllamaGenerate => Box::new(ollama::NdjsonDecoder::new(context)),
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
        let encoder: Box<dyn StreamEncoder + Send> = match endpoint {
            Endpoint::ChatCompletions => Box::new(openai_chat::SseEncoder::new(request.include_usage())),
            Endpoint::Messages => Box::new(anthropic::SseEncoder::new()),
            Endpoint::Responses => Box::new(responses::SseEncoder::new(request.echo()?)),
            Endpoint::OllamaChat => Box::new(ollama::NdjsonEncoder::new(ollama::Endpoint::Chat)),
            Endpoint::OllamaGenerate => Box::new(ollama::NdjsonEncoder::new(ollama::Endpoint::Generate)),
            _ => return None,
        };
        Some(StreamTranslator::new(decoder(wire, context)?, Some(encoder)))
    }

    /// Read the usage of a `wire` stream that passes through unchanged (Anthropic, Ollama).
    pub fn observe(wire: Wire, context: ResponseContext) -> Option<StreamTranslator> {
        Some(StreamTranslator::new(decoder(wire, context)?, None))
    }

    fn new(decoder: Box<dyn StreamDecoder + Send>, encoder: Option<Box<dyn StreamEncoder + Send>>) -> Self {
        StreamTranslator { decoder, encoder, events: Vec::new(), usage: None, text_chars: 0, failed: false }
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
            match &event {
                StreamEvent::Usage(u) => self.usage = Some(*u),
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
