//! The texts of a JSON request or answer, for guards to read and rewrite in place: every string
//! value except those under keys that hold no one's words (ids, roles, model names, URLs, base64
//! media, formats). One pass over the bytes; a body nothing changes in is not copied, and only
//! the strings a guard changes are re-encoded — never the whole document.

use smallvec::SmallVec;

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

/// An open object or array, and the key it is the value of.
struct Open {
    object: bool,
    key: Option<(usize, usize)>,
}

/// Call `rewrite` on each text in `body` (unescaped); where it returns a new text, that string
/// is replaced. `None` when nothing changed (or the body is not JSON as far as it was read).
pub fn rewrite_texts(body: &[u8], skip: Skip, mut rewrite: impl FnMut(&str) -> Option<String>) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    // Inline up to eight levels (an answer's JSON has four): no allocation per body.
    let mut open: SmallVec<[Open; 8]> = SmallVec::new();
    // The key just read, until its value starts.
    let mut key: Option<(usize, usize)> = None;
    let mut expect_key = false;
    let mut i = 0;
    while let Some(at) = next_token(body, i) {
        i = at;
        match body[i] {
            b'{' => {
                open.push(Open { object: true, key: key.take() });
                expect_key = true;
            }
            b'[' => open.push(Open { object: false, key: key.take() }),
            b'}' | b']' => {
                open.pop();
                (key, expect_key) = (None, false);
            }
            b',' => (key, expect_key) = (None, open.last().is_some_and(|o| o.object)),
            _ => {
                let (end, escaped) = string_end(body, i)?;
                if expect_key {
                    (key, expect_key) = (Some((i + 1, end)), false);
                } else {
                    // A string in an array counts as its array's key's.
                    let under = key.take().or_else(|| open.last().and_then(|o| o.key));
                    if is_text(body, under, skip) {
                        if let Some(new) = rewrite(&text_of(&body[i..=end], escaped)) {
                            let buf = out.get_or_insert_with(|| Vec::with_capacity(body.len() + 64));
                            buf.extend_from_slice(&body[copied..i]);
                            push_json_string(buf, &new);
                            copied = end + 1;
                        }
                    }
                }
                i = end;
            }
        }
        i += 1;
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

/// Bytes the walk stops at: what opens or closes a value, separates two, or starts a string.
/// The rest (`:`, numbers, `true`, spaces) is passed over a table lookup at a time, not through
/// the walk's `match` (a compare chain there cost ~9 instructions a byte, callgrind).
static TOKEN: [bool; 256] = {
    let mut table = [false; 256];
    let mut k = 0;
    let tokens = b"{}[],\"";
    while k < tokens.len() {
        table[tokens[k] as usize] = true;
        k += 1;
    }
    table
};

/// Where the next byte of `TOKEN` is, from `from` on.
#[inline]
fn next_token(body: &[u8], from: usize) -> Option<usize> {
    let rest = body.get(from..)?;
    rest.iter().position(|&b| TOKEN[usize::from(b)]).map(|at| from + at)
}

/// The index of the quote closing the string that opens at `start`, and whether the string has
/// an escape (a backslash) before it.
#[inline(always)]
fn string_end(body: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut j = start + 1;
    let mut escaped = false;
    // Keys and most values close within a few bytes: eight at a time in a word there (memchr's
    // vectorised search costs dozens of instructions to set up, a byte loop ~9 a byte), memchr
    // past them. Inline: a body's strings are most of its walk (a call each was a third of it).
    for _ in 0..4 {
        let Some(word) = body.get(j..).and_then(<[u8]>::first_chunk::<8>) else { break };
        let hits = quote_or_backslash(u64::from_le_bytes(*word));
        if hits == 0 {
            j += 8;
            continue;
        }
        let at = j + (hits.trailing_zeros() / 8) as usize;
        if word[at - j] == b'"' {
            return Some((at, escaped));
        }
        (j, escaped) = (at + 2, true);
    }
    loop {
        let at = j + memchr::memchr2(b'"', b'\\', body.get(j..)?)?;
        if body[at] == b'\\' {
            (j, escaped) = (at + 2, true);
        } else {
            return Some((at, escaped));
        }
    }
}

/// The high bit of each byte of `word` that is a `"` or a `\\`, exact up to the first one (the
/// zero-byte test's borrow can only flag bytes after a true match; only the first is used).
fn quote_or_backslash(word: u64) -> u64 {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |x: u64| x.wrapping_sub(LOW) & !x & HIGH;
    zero_bytes(word ^ (LOW * u64::from(b'"'))) | zero_bytes(word ^ (LOW * u64::from(b'\\')))
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

    #[test]
    fn strings_end_at_their_closing_quote_short_or_long() {
        let long = |n: usize, tail: &str| "x".repeat(n) + tail;
        let (short, edge) = (long(23, ""), long(24, ""));
        let (escaped_at_the_edge, escaped_far) = (long(22, r#"\"y"#), long(40, r#"\"z"#));
        for inner in ["", "a", r#"a\"b"#, r"\\", &short[..], &edge[..], &escaped_at_the_edge[..], &escaped_far[..]] {
            let body = format!("\"{inner}\",1");
            let escaped = inner.contains('\\');
            assert_eq!(string_end(body.as_bytes(), 0), Some((inner.len() + 1, escaped)), "{inner:?}");
        }
        // Every position of the closing quote and of an escape, across the word boundaries.
        for n in 0..40 {
            for e in 0..n {
                let inner = format!("{}\\\"{}", "x".repeat(e), "y".repeat(n - e));
                let body = format!("\"{inner}\"tail\"");
                assert_eq!(string_end(body.as_bytes(), 0), Some((inner.len() + 1, true)), "{inner:?}");
            }
        }
        assert_eq!(string_end(br#""open \""#, 0), None);
        assert_eq!(string_end(br#""open"#, 0), None);
    }

    #[test]
    fn arrays_of_texts_and_keys_after_nested_values() {
        let body = br#"{"input":["a bob","b"],"o":{"x":1},"stop":["bob"],"prompt":"bob"}"#;
        let out = String::from_utf8(rewrite_texts(body, not_text, upper_if("bob")).unwrap()).unwrap();
        assert_eq!(out, r#"{"input":["a BOB","b"],"o":{"x":1},"stop":["BOB"],"prompt":"BOB"}"#);
        assert!(rewrite_texts(br#"{"a":"unterminated"#, not_text, upper_if("a")).is_none());
    }
}
