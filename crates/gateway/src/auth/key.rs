//! Virtual key format and hashing. A key is `sy-{id}.{secret}`: `id` (16 hex) is the public
//! lookup handle, `secret` (64 hex, 256 random bits) is shown once and stored only as
//! HMAC-SHA256 under the server secret — never in plaintext, never as a bare hash.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const PREFIX: &str = "sy-";
const ID_HEX: usize = 16;
const SECRET_HEX: usize = 64;

/// The two halves of a presented key.
#[derive(Debug, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    pub id: &'a str,
    pub secret: &'a str,
}

/// Split a presented key; None when it is not shaped like one of ours.
pub fn parse(token: &str) -> Option<ParsedKey<'_>> {
    let rest = token.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('.')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex(id, ID_HEX) && hex(secret, SECRET_HEX)).then_some(ParsedKey { id, secret })
}

pub(crate) fn random_hex(bytes: usize) -> Result<String, String> {
    let mut buf = vec![0u8; bytes];
    getrandom::getrandom(&mut buf).map_err(|e| format!("no randomness available: {e}"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// A fresh key: (id, secret, the full key to show once).
pub fn generate() -> Result<(String, String, String), String> {
    let id = random_hex(ID_HEX / 2)?;
    let secret = random_hex(SECRET_HEX / 2)?;
    let full = format!("{PREFIX}{id}.{secret}");
    Ok((id, secret, full))
}

/// HMAC-SHA256 under the server secret. The keyed state is computed once and cloned per use
/// (half of an HMAC's compressions are the key's).
#[derive(Clone)]
pub struct Hasher {
    keyed: Hmac<Sha256>,
}

impl Hasher {
    pub fn new(server_secret: &[u8]) -> Hasher {
        // HMAC accepts keys of any length; this cannot fail.
        Hasher { keyed: <Hmac<Sha256> as Mac>::new_from_slice(server_secret).unwrap_or_else(|_| unreachable_mac()) }
    }

    fn mac(&self) -> Hmac<Sha256> {
        self.keyed.clone()
    }

    pub fn hash(&self, secret: &str) -> Vec<u8> {
        let mut mac = self.mac();
        mac.update(secret.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// Constant-time comparison against a stored hash.
    pub fn verify(&self, secret: &str, stored: &[u8]) -> bool {
        let mut mac = self.mac();
        mac.update(secret.as_bytes());
        mac.verify_slice(stored).is_ok()
    }
}

#[allow(clippy::panic)]
fn unreachable_mac() -> Hmac<Sha256> {
    panic!("HMAC-SHA256 rejected a key, which its contract rules out")
}

/// The server secret: from config/env when given, else read from (or created at) `path`, 0600.
pub fn server_secret(configured: Option<&str>, path: &Path) -> Result<Vec<u8>, String> {
    if let Some(s) = configured.filter(|s| !s.is_empty()) {
        if s.len() < 32 {
            return Err("auth.secret must be at least 32 characters".to_owned());
        }
        return Ok(s.as_bytes().to_vec());
    }
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().len() >= 32 => return Ok(text.trim().as_bytes().to_vec()),
        Ok(_) => return Err(format!("{} is too short to be a server secret", path.display())),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot read {}: {e}", path.display()));
        }
        Err(_) => {}
    }
    let secret = random_hex(32)?;
    write_private(path, &secret).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    tracing::info!(path = %path.display(), "generated a server secret for key hashing; keep this file with the database");
    Ok(secret.into_bytes())
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_and_verify() {
        let (id, secret, full) = generate().unwrap();
        let parsed = parse(&full).unwrap();
        assert_eq!((parsed.id, parsed.secret), (id.as_str(), secret.as_str()));
        let h = Hasher::new(b"0123456789abcdef0123456789abcdef");
        let stored = h.hash(&secret);
        assert_eq!(stored.len(), 32);
        assert!(h.verify(&secret, &stored));
        let flipped = if secret.ends_with('0') { "1" } else { "0" };
        assert!(!h.verify(&format!("{}{flipped}", &secret[..63]), &stored));
        assert!(!Hasher::new(b"another-server-secret-of-32-bytes!").verify(&secret, &stored), "keyed, not a bare hash");
        assert_ne!(stored, secret.as_bytes());
    }

    #[test]
    fn malformed_keys_do_not_parse() {
        for bad in ["", "sy-", "sk-abc", "sy-abc.def", "sy-0123456789abcdef", "sy-0123456789ABCDEF.00", "Bearer x"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn server_secret_is_created_once_and_private() {
        let dir = std::env::temp_dir().join(format!("sy-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("switchyard.secret");
        let _ = std::fs::remove_file(&path);
        let a = server_secret(None, &path).unwrap();
        let b = server_secret(None, &path).unwrap();
        assert_eq!(a, b);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert!(server_secret(Some("short"), &path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
