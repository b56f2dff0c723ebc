//! OpenAI Responses (`POST /v1/responses`): requests, `response` objects, typed SSE streams and
//! error bodies (OpenAI's shape), to and from the internal model.

mod output;
mod request;
mod response;
mod stream_decode;
mod stream_encode;

pub use output::Echo;
pub use request::{decode_request, encode_request};
pub use response::{decode_response, encode_response};
pub use stream_decode::SseDecoder;
pub use stream_encode::SseEncoder;

/// Errors of the Responses API have OpenAI's shape: `{"error":{"message","type","param","code"}}`.
pub use crate::openai_chat::{decode_error, encode_error};

pub(crate) const API: &str = "OpenAI Responses";
