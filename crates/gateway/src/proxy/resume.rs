//! Stream resume, the proxy's side: when a backend dies after its answer began streaming, ask
//! another backend serving the model to carry on the same answer — the conversation re-sent
//! with the text the client already has as the start of the assistant's reply (prefill, in the
//! form the backend's kind takes: Anthropic's final assistant turn, Ollama's chat, vLLM and
//! SGLang's `continue_final_message`, which llama.cpp's server does by itself) — and hand its
//! stream to the relay, which splices it into the client's. Nothing here runs unless a stream
//! fails: the client's request is decoded only then.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue};

use super::{translation, AttemptError, Call, Headers};
use crate::app::App;
use crate::config::BackendKind;
use crate::endpoint::Endpoint;
use crate::http::resume::{Resumable, Resume, ResumeFuture, Resumed};
use crate::route::RouteHints;
use crate::translate::{read_emitted, Decoded, StreamTranslator, Wire};
use crate::usage::{estimate_tokens, Tokens};

/// Everything needed to carry a request's answer on elsewhere.
pub struct Resumer {
    pub app: Arc<App>,
    pub endpoint: Endpoint,
    /// The client's request as it came (model alias resolved): decoded only for a resume.
    pub client_body: Bytes,
    pub model: String,
    pub request_id: HeaderValue,
    /// The client's `Accept`, passed on as on the first attempt.
    pub headers: HeaderMap,
    /// Backends that already failed this request.
    pub tried: Vec<usize>,
    /// Resumes still allowed (`routing.max_attempts` bounds attempts of every kind).
    pub resumes_left: u32,
    pub deadline: Instant,
    /// Fallback models not yet tried (`fallbacks:`), for when no backend of `model` can carry on.
    pub fallbacks: Vec<String>,
    /// The prompt's block hashes (cache-aware routing): a backend holding the conversation's
    /// prefix prefills the continuation from its cache rather than from scratch.
    pub chain: Vec<u64>,
}

/// The chat API a continuation speaks to a backend of `kind`: one whose prefill it honours.
fn continuation_wire(kind: BackendKind) -> Wire {
    match kind {
        BackendKind::Anthropic => Wire::Anthropic,
        BackendKind::Ollama => Wire::OllamaChat,
        BackendKind::OpenAi | BackendKind::Azure => Wire::OpenAiChat,
        BackendKind::Gemini => Wire::Gemini,
        BackendKind::Bedrock => Wire::Bedrock,
    }
}

impl Resume for Resumer {
    fn resume(self: Box<Self>, emitted: Bytes, discarded: Bytes) -> ResumeFuture {
        Box::pin(self.carry_on(emitted, discarded))
    }
}

impl Resumer {
    async fn carry_on(mut self: Box<Self>, emitted: Bytes, discarded: Bytes) -> Option<(Resumed, Box<dyn Resume>)> {
        if self.resumes_left == 0 {
            return None;
        }
        self.resumes_left -= 1;
        let mut decoded = match Decoded::decode(self.endpoint, &self.client_body, &self.model) {
            Ok(decoded) => decoded,
            Err(e) => {
                tracing::debug!(error = %e, "a stream could not be resumed: its request does not decode");
                return None;
            }
        };
        let Some(emitted) = read_emitted(self.endpoint, &emitted, &discarded) else {
            tracing::warn!("a stream could not be resumed: what the client was sent does not decode");
            return None;
        };
        let prompt = (self.client_body.len() as u64).div_ceil(4);
        let completion = estimate_tokens(emitted.generated_chars);
        let earlier = Tokens { prompt, completion, total: prompt + completion, cached: 0, cache_write: 0 };
        let app = self.app.clone();
        let mut fallen_back = None;
        // Where the strategy is cache-aware, the backends not yet tried that hold the most of
        // the prompt come first: the continuation re-sends all of it.
        let mut hints = RouteHints { chain: self.chain.clone(), ..RouteHints::default() };
        loop {
            let selected = match app.router.select_with(&self.model, &hints, &self.tried) {
                Ok(selected) => selected,
                // No backend of the model can carry the answer on: the next fallback model may.
                Err(_) => {
                    if self.fallbacks.is_empty() {
                        return None;
                    }
                    let to = app.config.resolve_alias(&self.fallbacks.remove(0)).to_owned();
                    self.client_body = crate::http::parse::with_model(&self.client_body, &to).ok()?;
                    decoded = Decoded::decode(self.endpoint, &self.client_body, &to).ok()?;
                    app.metrics.count_fallback(&self.model, &to);
                    // Another model's backends cache another model's prefixes.
                    hints.chain.clear();
                    self.model = to.clone();
                    fallen_back = Some(to);
                    self.tried.clear();
                    continue;
                }
            };
            let (backend, guard) = (selected.backend, selected.slot);
            self.tried.push(backend.id);
            let wire = continuation_wire(backend.kind());
            let Ok((body, trimmed)) = decoded.encode_continuation(wire, &emitted.text) else { continue };
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return None;
            }
            app.metrics.retries.fetch_add(1, Relaxed);
            backend.stats.attempts.fetch_add(1, Relaxed);
            let limit = remaining.min(app.config.timeouts.first_byte);
            let headers = Headers {
                model: &self.model,
                stream: true,
                client: &self.headers,
                request_id: &self.request_id,
                trace: None,
                credentials: None,
                extra: &[],
            };
            match super::keys::attempt(&app, &backend, wire, body, headers, limit).await.0 {
                Ok((parts, body, first)) if parts.status.is_success() => {
                    backend.health.on_success();
                    let context = translation::response_context(&self.request_id, &self.model);
                    let translator = StreamTranslator::continuation(
                        self.endpoint,
                        wire,
                        context,
                        &decoded,
                        &emitted,
                        trimmed,
                        completion,
                    )?;
                    tracing::info!(backend = backend.name(), "a broken stream carries on at another backend");
                    let model = fallen_back.take();
                    return Some((Resumed { body, first, guard, translator, earlier, model }, self));
                }
                Ok((parts, _, _)) => {
                    app.metrics.count_error("upstream_status");
                    if parts.status.is_server_error() && backend.health.on_server_error(app.clock.mono_ms()) {
                        tracing::warn!(backend = backend.name(), status = %parts.status, "circuit breaker opened");
                    }
                }
                Err(AttemptError::Transport) => {
                    app.metrics.count_error("upstream_connect");
                    backend.mark_failed("transport error");
                }
                Err(AttemptError::Timeout) => {
                    app.metrics.count_error("upstream_timeout");
                    backend.mark_failed("timeout");
                }
                // Resumed streams are JSON requests, never uploads.
                Err(AttemptError::Spent | AttemptError::TooLarge) => return None,
                // Every key of its pool rests: another backend may carry it on.
                Err(AttemptError::NoKey(_)) => {}
            }
        }
    }
}

/// What carrying a broken stream on elsewhere needs from the attempts so far.
pub(super) struct Resumption<'a> {
    pub tried: &'a [usize],
    pub client_body: &'a Bytes,
    pub model: &'a str,
    pub headers: &'a HeaderMap,
    /// Attempts made so far (a resume is one more, within `routing.max_attempts`).
    pub attempts: u32,
    /// The request's fallback models not yet tried.
    pub fallbacks: &'a [String],
    /// The prompt's block hashes, empty unless the routing strategy uses them.
    pub chain: &'a [u64],
}

impl Resumption<'_> {
    /// The relay's resume state for a successful stream, when resuming is on and possible.
    pub(super) fn resumable(&self, call: &Call<'_>) -> Option<Resumable> {
        let app = call.app;
        if !(app.config.resume_streams && call.stream && call.endpoint.spec().resumable) {
            return None;
        }
        let resumes_left = app.config.max_attempts.saturating_sub(self.attempts).max(1);
        let mut headers = HeaderMap::new();
        if let Some(accept) = self.headers.get(header::ACCEPT) {
            headers.insert(header::ACCEPT, accept.clone());
        }
        let resumer = Resumer {
            app: app.clone(),
            endpoint: call.endpoint,
            client_body: self.client_body.clone(),
            model: self.model.to_owned(),
            request_id: call.request_id.clone(),
            headers,
            tried: self.tried.to_vec(),
            resumes_left,
            deadline: call.deadline,
            fallbacks: self.fallbacks.to_vec(),
            chain: self.chain.to_vec(),
        };
        Some(Resumable::new(call.endpoint, Box::new(resumer)))
    }
}
