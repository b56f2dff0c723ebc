//! The configured guardrails (`guardrails:`) as one `Guard`: every guard's detectors compiled into
//! one engine (`switchyard-guardrails`), so each text is scanned once whatever the number of
//! guards; a finding applies the most severe action among the guards that asked for its kind and
//! apply to this request (`default`, plus the model's own list) in this direction: `block`, then
//! `mask`, then `log`. Verdicts are counted per guard, kind and action (`/metrics`).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use switchyard_guardrails::{Engine, Finding, GuardSet, StreamMasker};

use super::json_text::{all_text, not_text, rewrite_texts, Skip};
use super::pseudonym::Vault;
use super::stream_text::{Shape, TextEvent};
use super::{AnswerGuard, Guard, GuardedRequest, Held, Verdict};
use crate::config::guardrails::{Directions, GuardAction, GuardConfig, GuardrailsConfig};
use crate::records::VerdictTally;

/// Which way the text is going.
#[derive(Clone, Copy)]
enum Direction {
    Request,
    Response,
    ToolCall,
    ToolResult,
}

#[derive(Clone)]
pub struct ContentGuards(Arc<Inner>);

/// Where verdicts are counted and checks timed (the server's `/metrics`).
pub trait GuardMetrics: Send + Sync {
    /// A finding and the action taken: (guard, kind, action).
    fn count(&self, guard: &str, kind: &'static str, action: &'static str);
    /// A webhook's call took `took` (by the guard's name).
    fn time(&self, guard: &str, took: std::time::Duration);
    /// The built-in detectors' scan of one body took `took` (one scan serves all of them).
    fn time_builtin(&self, took: std::time::Duration);
}

struct Inner {
    engine: Arc<Engine>,
    guards: Vec<GuardConfig>,
    /// Bit masks over `guards`: every request's, and each model's own added to them.
    default: u64,
    /// `default`'s guards that watch each direction (by `Direction as usize`): most requests'
    /// whole answer, with no model's, key's or team's guards to add.
    default_on: [u64; 4],
    per_model: HashMap<String, u64>,
    /// A guard's index by its name (for the guards a key or team adds).
    by_name: HashMap<String, usize>,
    /// Where verdicts are counted and checks timed (`/metrics`).
    metrics: Arc<dyn GuardMetrics>,
}

/// Whether a check's verdicts are counted, and into which request's record.
#[derive(Clone, Copy)]
enum Count<'a> {
    Not,
    To(Option<&'a VerdictTally>),
}

fn action_name(action: GuardAction) -> &'static str {
    match action {
        GuardAction::Block => "block",
        GuardAction::Mask => "mask",
        GuardAction::Log => "log",
        GuardAction::Pseudonymize => "pseudonymize",
    }
}

const DIRECTIONS: [Direction; 4] =
    [Direction::Request, Direction::Response, Direction::ToolCall, Direction::ToolResult];

/// Whether a guard with `on` watches traffic going `direction`.
fn watches(on: &Directions, direction: Direction) -> bool {
    match direction {
        Direction::Request => on.request,
        Direction::Response => on.response,
        Direction::ToolCall => on.tool_call,
        Direction::ToolResult => on.tool_result,
    }
}

/// Of the guards in the mask `all`, those that watch `direction`. A pseudonymizing guard finds
/// values in requests only: on answers it gives them back (`guard/restore.rs`), and tool calls
/// have no answer of the client's to give them back in.
fn watching(guards: &[GuardConfig], all: u64, direction: Direction) -> u64 {
    let watches = |g: &GuardConfig| {
        watches(&g.on, direction) && (g.action != GuardAction::Pseudonymize || matches!(direction, Direction::Request))
    };
    (0..guards.len()).filter(|&i| all & (1 << i) != 0 && watches(&guards[i])).fold(0, |m, i| m | (1 << i))
}

fn mask_of(list: &[usize]) -> u64 {
    list.iter().fold(0, |m, &i| m | (1 << i))
}

impl ContentGuards {
    /// The guards as configured; `None` when there are none.
    pub fn build(config: &GuardrailsConfig, metrics: Arc<dyn GuardMetrics>) -> Result<Option<ContentGuards>, String> {
        if config.is_empty() {
            return Ok(None);
        }
        if config.guards.len() > 64 {
            return Err("at most 64 guardrails can be configured".to_owned());
        }
        let engine = Engine::new(&config.specs()).map_err(|e| format!("guardrails: {e}"))?;
        let per_model = config.per_model.iter().map(|(m, list)| (m.clone(), mask_of(list))).collect();
        let default = mask_of(&config.default);
        let default_on = DIRECTIONS.map(|direction| watching(&config.guards, default, direction));
        Ok(Some(ContentGuards(Arc::new(Inner {
            engine: Arc::new(engine),
            guards: config.guards.clone(),
            default,
            default_on,
            per_model,
            by_name: config.guards.iter().enumerate().map(|(i, g)| (g.name.clone(), i)).collect(),
            metrics,
        }))))
    }
}

impl ContentGuards {
    /// Whether a guard pseudonymizes the values it finds.
    pub fn pseudonymizes(&self) -> bool {
        self.0.guards.iter().any(|g| g.action == GuardAction::Pseudonymize)
    }

    /// The guards as configured, in the order their indexes count.
    pub(super) fn configs(&self) -> &[GuardConfig] {
        &self.0.guards
    }

    /// The guards that watch this request's body.
    pub(super) fn active_on_request(&self, request: &GuardedRequest<'_>) -> u64 {
        self.0.active(request, Direction::Request)
    }

    /// The guards that watch this request's answer.
    pub(super) fn active_on_answer(&self, request: &GuardedRequest<'_>) -> u64 {
        self.0.active(request, Direction::Response)
    }

    /// A check took `took` (a webhook's call, by the guard's name).
    pub(super) fn time(&self, guard: &str, took: std::time::Duration) {
        self.0.metrics.time(guard, took);
    }

    /// Count a verdict in `/metrics`, and in the request's record when it has one.
    pub(super) fn count(&self, request: &GuardedRequest<'_>, guard: &str, kind: &'static str, action: &'static str) {
        self.count_into(request.verdicts.map(|t| &**t), guard, kind, action)
    }

    /// Count a verdict in `/metrics`, and in `tally` (a request's record) when given.
    pub(super) fn count_into(
        &self,
        tally: Option<&VerdictTally>,
        guard: &str,
        kind: &'static str,
        action: &'static str,
    ) {
        self.0.note(tally, guard, kind, action)
    }
}

impl Inner {
    /// The guards that watch this request's traffic in this direction: the defaults, the model's
    /// own by the name the client used or the one it resolved to, and those its key and team add.
    fn active(&self, request: &GuardedRequest<'_>, direction: Direction) -> u64 {
        if self.per_model.is_empty() && request.added.iter().all(|list| list.is_empty()) {
            return self.default_on[direction as usize];
        }
        // Most configurations name no model's own guards: no hashing of model names then.
        let own = |name: &str| match self.per_model.is_empty() {
            true => 0,
            false => self.per_model.get(name).copied().unwrap_or(0),
        };
        let added = request.added.iter().flat_map(|list| list.iter()).filter_map(|n| self.by_name.get(n));
        let all = added.fold(self.default | own(request.requested) | own(request.model), |m, &i| m | (1 << i));
        watching(&self.guards, all, direction)
    }

    /// The action for a finding, and the guard that decides it: the most severe among `active`.
    fn decide(&self, finding: &Finding, active: u64) -> Option<(usize, GuardAction)> {
        // Masking wins over pseudonymizing: a value another guard masks never comes back.
        let rank = |a: GuardAction| match a {
            GuardAction::Block => 3,
            GuardAction::Mask => 2,
            GuardAction::Pseudonymize => 1,
            GuardAction::Log => 0,
        };
        finding
            .guards
            .iter()
            .map(|g| g.index())
            .filter(|&i| active & (1 << i) != 0)
            .map(|i| (i, self.guards[i].action))
            .max_by_key(|(_, a)| rank(*a))
    }

    /// A verdict: counted in `/metrics`, and in the request's record when it has one.
    fn note(&self, tally: Option<&VerdictTally>, guard: &str, kind: &'static str, action: &'static str) {
        self.metrics.count(guard, kind, action);
        if let Some(tally) = tally {
            tally.add(guard, kind, action);
        }
    }

    /// Check one JSON body's texts: the body masked (`None`: unchanged), or why it is blocked;
    /// values a pseudonymizing guard finds get their placeholders from `vault`. Timed as the
    /// built-in detectors' scan: one serves every guard.
    fn check(
        &self,
        body: &[u8],
        active: u64,
        tally: Option<&VerdictTally>,
        vault: Option<&Vault>,
    ) -> Result<Option<Vec<u8>>, String> {
        let started = std::time::Instant::now();
        let checked = self.check_with(body, active, Count::To(tally), not_text, vault);
        self.metrics.time_builtin(started.elapsed());
        checked
    }

    /// `check`, its verdicts counted or not (a text already counted as it streamed), with no
    /// placeholders to give (answers and tool calls).
    fn check_counted(&self, body: &[u8], active: u64, count: Count<'_>, skip: Skip) -> Result<Option<Vec<u8>>, String> {
        self.check_with(body, active, count, skip, None)
    }

    fn check_with(
        &self,
        body: &[u8],
        active: u64,
        count: Count<'_>,
        skip: Skip,
        vault: Option<&Vault>,
    ) -> Result<Option<Vec<u8>>, String> {
        let mut blocked: Option<String> = None;
        let rewritten = rewrite_texts(body, skip, |text| {
            if blocked.is_some() {
                return None;
            }
            let findings = self.engine.scan(text);
            let mut out = String::new();
            let mut copied = 0;
            for f in &findings {
                let Some((guard, action)) = self.decide(f, active) else { continue };
                let name = &self.guards[guard].name;
                if let Count::To(tally) = count {
                    self.note(tally, name, f.kind.name(), action_name(action));
                }
                match action {
                    GuardAction::Block => {
                        blocked = Some(found(name, f.kind.name()));
                        return None;
                    }
                    GuardAction::Mask | GuardAction::Pseudonymize => {
                        if copied == 0 {
                            // Placeholders are about as long as what they replace: one allocation.
                            out.reserve(text.len() + 16);
                        }
                        out.push_str(&text[copied..f.start]);
                        let mask = self.engine.placeholder(f.detector);
                        match (action, vault) {
                            (GuardAction::Pseudonymize, Some(vault)) => {
                                let label = mask.trim_start_matches('[').trim_end_matches(']');
                                let restore = self.guards[guard].on.response;
                                out.push_str(&vault.placeholder(label, &text[f.start..f.end], restore));
                            }
                            _ => out.push_str(mask),
                        }
                        copied = f.end;
                    }
                    GuardAction::Log => {}
                }
            }
            (copied > 0).then(|| {
                out.push_str(&text[copied..]);
                out
            })
        });
        match blocked {
            Some(reason) => Err(reason),
            None => Ok(rewritten),
        }
    }
}

impl ContentGuards {
    /// The guards on MCP tool calls and on their results (`on: [tool_call]`, `on: [tool_result]`),
    /// from `default` and what a key and its team add (a tool call names no model), as sets.
    pub(super) fn on_tools(&self, added: [&[String]; 2]) -> (u64, u64) {
        let tools = GuardedRequest {
            endpoint: crate::endpoint::Endpoint::Other,
            model: "",
            requested: "",
            key: None,
            team: None,
            added,
            stream: false,
            verdicts: None,
            tool: None,
            pseudonyms: None,
        };
        (self.0.active(&tools, Direction::ToolCall), self.0.active(&tools, Direction::ToolResult))
    }

    /// A tool's arguments or result, scanned whole (every string, whatever its key) by the built-in
    /// detectors among `active`: masked, or the block's reason.
    pub(super) fn check_tool(&self, json: &[u8], active: u64) -> Result<Option<Vec<u8>>, String> {
        self.0.check_counted(json, active, Count::To(None), all_text)
    }
}

impl Guard for ContentGuards {
    /// None of its own: a block names the configured guard that decided it.
    fn name(&self) -> &str {
        ""
    }

    fn request(&self, request: &GuardedRequest<'_>, body: &Bytes) -> Verdict {
        let active = self.0.active(request, Direction::Request);
        if active == 0 {
            return Verdict::Pass;
        }
        match self.0.check(body, active, request.verdicts.map(|t| &**t), request.pseudonyms.map(|v| &**v)) {
            Ok(None) => Verdict::Pass,
            Ok(Some(masked)) => Verdict::Replace(Bytes::from(masked)),
            Err(reason) => Verdict::Block(reason),
        }
    }

    fn answer(&self, request: &GuardedRequest<'_>) -> Option<Box<dyn AnswerGuard>> {
        let active = self.0.active(request, Direction::Response);
        if active == 0 {
            return None;
        }
        if !request.stream {
            let tally = request.verdicts.cloned();
            let held = Held::default();
            return Some(Box::new(WholeAnswer { guards: self.0.clone(), active, held, tally }));
        }
        let Some(shape) = Shape::of(request.endpoint) else {
            tracing::debug!(endpoint = ?request.endpoint, "streamed answers of this API are not guarded");
            return None;
        };
        // The stream masker replaces only what a masking guard found; what a blocking guard
        // finds stops the answer before it is sent (`judge`), what a logging one finds passes.
        let masking = (0..self.0.guards.len())
            .filter(|&i| active & (1 << i) != 0 && self.0.guards[i].action == GuardAction::Mask)
            .fold(0u64, |m, i| m | (1 << i));
        let masker = StreamMasker::for_guards(self.0.engine.clone(), GuardSet::from_bits(masking));
        let tally = request.verdicts.cloned();
        Some(Box::new(StreamedAnswer { guards: self.0.clone(), active, shape, masker, seen: 0, last: None, tally }))
    }
}

/// A whole (not streamed) answer: held until it is complete, then checked as one JSON body.
struct WholeAnswer {
    guards: Arc<Inner>,
    active: u64,
    held: Held,
    tally: Option<Arc<VerdictTally>>,
}

impl AnswerGuard for WholeAnswer {
    fn event(&mut self, chunk: &Bytes) -> Verdict {
        self.held.hold(chunk)
    }

    fn end(&mut self) -> Verdict {
        let held = self.held.take();
        match self.guards.check(&held, self.active, self.tally.as_deref(), None) {
            Ok(None) => Verdict::Replace(held),
            Ok(Some(masked)) => Verdict::Replace(Bytes::from(masked)),
            Err(reason) => Verdict::Block(reason),
        }
    }
}

/// A streamed answer: its events' texts read as one text through a stream masker, which holds
/// back only what could still become a match, so a match split across events is still masked.
struct StreamedAnswer {
    guards: Arc<Inner>,
    active: u64,
    shape: Shape,
    masker: StreamMasker<Arc<Engine>>,
    /// Findings already judged.
    seen: usize,
    /// The last text event: what text held past it goes out in.
    last: Option<TextEvent>,
    tally: Option<Arc<VerdictTally>>,
}

impl StreamedAnswer {
    /// Judge the findings released since last time: why the answer must stop, if it must.
    fn judge(&mut self) -> Result<(), String> {
        let findings = &self.masker.findings()[self.seen..];
        self.seen += findings.len();
        for f in findings {
            let Some((guard, action)) = self.guards.decide(f, self.active) else { continue };
            let name = &self.guards.guards[guard].name;
            self.guards.note(self.tally.as_deref(), name, f.kind.name(), action_name(action));
            if action == GuardAction::Block {
                return Err(found(name, f.kind.name()));
            }
        }
        Ok(())
    }

    /// The text held back, in an event like the last text event (empty when nothing is held).
    fn flush(&mut self) -> Result<Bytes, String> {
        let rest = self.masker.finish();
        self.judge()?;
        Ok(match (&self.last, rest.is_empty()) {
            (Some(last), false) => last.with_text(&rest),
            _ => Bytes::new(),
        })
    }
}

impl AnswerGuard for StreamedAnswer {
    fn event(&mut self, event: &Bytes) -> Verdict {
        let Some(text_event) = TextEvent::parse(self.shape, event) else {
            // Text ends where another kind of event comes (a block's end, the finish, usage);
            // an event that repeats the whole text (Responses' `…done`, `response.completed`)
            // is masked as a whole answer is, its findings already counted.
            let held = match self.flush() {
                Ok(held) => held,
                Err(reason) => return Verdict::Block(reason),
            };
            let event = match self.guards.check_counted(event, self.active, Count::Not, not_text) {
                Ok(None) => event.clone(),
                Ok(Some(masked)) => Bytes::from(masked),
                Err(reason) => return Verdict::Block(reason),
            };
            return if held.is_empty() {
                Verdict::Replace(event)
            } else {
                Verdict::Replace(Bytes::from([&held[..], &event[..]].concat()))
            };
        };
        let released = self.masker.push(text_event.text());
        if let Err(reason) = self.judge() {
            return Verdict::Block(reason);
        }
        let out = text_event.with_text(&released);
        self.last = Some(text_event);
        Verdict::Replace(out)
    }

    fn end(&mut self) -> Verdict {
        match self.flush() {
            Ok(held) if held.is_empty() => Verdict::Pass,
            Ok(held) => Verdict::Replace(held),
            Err(reason) => Verdict::Block(reason),
        }
    }
}

/// A built-in detector's block: the guard, and the kind of value it found.
fn found(guard: &str, kind: &str) -> String {
    crate::error::guard_reason(guard, Some(&format!("found: {kind}")))
}
