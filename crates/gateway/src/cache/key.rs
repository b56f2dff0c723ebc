//! The cache key: a SHA-256 digest of the request in a canonical form. Object keys are sorted
//! (reordered JSON is the same request), numbers are written one way (`1`, `1.0` and `1e0` are
//! the same number), and fields that cannot change the answer (`user`, `metadata`, prompt-cache
//! hints, Ollama's `keep_alive`, `stream: false`) are left out. Everything else — messages,
//! `tools`, `response_format`, sampling parameters, the model — is in the key, together with
//! the namespace (whose answers these are), the client's API, whether it streams, and the
//! `anthropic-beta` header (which turns features on).

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::endpoint::Endpoint;

pub type Digest = [u8; 32];

/// Top-level fields that do not change the answer.
const IGNORED: [&str; 7] =
    ["user", "metadata", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "keep_alive", "stream"];

/// What besides the body tells two requests apart.
pub struct KeyParts<'a> {
    pub namespace: &'a str,
    /// The model as asked for (Gemini names it in the path, not the body).
    pub model: &'a str,
    pub endpoint: Endpoint,
    pub stream: bool,
    /// The `anthropic-beta` header, when sent.
    pub beta: &'a [u8],
}

/// The digest of a request, or None when its body is not a JSON object.
pub fn digest(parts: &KeyParts<'_>, body: &[u8]) -> Option<Digest> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else { return None };
    let mut canonical = Vec::with_capacity(body.len() + 64);
    // Version 1 of this form; a change to it changes every key rather than mixing two forms.
    canonical.extend_from_slice(b"switchyard-cache-1\0");
    for part in [parts.namespace.as_bytes(), parts.model.as_bytes(), parts.endpoint.as_str().as_bytes(), parts.beta] {
        canonical.extend_from_slice(&(part.len() as u32).to_le_bytes());
        canonical.extend_from_slice(part);
    }
    canonical.push(u8::from(parts.stream));
    let mut entries: Vec<(&String, &Value)> = fields.iter().filter(|(k, _)| !IGNORED.contains(&k.as_str())).collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    write_object(&mut canonical, entries);
    Some(Sha256::digest(&canonical).into())
}

fn write_object(out: &mut Vec<u8>, entries: Vec<(&String, &Value)>) {
    out.push(b'{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, k);
        out.push(b':');
        write(out, v);
    }
    out.push(b'}');
}

fn write(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            write_object(out, entries);
        }
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    // serde_json escapes a given string one way, so equal strings write equal bytes.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Integers as integers, whichever way they were written (`2`, `2.0`, `2e0`); other numbers in
/// their shortest round-trip form.
fn write_number(out: &mut Vec<u8>, n: &serde_json::Number) {
    use std::io::Write as _;
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        if f.fract() == 0.0 && f.abs() < 9.0e15 {
            let _ = write!(out, "{}", f as i64);
        } else {
            let _ = write!(out, "{f:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(body: &str) -> Digest {
        key_in("k1", body)
    }

    fn key_in(namespace: &str, body: &str) -> Digest {
        let parts = KeyParts { namespace, model: "m", endpoint: Endpoint::ChatCompletions, stream: false, beta: b"" };
        digest(&parts, body.as_bytes()).unwrap()
    }

    #[test]
    fn reordered_keys_and_rewritten_numbers_are_the_same_request() {
        let a = key(r#"{"model":"m","temperature":1,"messages":[{"role":"user","content":"hi"}]}"#);
        let b = key(r#"{ "messages":[{"content":"hi","role":"user"}], "temperature":1.0, "model":"m" }"#);
        let c = key(r#"{"messages":[{"content":"hi","role":"user"}],"temperature":1e0,"model":"m","stream":false}"#);
        assert_eq!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn what_changes_the_answer_changes_the_key() {
        let base = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]"#;
        let plain = key(&format!("{base}}}"));
        for extra in [
            r#","tools":[{"type":"function","function":{"name":"f"}}]"#,
            r#","response_format":{"type":"json_object"}"#,
            r#","temperature":0.7"#,
            r#","top_p":0.5"#,
            r#","seed":1"#,
            r#","max_tokens":5"#,
        ] {
            assert_ne!(plain, key(&format!("{base}{extra}}}")), "{extra} is not in the key");
        }
        assert_ne!(plain, key(r#"{"model":"m","messages":[{"role":"user","content":"hi!"}]}"#));
        assert_ne!(plain, key(r#"{"model":"n","messages":[{"role":"user","content":"hi"}]}"#));
        assert_ne!(plain, key_in("k2", &format!("{base}}}")));
        let streamed =
            KeyParts { namespace: "k1", model: "m", endpoint: Endpoint::ChatCompletions, stream: true, beta: b"" };
        assert_ne!(plain, digest(&streamed, format!("{base}}}").as_bytes()).unwrap());
        let messages = KeyParts { namespace: "k1", model: "m", endpoint: Endpoint::Messages, stream: false, beta: b"" };
        assert_ne!(plain, digest(&messages, format!("{base}}}").as_bytes()).unwrap());
    }

    #[test]
    fn what_does_not_change_the_answer_is_left_out() {
        let plain = key(r#"{"model":"m","messages":[]}"#);
        assert_eq!(plain, key(r#"{"model":"m","messages":[],"user":"u1","metadata":{"a":1}}"#));
        assert_eq!(plain, key(r#"{"model":"m","messages":[],"prompt_cache_key":"x","stream":false}"#));
        // Only at the top level: a nested `user` is content.
        assert_ne!(key(r#"{"model":"m","messages":[{"user":1}]}"#), key(r#"{"model":"m","messages":[{"user":2}]}"#));
    }

    #[test]
    fn only_objects_have_keys() {
        let parts =
            KeyParts { namespace: "", model: "m", endpoint: Endpoint::ChatCompletions, stream: false, beta: b"" };
        assert!(digest(&parts, b"[1]").is_none());
        assert!(digest(&parts, b"{").is_none());
    }
}
