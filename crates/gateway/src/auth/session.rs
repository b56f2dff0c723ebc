//! Console sessions: what logging in to `/ui` with the master key gives the browser, an opaque
//! token kept in an HttpOnly cookie. A token is its expiry signed with the server secret over the
//! master key, so every instance of a fleet (same secret, same master key) accepts it, and
//! changing the master key ends every session. Logging out remembers the token as ended until it
//! would have expired anyway.

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

fn message(expires: i64, master: &str) -> String {
    format!("switchyard-console-session\0{expires}\0{master}")
}

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
    /// A token valid until `expires` (unix seconds).
    pub fn issue(&self, hasher: &Hasher, master: &str, expires: i64) -> String {
        format!("{expires}.{}", hex(&hasher.hash(&message(expires, master))))
    }

    /// Whether `token` is one this server secret and master key issued, unexpired and not ended.
    pub fn valid(&self, hasher: &Hasher, master: &str, token: &str, now: i64) -> bool {
        let Some((expires, tag)) = token.split_once('.') else { return false };
        let (Ok(expires), Some(tag)) = (expires.parse::<i64>(), unhex(tag)) else { return false };
        expires > now
            && hasher.verify(&message(expires, master), &tag)
            && !self.ended.lock().unwrap_or_else(|p| p.into_inner()).contains_key(token)
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
        let token = s.issue(&hasher, "master", 1_000);
        assert!(s.valid(&hasher, "master", &token, 999));
        assert!(!s.valid(&hasher, "master", &token, 1_000), "expired");
        assert!(!s.valid(&hasher, "other master", &token, 999), "another master key");
        assert!(!s.valid(&Hasher::new(b"other"), "master", &token, 999), "another server secret");
        let forged = token.replacen("1000.", "9000.", 1);
        assert!(!s.valid(&hasher, "master", &forged, 999), "a changed expiry");
        for junk in ["", ".", "1000", "1000.zz", "x.00"] {
            assert!(!s.valid(&hasher, "master", junk, 999), "{junk:?}");
        }
        s.end(&token, 500);
        assert!(!s.valid(&hasher, "master", &token, 999), "logged out");
        assert!(s.valid(&hasher, "master", &s.issue(&hasher, "master", 2_000), 999));
    }
}
