//! A client's request decoded into the internal model (once, and only when some backend needs a
//! translation), and encoded for the wire of the backend an attempt goes to.

use bytes::Bytes;
use switchyard_protocol::chat::{ChatRequest, Message, Part, Role, TranslateError};
use switchyard_protocol::embed::EmbedRequest;
use switchyard_protocol::responses::Echo;
use switchyard_protocol::{anthropic, bedrock, gemini, ollama, openai_chat, openai_embeddings, responses};

use super::Wire;
use crate::endpoint::Endpoint;

/// A request in the internal model, with the model name routing resolved.
#[derive(Debug)]
pub enum Decoded {
    Chat(Box<ChatRequest>),
    Embed(EmbedRequest),
}

impl Decoded {
    pub fn decode(endpoint: Endpoint, body: &[u8], model: &str) -> Result<Decoded, TranslateError> {
        let mut decoded = match endpoint {
            Endpoint::ChatCompletions => Decoded::Chat(Box::new(openai_chat::decode_request(body)?)),
            Endpoint::Responses => Decoded::Chat(Box::new(responses::decode_request(body)?)),
            Endpoint::Messages => Decoded::Chat(Box::new(anthropic::decode_request(body)?)),
            Endpoint::CountTokens => Decoded::Chat(Box::new(anthropic::decode_count_tokens_request(body)?)),
            Endpoint::OllamaChat => Decoded::Chat(Box::new(ollama::decode_chat_request(body)?)),
            Endpoint::OllamaGenerate => Decoded::Chat(Box::new(ollama::decode_generate_request(body)?)),
            Endpoint::Embeddings => Decoded::Embed(openai_embeddings::decode_request(body)?),
            Endpoint::OllamaEmbed => Decoded::Embed(ollama::decode_embed_request(body)?),
            Endpoint::GeminiGenerate | Endpoint::GeminiStream => {
                let mut req = gemini::decode_request(body)?;
                req.stream = endpoint == Endpoint::GeminiStream;
                Decoded::Chat(Box::new(req))
            }
            Endpoint::GeminiCountTokens => Decoded::Chat(Box::new(gemini::decode_count_tokens_request(body)?)),
            Endpoint::Completions
            | Endpoint::Models
            | Endpoint::Rerank
            | Endpoint::Score
            | Endpoint::Moderations
            | Endpoint::ImagesGenerations
            | Endpoint::ImagesEdits
            | Endpoint::Tokenize
            | Endpoint::Detokenize
            | Endpoint::AudioTranscriptions
            | Endpoint::AudioTranslations
            | Endpoint::AudioSpeech
            | Endpoint::Passthrough
            | Endpoint::Realtime
            | Endpoint::Other => return Err(TranslateError::Invalid("this endpoint cannot be translated".to_owned())),
        };
        match &mut decoded {
            Decoded::Chat(req) => req.model = model.to_owned(),
            Decoded::Embed(req) => req.model = model.to_owned(),
        }
        Ok(decoded)
    }

    /// The request body for `wire`.
    pub fn encode(&self, wire: Wire) -> Result<Bytes, TranslateError> {
        let bytes = match (self, wire) {
            (Decoded::Chat(req), Wire::OpenAiChat) => openai_chat::encode_request(req)?,
            (Decoded::Chat(req), Wire::Anthropic) => anthropic::encode_request(req)?,
            (Decoded::Chat(req), Wire::OllamaChat) => ollama::encode_chat_request(req)?,
            (Decoded::Chat(req), Wire::OllamaGenerate) => ollama::encode_generate_request(req)?,
            (Decoded::Chat(req), Wire::Gemini) => gemini::encode_request(req)?,
            (Decoded::Chat(req), Wire::Bedrock) => bedrock::encode_request(req)?,
            (Decoded::Embed(req), Wire::OpenAiEmbeddings) => openai_embeddings::encode_request(req)?,
            (Decoded::Embed(req), Wire::OllamaEmbed) => ollama::encode_embed_request(req)?,
            _ => return Err(TranslateError::Invalid("no translation between these APIs".to_owned())),
        };
        Ok(Bytes::from(bytes))
    }

    /// The streamed request that continues an answer of which the client has `prefill`, for
    /// `wire`: the same conversation with `prefill` as the start of the assistant's reply
    /// (assistant prefill: native in Anthropic's and Ollama's chat; vLLM and SGLang need
    /// `continue_final_message`, llama.cpp's server continues a final assistant message by
    /// itself). Also says whether trailing whitespace was cut from the prefill (Anthropic
    /// refuses a final assistant turn ending in whitespace).
    pub fn encode_continuation(&self, wire: Wire, prefill: &str) -> Result<(Bytes, bool), TranslateError> {
        let Decoded::Chat(request) = self else {
            return Err(TranslateError::Invalid("only a chat answer can be continued".to_owned()));
        };
        if wire == Wire::Gemini {
            // Gemini documents no assistant prefill: a final model turn is not continued.
            return Err(TranslateError::Invalid("Gemini cannot continue a started answer".to_owned()));
        }
        let mut request = request.clone();
        request.stream = true;
        request.include_usage = true;
        let mut trimmed = false;
        let mut text = prefill;
        // Claude (on Bedrock too) refuses a final assistant turn that ends in whitespace.
        if matches!(wire, Wire::Anthropic | Wire::Bedrock) {
            text = prefill.trim_end();
            trimmed = text.len() != prefill.len();
        }
        if !text.is_empty() {
            request.messages.push(Message { role: Role::Assistant, content: vec![Part::Text(text.to_owned())] });
        }
        let mut body = Decoded::Chat(request).encode(wire)?.to_vec();
        if wire == Wire::OpenAiChat && !text.is_empty() && body.last() == Some(&b'}') {
            // A splice, not a re-encode: the body is the encoder's own compact JSON object.
            body.pop();
            body.extend_from_slice(br#","continue_final_message":true,"add_generation_prompt":false}"#);
        }
        Ok((Bytes::from(body), trimmed))
    }

    pub fn chat(&self) -> Option<&ChatRequest> {
        match self {
            Decoded::Chat(req) => Some(req),
            Decoded::Embed(_) => None,
        }
    }

    /// What a Responses client's answer must echo back of its request.
    pub fn echo(&self) -> Option<Echo> {
        self.chat().map(Echo::from_request)
    }

    /// The client asked for the usage chunk of an OpenAI stream.
    pub fn include_usage(&self) -> bool {
        self.chat().is_some_and(|r| r.include_usage)
    }

    /// The client wants base64 embeddings (the OpenAI SDKs' default).
    pub fn base64_embeddings(&self) -> bool {
        matches!(self, Decoded::Embed(req) if req.base64)
    }
}
