//! What an OpenAI-compatible backend serves, where it says so itself (issue 33's catalogue), for
//! a backend whose `capabilities` are not configured:
//! - its OpenAPI document (`/openapi.json`, which vLLM and other FastAPI servers publish): vLLM
//!   registers only the routes its model's tasks support, so an endpoint family none of whose
//!   paths is listed (embeddings, rerank and score, audio, images, moderations, tokenize, chat) is
//!   not served there — a generate model has no `/v1/embeddings`, a pooling model no chat;
//! - llama.cpp's `/props`: `modalities.audio: false` means no audio input, so no transcription.
//!
//! A backend that publishes neither keeps what its type speaks. Asked at start-up and again when a
//! backend's model list changes or it comes back (a restart may serve another model).

use std::time::Duration;

use serde_json::Value;

use super::backend::Backend;
use crate::config::BackendKind;
use crate::endpoint::{Endpoint, CAPABILITIES};
use crate::upstream::UpstreamClient;

/// Ask the backend what it serves and keep the answer (None: it did not say).
pub async fn discover(client: &UpstreamClient, backend: &Backend, timeout: Duration) {
    if backend.cfg.kind != BackendKind::OpenAi || backend.cfg.capabilities.is_some() {
        return;
    }
    let from_paths = super::health::fetch(client, backend, "/openapi.json", timeout).await.and_then(|b| by_paths(&b));
    let audio = super::health::fetch(client, backend, "/props", timeout).await.and_then(|b| audio_input(&b));
    let served = match (from_paths, audio) {
        (None, None | Some(true)) => None,
        (Some(served), None | Some(true)) => Some(served),
        (served, Some(false)) => {
            let all = || CAPABILITIES.to_vec();
            Some(served.unwrap_or_else(all).into_iter().filter(|c| *c != "audio").collect())
        }
    };
    backend.set_discovered(served);
}

/// The capabilities an OpenAPI document's `paths` show: each family with an endpoint path listed
/// (with or without its `/v1`), and those not published as HTTP paths (realtime's WebSocket).
fn by_paths(body: &[u8]) -> Option<Vec<&'static str>> {
    let doc: Value = serde_json::from_slice(body).ok()?;
    let paths = doc.get("paths")?.as_object()?;
    let listed: Vec<&str> = paths.keys().map(|p| unversioned(p)).collect();
    let served = CAPABILITIES.iter().copied().filter(|capability| {
        let mut paths = Endpoint::ALL
            .iter()
            .filter(|e| e.spec().capability == *capability && e.names_a_model())
            .filter_map(|e| e.spec().path)
            .peekable();
        // A family with no path of its own here (realtime, none) is not judged by the document.
        paths.peek().is_none() || *capability == "realtime" || paths.any(|p| listed.contains(&unversioned(p)))
    });
    Some(served.collect())
}

fn unversioned(path: &str) -> &str {
    path.strip_prefix("/v1").or_else(|| path.strip_prefix("/v2")).unwrap_or(path)
}

/// llama.cpp's `/props`: whether its model takes audio input (`modalities.audio`).
fn audio_input(body: &[u8]) -> Option<bool> {
    let props: Value = serde_json::from_slice(body).ok()?;
    props.get("modalities")?.get("audio")?.as_bool()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooling_models_openapi_document_shows_embeddings_and_rerank_but_no_chat() {
        let doc = br#"{"openapi": "3.1.0", "paths": {"/health": {}, "/v1/models": {}, "/v1/embeddings": {},
            "/rerank": {}, "/v1/rerank": {}, "/v2/rerank": {}, "/score": {}, "/tokenize": {}}}"#;
        let served = by_paths(doc).unwrap();
        assert!(served.contains(&"embeddings") && served.contains(&"rerank") && served.contains(&"tokenize"));
        assert!(!served.contains(&"chat") && !served.contains(&"audio") && !served.contains(&"images"), "{served:?}");
        let chat = by_paths(br#"{"paths": {"/v1/chat/completions": {}, "/v1/completions": {}}}"#).unwrap();
        assert!(chat.contains(&"chat") && !chat.contains(&"embeddings"), "{chat:?}");
        assert_eq!(by_paths(b"<html>not here</html>"), None);
        assert_eq!(audio_input(br#"{"modalities": {"vision": true, "audio": false}}"#), Some(false));
        assert_eq!(audio_input(br#"{"total_slots": 4}"#), None);
    }
}
