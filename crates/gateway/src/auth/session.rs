//! Console sessions: what signing in to `/ui` (with the master key, or as a user through single
//! sign-on) gives the browser, an opaque token kept in an HttpOnly cookie. A token is its expiry,
//! issue time and subject (`m` for the master key, else a user id) signed with the server secret
//! over the master key, so every instance of a fleet (same secret, same master key) accepts it,
//! and changing the master key ends every session. Logging out remembers the token as ended until
//! it would have expired anyway; a user's sessions all end when their `sessions_after` passes
//! the issue time (checked where the user is read, `console.rs`).

use std::collections::HashMap;
use std::sync::Mutex;

use super::key::Hasher;

/// Logged-out tokens remembered at most (oldest forgotten first: they expire soonest).
const MAX_ENDED: usize = 10_000;

#[derive(Default)]
pub struct Sessions {
    /// Ended tokens and when they expire (unix seconds).
    ended: Mutex<HashMap<String, i64>>,
}

fn message(expires: i64, issued: i64, subject: &str, master: &str) -> String {
    format!("switchyard-console-session\0{expires}\0{issued}\0{subject}\0{master}")
}

/// Who a valid session is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `m` (the master key) or a user id.
    pub subject: String,
    /// Unix milliseconds.
    pub issued: i64,
}

/// The subject of sessions signed in with the master key.
pub const MASTER: &str = "m";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

impl Sessions {
    /// A token for `subject` (no `.` in it), issued at `issued` (unix milliseconds) and valid
    /// until `expires` (unix seconds).
    pub fn issue(&self, hasher: &Hasher, master: &str, subject: &str, issued: i64, expires: i64) -> Option<String> {
        if subject.is_empty() || subject.contains('.') {
            return None;
        }
        let tag = hex(&hasher.hash(&message(expires, issued, subject, master)));
        Some(format!("{expires}.{issued}.{subject}.{tag}"))
    }

    /// The session `token` stands for, if this server secret and master key issued it and it is
    /// unexpired and not ended.
    pub fn valid(&self, hasher: &Hasher, master: &str, token: &str, now: i64) -> Option<Session> {
        let mut parts = token.splitn(4, '.');
        let (expires, issued, subject, tag) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let (expires, issued, tag) = (expires.parse::<i64>().ok()?, issued.parse::<i64>().ok()?, unhex(tag)?);
        let fine = expires > now
            && hasher.verify(&message(expires, issued, subject, master), &tag)
            && !self.ended.lock().unwrap_or_else(|p| p.into_inner()).contains_key(token);
        fine.then(|| Session { subject: subject.to_owned(), issued })
    }

    /// Log `token` out.
    pub fn end(&self, token: &str, now: i64) {
        let expires = token.split_once('.').and_then(|(e, _)| e.parse::<i64>().ok()).unwrap_or(now);
        if expires <= now {
            return;
        }
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended.retain(|_, e| *e > now);
        if ended.len() >= MAX_ENDED {
            if let Some(oldest) = ended.iter().min_by_key(|(_, e)| **e).map(|(t, _)| t.clone()) {
                ended.remove(&oldest);
            }
        }
        ended.insert(token.to_owned(), expires);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_verify_until_they_expire_or_end() {
        let hasher = Hasher::new(b"secret");
        let s = Sessions::default();
        let token = s.issue(&hasher, "master", MASTER, 10, 1_000).unwrap();
        assert_eq!(s.valid(&hasher, "master", &token, 999), Some(Session { subject: "m".into(), issued: 10 }));
        assert!(s.valid(&hasher, "master", &token, 1_000).is_none(), "expired");
        assert!(s.valid(&hasher, "other master", &token, 999).is_none(), "another master key");
        assert!(s.valid(&Hasher::new(b"other"), "master", &token, 999).is_none(), "another server secret");
        let forged = token.replacen("1000.", "9000.", 1);
        assert!(s.valid(&hasher, "master", &forged, 999).is_none(), "a changed expiry");
        let user = s.issue(&hasher, "master", "u_1", 10, 1_000).unwrap();
        let other_user = user.replacen(".u_1.", ".u_2.", 1);
        assert!(s.valid(&hasher, "master", &other_user, 999).is_none(), "another subject");
        assert_eq!(s.valid(&hasher, "master", &user, 999).map(|s| s.subject), Some("u_1".to_owned()));
        for junk in ["", ".", "1000", "1000.zz", "x.00", "1000.1.m", "1000.1.m.zz"] {
            assert!(s.valid(&hasher, "master", junk, 999).is_none(), "{junk:?}");
        }
        assert!(s.issue(&hasher, "master", "a.b", 1, 2).is_none(), "a subject with a dot");
        s.end(&token, 500);
        assert!(s.valid(&hasher, "master", &token, 999).is_none(), "logged out");
    }
}
