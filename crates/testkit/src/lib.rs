//! Switchyard test kit: fast mock LLM backends and a small HTTP test client.
//!
//! [`MockServer`] speaks one API ([`MockApi`]): OpenAI-compatible (`/v1/models`,
//! `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`), Anthropic Messages
//! (`/v1/messages`, `/v1/messages/count_tokens`, `/v1/models`) or Ollama (`/api/chat`,
//! `/api/generate`, `/api/embed`, `/api/tags`, `/api/ps`, `/api/version` and its OpenAI-compatible
//! `/v1`), each with deterministic replies and tool calls, over HTTP/1.1 and h2c, with runtime
//! knobs ([`MockControl`]) for latency and failure injection, and abrupt [`MockServer::kill`] /
//! [`MockServer::restart`] for failover tests. With [`KvCacheConfig`] it simulates an inference
//! server's prefix cache and slots (time to first token grows with uncached prompt tokens) and
//! answers llama.cpp's `/slots` and `/metrics`; [`mock::tokens`] is its tokeniser.
//! [`TestClient`] is a keep-alive hyper client returning whole bodies or stream frames.

pub mod client;
pub mod mcp;
pub mod mock;

pub use client::{Error, TestClient, TestResponse};
pub use mcp::{McpMock, McpMockConfig, McpStats};
pub use mock::{
    run_cli, KvCacheConfig, KvStats, MockApi, MockConfig, MockControl, MockServer, REPLY_IN_FINE_PIECES, REPLY_SPLIT,
};
