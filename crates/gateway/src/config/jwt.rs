//! `auth.jwt:` — identity providers whose bearer tokens (JWTs) clients may present instead of a
//! virtual key: each an issuer, the audiences its tokens must name, where its signing keys are
//! (`jwks_url`, else found by OpenID discovery) and which claims name the user, team and roles.

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwtIssuer {
    issuer: String,
    #[serde(default)]
    audiences: Vec<String>,
    jwks_url: Option<String>,
    user_claim: Option<String>,
    team_claim: Option<String>,
    roles_claim: Option<String>,
}

/// One trusted issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtIssuer {
    /// Matched exactly against a token's `iss`.
    pub issuer: String,
    /// A token's `aud` must name one of these; empty: `aud` is not checked.
    pub audiences: Vec<String>,
    /// The JWKS; None: `{issuer}/.well-known/openid-configuration`'s `jwks_uri`.
    pub jwks_url: Option<String>,
    /// The claim naming the user (default `sub`).
    pub user_claim: String,
    /// The claim naming the team by its name (a string, or a list whose first entry counts).
    pub team_claim: Option<String>,
    pub roles_claim: Option<String>,
}

pub fn validate(raw: Option<Vec<RawJwtIssuer>>) -> Result<Vec<JwtIssuer>, ConfigError> {
    let mut out: Vec<JwtIssuer> = Vec::new();
    for (i, r) in raw.unwrap_or_default().into_iter().enumerate() {
        let at = |field: &str| format!("auth.jwt[{i}].{field}");
        let url_ok = |u: &str| u.starts_with("https://") || u.starts_with("http://");
        if !url_ok(&r.issuer) {
            return Err(ConfigError::at(at("issuer"), "must be an http(s) URL, exactly as tokens name it in `iss`"));
        }
        if r.jwks_url.as_deref().is_some_and(|u| !url_ok(u)) {
            return Err(ConfigError::at(at("jwks_url"), "must be an http(s) URL"));
        }
        if out.iter().any(|o| o.issuer == r.issuer) {
            return Err(ConfigError::at(at("issuer"), "is listed twice"));
        }
        out.push(JwtIssuer {
            issuer: r.issuer,
            audiences: r.audiences,
            jwks_url: r.jwks_url,
            user_claim: r.user_claim.unwrap_or_else(|| "sub".to_owned()),
            team_claim: r.team_claim,
            roles_claim: r.roles_claim,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer(yaml: &str) -> Result<Vec<JwtIssuer>, ConfigError> {
        validate(Some(yaml_serde::from_str(yaml).map_err(|e| ConfigError::at("auth.jwt", e.to_string()))?))
    }

    #[test]
    fn issuers_are_urls_listed_once_and_sub_is_the_default_user_claim() {
        let ok = issuer("[{issuer: 'https://id.example', audiences: [sw]}]").unwrap();
        assert_eq!((ok[0].user_claim.as_str(), ok[0].audiences.as_slice()), ("sub", &["sw".to_owned()][..]));
        assert!(issuer("[{issuer: 'id.example'}]").unwrap_err().to_string().contains("auth.jwt[0].issuer"));
        assert!(issuer("[{issuer: 'https://a', jwks_url: 'ftp://x'}]").unwrap_err().to_string().contains("jwks_url"));
        assert!(issuer("[{issuer: 'https://a'}, {issuer: 'https://a'}]").unwrap_err().to_string().contains("twice"));
        assert!(issuer("[{issuer: 'https://a', colour: red}]").is_err(), "unknown fields are refused");
    }
}
