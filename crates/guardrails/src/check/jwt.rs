//! JSON Web Tokens. The automaton finds `eyJ` (a base64url `{"`) and a little more; this reads
//! the whole token: three parts (a JWS) or five (a JWE) separated by dots, within `CAP` bytes,
//! whose header decodes to JSON naming a JOSE parameter (`"alg"`, `"typ"`, `"enc"`, `"kid"`).

use super::{Hay, Verdict};

/// The longest token read as one. Longer runs of token characters are judged on their first
/// `CAP` bytes.
pub(crate) const CAP: usize = 8 * 1024;

/// How much of the header is decoded to look for a JOSE parameter (the first ones name it).
const HEADER_PREFIX: usize = 192;

/// The token that starts at `start`.
pub(crate) fn token(hay: Hay<'_>, start: usize) -> Verdict {
    // Not the middle of a longer dotted or dashed token (which would also make every `eyJ` in a
    // long run read the run again).
    if start > 0 && in_token(hay.bytes[start - 1]) {
        return Verdict::Reject;
    }
    let window = &hay.bytes[start..hay.bytes.len().min(start + CAP)];
    let complete = hay.eof || start + CAP <= hay.bytes.len();
    let run = match window.iter().position(|&byte| !in_token(byte)) {
        Some(length) => length,
        None if complete => window.len(),
        None => return Verdict::NeedMore,
    };
    let mut token = &window[..run];
    let parts = token.split(|&byte| byte == b'.').count();
    // A full stop after the token ends a sentence; it is not a part.
    if token.ends_with(b".") && (parts == 4 || parts == 6) {
        token = &token[..token.len() - 1];
    }
    let mut parts = token.split(|&byte| byte == b'.');
    let header = parts.next().unwrap_or_default();
    let shaped = match (parts.next(), parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(payload), Some(_), None, None, None) => !payload.is_empty(),
        (Some(_), Some(_), Some(_), Some(_), None) => true,
        _ => false,
    };
    match shaped && jose_header(header) {
        true => Verdict::Accept { start, end: start + token.len() },
        false => Verdict::Reject,
    }
}

fn in_token(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.')
}

/// Whether the base64url `header` decodes to a JSON object naming a JOSE header parameter.
fn jose_header(header: &[u8]) -> bool {
    let mut decoded = [0u8; HEADER_PREFIX / 4 * 3];
    let mut length = 0;
    let (mut bits, mut pending) = (0u32, 0u32);
    for &char in header.iter().take(HEADER_PREFIX) {
        let Some(value) = base64url(char) else {
            return false;
        };
        pending = pending << 6 | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            decoded[length] = (pending >> bits) as u8;
            length += 1;
            pending &= (1 << bits) - 1;
        }
    }
    let json = &decoded[..length];
    json.starts_with(b"{")
        && [&b"\"alg\""[..], b"\"typ\"", b"\"enc\"", b"\"kid\""]
            .iter()
            .any(|parameter| memchr::memmem::find(json, parameter).is_some())
}

fn base64url(char: u8) -> Option<u8> {
    match char {
        b'A'..=b'Z' => Some(char - b'A'),
        b'a'..=b'z' => Some(char - b'a' + 26),
        b'0'..=b'9' => Some(char - b'0' + 52),
        b'-' => Some(62),
        b'_' => Some(63),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jwt.io's example token.
    const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

    fn verdict(text: &str, eof: bool) -> Verdict {
        token(Hay { bytes: text.as_bytes(), eof }, 0)
    }

    #[test]
    fn tokens_and_their_ends() {
        assert_eq!(verdict(JWT, true), Verdict::Accept { start: 0, end: JWT.len() });
        assert_eq!(verdict(&format!("{JWT}. Next"), true), Verdict::Accept { start: 0, end: JWT.len() });
        assert_eq!(verdict(JWT, false), Verdict::NeedMore);
        assert_eq!(verdict(&format!("{JWT} "), false), Verdict::Accept { start: 0, end: JWT.len() });
    }

    #[test]
    fn base64_json_that_is_not_a_token_is_rejected() {
        // {"name":"John Doe"} alone, and as a dotted pair.
        assert_eq!(verdict("eyJuYW1lIjoiSm9obiBEb2UifQ", true), Verdict::Reject);
        assert_eq!(verdict("eyJuYW1lIjoiSm9obiBEb2UifQ.eyJhIjoxfQ.c2ln", true), Verdict::Reject);
        assert_eq!(verdict("eyJhbGciOiJIUzI1NiJ9.eyJhIjoxfQ", true), Verdict::Reject);
        let inside = format!("x.{JWT}");
        assert_eq!(token(Hay { bytes: inside.as_bytes(), eof: true }, 2), Verdict::Reject);
    }
}
