//! Client authentication: the master key (admin and full access) and virtual keys (`sy-…`)
//! presented as `Authorization: Bearer`, `x-api-key` or `x-goog-api-key`. Key lookups go through a small cache
//! with negative entries; revocation through this process evicts at once, so a revoked key is
//! refused on its very next request.

mod identity;
pub mod jwt;
pub mod key;
pub mod oidc;
pub mod session;

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::HeaderMap;

use crate::error::GatewayError;
use crate::records::{KeyRecord, TeamRecord, UserRecord};
use key::Hasher;

/// Where keys live (the SQL store in production, a map in tests).
pub trait KeyLookup: Send + Sync + 'static {
    fn lookup(&self, id: &str) -> Pin<Box<dyn Future<Output = Result<Option<KeyRecord>, String>> + Send + '_>>;

    /// A team by its name (what a token's team claim says); none where teams are not kept.
    fn team_by_name(
        &self,
        _name: &str,
    ) -> Pin<Box<dyn Future<Output = Result<Option<crate::records::TeamRecord>, String>> + Send + '_>> {
        Box::pin(async { Ok(None) })
    }
}

pub use identity::{Identity, Role, Subject};

/// Which credential a request presented.
#[derive(Debug, Clone)]
pub enum Principal {
    /// No master key configured: the gateway is open (local use).
    Open,
    Master,
    Key(Arc<KeyRecord>),
}

impl Principal {
    pub fn key(&self) -> Option<&KeyRecord> {
        match self {
            Principal::Key(k) => Some(k),
            _ => None,
        }
    }
}

const POSITIVE_TTL: Duration = Duration::from_secs(30);
const NEGATIVE_TTL: Duration = Duration::from_secs(5);

/// A looked-up key id: when, the record (None for "no such key"), and a tag of the secret last
/// verified against it.
struct CacheEntry {
    at: Instant,
    record: Option<Arc<KeyRecord>>,
    verified: Option<u64>,
    /// To be looked up again at its next use (a key change may have been missed), but still
    /// served if the database cannot answer then.
    stale: bool,
}

pub struct Auth {
    master_key: Option<String>,
    hasher: Hasher,
    store: Arc<dyn KeyLookup>,
    cache: Mutex<crate::config::FastMap<String, CacheEntry>>,
    /// Keys the tags of verified secrets: SipHash under a random per-process key, so a repeat
    /// request skips the HMAC (a forged secret would need a 64-bit collision under an unknown key).
    tags: RandomState,
    /// Console logins (`/ui`).
    sessions: session::Sessions,
    /// Bearer tokens from trusted issuers (`auth.jwt`), when configured.
    jwt: Option<jwt::JwtVerifier>,
    /// Single sign-on to the console (`auth.oidc`), when configured.
    oidc: Option<oidc::OidcProvider>,
    /// Teams tokens name, by name, with when they were looked up.
    teams: Mutex<crate::config::FastMap<String, TeamLookup>>,
}

/// A team looked up by name (None: no such team), and when.
type TeamLookup = (Instant, Option<Arc<crate::records::TeamRecord>>);

/// The key a client presented, if any.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        let token = v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")).unwrap_or(v);
        return Some(token.trim());
    }
    // Anthropic's clients send `x-api-key`, Google's `x-goog-api-key`.
    headers.get("x-api-key").or_else(|| headers.get("x-goog-api-key")).and_then(|v| v.to_str().ok()).map(str::trim)
}

fn unauthorized(message: &str, code: &'static str) -> GatewayError {
    GatewayError::Unauthorized { message: message.to_owned(), code }
}

impl Auth {
    pub fn new(master_key: Option<String>, hasher: Hasher, store: Arc<dyn KeyLookup>) -> Auth {
        Auth {
            master_key: master_key.filter(|k| !k.is_empty()),
            hasher,
            store,
            cache: Mutex::default(),
            tags: RandomState::new(),
            sessions: session::Sessions::default(),
            jwt: None,
            oidc: None,
            teams: Mutex::default(),
        }
    }

    /// Accept bearer tokens from these issuers as well.
    pub fn with_jwt(mut self, verifier: jwt::JwtVerifier) -> Auth {
        self.jwt = Some(verifier);
        self
    }

    /// Sign console users in through this OpenID provider.
    pub fn with_oidc(mut self, provider: oidc::OidcProvider) -> Auth {
        self.oidc = Some(provider);
        self
    }

    pub fn oidc(&self) -> Option<&oidc::OidcProvider> {
        self.oidc.as_ref()
    }

    /// A console session token for `given`, when it is the master key (constant-time compare).
    pub fn console_login(&self, given: &str, issued_ms: i64, expires_unix: i64) -> Option<String> {
        let master = self.master_key.as_deref()?;
        constant_time_eq(master.as_bytes(), given.trim().as_bytes())
            .then(|| self.sessions.issue(&self.hasher, master, session::MASTER, issued_ms, expires_unix))
            .flatten()
    }

    /// A console session for a user signed in through single sign-on.
    pub fn user_session(&self, user_id: &str, issued_ms: i64, expires_unix: i64) -> Option<String> {
        let master = self.master_key.as_deref()?;
        self.sessions.issue(&self.hasher, master, user_id, issued_ms, expires_unix)
    }

    /// The console session a token stands for. With no master key the console is open (as the
    /// admin API is): every caller counts as signed in with the master key.
    pub fn console_session(&self, token: Option<&str>, now_unix: i64) -> Option<session::Session> {
        match (&self.master_key, token) {
            (None, _) => Some(session::Session { subject: session::MASTER.to_owned(), issued: now_unix * 1000 }),
            (Some(master), Some(token)) => self.sessions.valid(&self.hasher, master, token, now_unix),
            (Some(_), None) => None,
        }
    }

    pub fn console_logout(&self, token: &str, now_unix: i64) {
        self.sessions.end(token, now_unix);
    }

    /// The master key as a bearer header, for console requests sent through the proxy (playground).
    pub fn master_bearer(&self) -> Option<http::HeaderValue> {
        let master = self.master_key.as_deref()?;
        http::HeaderValue::try_from(format!("Bearer {master}")).ok()
    }

    pub fn enabled(&self) -> bool {
        self.master_key.is_some()
    }

    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// True for the master key (constant-time compare).
    pub fn is_master(&self, headers: &HeaderMap) -> bool {
        match (&self.master_key, presented_key(headers)) {
            (Some(master), Some(given)) => constant_time_eq(master.as_bytes(), given.as_bytes()),
            _ => false,
        }
    }

    /// Authenticate a client request.
    pub async fn authenticate(&self, headers: &HeaderMap, now_unix: i64) -> Result<Identity, GatewayError> {
        if !self.enabled() {
            return Ok(Identity::from(Principal::Open));
        }
        if self.is_master(headers) {
            return Ok(Identity::from(Principal::Master));
        }
        let token = presented_key(headers).ok_or_else(|| {
            unauthorized("missing API key: send `Authorization: Bearer sy-…` or `x-api-key`", "missing_api_key")
        })?;
        let Some(parsed) = key::parse(token) else {
            return match &self.jwt {
                Some(verifier) if jwt::looks_like_jwt(token) || token.len() > jwt::MAX_TOKEN_BYTES => {
                    self.token_identity(verifier, token, now_unix).await
                }
                _ => Err(unauthorized("incorrect API key provided", "invalid_api_key")),
            };
        };
        let (record, verified) = self.cached(parsed.id).await?;
        let record = record.ok_or_else(|| unauthorized("incorrect API key provided", "invalid_api_key"))?;
        let tag = self.tags.hash_one(parsed.secret);
        if verified != Some(tag) {
            if !self.hasher.verify(parsed.secret, &record.secret_hash) {
                return Err(unauthorized("incorrect API key provided", "invalid_api_key"));
            }
            self.remember_verified(parsed.id, &record, tag);
        }
        if record.revoked_at.is_some() {
            return Err(unauthorized("this API key has been revoked", "key_revoked"));
        }
        if record.expires_at.is_some_and(|t| t <= now_unix) {
            return Err(unauthorized("this API key has expired", "key_expired"));
        }
        Ok(Identity::from(Principal::Key(record)))
    }

    /// The key's record (None: no such key) and the tag of the secret last verified for it.
    async fn cached(&self, id: &str) -> Result<(Option<Arc<KeyRecord>>, Option<u64>), GatewayError> {
        {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(entry) = cache.get(id) {
                let ttl = if entry.record.is_some() { POSITIVE_TTL } else { NEGATIVE_TTL };
                if !entry.stale && entry.at.elapsed() < ttl {
                    return Ok((entry.record.clone(), entry.verified));
                }
            }
        }
        let found = match self.store.lookup(id).await {
            Ok(found) => found,
            Err(e) => {
                // The database is away: a key known before goes on as it was (stale if error),
                // so an outage does not refuse every key whose cache entry aged meanwhile.
                let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(entry) = cache.get(id) {
                    tracing::debug!(error = %e, "key lookup failed: serving the cached record");
                    return Ok((entry.record.clone(), entry.verified));
                }
                tracing::error!(error = %e, "key lookup failed");
                return Err(GatewayError::KeysUnavailable);
            }
        };
        let record = found.map(Arc::new);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() > 100_000 {
            cache.clear();
        }
        cache.insert(
            id.to_owned(),
            CacheEntry { at: Instant::now(), record: record.clone(), verified: None, stale: false },
        );
        Ok((record, None))
    }

    /// The secret with this tag matched this record's hash (unless the entry changed meanwhile).
    fn remember_verified(&self, id: &str, record: &Arc<KeyRecord>, tag: u64) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = cache.get_mut(id) {
            if entry.record.as_ref().is_some_and(|r| Arc::ptr_eq(r, record)) {
                entry.verified = Some(tag);
            }
        }
    }

    /// A verified token's bearer, as a key of its team's with no limits of its own: the team's
    /// limits, budget and allow-lists apply, and usage is recorded under the token's user and
    /// team.
    async fn token_identity(
        &self,
        verifier: &jwt::JwtVerifier,
        token: &str,
        now_unix: i64,
    ) -> Result<Identity, GatewayError> {
        let claims = verifier.verify(token, now_unix).await.map_err(token_refusal)?;
        let team = match &claims.team {
            Some(name) => Some(self.team_named(name).await?.ok_or_else(|| GatewayError::Forbidden {
                message: format!("the token's team `{name}` is not a team of this gateway"),
                code: "unknown_team",
            })?),
            None => None,
        };
        let mut record = KeyRecord::new(format!("jwt:{}", claims.user), Vec::new(), 0);
        record.name = Some(claims.issuer.clone());
        record.user = Some(claims.user.clone());
        record.team = claims.team.clone();
        record.team_id = team.as_ref().map(|t| t.id.clone());
        record.owners.team = team;
        let roles = claims.roles.iter().filter_map(|r| Role::parse(r)).collect();
        let subject = Subject {
            user: Some(claims.user.clone()),
            teams: claims.team.iter().cloned().collect(),
            roles,
            claims: Some(claims.raw.clone()),
        };
        Ok(Identity { principal: Principal::Key(Arc::new(record)), subject: Some(Arc::new(subject)) })
    }

    /// A signed-in user's identity for requests the console sends on their behalf (playground):
    /// a key of theirs with no limits of its own, so their and their team's limits, budget and
    /// allow-lists apply and usage is recorded under them.
    pub fn user_identity(user: Arc<UserRecord>, team: Option<Arc<TeamRecord>>) -> Identity {
        let mut record = KeyRecord::new(format!("user:{}", user.id), Vec::new(), 0);
        record.name = Some("console playground".to_owned());
        record.user_id = Some(user.id.clone());
        record.team_id = team.as_ref().map(|t| t.id.clone());
        record.owners = crate::records::Owners { team, user: Some(user) };
        Identity::from(Principal::Key(Arc::new(record)))
    }

    /// What a bearer token from a configured issuer says (None: no issuer is configured).
    pub async fn verify_token(
        &self,
        token: &str,
        now_unix: i64,
    ) -> Option<Result<Arc<jwt::TokenClaims>, GatewayError>> {
        let verifier = self.jwt.as_ref()?;
        Some(verifier.verify(token, now_unix).await.map_err(token_refusal))
    }

    /// The team with this name, looked up at most every `POSITIVE_TTL`.
    async fn team_named(&self, name: &str) -> Result<Option<Arc<crate::records::TeamRecord>>, GatewayError> {
        if let Some((at, team)) = self.teams.lock().unwrap_or_else(|p| p.into_inner()).get(name) {
            if at.elapsed() < POSITIVE_TTL {
                return Ok(team.clone());
            }
        }
        let team = self.store.team_by_name(name).await.map_err(|e| {
            tracing::error!(error = %e, "team lookup failed");
            GatewayError::KeysUnavailable
        })?;
        let team = team.map(Arc::new);
        let mut teams = self.teams.lock().unwrap_or_else(|p| p.into_inner());
        if teams.len() > 10_000 {
            teams.clear();
        }
        teams.insert(name.to_owned(), (Instant::now(), team.clone()));
        Ok(team)
    }

    /// Forget a key so its next use is looked up again (after update or revocation).
    pub fn evict(&self, id: &str) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }

    /// Look every key up again at its next use (changes may have been missed: see
    /// `shared/revocation.rs`); while the database cannot answer, the cached records still serve.
    pub fn evict_all(&self) {
        for entry in self.cache.lock().unwrap_or_else(|p| p.into_inner()).values_mut() {
            entry.stale = true;
        }
        self.teams.lock().unwrap_or_else(|p| p.into_inner()).clear();
        if let Some(verifier) = &self.jwt {
            verifier.forget();
        }
    }
}

fn token_refusal(e: jwt::JwtError) -> GatewayError {
    match e {
        jwt::JwtError::Unavailable => GatewayError::IdentityUnavailable,
        e => GatewayError::Unauthorized { message: e.message(), code: e.code() },
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Does `model` match any of the key's allowed globs (`*` matches any run of characters)?
pub fn model_allowed(globs: &[String], model: &str) -> bool {
    globs.is_empty() || crate::glob::any(globs, model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct MapStore(Mutex<HashMap<String, KeyRecord>>);

    impl KeyLookup for MapStore {
        fn lookup(&self, id: &str) -> Pin<Box<dyn Future<Output = Result<Option<KeyRecord>, String>> + Send + '_>> {
            let found = self.0.lock().unwrap().get(id).cloned();
            Box::pin(async move { Ok(found) })
        }
    }

    fn record(id: &str, hash: Vec<u8>) -> KeyRecord {
        KeyRecord::new(id.into(), hash, 0)
    }

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, format!("Bearer {v}").parse().unwrap());
        h
    }

    #[tokio::test]
    async fn keys_master_and_refusals() {
        let hasher = Hasher::new(b"0123456789abcdef0123456789abcdef");
        let (id, secret, full) = key::generate().unwrap();
        let store = Arc::new(MapStore(Mutex::new(HashMap::from([(id.clone(), record(&id, hasher.hash(&secret)))]))));
        let auth = Auth::new(Some("master-key".into()), hasher, store.clone());
        assert!(matches!(
            auth.authenticate(&headers(&full), 0).await,
            Ok(Identity { principal: Principal::Key(_), .. })
        ));
        assert!(matches!(
            auth.authenticate(&headers("master-key"), 0).await,
            Ok(Identity { principal: Principal::Master, .. })
        ));
        let mut xh = HeaderMap::new();
        xh.insert("x-api-key", full.parse().unwrap());
        assert!(matches!(auth.authenticate(&xh, 0).await, Ok(Identity { principal: Principal::Key(_), .. })));
        let flipped = if full.ends_with('0') { "1" } else { "0" };
        let wrong_secret = format!("{}{flipped}", &full[..full.len() - 1]);
        for bad in ["", "sk-nope", &full.replace('.', "_"), &wrong_secret] {
            assert!(auth.authenticate(&headers(bad), 0).await.is_err(), "{bad}");
        }
        assert!(auth.authenticate(&HeaderMap::new(), 0).await.is_err());
        // Revocation is seen on the next request once evicted.
        store.0.lock().unwrap().get_mut(&id).unwrap().revoked_at = Some(1);
        auth.evict(&id);
        match auth.authenticate(&headers(&full), 0).await {
            Err(GatewayError::Unauthorized { code, .. }) => assert_eq!(code, "key_revoked"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn open_without_master_key() {
        let auth = Auth::new(None, Hasher::new(b"x"), Arc::new(MapStore(Mutex::new(HashMap::new()))));
        assert!(matches!(
            auth.authenticate(&HeaderMap::new(), 0).await,
            Ok(Identity { principal: Principal::Open, .. })
        ));
    }

    #[test]
    fn globs() {
        let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(model_allowed(&[], "anything"));
        assert!(model_allowed(&g(&["llama*"]), "llama3.2:1b"));
        assert!(model_allowed(&g(&["*:1b"]), "llama3.2:1b"));
        assert!(!model_allowed(&g(&["llama*"]), "qwen2.5"));
        assert!(model_allowed(&g(&["gpt-4o", "qwen*"]), "qwen2.5"));
    }
}
