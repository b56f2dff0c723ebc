//! Remote guards: the webhooks and classifier models a request's texts are sent to, after the
//! built-in detectors. Each is asked once per request, in name order, before routing — or, for a
//! classifier in `mode: parallel`, while the call goes ahead, its answer held until the verdict
//! (`Parallel`). A failover's retries reuse the verdict, so none is applied twice. A guard that
//! cannot answer within its timeout and the request's deadline fails as configured: `on_error:
//! closed` refuses the request (503 `guardrail_unavailable`), `open` lets it through.
//!
//! Those with `on: [response]` judge the whole answer too (`check_answer`): the pipeline holds
//! it, a stream to its end, and sends it only once they let it — masked where a webhook masks
//! (a stream's text is judged as one text; masked, the first text event carries all of it), or
//! refused with the client API's own error where one blocks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::content::ContentGuards;
use super::json_text::{all_text, not_text, rewrite_texts, Skip};
use super::model::{self, ModelCaller};
use super::stream_text::{self, Shape};
use super::{webhook, GuardedRequest};
use crate::config::guardrails::{Classifier, GuardAction, GuardKind, Webhook};
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::records::VerdictTally;
use crate::upstream::UpstreamClient;

pub struct RemoteGuards {
    content: ContentGuards,
    /// (index among the configured guards, what to ask)
    remotes: Vec<(usize, Remote)>,
    client: UpstreamClient,
    caller: Arc<dyn ModelCaller>,
}

enum Remote {
    Webhook(Webhook),
    Model(Classifier),
}

/// Classifiers judging beside the call: the answer waits for `verdict`. Dropped unawaited (the
/// request ended first), they are stopped.
pub struct Parallel(Vec<tokio::task::JoinHandle<Result<(), GatewayError>>>);

impl Parallel {
    /// Every classifier's verdict: the first block or closed failure.
    pub async fn verdict(mut self) -> Result<(), GatewayError> {
        while let Some(judging) = self.0.first_mut() {
            let judged = judging.await;
            self.0.remove(0);
            judged.map_err(|_| GatewayError::GuardrailUnavailable)??;
        }
        Ok(())
    }
}

impl Drop for Parallel {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// What a timed-out remote guard reports.
pub(super) fn no_answer_within(wait: Duration) -> String {
    format!("no answer within {}", humantime::format_duration(Duration::from_millis(wait.as_millis() as u64)))
}

impl RemoteGuards {
    /// The webhook and model guards among the configured ones; `None` when there are none.
    pub fn build(
        content: &ContentGuards,
        client: UpstreamClient,
        caller: Arc<dyn ModelCaller>,
    ) -> Option<RemoteGuards> {
        let remotes: Vec<(usize, Remote)> = content
            .configs()
            .iter()
            .enumerate()
            .filter_map(|(i, g)| match &g.kind {
                GuardKind::Webhook(w) => Some((i, Remote::Webhook(w.clone()))),
                GuardKind::Model(c) => Some((i, Remote::Model(c.clone()))),
                _ => None,
            })
            .collect();
        (!remotes.is_empty()).then(|| RemoteGuards { content: content.clone(), remotes, client, caller })
    }

    /// Ask every remote guard that applies to this request, in name order: `body` becomes what
    /// the last one left (masked), or the first block or closed failure refuses it. Classifiers
    /// in `mode: parallel` are started and returned, to be awaited before the answer goes out.
    pub async fn check(
        &self,
        request: &GuardedRequest<'_>,
        body: &mut Bytes,
        deadline: Instant,
    ) -> Result<Option<Parallel>, GatewayError> {
        let active = self.content.active_on_request(request);
        let mut parallel = Vec::new();
        for (index, remote) in self.remotes.iter().filter(|(i, _)| active & (1 << i) != 0) {
            let guard = &self.content.configs()[*index];
            let texts = texts_of(body);
            if texts.is_empty() {
                continue;
            }
            match remote {
                Remote::Webhook(hook) => {
                    let asked = self.ask_webhook(hook, &guard.name, request, &texts, "request", deadline).await?;
                    if let Some(answer) = asked {
                        webhook::apply(&self.content, request, &guard.name, guard.action, answer, body)?;
                    }
                }
                Remote::Model(classifier) => {
                    let judged = self.judge(classifier, &guard.name, guard.action, request, texts, false, deadline);
                    if classifier.parallel {
                        parallel.push(tokio::spawn(judged));
                    } else {
                        judged.await?;
                    }
                }
            }
        }
        Ok((!parallel.is_empty()).then_some(Parallel(parallel)))
    }

    /// Whether one of these guards is among `active`.
    pub fn watches(&self, active: u64) -> bool {
        self.remotes.iter().any(|(i, _)| active & (1 << i) != 0)
    }

    /// Ask every remote guard among `active` about a tool call's arguments or its result
    /// (`direction`: `tool_call` or `tool_result`), in name order: `json` becomes what the last
    /// one left (every string is a text, whatever its key), or the first block or closed failure
    /// refuses it. A classifier judges it as a user's turn (a prompt injection in a tool's result
    /// is text the model will read); it is awaited even in `mode: parallel`, as the call waits on
    /// its arguments anyway. All of them answer by `deadline`: a guard asked when little is left
    /// gets only that, and fails as its `on_error` says when it is not enough.
    pub async fn check_tool(
        &self,
        active: u64,
        direction: &'static str,
        tool: &str,
        json: &mut Bytes,
        deadline: Instant,
    ) -> Result<(), GatewayError> {
        let request = GuardedRequest {
            endpoint: Endpoint::Other,
            model: "",
            requested: "",
            key: None,
            team: None,
            added: [&[], &[]],
            stream: false,
            verdicts: None,
            tool: Some(tool),
            pseudonyms: None,
        };
        for (index, remote) in self.remotes.iter().filter(|(i, _)| active & (1 << i) != 0) {
            let guard = &self.content.configs()[*index];
            let texts = all_texts(json);
            if texts.is_empty() {
                continue;
            }
            match remote {
                Remote::Webhook(hook) => {
                    let asked = self.ask_webhook(hook, &guard.name, &request, &texts, direction, deadline).await?;
                    let Some(verdict) = asked else { continue };
                    let decided = webhook::decide(&self.content, &request, &guard.name, guard.action, verdict)?;
                    let Some(replacements) = decided else { continue };
                    let mut replacements = replacements.into_iter();
                    if let Some(masked) = rewrite_texts(json, all_text, |_| replacements.next().flatten()) {
                        *json = Bytes::from(masked);
                    }
                }
                Remote::Model(classifier) => {
                    self.judge(classifier, &guard.name, guard.action, &request, texts, false, deadline).await?;
                }
            }
        }
        Ok(())
    }

    /// Whether one of these guards watches this request's answer: the chat APIs' answers (OpenAI
    /// Chat and Responses, Anthropic, Gemini, Ollama), whose text they can read — never audio or
    /// images, which would only be held for nothing.
    pub fn watches_answer(&self, request: &GuardedRequest<'_>) -> bool {
        if Shape::of(request.endpoint).is_none() && request.endpoint != Endpoint::GeminiGenerate {
            return false;
        }
        let active = self.content.active_on_answer(request);
        self.remotes.iter().any(|(i, _)| active & (1 << i) != 0)
    }

    /// Ask every remote guard that watches this request's answer about the whole answer, in name
    /// order: `answer` becomes what the last one left (masked), or the first block or closed
    /// failure refuses it. A stream's answer text is judged as one text; a stream whose shape
    /// carries no text the guards can follow has nothing to judge.
    pub async fn check_answer(
        &self,
        request: &GuardedRequest<'_>,
        answer: &mut Bytes,
        deadline: Instant,
    ) -> Result<(), GatewayError> {
        let active = self.content.active_on_answer(request);
        let shape = if request.stream { Shape::of(request.endpoint) } else { None };
        for (index, remote) in self.remotes.iter().filter(|(i, _)| active & (1 << i) != 0) {
            let guard = &self.content.configs()[*index];
            let texts = match shape {
                Some(shape) => vec![stream_text::whole_text(shape, answer)],
                None if request.stream => Vec::new(),
                None => texts_of(answer),
            };
            if texts.iter().all(String::is_empty) {
                continue;
            }
            match remote {
                Remote::Webhook(hook) => {
                    let asked = self.ask_webhook(hook, &guard.name, request, &texts, "response", deadline).await?;
                    let Some(verdict) = asked else { continue };
                    let Some(replacements) =
                        webhook::decide(&self.content, request, &guard.name, guard.action, verdict)?
                    else {
                        continue;
                    };
                    *answer = masked(answer, shape, &texts, replacements);
                }
                Remote::Model(classifier) => {
                    self.judge(classifier, &guard.name, guard.action, request, texts, true, deadline).await?;
                }
            }
        }
        Ok(())
    }

    /// Ask one webhook about `texts`, timed: its answer, or None when it failed and `on_error:
    /// open` lets the traffic through (a closed failure is the error); failures are counted.
    async fn ask_webhook(
        &self,
        hook: &Webhook,
        guard: &str,
        request: &GuardedRequest<'_>,
        texts: &[String],
        direction: &str,
        deadline: Instant,
    ) -> Result<Option<webhook::Answer>, GatewayError> {
        let started = Instant::now();
        let asked = webhook::ask(&self.client, hook, guard, request, texts, direction, deadline).await;
        self.content.time(guard, started.elapsed());
        match asked {
            Ok(answer) => Ok(Some(answer)),
            Err(e) => {
                let tally = request.verdicts.map(|t| &**t);
                failed(&self.content, tally, guard, "webhook", hook.fail_open, &e).map(|()| None)
            }
        }
    }

    /// A classifier's verdict on `texts` (a request's, or an `answer`'s), counted, as a future
    /// that owns what it needs (it may run on its own task, beside the call).
    #[allow(clippy::too_many_arguments)] // each is one thing the verdict is about
    fn judge(
        &self,
        classifier: &Classifier,
        guard: &str,
        action: GuardAction,
        request: &GuardedRequest<'_>,
        texts: Vec<String>,
        answer: bool,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<(), GatewayError>> + Send + 'static {
        let (this, classifier, guard) = (self.handle(), classifier.clone(), guard.to_owned());
        let tally = request.verdicts.cloned();
        async move {
            let started = Instant::now();
            let asked = model::ask(&*this.caller, &classifier, &guard, &texts, answer, deadline).await;
            this.content.time(&guard, started.elapsed());
            let judgement = match asked {
                Ok(judgement) => judgement,
                Err(e) => return failed(&this.content, tally.as_deref(), &guard, "model", classifier.fail_open, &e),
            };
            let Some(categories) = judgement.blocking(&classifier) else { return Ok(()) };
            let logging = action == GuardAction::Log;
            this.content.count_into(tally.as_deref(), &guard, "model", if logging { "log" } else { "block" });
            if logging {
                return Ok(());
            }
            let kind = match categories.as_slice() {
                [] => "unsafe".to_owned(),
                named => format!("unsafe: {}", named.join(", ")),
            };
            let reason = crate::error::guard_reason(&guard, Some(&kind));
            Err(super::blocked("", &reason))
        }
    }

    /// What a task of its own needs of these guards.
    fn handle(&self) -> Arc<Handle> {
        Arc::new(Handle { content: self.content.clone(), caller: self.caller.clone() })
    }
}

/// The parts of `RemoteGuards` a classifier's task owns.
struct Handle {
    content: ContentGuards,
    caller: Arc<dyn ModelCaller>,
}

/// A remote guard could not answer: counted, then let through (`on_error: open`) or refused.
fn failed(
    content: &ContentGuards,
    tally: Option<&VerdictTally>,
    guard: &str,
    kind: &'static str,
    fail_open: bool,
    error: &str,
) -> Result<(), GatewayError> {
    content.count_into(tally, guard, kind, "error");
    if fail_open {
        tracing::warn!(guard, error, "{kind} guard failed; letting the request through (on_error: open)");
        Ok(())
    } else {
        tracing::warn!(guard, error, "{kind} guard failed; refusing the request (on_error: closed)");
        Err(GatewayError::GuardrailUnavailable)
    }
}

/// `answer` with a webhook's replacements of the `texts` it was sent: a whole answer's texts in
/// order, or a stream's one text.
fn masked(answer: &Bytes, shape: Option<Shape>, texts: &[String], replacements: Vec<Option<String>>) -> Bytes {
    let mut replacements = replacements.into_iter();
    match (shape, texts.first()) {
        (Some(shape), Some(was)) => match replacements.next().flatten() {
            Some(text) => stream_text::with_whole_text(shape, answer, was, &text),
            None => answer.clone(),
        },
        (Some(_), None) => answer.clone(),
        (None, _) => match rewrite_texts(answer, not_text, |_| replacements.next().flatten()) {
            Some(rewritten) => Bytes::from(rewritten),
            None => answer.clone(),
        },
    }
}

/// Every text field of a request body, in order.
fn texts_of(body: &[u8]) -> Vec<String> {
    strings_of(body, not_text)
}

/// Every string of a JSON value (a tool's arguments or result), in order.
fn all_texts(json: &[u8]) -> Vec<String> {
    strings_of(json, all_text)
}

fn strings_of(json: &[u8], skip: Skip) -> Vec<String> {
    let mut texts = Vec::new();
    let _ = rewrite_texts(json, skip, |t| {
        texts.push(t.to_owned());
        None
    });
    texts
}
