//! Emails and credentials whose shape is not enough: an email's parts, a key's body that looks
//! random (not `sk-learn-tutorial`), a password value's entropy.

use super::context::path_follows;
use super::{Hay, NeedMore, Verdict};

/// Email "domains" that are file names (`icon@2x.png`).
const FILE_EXTENSIONS: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico", "css", "js", "ts", "tsx", "jsx", "json", "html", "md",
    "txt", "pdf",
];

/// The least Shannon entropy, in bits per character, of a value after a `password=`-style key.
/// Eight distinct characters reach 3.0; `changeme` (2.75) and `Password!` (2.95) do not.
pub(crate) const PASSWORD_ENTROPY: f64 = 3.0;

/// Values after a `password=`-style key that another detector names better.
const CREDENTIAL_PREFIXES: &[&str] =
    &["sk-", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "AIza", "xox", "eyJ"];

/// Values that stand for a password rather than being one: templates, references, masks.
const PLACEHOLDER_PREFIXES: &[&str] = &["${", "{{", "%(", "$(", "<", "[", "*"];

/// An email address, not a `user@host:path` (scp, git).
pub(crate) fn email(hay: Hay<'_>, start: usize, end: usize) -> Result<bool, NeedMore> {
    Ok(mailbox(&hay.bytes[start..end]) && !path_follows(hay, end)?)
}

fn mailbox(text: &[u8]) -> bool {
    let Some(at) = memchr::memchr(b'@', text) else {
        return false;
    };
    let (local, domain) = (&text[..at], &text[at + 1..]);
    let local_valid = !local.starts_with(b".") && !local.ends_with(b".") && !contains(local, b"..");
    let labels_valid = domain
        .split(|&byte| byte == b'.')
        .all(|label| !label.is_empty() && !label.starts_with(b"-") && !label.ends_with(b"-"));
    let top = domain.rsplit(|&byte| byte == b'.').next().unwrap_or_default();
    let file = FILE_EXTENSIONS.iter().any(|extension| top.eq_ignore_ascii_case(extension.as_bytes()));
    local_valid && labels_valid && !file
}

/// `sk-…` and `sk-proj-…`: a random-looking body, and not Anthropic's `sk-ant-`.
pub(crate) fn openai(text: &[u8]) -> bool {
    if text.starts_with(b"sk-ant-") {
        return false;
    }
    let body = &text[3..];
    let body =
        [&b"proj-"[..], b"svcacct-", b"admin-"].iter().find_map(|prefix| body.strip_prefix(*prefix)).unwrap_or(body);
    random_looking(body)
}

/// `sk-ant-<kind>-…`: a random-looking body.
pub(crate) fn anthropic(text: &[u8]) -> bool {
    let body = text.splitn(4, |&byte| byte == b'-').nth(3).unwrap_or_default();
    random_looking(body)
}

/// `xox?-…`: a numeric part and a long random part.
pub(crate) fn slack(text: &[u8]) -> bool {
    let body = &text[5..];
    body.iter().any(u8::is_ascii_digit) && longest_alphanumeric_run(body) >= 8
}

/// A `password=value` candidate: the value (the finding's span), if it is neither a template nor
/// code nor another credential, and has enough entropy.
pub(crate) fn password(text: &[u8], start: usize) -> Verdict {
    let Some(separator) = text.iter().position(|&byte| byte == b':' || byte == b'=') else {
        return Verdict::Reject;
    };
    let mut value = separator + 1;
    if let (Some(b':'), Some(b'=')) | (Some(b'='), Some(b'>')) = (text.get(separator), text.get(value)) {
        value += 1;
    }
    while matches!(text.get(value), Some(b' ' | b'\t')) {
        value += 1;
    }
    if matches!(text.get(value), Some(b'"' | b'\'')) {
        value += 1;
    }
    let Some(secret) = text.get(value..).filter(|secret| secret.len() >= 8) else {
        return Verdict::Reject;
    };
    let prefixed = |prefixes: &[&str]| prefixes.iter().any(|prefix| secret.starts_with(prefix.as_bytes()));
    if prefixed(CREDENTIAL_PREFIXES) || prefixed(PLACEHOLDER_PREFIXES) || code_like(secret) {
        return Verdict::Reject;
    }
    let secret = without_closing_punctuation(secret);
    if entropy(secret) < PASSWORD_ENTROPY {
        return Verdict::Reject;
    }
    Verdict::Accept { start: start + value, end: start + value + secret.len() }
}

/// `secret` without the full stop or closing bracket of the sentence around it (`(password=x.)`):
/// a trailing `.` or `:`, or a `)`, `]`, `}` the value does not open.
fn without_closing_punctuation(mut secret: &[u8]) -> &[u8] {
    loop {
        let opens = |open: u8| secret.contains(&open);
        let closing = match secret.last() {
            Some(b'.' | b':') => true,
            Some(b')') => !opens(b'('),
            Some(b']') => !opens(b'['),
            Some(b'}') => !opens(b'{'),
            _ => false,
        };
        if !closing {
            return secret;
        }
        secret = &secret[..secret.len() - 1];
    }
}

/// A name or call (`os.environ[`, `get_password()`, `REDACTED`): no digit, and only identifier
/// characters, dots and brackets.
fn code_like(value: &[u8]) -> bool {
    let identifier = |byte: &u8| byte.is_ascii_alphanumeric() || b"_.()[]".contains(byte);
    !value.iter().any(u8::is_ascii_digit) && value.iter().all(identifier)
}

/// Shannon entropy in bits per byte.
pub(crate) fn entropy(value: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &byte in value {
        counts[usize::from(byte)] += 1;
    }
    let total = value.len() as f64;
    counts.iter().filter(|&&count| count > 0).map(|&count| f64::from(count) / total).map(|p| -p * p.log2()).sum()
}

/// Mixed case and digits, and a long stretch without separators: what a generated key looks
/// like, and a hyphenated phrase (`sk-learn-and-numpy-2024`) does not.
fn random_looking(body: &[u8]) -> bool {
    body.iter().any(u8::is_ascii_uppercase)
        && body.iter().any(u8::is_ascii_lowercase)
        && body.iter().any(u8::is_ascii_digit)
        && longest_alphanumeric_run(body) >= 16
}

fn longest_alphanumeric_run(text: &[u8]) -> usize {
    text.split(|byte| !byte.is_ascii_alphanumeric()).map(<[u8]>::len).max().unwrap_or(0)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        assert!(mailbox(b"jane.doe+tag@mail.example.co.uk"));
        assert!(!mailbox(b"icon@2x.png"));
        assert!(!mailbox(b".jane@example.com"));
        assert!(!mailbox(b"jane..doe@example.com"));
        assert!(!mailbox(b"jane@-example.com"));
    }

    #[test]
    fn key_bodies_must_look_random() {
        assert!(openai(b"sk-proj-T3BlbkFJx9Qm2LwZrV7aPnK4sDfGhJ8e"));
        assert!(!openai(b"sk-learn-tutorial-for-beginners-2024"));
        assert!(!openai(b"sk-ant-api03-T3BlbkFJx9Qm2LwZrV7aPnK4sDfGhJ8e"));
        assert!(anthropic(b"sk-ant-api03-T3BlbkFJx9Qm2LwZrV7aPnK4sDfGhJ8eXyZ"));
        assert!(slack(b"xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"));
        assert!(!slack(b"xoxb-not-a-real-token-at-all"));
    }

    #[test]
    fn password_values() {
        let accept = |text: &str| password(text.as_bytes(), 0);
        assert_eq!(accept("password=Xk9$mP2!vL7q"), Verdict::Accept { start: 9, end: 21 });
        assert_eq!(accept("\"password\": \"Xk9$mP2!vL7q"), Verdict::Accept { start: 13, end: 25 });
        assert_eq!(accept("DB_PASSWORD := Xk9$mP2!vL7q"), Verdict::Accept { start: 15, end: 27 });
        assert_eq!(accept("password=Xk9$mP2!vL7q)."), Verdict::Accept { start: 9, end: 21 });
        assert_eq!(accept("password=(Xk9$mP2!vL7q)"), Verdict::Accept { start: 9, end: 23 });
        for rejected in [
            "password=changeme",
            "password=${DB_PASSWORD}",
            "password=os.environ[",
            "api_key=sk-proj-abc",
            "pwd=********",
        ] {
            assert_eq!(accept(rejected), Verdict::Reject, "{rejected}");
        }
    }

    #[test]
    fn entropy_of_known_strings() {
        assert!((entropy(b"abcdefgh") - 3.0).abs() < 1e-9);
        assert!(entropy(b"aaaaaaaa") < 1e-9);
    }
}
