//! `Identity`: who a request is from, as `authenticate` established it — the credential it
//! presented and, where the gateway knows one, the person or service behind it (a user, their
//! teams and roles, or a token's claims). Every phase after authentication reads this, never
//! the headers; a new way to sign in produces an `Identity` and nothing downstream changes.

use std::sync::Arc;

use super::Principal;
use crate::records::KeyRecord;

/// A request's identity. Cheap to build for the common case: a key or the master key carries no
/// `Subject` (one null pointer).
#[derive(Debug, Clone)]
pub struct Identity {
    pub principal: Principal,
    /// The user, teams and roles behind the credential, when known.
    pub subject: Option<Arc<Subject>>,
}

/// The person or service behind a credential.
#[derive(Debug, Clone, Default)]
pub struct Subject {
    /// A user id (the key's owner, or a token's `sub`).
    pub user: Option<String>,
    /// Team ids the subject acts for; the first is the one a request is charged to.
    pub teams: Vec<String>,
    pub roles: Vec<Role>,
    /// A verified token's claims as they came (JSON), for policies that read them.
    pub claims: Option<Arc<str>>,
}

/// What a subject may administer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything (the master key has it implicitly).
    Admin,
    /// Its own team's keys, members and limits.
    TeamAdmin,
    /// Its own keys and usage.
    Member,
    /// Read-only access to usage and the request log.
    Viewer,
}

impl Role {
    /// `admin`, `team_admin`, `member`, `viewer`.
    pub fn parse(name: &str) -> Option<Role> {
        Some(match name {
            "admin" => Role::Admin,
            "team_admin" => Role::TeamAdmin,
            "member" => Role::Member,
            "viewer" => Role::Viewer,
            _ => return None,
        })
    }
}

impl From<Principal> for Identity {
    fn from(principal: Principal) -> Identity {
        Identity { principal, subject: None }
    }
}

impl Identity {
    /// The virtual key the request presented, if any.
    pub fn key(&self) -> Option<&KeyRecord> {
        self.principal.key()
    }

    /// The key's shared record (for what outlives the request: MCP sessions, permissions).
    pub fn key_record(&self) -> Option<&Arc<KeyRecord>> {
        match &self.principal {
            Principal::Key(k) => Some(k),
            _ => None,
        }
    }

    /// Whether the identity may administer the whole gateway.
    pub fn is_admin(&self) -> bool {
        matches!(self.principal, Principal::Master | Principal::Open)
            || self.subject.as_ref().is_some_and(|s| s.roles.contains(&Role::Admin))
    }

    /// The user a request is charged to: the subject's, else the key's user (by email), else the
    /// key's tag.
    pub fn user(&self) -> Option<&str> {
        self.subject.as_ref().and_then(|s| s.user.as_deref()).or_else(|| self.key()?.user_name())
    }

    /// The team a request is charged to: the subject's first, else the key's team (by name),
    /// else the key's tag.
    pub fn team(&self) -> Option<&str> {
        self.subject.as_ref().and_then(|s| s.teams.first().map(String::as_str)).or_else(|| self.key()?.team_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_adds_to_what_the_credential_says() {
        let open = Identity::from(Principal::Open);
        assert!(open.is_admin() && open.user().is_none() && open.team().is_none());
        let subject =
            Subject { user: Some("ana".into()), teams: vec!["ml".into()], roles: vec![Role::Admin], claims: None };
        let signed_in = Identity { principal: Principal::Open, subject: Some(Arc::new(subject)) };
        assert_eq!((signed_in.user(), signed_in.team()), (Some("ana"), Some("ml")));
    }
}
