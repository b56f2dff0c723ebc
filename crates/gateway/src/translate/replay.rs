//! Answers kept API-neutral: what a client of one API received (a JSON body or a whole stream)
//! read back into one `ChatResponse`, and a `ChatResponse` rendered for a client of any API,
//! whole or as a stream with the event shapes a live answer has (usage included). The semantic
//! cache stores answers this way, so a question first asked over Anthropic's API is answered
//! from the cache to an OpenAI, Responses, Ollama or Gemini client, streamed or not.

use switchyard_protocol::chat::{
    ChatResponse, Part, ResponseContext, StopReason, StreamDecoder, StreamEvent, ToolCall, Usage,
};
use switchyard_protocol::{anthropic, gemini, ollama, openai_chat, responses};

use super::stream::client_encoder;
use super::Decoded;
use crate::endpoint::Endpoint;

/// The answer a client of `endpoint` received; `None` if it is unreadable, an error, or cut.
pub fn read_answer(endpoint: Endpoint, stream: bool, body: &[u8]) -> Option<ChatResponse> {
    let context = ResponseContext::default();
    if !stream {
        return match endpoint {
            Endpoint::ChatCompletions => openai_chat::decode_response(body, &context),
            Endpoint::Messages => anthropic::decode_response(body, &context),
            Endpoint::Responses => responses::decode_response(body, &context),
            Endpoint::OllamaChat | Endpoint::OllamaGenerate => ollama::decode_response(body, &context),
            Endpoint::GeminiGenerate => gemini::decode_response(body, &context),
            _ => return None,
        }
        .ok();
    }
    let mut decoder: Box<dyn StreamDecoder + Send> = match endpoint {
        Endpoint::ChatCompletions => Box::new(openai_chat::SseDecoder::new(context)),
        Endpoint::Messages => Box::new(anthropic::SseDecoder::new(context)),
        Endpoint::Responses => Box::new(responses::SseDecoder::new(context)),
        Endpoint::OllamaChat | Endpoint::OllamaGenerate => Box::new(ollama::NdjsonDecoder::new(context)),
        Endpoint::GeminiStream => Box::new(gemini::SseDecoder::new(context)),
        _ => return None,
    };
    let mut events = Vec::new();
    decoder.feed(body, &mut events).ok()?;
    decoder.finish(&mut events).ok()?;
    fold(events)
}

/// A stream's events as one answer; `None` without a stop reason, or with an error.
fn fold(events: Vec<StreamEvent>) -> Option<ChatResponse> {
    let mut answer = ChatResponse {
        id: String::new(),
        model: String::new(),
        created: 0,
        content: Vec::new(),
        stop_reason: StopReason::EndTurn,
        stop_sequence: None,
        usage: Usage::default(),
    };
    let mut stopped = false;
    let mut open_call: Option<usize> = None;
    for event in events {
        match event {
            StreamEvent::Start { id, model, created } => {
                (answer.id, answer.model, answer.created) = (id, model, created)
            }
            StreamEvent::TextDelta { text, .. } => match answer.content.last_mut() {
                Some(Part::Text(t)) => t.push_str(&text),
                _ => answer.content.push(Part::Text(text)),
            },
            StreamEvent::ToolCallStart { id, name, .. } => {
                answer.content.push(Part::ToolCall(ToolCall { id, name, arguments: String::new() }));
                open_call = Some(answer.content.len() - 1);
            }
            StreamEvent::ToolCallDelta { arguments_fragment, .. } => {
                if let Some(Part::ToolCall(call)) = open_call.and_then(|i| answer.content.get_mut(i)) {
                    call.arguments.push_str(&arguments_fragment);
                }
            }
            StreamEvent::BlockStop { .. } => open_call = None,
            StreamEvent::Stop { reason, stop_sequence } => {
                (answer.stop_reason, answer.stop_sequence, stopped) = (reason, stop_sequence, true)
            }
            StreamEvent::Usage(usage) => answer.usage = usage,
            StreamEvent::Error(_) => return None,
            StreamEvent::Done => {}
        }
    }
    stopped.then_some(answer)
}

/// `answer` for a client of `endpoint` that asked `request`: a whole body, or (`stream`) the
/// events a live answer would send, its text in pieces of about 64 characters.
pub fn render(endpoint: Endpoint, stream: bool, answer: &ChatResponse, request: &Decoded) -> Option<Vec<u8>> {
    if !stream {
        return render_whole(endpoint, answer, request).ok();
    }
    let mut encoder = client_encoder(endpoint, Some(request))?;
    let mut out = Vec::new();
    let start = StreamEvent::Start { id: answer.id.clone(), model: answer.model.clone(), created: answer.created };
    encoder.encode(&start, &mut out);
    for (index, part) in answer.content.iter().enumerate() {
        let index = index as u32;
        match part {
            Part::Text(text) => {
                for piece in pieces(text, 64) {
                    encoder.encode(&StreamEvent::TextDelta { index, text: piece.to_owned() }, &mut out);
                }
            }
            Part::ToolCall(call) => {
                let begin = StreamEvent::ToolCallStart { index, id: call.id.clone(), name: call.name.clone() };
                encoder.encode(&begin, &mut out);
                let arguments = StreamEvent::ToolCallDelta { index, arguments_fragment: call.arguments.clone() };
                encoder.encode(&arguments, &mut out);
            }
            Part::Image(_) | Part::ToolResult(_) => continue,
        }
        encoder.encode(&StreamEvent::BlockStop { index }, &mut out);
    }
    let stop = StreamEvent::Stop { reason: answer.stop_reason.clone(), stop_sequence: answer.stop_sequence.clone() };
    encoder.encode(&stop, &mut out);
    encoder.encode(&StreamEvent::Usage(answer.usage), &mut out);
    encoder.encode(&StreamEvent::Done, &mut out);
    encoder.finish(&mut out);
    Some(out)
}

/// A whole answer in the shape of `endpoint`'s API.
pub(super) fn render_whole(
    endpoint: Endpoint,
    response: &ChatResponse,
    request: &Decoded,
) -> Result<Vec<u8>, switchyard_protocol::chat::TranslateError> {
    use switchyard_protocol::chat::TranslateError;
    match endpoint {
        Endpoint::ChatCompletions => openai_chat::encode_response(response),
        Endpoint::Messages => anthropic::encode_response(response),
        Endpoint::Responses => {
            let echo = request.echo().ok_or_else(|| TranslateError::Invalid("not a chat request".to_owned()))?;
            responses::encode_response(response, &echo)
        }
        Endpoint::OllamaChat => ollama::encode_response(response, ollama::Endpoint::Chat),
        Endpoint::OllamaGenerate => ollama::encode_response(response, ollama::Endpoint::Generate),
        Endpoint::GeminiGenerate => gemini::encode_response(response),
        _ => Err(TranslateError::Invalid("no translation for this answer".to_owned())),
    }
}

/// `text` cut at character boundaries into pieces of at most `size` bytes (at least one char).
fn pieces(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = size.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(endpoint: Endpoint, body: &str) -> Decoded {
        Decoded::decode(endpoint, body.as_bytes(), "m").unwrap()
    }

    #[test]
    fn a_stored_stream_renders_for_every_api_and_reads_back_the_same() {
        let chat = br#"data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello "}}]}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"world"},"finish_reason":"stop"}]}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}

data: [DONE]

"#;
        let answer = read_answer(Endpoint::ChatCompletions, true, chat).unwrap();
        assert_eq!(answer.text(), "Hello world");
        assert_eq!((answer.usage.prompt_tokens, answer.usage.completion_tokens), (5, 2));
        let ask = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9,"stream":true}"#;
        let input = r#"{"model":"m","input":"hi","stream":true}"#;
        for (endpoint, body) in [
            (Endpoint::ChatCompletions, ask),
            (Endpoint::Messages, ask),
            (Endpoint::Responses, input),
            (Endpoint::OllamaChat, ask),
        ] {
            for stream in [true, false] {
                let rendered = render(endpoint, stream, &answer, &request(endpoint, body)).unwrap();
                let back = read_answer(endpoint, stream, &rendered).unwrap_or_else(|| panic!("{endpoint:?} {stream}"));
                assert_eq!(back.text(), "Hello world", "{endpoint:?} {stream}");
            }
        }
        let gemini = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        for (endpoint, stream) in [(Endpoint::GeminiGenerate, false), (Endpoint::GeminiStream, true)] {
            let rendered = render(endpoint, stream, &answer, &request(endpoint, gemini)).unwrap();
            let back = read_answer(endpoint, stream, &rendered).unwrap_or_else(|| panic!("{endpoint:?}"));
            assert_eq!(back.text(), "Hello world", "{endpoint:?}");
        }
        assert!(read_answer(Endpoint::ChatCompletions, true, &chat[..200]).is_none(), "a cut stream");
    }

    #[test]
    fn pieces_keep_characters_whole() {
        assert_eq!(pieces("ééé", 3), ["éé", "é"]);
        assert!(pieces("", 4).is_empty());
    }
}
