//! A2A agents' cards as the gateway holds them (issue 59): the agent's own card, fetched on first
//! use and again once its `card_ttl` has passed (the last good one is served while a fetch fails),
//! or the configured one. A card is checked when it arrives: every interface URL it names must be
//! on the agents' allow-list, or it is refused whole and never used. What the gateway relays is in
//! `a2a.rs`; the protocol's reading is the `switchyard-a2a` crate's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::Value;
use switchyard_a2a::{rewrite_card, AllowedHosts, CardError, Interfaces};

use crate::config::agents::{AgentConfig, CardSource};
use crate::upstream::UpstreamClient;

/// A card larger than this is refused.
pub const MAX_CARD_BYTES: usize = 1 << 20;

/// The longest a card fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// A card as held: as the agent (or the configuration) gave it, and where it says the agent listens.
#[derive(Debug)]
pub struct Card {
    pub raw: Value,
    pub interfaces: Interfaces,
    /// The configuration it was made under: a reload's agents get their cards again.
    made_for: Arc<AgentConfig>,
    fetched: Instant,
}

impl Card {
    /// The card as a client of `gateway` (the agent's base on the gateway) sees it.
    pub fn for_client(&self, gateway: &str, allowed: &AllowedHosts) -> Result<Value, CardError> {
        let mut card = self.raw.clone();
        rewrite_card(&mut card, gateway, allowed)?;
        Ok(card)
    }

    /// Where JSON-RPC calls go: the card's JSON-RPC interface, else the configured URL.
    pub fn jsonrpc(&self) -> Uri {
        self.interfaces.jsonrpc.clone().unwrap_or_else(|| self.made_for.url.clone())
    }

    /// The REST binding's base: the card's, else the configured URL.
    pub fn rest(&self) -> Uri {
        self.interfaces.rest.clone().unwrap_or_else(|| self.made_for.url.clone())
    }
}

/// Why no card can be served.
#[derive(Debug)]
pub enum CardFailure {
    Refused(CardError),
    Unreachable(String),
}

impl std::fmt::Display for CardFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CardFailure::Refused(e) => e.fmt(f),
            CardFailure::Unreachable(why) => write!(f, "the agent's card could not be fetched: {why}"),
        }
    }
}

/// Every agent's card; lives across reloads (an entry made under an older configuration is made
/// again).
#[derive(Default)]
pub struct AgentCards {
    cards: Mutex<HashMap<String, Arc<Card>>>,
}

impl AgentCards {
    /// `agent`'s card, fetched when there is none yet or it is older than its `card_ttl`.
    pub async fn card(
        &self,
        agent: &Arc<AgentConfig>,
        client: &UpstreamClient,
        allowed: &AllowedHosts,
    ) -> Result<Arc<Card>, CardFailure> {
        let held = self.cards.lock().map(|c| c.get(&agent.name).cloned()).ok().flatten();
        let held = held.filter(|c| Arc::ptr_eq(&c.made_for, agent));
        if let Some(card) = held.as_ref().filter(|c| c.fetched.elapsed() < agent.card_ttl) {
            return Ok(card.clone());
        }
        let raw = match &agent.card {
            CardSource::Configured(card) => Ok((**card).clone()),
            CardSource::Fetch => fetch(agent, client).await,
        };
        let card = match raw.and_then(|raw| checked(raw, agent, allowed)) {
            Ok(card) => Arc::new(card),
            Err(e) => {
                // The last good card is served while a fetch fails; a refused one never is.
                if let (Some(stale), CardFailure::Unreachable(why)) = (held, &e) {
                    tracing::warn!(agent = %agent.name, "serving the agent's last card: {why}");
                    return Ok(stale);
                }
                return Err(e);
            }
        };
        if let Ok(mut cards) = self.cards.lock() {
            cards.insert(agent.name.clone(), card.clone());
        }
        Ok(card)
    }
}

fn checked(raw: Value, agent: &Arc<AgentConfig>, allowed: &AllowedHosts) -> Result<Card, CardFailure> {
    let mut probe = raw.clone();
    let interfaces = rewrite_card(&mut probe, "http://gateway.invalid", allowed).map_err(|e| {
        tracing::warn!(agent = %agent.name, error = %e, "an agent card was refused");
        CardFailure::Refused(e)
    })?;
    Ok(Card { raw, interfaces, made_for: agent.clone(), fetched: Instant::now() })
}

/// The agent's card from `{url}/.well-known/agent-card.json` (A2A 0.3's `agent.json` when that
/// is not found).
async fn fetch(agent: &AgentConfig, client: &UpstreamClient) -> Result<Value, CardFailure> {
    let timeout = agent.timeout.min(FETCH_TIMEOUT);
    let first = get_json(agent, client, "/.well-known/agent-card.json", timeout).await;
    match first {
        Err(CardFailure::Unreachable(why)) if why.starts_with("404") => {
            get_json(agent, client, "/.well-known/agent.json", timeout).await
        }
        other => other,
    }
}

async fn get_json(
    agent: &AgentConfig,
    client: &UpstreamClient,
    path: &str,
    timeout: Duration,
) -> Result<Value, CardFailure> {
    let unreachable = |why: String| CardFailure::Unreachable(why);
    let url = format!("{}{path}", agent.url.to_string().trim_end_matches('/'));
    let mut req = Request::get(&url).header(http::header::ACCEPT, "application/json");
    for (name, value) in &agent.headers {
        req = req.header(name, value);
    }
    let req = req.body(Full::new(Bytes::new())).map_err(|e| unreachable(e.to_string()))?;
    let answer = tokio::time::timeout(timeout, async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_CARD_BYTES).collect().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body.to_bytes()))
    });
    let (status, body) = answer.await.map_err(|_| unreachable("timed out".to_owned()))?.map_err(unreachable)?;
    if !status.is_success() {
        return Err(unreachable(format!("{} from {url}", status.as_u16())));
    }
    serde_json::from_slice(&body).map_err(|e| CardFailure::Refused(CardError::Malformed(e.to_string())))
}
