//! Guard hooks: where checks on content plug into the request path. A guard sees the request
//! body before it is routed, and what goes back to the client: a whole answer, or a stream one
//! event at a time. The pipeline calls them through `Guards`; with none registered (the
//! default) the request path pays one branch on an empty list and the relay carries no guard.
//!
//! The checks themselves (PII and secret masking, keyword blocks, webhooks, model guards) are
//! built on these hooks; this module holds only the contract and the plumbing.

pub mod content;
mod json_stops;
mod json_text;
pub mod model;
pub mod pseudonym;
pub mod remote;
mod restore;
mod stream_text;
pub mod tools;
mod webhook;

use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::endpoint::Endpoint;
use crate::error::GatewayError;

/// What a request guard sees: the request as it will be routed.
pub struct GuardedRequest<'a> {
    pub endpoint: Endpoint,
    /// The model the request asks for (after alias resolution).
    pub model: &'a str,
    /// The model as the client named it (an alias, or the same as `model`).
    pub requested: &'a str,
    /// The virtual key's id, when the request carries one.
    pub key: Option<&'a str>,
    /// The team the request is charged to, when known.
    pub team: Option<&'a str>,
    /// Guards (by name) the key and its team add to the configured ones.
    pub added: [&'a [String]; 2],
    pub stream: bool,
    /// Where verdicts are noted for the request's usage record (when it has one).
    pub verdicts: Option<&'a Arc<crate::records::VerdictTally>>,
    /// An MCP tool call's `server/tool` (its arguments or result are what is checked).
    pub tool: Option<&'a str>,
    /// The placeholders the request's values were given (`action: pseudonymize`), when a guard
    /// pseudonymizes: the answer gets the values back.
    pub pseudonyms: Option<&'a Arc<pseudonym::Vault>>,
}

/// A guard's verdict on some bytes.
pub enum Verdict {
    /// Let them through unchanged.
    Pass,
    /// Send these bytes instead (a masked body or event). An empty replacement holds the bytes
    /// back: a guard that judges a whole answer returns them from `AnswerGuard::end`.
    Replace(Bytes),
    /// Stop: the request is refused, or the answer is cut with an error in the client's shape.
    Block(String),
}

/// One check on content. Registered once; shared by every request.
pub trait Guard: Send + Sync {
    /// A name for logs, metrics and the error a block produces.
    fn name(&self) -> &str;

    /// Check the request body before it is routed; `Replace` rewrites what is sent upstream.
    fn request(&self, _request: &GuardedRequest<'_>, _body: &Bytes) -> Verdict {
        Verdict::Pass
    }

    /// Start watching one answer; `None` when this guard does not look at answers.
    fn answer(&self, _request: &GuardedRequest<'_>) -> Option<Box<dyn AnswerGuard>> {
        None
    }
}

/// The per-answer side of a guard: stateful, so a match split across stream events is still
/// seen (a guard may hold bytes back with an empty `Replace` and release them later).
pub trait AnswerGuard: Send {
    /// One complete server-sent event (its `data:` lines and the blank line that ends it), or one
    /// chunk of a body that is not a stream, in the client's API shape.
    fn event(&mut self, event: &Bytes) -> Verdict;

    /// The answer is complete: bytes still held back, or a last verdict.
    fn end(&mut self) -> Verdict {
        Verdict::Pass
    }
}

/// The guards that apply to traffic, in order, and the remote ones (webhooks, classifier
/// models) asked after them.
#[derive(Clone, Default)]
pub struct Guards {
    list: Arc<[Arc<dyn Guard>]>,
    remote: Option<Arc<remote::RemoteGuards>>,
    /// The configured guardrails, for the tool guards of keys and teams that add their own.
    content: Option<content::ContentGuards>,
}

impl Guards {
    pub fn new(list: Vec<Arc<dyn Guard>>) -> Guards {
        Guards { list: list.into(), remote: None, content: None }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty() && self.remote.is_none()
    }

    /// These guards with `first` ahead of them.
    pub fn after(self, first: Arc<dyn Guard>) -> Guards {
        Guards { list: std::iter::once(first).chain(self.list.iter().cloned()).collect(), ..self }
    }

    /// The configured guardrails ahead of these guards (and, when one pseudonymizes, what
    /// restores its values in answers right after them), then the remote ones among them.
    pub fn configured(self, content: content::ContentGuards, remote: Option<remote::RemoteGuards>) -> Guards {
        let pseudonymizes = content.pseudonymizes();
        let mut guards = Guards { content: Some(content.clone()), remote: remote.map(Arc::new), ..self };
        if pseudonymizes {
            guards = guards.after(Arc::new(restore::Restore));
        }
        guards.after(Arc::new(content))
    }

    /// Whether a configured guard pseudonymizes: each request then gets its own vault.
    pub fn pseudonymizes(&self) -> bool {
        self.content.as_ref().is_some_and(content::ContentGuards::pseudonymizes)
    }

    /// The guards on every MCP tool call (the hub's own), when any applies.
    pub fn tools(&self) -> Option<switchyard_mcp::SharedToolGuard> {
        let tools = tools::ToolGuards::build(self.content.as_ref()?, self.remote.clone(), [&[], &[]])?;
        Some(Arc::new(tools))
    }

    /// The guards on the MCP tool calls of a key that, or whose team, adds guards of its own
    /// (`added`: the key's list and its team's); None when neither adds any (the hub's own
    /// guards then apply).
    pub fn tools_adding(&self, added: [&[String]; 2]) -> Option<switchyard_mcp::SharedToolGuard> {
        if added.iter().all(|list| list.is_empty()) {
            return None;
        }
        let tools = tools::ToolGuards::build(self.content.as_ref()?, self.remote.clone(), added)?;
        Some(Arc::new(tools))
    }

    /// The remote guards, asked after `check_request` (they wait on the network): classifiers
    /// running beside the call come back as `Parallel`, to be awaited before the answer goes out.
    pub async fn check_remote(
        &self,
        request: &GuardedRequest<'_>,
        body: &mut Bytes,
        deadline: std::time::Instant,
    ) -> Result<Option<remote::Parallel>, GatewayError> {
        match &self.remote {
            Some(remote) => remote.check(request, body, deadline).await,
            None => Ok(None),
        }
    }

    /// Whether a webhook or classifier watches this request's answer (`on: [response]`): the
    /// answer is then held whole and judged by `check_remote_answer` before any of it goes out.
    pub fn remote_answer(&self, request: &GuardedRequest<'_>) -> bool {
        self.remote.as_ref().is_some_and(|remote| remote.watches_answer(request))
    }

    /// The webhooks and classifiers on answers, asked about a whole answer (a held stream's
    /// text as one): `answer` as the last one left it (masked), or the first block.
    pub async fn check_remote_answer(
        &self,
        request: &GuardedRequest<'_>,
        answer: &mut Bytes,
        deadline: std::time::Instant,
    ) -> Result<(), GatewayError> {
        match &self.remote {
            Some(remote) => remote.check_answer(request, answer, deadline).await,
            None => Ok(()),
        }
    }

    /// Run every request guard in turn: the body as the last one left it, or the first block.
    pub fn check_request(&self, request: &GuardedRequest<'_>, body: &mut Bytes) -> Result<(), GatewayError> {
        for guard in self.list.iter() {
            match guard.request(request, body) {
                Verdict::Pass => {}
                Verdict::Replace(changed) => *body = changed,
                Verdict::Block(reason) => return Err(blocked(guard.name(), &reason)),
            }
        }
        Ok(())
    }

    /// The answer guards for one request, chained; `None` when no guard watches answers.
    pub fn answer(&self, request: &GuardedRequest<'_>) -> Option<Box<AnswerGuards>> {
        let watching: SmallVec<[_; 2]> =
            self.list.iter().filter_map(|g| Some((g.clone(), g.answer(request)?))).collect();
        let (endpoint, stream) = (request.endpoint, request.stream);
        (!watching.is_empty()).then(|| Box::new(AnswerGuards { watching, pending: Vec::new(), endpoint, stream }))
    }
}

/// The error a blocked request or answer reports: which guard, and why.
pub fn blocked(guard: &str, reason: &str) -> GatewayError {
    GatewayError::ContentBlocked { guard: guard.to_owned(), reason: reason.to_owned() }
}

/// What a tool call's JSON-RPC error says when a guard stopped it (the MCP layer puts "blocked by"
/// before it): the guard and its reason, else the error's message.
pub fn tool_refusal(error: &GatewayError) -> String {
    match error {
        GatewayError::ContentBlocked { guard, reason } => crate::error::blocked_why(guard, reason),
        _ => error.to_string(),
    }
}

/// A guard, and its watcher on one answer.
type Watching = (Arc<dyn Guard>, Box<dyn AnswerGuard>);

/// One answer's guards, chained: each sees what the one before it let through. For a stream,
/// frames are cut into whole events (or lines) first, so a guard never sees half an event.
pub struct AnswerGuards {
    /// Inline: most answers have one or two watchers, and an answer's guards are built per request.
    watching: SmallVec<[Watching; 2]>,
    /// Bytes of a server-sent event (or line) not yet complete.
    pending: Vec<u8>,
    /// The client's API: a blocked stream ends with its own error event.
    endpoint: Endpoint,
    /// The answer is a stream (server-sent events, or Ollama's JSON lines).
    stream: bool,
}

/// An answer guard blocked the answer: which guard, and why; and the client's API (a stream ends
/// with its error event; a whole answer is refused whole).
pub struct Blocked {
    pub guard: String,
    pub reason: String,
    pub endpoint: Endpoint,
}

impl AnswerGuards {
    /// The answer is whole (not a stream): it is judged as one body when it ends.
    pub fn whole(&self) -> bool {
        !self.stream
    }

    /// One frame on its way to the client: what to send instead (possibly nothing yet).
    pub fn frame(&mut self, data: Bytes, sse: bool) -> Result<Bytes, Blocked> {
        // Ollama streams JSON lines: a guard sees one line at a time.
        let lines = self.stream && matches!(self.endpoint, Endpoint::OllamaChat | Endpoint::OllamaGenerate);
        if !sse && !lines {
            return self.through(data);
        }
        self.pending.extend_from_slice(&data);
        let mut out = Vec::new();
        let end_of = if lines { line_end } else { event_end };
        while let Some(end) = end_of(&self.pending) {
            let event = Bytes::from(self.pending.drain(..end).collect::<Vec<u8>>());
            out.extend_from_slice(&self.through(event)?);
        }
        Ok(Bytes::from(out))
    }

    /// The last bytes of an answer (a whole answer, or a stream's tail), then what every guard
    /// still held: all that is left to send.
    pub fn finish(&mut self, last: Bytes, sse: bool) -> Result<Bytes, Blocked> {
        let last = self.frame(last, sse)?;
        let held = self.end()?;
        Ok(joined(last, held))
    }

    /// The upstream body ended: a partial last event, then what each guard still held.
    pub fn end(&mut self) -> Result<Bytes, Blocked> {
        let rest = Bytes::from(std::mem::take(&mut self.pending));
        let mut out = if rest.is_empty() { Bytes::new() } else { self.through(rest)? };
        for i in 0..self.watching.len() {
            let tail = match self.watching[i].1.end() {
                Verdict::Pass => continue,
                Verdict::Replace(tail) => tail,
                Verdict::Block(reason) => return Err(self.blocked(self.watching[i].0.name(), reason)),
            };
            out = joined(out, self.through_from(i + 1, tail)?);
        }
        Ok(out)
    }

    fn through(&mut self, bytes: Bytes) -> Result<Bytes, Blocked> {
        self.through_from(0, bytes)
    }

    fn blocked(&self, guard: &str, reason: String) -> Blocked {
        Blocked { guard: guard.to_owned(), reason, endpoint: self.endpoint }
    }

    /// `bytes` through the guards from the `first`th on.
    fn through_from(&mut self, first: usize, mut bytes: Bytes) -> Result<Bytes, Blocked> {
        let endpoint = self.endpoint;
        for (guard, watcher) in &mut self.watching[first..] {
            if bytes.is_empty() {
                break;
            }
            match watcher.event(&bytes) {
                Verdict::Pass => {}
                Verdict::Replace(changed) => bytes = changed,
                Verdict::Block(reason) => {
                    return Err(Blocked { guard: guard.name().to_owned(), reason, endpoint });
                }
            }
        }
        Ok(bytes)
    }
}

/// A whole answer's frames, held until it is complete: most answers are one frame, which is
/// judged and sent on uncopied.
#[derive(Default)]
pub(crate) struct Held(SmallVec<[Bytes; 1]>);

impl Held {
    /// Hold `chunk` back (the verdict that says so).
    pub fn hold(&mut self, chunk: &Bytes) -> Verdict {
        self.0.push(chunk.clone());
        Verdict::Replace(Bytes::new())
    }

    /// The whole answer, and nothing held any more.
    pub fn take(&mut self) -> Bytes {
        match std::mem::take(&mut self.0).as_slice() {
            [one] => one.clone(),
            frames => Bytes::from(frames.concat()),
        }
    }
}

/// Two pieces of an answer as one: copied only when both have bytes (a whole answer is one).
pub(crate) fn joined(head: Bytes, tail: Bytes) -> Bytes {
    match (head.is_empty(), tail.is_empty()) {
        (_, true) => head,
        (true, false) => tail,
        (false, false) => Bytes::from([&head[..], &tail[..]].concat()),
    }
}

/// Where the first complete line in `buf` ends (after its newline).
pub(crate) fn line_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', buf).map(|i| i + 1)
}

/// Where the first complete server-sent event in `buf` ends (after its blank line).
pub(crate) fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = memchr::memmem::find(buf, b"\n\n").map(|i| i + 2);
    let crlf = memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Masks `secret` in answers and holds back everything until the end when `whole` is set.
    struct Mask;
    struct MaskAnswer;

    impl Guard for Mask {
        fn name(&self) -> &str {
            "mask"
        }
        fn request(&self, _: &GuardedRequest<'_>, body: &Bytes) -> Verdict {
            if body.windows(5).any(|w| w == b"block") {
                return Verdict::Block("the word".into());
            }
            Verdict::Pass
        }
        fn answer(&self, _: &GuardedRequest<'_>) -> Option<Box<dyn AnswerGuard>> {
            Some(Box::new(MaskAnswer))
        }
    }

    impl AnswerGuard for MaskAnswer {
        fn event(&mut self, event: &Bytes) -> Verdict {
            let text = String::from_utf8_lossy(event);
            if text.contains("secret") {
                return Verdict::Replace(Bytes::from(text.replace("secret", "[SECRET]")));
            }
            Verdict::Pass
        }
    }

    fn request() -> GuardedRequest<'static> {
        GuardedRequest {
            endpoint: Endpoint::ChatCompletions,
            model: "m",
            requested: "m",
            key: None,
            team: None,
            added: [&[], &[]],
            stream: true,
            verdicts: None,
            tool: None,
            pseudonyms: None,
        }
    }

    #[test]
    fn a_request_guard_blocks_and_an_empty_list_passes() {
        let guards = Guards::new(vec![Arc::new(Mask)]);
        let mut body = Bytes::from_static(b"{\"x\":\"block\"}");
        assert!(guards.check_request(&request(), &mut body).is_err());
        assert!(Guards::default().check_request(&request(), &mut body).is_ok());
        assert!(Guards::default().answer(&request()).is_none());
    }

    #[test]
    fn a_stream_guard_sees_whole_events_however_frames_split_them() {
        let guards = Guards::new(vec![Arc::new(Mask)]);
        let mut answer = guards.answer(&request()).unwrap();
        let mut out = Vec::new();
        for frame in ["data: a sec", "ret here\n", "\ndata: b\n\ndata: tail sec", "ret"] {
            out.extend_from_slice(&answer.frame(Bytes::from(frame), true).ok().unwrap());
        }
        out.extend_from_slice(&answer.end().ok().unwrap());
        assert_eq!(String::from_utf8(out).unwrap(), "data: a [SECRET] here\n\ndata: b\n\ndata: tail [SECRET]");
    }
}
