//! Redaction of secrets from text the gateway keeps (request and response bodies stored on the
//! operator's opt-in): the configured secrets themselves, tokens that look like API keys or bearer
//! credentials, and the values of JSON fields named like credentials. What is removed becomes
//! `[REDACTED]`; everything else is left byte for byte.

/// What replaces a secret.
pub const MARK: &str = "[REDACTED]";

/// Prefixes of well-known credential formats (OpenAI/Anthropic `sk-`, our own `sy-`, Stripe,
/// GitHub, Slack, GitLab, Hugging Face, AWS access key ids, Google API keys, JWTs).
const TOKEN_PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "sy-",
    "rk_",
    "pk_",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "glpat-",
    "hf_",
    "AKIA",
    "ASIA",
    "AIza",
    "eyJ",
];

/// A prefix counts only when at least this many token characters follow it ("sk-learn" stays).
const MIN_TOKEN_TAIL: usize = 12;

/// JSON field names (compared case-insensitively, `-` as `_`) whose string values are secrets.
const SECRET_FIELDS: &[&str] = &[
    "api_key",
    "apikey",
    "x_api_key",
    "password",
    "passwd",
    "secret",
    "client_secret",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "authorization",
    "private_key",
    "aws_secret_access_key",
];

/// Redacts `text` given the deployment's own secrets (`known`: master key, backend keys, header
/// values from the config; empty ones are ignored).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    known: Vec<String>,
}

impl Redactor {
    pub fn new(known: impl IntoIterator<Item = String>) -> Redactor {
        // Longest first, so a secret that contains another is removed whole; very short
        // strings are not secrets worth matching (and would shred ordinary text).
        let mut known: Vec<String> = known.into_iter().filter(|s| s.len() >= 8).collect();
        known.sort_by_key(|s| std::cmp::Reverse(s.len()));
        known.dedup();
        Redactor { known }
    }

    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.known {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MARK);
            }
        }
        let out = redact_tokens(&out);
        redact_fields(&out)
    }
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+' | b'/' | b'=')
}

/// Tokens with a credential prefix, and whatever follows `Bearer `.
fn redact_tokens(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied) = (0, 0);
    while i < bytes.len() {
        let at_word_start = i == 0 || !is_token_char(bytes[i - 1]);
        if !at_word_start {
            i += 1;
            continue;
        }
        // Bytes, not `str`: `i` may sit inside a multi-byte character (which then matches nothing).
        let rest = &bytes[i..];
        let bearer = rest.get(..7).is_some_and(|p| p.eq_ignore_ascii_case(b"bearer "));
        let (keep, min_tail) = if bearer {
            (7, 1)
        } else if let Some(p) = TOKEN_PREFIXES.iter().find(|p| rest.starts_with(p.as_bytes())) {
            (p.len(), MIN_TOKEN_TAIL)
        } else {
            i += 1;
            continue;
        };
        let tail = bytes[i + keep..].iter().take_while(|b| is_token_char(**b)).count();
        if tail >= min_tail {
            out.push_str(&text[copied..i + keep]);
            out.push_str(MARK);
            i += keep + tail;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// `"name": "value"` where `name` is a credential field: the value becomes the mark. Works on
/// JSON text as it is (also truncated or inside an SSE frame), without parsing it.
fn redact_fields(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied) = (0, 0);
    while let Some(q) = bytes[i..].iter().position(|b| *b == b'"').map(|p| p + i) {
        // A field name: a quoted string followed by `:` and then a string value.
        let Some(end) = string_end(bytes, q + 1) else { break };
        let name = &text[q + 1..end];
        let mut j = end + 1;
        while j < bytes.len() && bytes[j].is_ascii_whitespace() {
            j += 1;
        }
        if j < bytes.len() && bytes[j] == b':' && secret_field(name) {
            j += 1;
            while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                j += 1;
            }
            if j < bytes.len() && bytes[j] == b'"' {
                let value_end = string_end(bytes, j + 1).unwrap_or(bytes.len());
                out.push_str(&text[copied..=j]);
                out.push_str(MARK);
                copied = value_end;
                i = value_end.min(bytes.len());
                if i < bytes.len() {
                    i += 1; // past the closing quote, which is copied with what follows
                }
                continue;
            }
        }
        i = end + 1;
    }
    out.push_str(&text[copied.min(text.len())..]);
    out
}

/// Index of the quote that closes a JSON string starting at `from` (after its opening quote).
fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn secret_field(name: &str) -> bool {
    name.len() <= 32
        && SECRET_FIELDS.iter().any(|f| {
            f.len() == name.len()
                && f.bytes().zip(name.bytes()).all(|(a, b)| a == b.to_ascii_lowercase() || (a == b'_' && b == b'-'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_secrets_tokens_and_credential_fields_are_removed() {
        let r = Redactor::new(["master-key-canary-123".to_owned(), "short".to_owned()]);
        let text = r#"{"messages":[{"role":"user","content":"my key is sk-proj-abcdefghijklmnop1234 and master-key-canary-123, use Bearer abc.def"}],"api_key":"p@ss \"quoted\"","Password": "hunter2", "n": "short"}"#;
        let got = r.redact(text);
        for secret in ["sk-proj-abcdefghijklmnop1234", "master-key-canary-123", "abc.def", "p@ss", "hunter2"] {
            assert!(!got.contains(secret), "{secret} left in {got}");
        }
        assert!(got.contains(r#""api_key":"[REDACTED]","Password": "[REDACTED]""#), "{got}");
        assert!(got.contains("my key is sk-[REDACTED] and [REDACTED], use Bearer [REDACTED]"), "{got}");
        // Short configured strings and ordinary words are left alone.
        assert!(got.contains(r#""n": "short""#), "{got}");
        assert_eq!(r.redact("use sk-learn for that"), "use sk-learn for that");
        assert_eq!(r.redact("a task-abcdefghijklmnopqrstuv"), "a task-abcdefghijklmnopqrstuv");
    }

    #[test]
    fn any_text_is_handled_without_panicking() {
        let r = Redactor::new(Vec::new());
        for text in
            ["", "\"", "\"token\"", "\"token\":", "\"token\": \"unterminated", "Bearer ", "é\"api_key\":\"ü\"x", "sk-"]
        {
            let got = r.redact(text);
            assert!(!got.contains("unterminated"), "{got}");
        }
        assert_eq!(r.redact("é\"api_key\":\"ü\"x"), "é\"api_key\":\"[REDACTED]\"x");
    }
}
