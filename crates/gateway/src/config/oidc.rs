//! `auth.oidc:` — single sign-on to the console with the company's OpenID provider: its issuer
//! (endpoints found by discovery), this gateway's client registration, the scopes asked for, and
//! how the ID token's claims map to a role (`groups_claim` through `roles`) and to teams
//! (`teams_claim`, by team name).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOidc {
    issuer: String,
    client_id: String,
    client_secret: Option<String>,
    scopes: Option<Vec<String>>,
    redirect_url: String,
    groups_claim: Option<String>,
    #[serde(default)]
    roles: BTreeMap<String, String>,
    teams_claim: Option<String>,
    default_role: Option<String>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// Matched exactly against the ID token's `iss`; discovery is under it.
    pub issuer: String,
    pub client_id: String,
    /// None: a public client (PKCE alone).
    pub client_secret: Option<String>,
    /// Always includes `openid`.
    pub scopes: Vec<String>,
    /// This gateway's `/ui/oidc/callback` as the browser reaches it.
    pub redirect_url: String,
    /// The claim listing the user's groups (default `groups`).
    pub groups_claim: String,
    /// Group → role; the most powerful role among the user's groups wins.
    pub roles: Vec<(String, String)>,
    /// The claim listing the user's teams by name; None: memberships are managed by hand.
    pub teams_claim: Option<String>,
    /// The role of a user none of whose groups is mapped (default `viewer`).
    pub default_role: String,
}

impl fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the client secret.
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "<set>"))
            .field("scopes", &self.scopes)
            .field("redirect_url", &self.redirect_url)
            .field("roles", &self.roles)
            .field("teams_claim", &self.teams_claim)
            .finish()
    }
}

/// The roles a user may have, least powerful first.
pub const ROLES: [&str; 4] = ["viewer", "member", "team_admin", "admin"];

pub fn validate(raw: Option<RawOidc>, has_master_key: bool) -> Result<Option<OidcConfig>, ConfigError> {
    let Some(r) = raw else { return Ok(None) };
    let at = |field: &str| format!("auth.oidc.{field}");
    let url_ok = |u: &str| u.starts_with("https://") || u.starts_with("http://");
    if !url_ok(&r.issuer) {
        return Err(ConfigError::at(at("issuer"), "must be an http(s) URL, exactly as ID tokens name it in `iss`"));
    }
    if !url_ok(&r.redirect_url) || !r.redirect_url.ends_with("/ui/oidc/callback") {
        return Err(ConfigError::at(
            at("redirect_url"),
            "must be this gateway's http(s) URL ending in /ui/oidc/callback",
        ));
    }
    if r.client_id.is_empty() {
        return Err(ConfigError::at(at("client_id"), "must not be empty"));
    }
    if !has_master_key {
        return Err(ConfigError::at("auth.oidc", "needs auth.master_key (sessions are signed over it)"));
    }
    for (group, role) in &r.roles {
        if !ROLES.contains(&role.as_str()) {
            return Err(ConfigError::at(at(&format!("roles.{group}")), "must be admin, team_admin, member or viewer"));
        }
    }
    let default_role = r.default_role.unwrap_or_else(|| "viewer".to_owned());
    if !ROLES.contains(&default_role.as_str()) {
        return Err(ConfigError::at(at("default_role"), "must be admin, team_admin, member or viewer"));
    }
    let mut scopes = r.scopes.unwrap_or_else(|| vec!["openid".into(), "email".into(), "profile".into()]);
    if !scopes.iter().any(|s| s == "openid") {
        scopes.insert(0, "openid".to_owned());
    }
    Ok(Some(OidcConfig {
        issuer: r.issuer,
        client_id: r.client_id,
        client_secret: r.client_secret.filter(|s| !s.is_empty()),
        scopes,
        redirect_url: r.redirect_url,
        groups_claim: r.groups_claim.unwrap_or_else(|| "groups".to_owned()),
        roles: r.roles.into_iter().collect(),
        teams_claim: r.teams_claim,
        default_role,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oidc(yaml: &str, master: bool) -> Result<Option<OidcConfig>, ConfigError> {
        validate(Some(yaml_serde::from_str(yaml).map_err(|e| ConfigError::at("auth.oidc", e.to_string()))?), master)
    }

    #[test]
    fn urls_roles_and_the_master_key_are_checked() {
        let base = "{issuer: 'https://id.example/', client_id: sw, redirect_url: 'https://gw/ui/oidc/callback'";
        let ok = oidc(&format!("{base}, scopes: [email], roles: {{ops: admin}}}}"), true).unwrap().unwrap();
        assert_eq!(ok.issuer, "https://id.example/", "as ID tokens name it");
        assert_eq!(ok.scopes, ["openid", "email"]);
        assert_eq!((ok.groups_claim.as_str(), ok.default_role.as_str()), ("groups", "viewer"));
        assert!(oidc(&format!("{base}}}"), false).unwrap_err().to_string().contains("master_key"));
        let bad_role = oidc(&format!("{base}, roles: {{ops: root}}}}"), true).unwrap_err().to_string();
        assert!(bad_role.contains("auth.oidc.roles.ops"), "{bad_role}");
        let bad_redirect = "{issuer: 'https://id', client_id: sw, redirect_url: 'https://gw/elsewhere'}";
        assert!(oidc(bad_redirect, true).unwrap_err().to_string().contains("redirect_url"));
        assert!(oidc(&format!("{base}, colour: red}}"), true).is_err(), "unknown fields are refused");
    }
}
