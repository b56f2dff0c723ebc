//! Wire types of the APIs Switchyard speaks, and pure translations between them through one
//! internal model of a chat exchange (`chat`). Pure: no runtime, no I/O.

pub mod anthropic;
pub mod bedrock;
pub mod chat;
pub mod embed;
pub mod error;
pub mod frames;
pub mod gemini;
mod json;
pub mod ollama;
pub mod openai;
pub mod openai_chat;
pub mod openai_embeddings;
pub mod responses;
mod wire;
