//! The console's OpenID Connect relying party (`auth.oidc`): the provider's endpoints found by
//! discovery, the authorization request (code flow with PKCE S256, RFC 7636, and a nonce), the code
//! exchange, and the ID token's checks (signature against the provider's JWKS, `iss`, `aud` = our
//! client id, `exp`/`nbf`, `nonce`). A sign-in in flight is a `Flow` sealed into a short-lived
//! cookie with the server secret, so any instance of a fleet can finish what another began. What
//! a sign-in means for users and teams is the console's (`console/oidc.rs`).

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::jwt::{fetch_json, JwtVerifier};
use super::key::{random_hex, Hasher};
use crate::config::jwt::JwtIssuer;
use crate::config::oidc::OidcConfig;
use crate::upstream::UpstreamClient;

/// How long a sign-in may take from leaving for the provider to coming back (seconds).
pub const FLOW_TTL: i64 = 600;

pub struct OidcProvider {
    config: OidcConfig,
    verifier: JwtVerifier,
    client: UpstreamClient,
    /// (authorization endpoint, token endpoint), once discovered.
    endpoints: tokio::sync::OnceCell<(String, String)>,
}

/// A sign-in in flight: what the callback must see again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    pub state: String,
    pub nonce: String,
    /// The PKCE code verifier (64 hex characters).
    pub verifier: String,
}

fn flow_message(expires: i64, state: &str, nonce: &str, verifier: &str) -> String {
    format!("switchyard-oidc-flow\0{expires}\0{state}\0{nonce}\0{verifier}")
}

impl Flow {
    pub fn new() -> Result<Flow, String> {
        Ok(Flow { state: random_hex(16)?, nonce: random_hex(16)?, verifier: random_hex(32)? })
    }

    /// The flow as a cookie value, signed, valid until `expires`.
    pub fn seal(&self, hasher: &Hasher, expires: i64) -> String {
        let tag = hasher.hash(&flow_message(expires, &self.state, &self.nonce, &self.verifier));
        let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        format!("{expires}.{}.{}.{}.{tag}", self.state, self.nonce, self.verifier)
    }

    /// A sealed flow, if this server sealed it and it has not expired.
    pub fn open(hasher: &Hasher, sealed: &str, now: i64) -> Option<Flow> {
        let mut parts = sealed.split('.');
        let (expires, state, nonce, verifier, tag) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let expires: i64 = expires.parse().ok()?;
        let tag: Vec<u8> = (0..tag.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(tag.get(i..i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        let fine = parts.next().is_none()
            && expires > now
            && hasher.verify(&flow_message(expires, state, nonce, verifier), &tag);
        fine.then(|| Flow { state: state.to_owned(), nonce: nonce.to_owned(), verifier: verifier.to_owned() })
    }

    fn challenge(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(self.verifier.as_bytes()))
    }
}

impl OidcProvider {
    pub fn new(config: &OidcConfig, client: UpstreamClient) -> OidcProvider {
        let issuer = JwtIssuer {
            issuer: config.issuer.clone(),
            audiences: vec![config.client_id.clone()],
            jwks_url: None,
            user_claim: "sub".to_owned(),
            team_claim: None,
            roles_claim: None,
        };
        OidcProvider {
            config: config.clone(),
            verifier: JwtVerifier::new(&[issuer], client.clone()),
            client,
            endpoints: tokio::sync::OnceCell::new(),
        }
    }

    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    async fn endpoints(&self) -> Result<&(String, String), String> {
        self.endpoints
            .get_or_try_init(|| async {
                let url = format!("{}/.well-known/openid-configuration", self.config.issuer.trim_end_matches('/'));
                let req = http::Request::get(&url).body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
                let doc = fetch_json(&self.client, req).await?;
                let field = |name: &str| {
                    doc[name].as_str().map(str::to_owned).ok_or_else(|| format!("discovery names no {name}"))
                };
                Ok((field("authorization_endpoint")?, field("token_endpoint")?))
            })
            .await
    }

    /// Where to send the browser to sign in.
    pub async fn authorization_url(&self, flow: &Flow) -> Result<String, String> {
        let (authorize, _) = self.endpoints().await?;
        let scope = self.config.scopes.join(" ");
        let query = serde_urlencoded::to_string([
            ("response_type", "code"),
            ("client_id", self.config.client_id.as_str()),
            ("redirect_uri", self.config.redirect_url.as_str()),
            ("scope", scope.as_str()),
            ("state", flow.state.as_str()),
            ("nonce", flow.nonce.as_str()),
            ("code_challenge", flow.challenge().as_str()),
            ("code_challenge_method", "S256"),
        ])
        .map_err(|e| e.to_string())?;
        let joint = if authorize.contains('?') { '&' } else { '?' };
        Ok(format!("{authorize}{joint}{query}"))
    }

    /// Trade the authorization code for the ID token's verified claims.
    pub async fn sign_in(&self, code: &str, flow: &Flow) -> Result<Value, String> {
        let (_, token_url) = self.endpoints().await?;
        let form = serde_urlencoded::to_string([
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.config.redirect_url.as_str()),
            ("code_verifier", flow.verifier.as_str()),
            ("client_id", self.config.client_id.as_str()),
        ])
        .map_err(|e| e.to_string())?;
        let mut req = http::Request::post(token_url)
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(http::header::ACCEPT, "application/json");
        if let Some(secret) = &self.config.client_secret {
            // client_secret_basic: each part form-encoded first (RFC 6749, 2.3.1).
            let enc = |s: &str| serde_urlencoded::to_string([("", s)]).map(|p| p[1..].to_owned());
            let pair = format!(
                "{}:{}",
                enc(&self.config.client_id).map_err(|e| e.to_string())?,
                enc(secret).map_err(|e| e.to_string())?
            );
            let basic = base64::engine::general_purpose::STANDARD.encode(pair);
            req = req.header(http::header::AUTHORIZATION, format!("Basic {basic}"));
        }
        let req = req.body(Full::new(Bytes::from(form))).map_err(|e| e.to_string())?;
        let answer = fetch_json(&self.client, req).await?;
        let id_token = answer["id_token"].as_str().ok_or("the token endpoint returned no id_token")?;
        let claims = self.verifier.claims(id_token).await.map_err(|e| format!("the ID token: {}", e.message()))?;
        if claims["nonce"].as_str() != Some(flow.nonce.as_str()) {
            return Err("the ID token's nonce is not this sign-in's".to_owned());
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_flow_opens_only_unaltered_unexpired_and_here() {
        let hasher = Hasher::new(b"secret");
        let flow = Flow::new().unwrap();
        let sealed = flow.seal(&hasher, 100);
        assert_eq!(Flow::open(&hasher, &sealed, 99), Some(flow.clone()));
        assert_eq!(Flow::open(&hasher, &sealed, 100), None, "expired");
        assert_eq!(Flow::open(&Hasher::new(b"other"), &sealed, 99), None, "another server");
        let swapped = sealed.replacen(&flow.state, &"0".repeat(32), 1);
        assert_eq!(Flow::open(&hasher, &swapped, 99), None, "another state");
        assert_eq!(Flow::open(&hasher, &format!("{sealed}.x"), 99), None);
        // RFC 7636 appendix B's example verifier and challenge.
        let rfc = Flow {
            state: String::new(),
            nonce: String::new(),
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
        };
        assert_eq!(rfc.challenge(), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }
}
