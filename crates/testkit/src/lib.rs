//! Switchyard test kit: a fast OpenAI-compatible mock LLM backend and a small HTTP test client.
//!
//! [`MockServer`] serves `/v1/models`, `/v1/chat/completions`, `/v1/completions`,
//! `/v1/embeddings`, `/health` and optionally Ollama's `/api/tags` and `/api/version`
//! over HTTP/1.1 and h2c, with runtime knobs ([`MockControl`]) for latency and failure
//! injection, and abrupt [`MockServer::kill`] / [`MockServer::restart`] for failover tests.
//! [`TestClient`] is a keep-alive hyper client returning whole bodies or stream frames.

pub mod client;
pub mod mock;

pub use client::{Error, TestClient, TestResponse};
pub use mock::{run_cli, MockConfig, MockControl, MockServer};
