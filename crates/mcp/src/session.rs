//! Session ids that need no session store: `s1[-{caps}].{version}.{key}.{issued}.{nonce}.{mac}`
//! (`caps`: what the client offered at `initialize`, `s`ampling, `e`licitation, `r`oots, so every
//! instance knows which server requests it may relay to it; `nonce`: 8 random bytes, so two
//! sessions never share an id), where `mac` is
//! an HMAC-SHA256 (first 16 bytes, hex) over the rest under the gateway's secret. Any instance
//! with the same secret accepts a session another instance issued, and a session is bound to the
//! key that opened it. A forged, altered, foreign-key or expired id is "unknown": the client gets
//! 404 and opens a new session, as the spec prescribes.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// What a valid session id says.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub version: String,
    /// The client's capability flags (`s`, `e`, `r`), as `ClientCaps::flags` wrote them.
    pub caps: String,
    /// The key id that opened it (`-` without keys).
    pub key: String,
    pub issued_unix: i64,
}

#[derive(Clone)]
pub struct SessionSigner {
    mac: HmacSha256,
    ttl_secs: i64,
}

impl SessionSigner {
    /// HMAC takes keys of any length, so this fails only if that contract breaks.
    pub fn new(secret: &[u8], ttl_secs: i64) -> Result<SessionSigner, String> {
        let mac = HmacSha256::new_from_slice(secret).map_err(|e| format!("session signer: {e}"))?;
        Ok(SessionSigner { mac, ttl_secs })
    }

    pub fn issue(&self, version: &str, key: Option<&str>, now_unix: i64) -> String {
        self.issue_with(version, "", key, now_unix)
    }

    /// A session id that also carries the client's capability flags (`[a-z]*`).
    pub fn issue_with(&self, version: &str, caps: &str, key: Option<&str>, now_unix: i64) -> String {
        let mut nonce = [0u8; 8];
        if getrandom::getrandom(&mut nonce).is_err() {
            // No OS randomness: a process-wide counter still keeps ids apart.
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            nonce = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_le_bytes();
        }
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let caps: String = caps.chars().filter(char::is_ascii_lowercase).collect();
        let tag = if caps.is_empty() { "s1".to_owned() } else { format!("s1-{caps}") };
        let body = format!("{tag}.{version}.{}.{now_unix}.{nonce}", key.unwrap_or("-"));
        format!("{body}.{}", self.tag(&body))
    }

    /// The session, if `id` is one this secret issued, for `key`, and not expired at `now_unix`.
    pub fn verify(&self, id: &str, key: Option<&str>, now_unix: i64) -> Option<Session> {
        let (body, tag) = id.rsplit_once('.')?;
        if !constant_time_eq(self.tag(body).as_bytes(), tag.as_bytes()) {
            return None;
        }
        // The owner is read between the fields on either side of it, none of which has a dot: a
        // key id may have dots (a token's user is often an email), and splitting the id at every
        // dot made such a key's sessions unknown at once (the MCP SDK's "Session terminated").
        let mut front = body.splitn(3, '.');
        let (s1, version, rest) = (front.next()?, front.next()?, front.next()?);
        let mut back = rest.rsplitn(3, '.');
        let (_nonce, issued, owner) = (back.next()?, back.next()?, back.next()?);
        let issued: i64 = issued.parse().ok()?;
        let fresh = issued <= now_unix + 60 && now_unix - issued <= self.ttl_secs;
        let caps = if s1 == "s1" { Some("") } else { s1.strip_prefix("s1-") };
        let caps = caps?;
        (owner == key.unwrap_or("-") && fresh).then(|| Session {
            version: version.to_owned(),
            caps: caps.to_owned(),
            key: owner.to_owned(),
            issued_unix: issued,
        })
    }

    fn tag(&self, body: &str) -> String {
        let mut mac = self.mac.clone();
        mac.update(body.as_bytes());
        mac.finalize().into_bytes()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_accepted_by_any_signer_with_the_secret_for_its_key_until_it_expires() {
        let a = SessionSigner::new(b"one secret", 3600).unwrap();
        let b = SessionSigner::new(b"one secret", 3600).unwrap();
        let id = a.issue("2025-11-25", Some("k_1"), 1_000);
        let s = b.verify(&id, Some("k_1"), 1_100).unwrap();
        assert_eq!((s.version.as_str(), s.key.as_str(), s.issued_unix), ("2025-11-25", "k_1", 1_000));
        assert!(b.verify(&id, Some("k_2"), 1_100).is_none(), "bound to its key");
        assert!(b.verify(&id, None, 1_100).is_none());
        assert!(b.verify(&id, Some("k_1"), 1_000 + 3601).is_none(), "expired");
        assert!(
            SessionSigner::new(b"other", 3600).unwrap().verify(&id, Some("k_1"), 1_100).is_none(),
            "another secret"
        );
        let forged = id.replacen("k_1", "k_2", 1);
        assert!(b.verify(&forged, Some("k_2"), 1_100).is_none(), "altered");
        assert!(b.verify("garbage", None, 0).is_none());
        assert_ne!(a.issue("2025-11-25", Some("k_1"), 1_000), id, "two sessions opened together differ");
        let open = a.issue("2025-06-18", None, 5);
        assert_eq!(a.verify(&open, None, 6).unwrap().key, "-");
        assert_eq!(a.verify(&open, None, 6).unwrap().caps, "");
        let capable = a.issue_with("2025-06-18", "se", Some("k_1"), 5);
        assert_eq!(b.verify(&capable, Some("k_1"), 6).unwrap().caps, "se");
        assert!(b.verify(&capable.replacen("s1-se", "s1-ser", 1), Some("k_1"), 6).is_none(), "caps are signed");
    }

    #[test]
    fn a_key_id_with_dots_keeps_its_sessions() {
        let signer = SessionSigner::new(b"one secret", 3600).unwrap();
        let owner = "jwt:alice.smith@corp.example";
        let id = signer.issue_with("2025-06-18", "e", Some(owner), 1_000);
        let s = signer.verify(&id, Some(owner), 1_001).unwrap();
        assert_eq!(
            (s.version.as_str(), s.key.as_str(), s.caps.as_str(), s.issued_unix),
            ("2025-06-18", owner, "e", 1_000)
        );
        assert!(signer.verify(&id, Some("jwt:alice"), 1_001).is_none(), "bound to the whole key id");
    }
}
