//! JWT client authentication (`auth.jwt`): a bearer token from a trusted issuer instead of a
//! virtual key. Asymmetric signatures only (RS/PS/ES/EdDSA): `none` and the HMAC family are
//! refused before anything else, so a token "signed" with an issuer's public key as an HMAC
//! secret never verifies. `iss`, `aud`, `exp` and `nbf` are checked with 60 s of leeway. Each
//! issuer's JWKS is fetched once and kept; a token naming a `kid` it lacks makes it fetch again,
//! at most once per `REFETCH_EVERY`, so key rotation needs no restart and a flood of forged
//! `kid`s cannot make it hammer the provider. While the provider is away the cached keys keep
//! serving; a token no cached key can check is a 503 `identity_unavailable`. (A fetch that did
//! not find the `kid` it was for holds further fetches off for `REFETCH_EVERY`; one that did,
//! a rotation, does not.) A verified token is
//! remembered (by a keyed hash of it) until its `exp`, so repeat requests skip the signature.

use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::config::jwt::JwtIssuer;
use crate::upstream::UpstreamClient;

/// Longer tokens are refused unread.
pub const MAX_TOKEN_BYTES: usize = 8 << 10;
/// How long a fetch that did not find the key it was for (or failed) holds off the next one.
const REFETCH_EVERY: Duration = Duration::from_secs(30);
/// A JWKS or discovery document larger than this is refused.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Clock skew allowed on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 60;
/// Verified tokens remembered at most (the memo is cleared when full).
const MEMO_MAX: usize = 50_000;

/// Why a token was refused; each maps to a 401 with its own `code`, but `Unavailable` (503).
#[derive(Debug, Clone, PartialEq)]
pub enum JwtError {
    TooLarge,
    Malformed,
    UnsupportedAlg(String),
    UnknownIssuer,
    UnknownKid,
    BadSignature,
    Expired,
    NotYetValid,
    WrongAudience,
    Invalid(String),
    /// No cached key can check it and the provider cannot be reached now.
    Unavailable,
}

impl JwtError {
    pub fn code(&self) -> &'static str {
        match self {
            JwtError::TooLarge => "token_too_large",
            JwtError::Malformed | JwtError::Invalid(_) => "invalid_token",
            JwtError::UnsupportedAlg(_) => "unsupported_token_algorithm",
            JwtError::UnknownIssuer => "unknown_issuer",
            JwtError::UnknownKid => "unknown_key_id",
            JwtError::BadSignature => "invalid_signature",
            JwtError::Expired => "token_expired",
            JwtError::NotYetValid => "token_not_yet_valid",
            JwtError::WrongAudience => "invalid_audience",
            JwtError::Unavailable => "identity_unavailable",
        }
    }

    pub fn message(&self) -> String {
        match self {
            JwtError::TooLarge => format!("the bearer token is longer than {MAX_TOKEN_BYTES} bytes"),
            JwtError::Malformed => "the bearer token is not a JWT".to_owned(),
            JwtError::UnsupportedAlg(alg) => format!("tokens signed with `{alg}` are not accepted"),
            JwtError::UnknownIssuer => "the token's issuer is not trusted here".to_owned(),
            JwtError::UnknownKid => "the token was signed with a key its issuer does not publish".to_owned(),
            JwtError::BadSignature => "the token's signature is invalid".to_owned(),
            JwtError::Expired => "the token has expired".to_owned(),
            JwtError::NotYetValid => "the token is not valid yet".to_owned(),
            JwtError::WrongAudience => "the token is not meant for this gateway (audience)".to_owned(),
            JwtError::Invalid(why) => format!("the token is invalid: {why}"),
            JwtError::Unavailable => "the identity provider cannot be reached to check this token".to_owned(),
        }
    }
}

/// What a verified token says about its bearer.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenClaims {
    pub issuer: String,
    /// The `user_claim` (default `sub`).
    pub user: String,
    /// The `team_claim`, a team's name.
    pub team: Option<String>,
    pub roles: Vec<String>,
    /// Unix seconds.
    pub expires: i64,
    /// Every claim as the token carried it (JSON), for policies that read `jwt.claims`.
    pub raw: std::sync::Arc<str>,
}

struct Issuer {
    config: JwtIssuer,
    keys: Mutex<Keys>,
    /// One fetch at a time per issuer.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Keys {
    set: Vec<(Option<String>, Arc<DecodingKey>)>,
    /// No fetch before this (a fetch came back without the key asked for, or failed).
    held_until: Option<Instant>,
}

pub struct JwtVerifier {
    issuers: Vec<Issuer>,
    client: UpstreamClient,
    memo: Mutex<crate::config::FastMap<u64, Arc<TokenClaims>>>,
    tags: RandomState,
}

/// Algorithms accepted: the asymmetric ones.
fn accepted(alg: &str) -> Option<Algorithm> {
    Some(match alg {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        "EdDSA" => Algorithm::EdDSA,
        _ => return None,
    })
}

/// A segment of a compact JWT, decoded as JSON.
fn segment(token: &str, i: usize) -> Result<Value, JwtError> {
    let part = token.split('.').nth(i).ok_or(JwtError::Malformed)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).map_err(|_| JwtError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed)
}

/// Whether a bearer credential looks like a compact JWT (three base64url parts).
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.matches('.').count() == 2
}

impl JwtVerifier {
    pub fn new(issuers: &[JwtIssuer], client: UpstreamClient) -> JwtVerifier {
        let issuers = issuers
            .iter()
            .map(|c| Issuer { config: c.clone(), keys: Mutex::default(), fetching: tokio::sync::Mutex::new(()) })
            .collect();
        JwtVerifier { issuers, client, memo: Mutex::default(), tags: RandomState::new() }
    }

    /// Give `issuer` these signing keys now, as a fetch of its JWKS would (benchmarks, and keys an
    /// operator pins).
    pub fn preload(&self, issuer: &str, jwks: &JwkSet) {
        if let Some(i) = self.issuers.iter().find(|i| i.config.issuer == issuer) {
            let set = jwks
                .keys
                .iter()
                .filter_map(|jwk| Some((jwk.common.key_id.clone(), Arc::new(DecodingKey::from_jwk(jwk).ok()?))))
                .collect();
            i.keys.lock().unwrap_or_else(|p| p.into_inner()).set = set;
        }
    }

    /// Forget every remembered token (a team or user changed: claims map anew).
    pub fn forget(&self) {
        self.memo.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Check a token; what it says about its bearer.
    pub async fn verify(&self, token: &str, now_unix: i64) -> Result<Arc<TokenClaims>, JwtError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(JwtError::TooLarge);
        }
        let tag = self.tags.hash_one(token);
        if let Some(known) = self.memo.lock().unwrap_or_else(|p| p.into_inner()).get(&tag) {
            if known.expires + LEEWAY_SECS as i64 > now_unix {
                return Ok(known.clone());
            }
        }
        let (issuer, claims) = self.checked(token).await?;
        let claims = Arc::new(claims_of(&issuer.config, &claims)?);
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if memo.len() >= MEMO_MAX {
            memo.clear();
        }
        memo.insert(tag, claims.clone());
        Ok(claims)
    }

    /// A token's claims, its signature and registered claims checked, as they came (for claims
    /// this module does not map, such as an ID token's `nonce` and groups). Not remembered.
    pub async fn claims(&self, token: &str) -> Result<Value, JwtError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(JwtError::TooLarge);
        }
        self.checked(token).await.map(|(_, claims)| claims)
    }

    async fn checked(&self, token: &str) -> Result<(&Issuer, Value), JwtError> {
        let header = segment(token, 0)?;
        let alg_name = header["alg"].as_str().ok_or(JwtError::Malformed)?;
        let alg = accepted(alg_name).ok_or_else(|| JwtError::UnsupportedAlg(alg_name.to_owned()))?;
        let kid = header["kid"].as_str();
        let unverified = segment(token, 1)?;
        let iss = unverified["iss"].as_str().ok_or(JwtError::UnknownIssuer)?;
        let issuer = self.issuers.iter().find(|i| i.config.issuer == iss).ok_or(JwtError::UnknownIssuer)?;
        let key = self.key_for(issuer, kid).await?;
        Ok((issuer, check(token, alg, &key, &issuer.config)?))
    }

    /// The issuer's key with this `kid` (any key when the token names none and the set has
    /// one), fetching the set when it is unknown and a fetch is due.
    async fn key_for(&self, issuer: &Issuer, kid: Option<&str>) -> Result<Arc<DecodingKey>, JwtError> {
        if let Some(key) = find(&issuer.keys.lock().unwrap_or_else(|p| p.into_inner()), kid) {
            return Ok(key);
        }
        let _one_at_a_time = issuer.fetching.lock().await;
        let (held_until, had_keys) = {
            let keys = issuer.keys.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(key) = find(&keys, kid) {
                return Ok(key);
            }
            (keys.held_until, !keys.set.is_empty())
        };
        if held_until.is_some_and(|until| Instant::now() < until) {
            return Err(if had_keys { JwtError::UnknownKid } else { JwtError::Unavailable });
        }
        match self.fetch_keys(&issuer.config).await {
            Ok(set) => {
                let mut keys = issuer.keys.lock().unwrap_or_else(|p| p.into_inner());
                keys.set = set;
                let found = find(&keys, kid);
                keys.held_until = found.is_none().then(|| Instant::now() + REFETCH_EVERY);
                found.ok_or(JwtError::UnknownKid)
            }
            Err(e) => {
                tracing::warn!(issuer = %issuer.config.issuer, error = %e, "could not fetch an issuer's signing keys");
                let mut keys = issuer.keys.lock().unwrap_or_else(|p| p.into_inner());
                // With keys cached, the token's kid is simply not among them.
                keys.held_until = Some(Instant::now() + REFETCH_EVERY);
                Err(if keys.set.is_empty() { JwtError::Unavailable } else { JwtError::UnknownKid })
            }
        }
    }

    async fn fetch_keys(&self, issuer: &JwtIssuer) -> Result<Vec<(Option<String>, Arc<DecodingKey>)>, String> {
        let url = match &issuer.jwks_url {
            Some(url) => url.clone(),
            None => {
                let discovery = format!("{}/.well-known/openid-configuration", issuer.issuer.trim_end_matches('/'));
                let doc = self.get_json(&discovery).await?;
                doc["jwks_uri"].as_str().ok_or("the discovery document names no jwks_uri")?.to_owned()
            }
        };
        let set: JwkSet = serde_json::from_value(self.get_json(&url).await?).map_err(|e| format!("JWKS: {e}"))?;
        let keys = set
            .keys
            .iter()
            .filter_map(|jwk| Some((jwk.common.key_id.clone(), Arc::new(DecodingKey::from_jwk(jwk).ok()?))))
            .collect();
        Ok(keys)
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let req = http::Request::get(url).body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
        fetch_json(&self.client, req).await
    }
}

/// Send `req` to an identity provider and read its JSON answer (bounded in size and time).
pub async fn fetch_json(client: &UpstreamClient, req: http::Request<Full<Bytes>>) -> Result<Value, String> {
    let url = req.uri().to_string();
    let fetch = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_DOCUMENT_BYTES);
        let bytes = body.collect().await.map(|b| b.to_bytes()).map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!(
                "{url} answered {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            ));
        }
        Ok(bytes)
    };
    let bytes = tokio::time::timeout(FETCH_TIMEOUT, fetch).await.map_err(|_| format!("{url} timed out"))??;
    serde_json::from_slice(&bytes).map_err(|e| format!("{url}: {e}"))
}

fn find(keys: &Keys, kid: Option<&str>) -> Option<Arc<DecodingKey>> {
    match kid {
        Some(kid) => keys.set.iter().find(|(k, _)| k.as_deref() == Some(kid)).map(|(_, key)| key.clone()),
        None if keys.set.len() == 1 => Some(keys.set[0].1.clone()),
        None => None,
    }
}

/// The signature and the registered claims.
fn check(token: &str, alg: Algorithm, key: &DecodingKey, issuer: &JwtIssuer) -> Result<Value, JwtError> {
    let mut v = Validation::new(alg);
    v.leeway = LEEWAY_SECS;
    v.validate_nbf = true;
    v.set_issuer(&[&issuer.issuer]);
    v.set_required_spec_claims(&["exp", "iss"]);
    if issuer.audiences.is_empty() {
        v.validate_aud = false;
    } else {
        v.set_audience(&issuer.audiences);
    }
    use jsonwebtoken::errors::ErrorKind;
    jsonwebtoken::decode::<Value>(token, key, &v).map(|d| d.claims).map_err(|e| match e.kind() {
        ErrorKind::InvalidSignature => JwtError::BadSignature,
        ErrorKind::ExpiredSignature => JwtError::Expired,
        ErrorKind::ImmatureSignature => JwtError::NotYetValid,
        ErrorKind::InvalidAudience => JwtError::WrongAudience,
        ErrorKind::InvalidIssuer => JwtError::UnknownIssuer,
        ErrorKind::InvalidAlgorithm => JwtError::UnsupportedAlg("a key of another type".to_owned()),
        other => JwtError::Invalid(format!("{other:?}")),
    })
}

/// The user, team and roles the issuer's claims name.
fn claims_of(issuer: &JwtIssuer, claims: &Value) -> Result<TokenClaims, JwtError> {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => items.first().and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    let user = text(&claims[&issuer.user_claim])
        .ok_or_else(|| JwtError::Invalid(format!("it has no `{}` claim", issuer.user_claim)))?;
    let team = issuer.team_claim.as_ref().and_then(|c| text(&claims[c]));
    let roles = match issuer.roles_claim.as_ref().map(|c| &claims[c]) {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let expires = claims["exp"].as_i64().ok_or_else(|| JwtError::Invalid("`exp` is not a number".to_owned()))?;
    let raw = claims.to_string().into();
    Ok(TokenClaims { issuer: issuer.issuer.clone(), user, team, roles, expires, raw })
}
