//! The texts of a JSON request or answer, for guards to read and rewrite in place: every string
//! value except those under keys that hold no one's words (ids, roles, model names, URLs, base64
//! media, formats). One pass over the bytes; a body nothing changes in is not copied, and only
//! the strings a guard changes are re-encoded — never the whole document.

use smallvec::SmallVec;

use super::json_stops::Stops;

/// Which keys' string values are skipped: [`not_text`] for the model APIs' bodies, [`all_text`]
/// for a tool's arguments and results (scanned whole, their keys being the tool's own).
pub type Skip = fn(&[u8]) -> bool;

/// Keys whose string values are not text a person or a model wrote (ids, roles, model names, URLs,
/// base64 media, formats). Grouped by length: a key is compared with the few of its own length,
/// not with all 33 (every string of every body asks; a linear search was ~1.5k instructions a
/// request, callgrind).
pub fn not_text(key: &[u8]) -> bool {
    let among = |words: &[&[u8]]| words.contains(&key);
    match key.len() {
        2 => key == b"id",
        3 => key == b"url",
        4 => among(&[b"type", b"role", b"name", b"data"]),
        5 => among(&[b"model", b"voice"]),
        6 => among(&[b"object", b"detail", b"format", b"status"]),
        7 => among(&[b"call_id", b"file_id"]),
        8 => key == b"mimeType",
        9 => among(&[b"image_url", b"mime_type", b"signature"]),
        10 => among(&[b"media_type", b"created_at", b"keep_alive"]),
        11 => among(&[b"tool_use_id", b"stop_reason", b"done_reason", b"tool_choice"]),
        12 => among(&[b"tool_call_id", b"service_tier"]),
        13 => key == b"finish_reason",
        15 => among(&[b"encoding_format", b"response_format"]),
        16 => key == b"reasoning_effort",
        18 => key == b"system_fingerprint",
        20 => key == b"previous_response_id",
        _ => false,
    }
}

/// Every string value is text (a tool's arguments and results).
pub fn all_text(_key: &[u8]) -> bool {
    false
}

/// Call `rewrite` on each text in `body` (unescaped); where it returns a new text, that string
/// is replaced. `None` when nothing changed (or the body is not JSON as far as it was read).
pub fn rewrite_texts(body: &[u8], skip: Skip, mut rewrite: impl FnMut(&str) -> Option<String>) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    // Per open object or array, the key it is the value of. Inline up to eight levels (an
    // answer's JSON has four): no allocation per body.
    let mut open: SmallVec<[Option<(usize, usize)>; 8]> = SmallVec::new();
    // The key last read in the innermost open object (a key is the string a `:` follows: commas
    // need no stop of their own).
    let mut key: Option<(usize, usize)> = None;
    let mut stops = Stops::new(body);
    while let Some(i) = stops.next() {
        match body[i] {
            b'{' | b'[' => open.push(key.take()),
            b'}' | b']' => {
                open.pop();
                key = None;
            }
            b'"' => {
                let (end, escaped) = stops.string_end()?;
                if is_key(body, end) {
                    key = Some((i + 1, end));
                    continue;
                }
                // A string in an array counts as its array's key's.
                let under = key.take().or_else(|| open.last().copied().flatten());
                if is_text(body, under, skip) {
                    if let Some(new) = rewrite(&text_of(&body[i..=end], escaped)) {
                        let buf = out.get_or_insert_with(|| Vec::with_capacity(body.len() + 64));
                        buf.extend_from_slice(&body[copied..i]);
                        push_json_string(buf, &new);
                        copied = end + 1;
                    }
                }
            }
            // A backslash outside a string: not JSON; passed over.
            _ => {}
        }
    }
    out.map(|mut buf| {
        buf.extend_from_slice(&body[copied..]);
        buf
    })
}

/// `text` as a JSON string token. Masked texts are mostly runs of the original, which rarely hold
/// a byte JSON escapes, so a quick check comes first and the text is copied as it is: serde_json's
/// escaper goes byte by byte through a table, and re-escaping a masked 4 KB prompt was a quarter of
/// the guards' cost per request (callgrind).
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    // A fold over chunks of a fixed size known to the compiler (`chunks_exact`, not `chunks`), with
    // no early exit inside one, is what it vectorises.
    let escapes = |chunk: &[u8]| chunk.iter().fold(false, |any, &b| any | (b < 0x20) | (b == b'"') | (b == b'\\'));
    let mut chunks = text.as_bytes().chunks_exact(32);
    if escapes(chunks.remainder()) || chunks.any(escapes) {
        // Writing JSON into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, text);
    } else {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// Whether the string closing at `end` is a key: a `:` comes next (after blanks, in a pretty body).
#[inline]
fn is_key(body: &[u8], end: usize) -> bool {
    match body.get(end + 1) {
        Some(b':') => true,
        Some(b' ' | b'\n' | b'\r' | b'\t') => body[end + 1..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b':'),
        _ => false,
    }
}

fn is_text(body: &[u8], key: Option<(usize, usize)>, skip: Skip) -> bool {
    match key {
        None => true,
        Some((s, e)) => !skip(&body[s..e]),
    }
}

/// A JSON string token (quotes included) as text: borrowed when it has no escapes (`escaped`, as
/// its end was found), after a SIMD check that it is UTF-8 (the standard library's check was a
/// fifth of a guarded 4 KB prompt's cost, callgrind). A text that is not UTF-8 is still read, its
/// stray bytes as U+FFFD (and, if it has escapes, those as written): a backend may take what the
/// guards could not decode.
fn text_of(token: &[u8], escaped: bool) -> std::borrow::Cow<'_, str> {
    let inner = &token[1..token.len() - 1];
    if !escaped {
        if let Ok(text) = simdutf8::basic::from_utf8(inner) {
            return std::borrow::Cow::Borrowed(text);
        }
    }
    match serde_json::from_slice::<String>(token) {
        Ok(text) => std::borrow::Cow::Owned(text),
        Err(_) => String::from_utf8_lossy(inner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upper_if(needle: &'static str) -> impl FnMut(&str) -> Option<String> {
        move |t: &str| t.contains(needle).then(|| t.replace(needle, &needle.to_uppercase()))
    }

    #[test]
    fn only_texts_change_and_only_when_asked() {
        let body = br#"{"model":"bob","messages":[{"role":"user","content":"hi bob"},{"role":"assistant","content":[{"type":"text","text":"bob \"q\" bob"},{"type":"image_url","image_url":{"url":"data:bob"}}]}],"user":"bob","n":1,"tools":[{"function":{"name":"bob","arguments":"{\"who\":\"bob\"}"}}]}"#;
        let out = String::from_utf8(rewrite_texts(body, not_text, upper_if("bob")).unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["model"], "bob", "a model name is not text");
        assert_eq!(v["messages"][0]["content"], "hi BOB");
        assert_eq!(v["messages"][1]["content"][0]["text"], "BOB \"q\" BOB");
        assert_eq!(v["messages"][1]["content"][1]["image_url"]["url"], "data:bob");
        assert_eq!(v["user"], "BOB");
        assert_eq!(v["tools"][0]["function"]["name"], "bob");
        assert_eq!(v["tools"][0]["function"]["arguments"], "{\"who\":\"BOB\"}");
        assert!(rewrite_texts(body, not_text, upper_if("zed")).is_none(), "nothing changed, nothing copied");
    }

    #[test]
    fn texts_are_written_back_as_json_strings_escaped_only_where_needed() {
        let long = "x".repeat(100) + "\"";
        for text in ["plain [EMAIL] text", "", "quote \" and \\ back", "tab\there\nnew line \u{1}", "émoji 🦀 ü", &long]
        {
            let mut out = Vec::new();
            push_json_string(&mut out, text);
            assert_eq!(out, serde_json::to_vec(text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn keys_that_hold_no_ones_words_are_known_by_name() {
        let not = [
            "id",
            "type",
            "role",
            "model",
            "object",
            "name",
            "tool_call_id",
            "tool_use_id",
            "call_id",
            "url",
            "image_url",
            "data",
            "media_type",
            "mime_type",
            "mimeType",
            "detail",
            "format",
            "encoding_format",
            "response_format",
            "finish_reason",
            "stop_reason",
            "service_tier",
            "system_fingerprint",
            "signature",
            "created_at",
            "done_reason",
            "status",
            "tool_choice",
            "voice",
            "file_id",
            "previous_response_id",
            "keep_alive",
            "reasoning_effort",
        ];
        for key in not {
            assert!(not_text(key.as_bytes()), "{key}");
        }
        for key in ["content", "text", "input", "arguments", "prompt", "system", "ids", "", "roles", "modelx"] {
            assert!(!not_text(key.as_bytes()), "{key}");
        }
        assert!(!all_text(b"id"));
    }

    #[test]
    fn a_text_that_is_not_utf8_is_still_read() {
        let mut body = br#"{"content":"mail bob at "#.to_vec();
        body.extend_from_slice(b"\xff\xfe bob");
        body.extend_from_slice(br#"","n":1}"#);
        let out = String::from_utf8(rewrite_texts(&body, not_text, upper_if("bob")).unwrap()).unwrap();
        assert_eq!(out, "{\"content\":\"mail BOB at \u{fffd}\u{fffd} BOB\",\"n\":1}");
        let escaped = [&br#"{"content":"tab\tbob "#[..], b"\xff", br#""}"#].concat();
        let out = String::from_utf8(rewrite_texts(&escaped, not_text, upper_if("bob")).unwrap()).unwrap();
        assert!(out.contains("BOB"), "{out}");
    }

    /// What `rewrite_texts` should do, on the parsed value: a string is text unless the key it is
    /// the value of (or, in an array, its array's key) holds no one's words.
    fn rewritten_by_hand(value: &mut serde_json::Value, key: Option<&str>) {
        use serde_json::Value;
        match value {
            Value::String(s) if !key.is_some_and(|k| not_text(k.as_bytes())) => *s = s.replace("bob", "BOB"),
            Value::Array(items) => {
                for item in items {
                    let inherited = if item.is_string() { key } else { None };
                    rewritten_by_hand(item, inherited);
                }
            }
            Value::Object(members) => {
                for (k, v) in members.iter_mut() {
                    rewritten_by_hand(v, Some(k));
                }
            }
            _ => {}
        }
    }

    #[test]
    fn random_documents_have_exactly_their_texts_rewritten() {
        use serde_json::{json, Value};
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let pieces = ["bob", "b", "o", "\"", "\\", "{", "}", "[", "]", ",", ":", " ", "\n", "\u{1}", "é", "🦀", "x"];
        let keys = ["content", "text", "id", "model", "role", "url", "arguments", "input", "n", "k\"ey"];
        fn build(depth: usize, next: &mut impl FnMut(usize) -> usize, pieces: &[&str], keys: &[&str]) -> Value {
            match if depth > 4 { next(3) } else { next(6) } {
                0 => Value::String((0..next(40) * next(4)).map(|_| pieces[next(pieces.len())]).collect()),
                1 => json!(next(1000)),
                2 => Value::Null,
                3 => Value::Array((0..next(5)).map(|_| build(depth + 1, next, pieces, keys)).collect()),
                _ => Value::Object(
                    (0..next(6))
                        .map(|_| (keys[next(keys.len())].to_owned(), build(depth + 1, next, pieces, keys)))
                        .collect(),
                ),
            }
        }
        for round in 0..2000 {
            let value = build(0, &mut next, &pieces, &keys);
            let mut expected = value.clone();
            rewritten_by_hand(&mut expected, None);
            for body in [serde_json::to_vec(&value).unwrap(), serde_json::to_vec_pretty(&value).unwrap()] {
                let out = rewrite_texts(&body, not_text, upper_if("bob"));
                let got: Value = serde_json::from_slice(out.as_deref().unwrap_or(&body)).unwrap();
                assert_eq!(got, expected, "round {round}: {}", String::from_utf8_lossy(&body));
                assert_eq!(out.is_some(), expected != value, "round {round}: copied only when changed");
            }
        }
    }

    #[test]
    fn arrays_of_texts_and_keys_after_nested_values() {
        let body = br#"{"input":["a bob","b"],"o":{"x":1},"stop":["bob"],"prompt":"bob"}"#;
        let out = String::from_utf8(rewrite_texts(body, not_text, upper_if("bob")).unwrap()).unwrap();
        assert_eq!(out, r#"{"input":["a BOB","b"],"o":{"x":1},"stop":["BOB"],"prompt":"BOB"}"#);
        assert!(rewrite_texts(br#"{"a":"unterminated"#, not_text, upper_if("a")).is_none());
        // Blanks before a key's colon, and a key whose value is not a string.
        let body = b"{ \"model\" :\n \"bob\" , \"n\" : 1 , \"id\"\t:\"bob\", \"content\"\r\n: \"bob\" }";
        let out = String::from_utf8(rewrite_texts(body, not_text, upper_if("bob")).unwrap()).unwrap();
        assert_eq!(out, "{ \"model\" :\n \"bob\" , \"n\" : 1 , \"id\"\t:\"bob\", \"content\"\r\n: \"BOB\" }");
    }
}
