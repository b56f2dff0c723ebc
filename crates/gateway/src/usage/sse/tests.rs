//! Tests of `SseUsageTap` on recorded-shape OpenAI streams: stripping, frame splits, zero-copy.

use super::*;

fn chunk(content: &str) -> String {
    let content = serde_json::to_string(content).unwrap();
    format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{content}}},\"finish_reason\":null}}]}}\n\n")
}

const ROLE: &str =
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
const USAGE: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n";
const DONE: &str = "data: [DONE]\n\n";
const TOKENS: Tokens = Tokens { prompt: 9, completion: 3, total: 12, cached: 0, cache_write: 0 };

/// Feed `frames`, then `finish`; everything the client would receive.
fn relay(tap: &mut SseUsageTap, frames: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        if let Some(b) = tap.push(frame) {
            assert!(!b.is_empty(), "never forwards an empty frame");
            out.extend_from_slice(&b);
        }
    }
    out.extend_from_slice(&tap.finish().unwrap_or_default());
    out
}

#[test]
fn usage_chunk_in_the_done_frame_is_stripped_without_a_copy() {
    let frame = Bytes::from(format!("{USAGE}{DONE}"));
    let mut tap = SseUsageTap::new(true);
    let out = tap.push(frame.clone()).unwrap();
    assert_eq!(&out[..], DONE.as_bytes());
    assert_eq!(out.as_ptr(), frame[USAGE.len()..].as_ptr(), "a slice of the frame, not a copy");
    assert_eq!(tap.usage(), Some(TOKENS));
    assert!(tap.saw_done());
    assert_eq!(tap.finish(), None);
}

#[test]
fn usage_chunk_alone_is_dropped_and_kept_when_not_stripping() {
    let mut tap = SseUsageTap::new(true);
    assert_eq!(tap.push(Bytes::from_static(USAGE.as_bytes())), None);
    assert_eq!(tap.usage(), Some(TOKENS));
    let mut tap = SseUsageTap::new(false);
    let frame = Bytes::from_static(USAGE.as_bytes());
    assert_eq!(tap.push(frame.clone()).unwrap().as_ptr(), frame.as_ptr());
    assert_eq!(tap.usage(), Some(TOKENS));
}

#[test]
fn frames_pass_through_zero_copy_when_nothing_is_stripped() {
    for strip in [true, false] {
        let mut tap = SseUsageTap::new(strip);
        let events =
            [ROLE.to_owned(), chunk("Hel"), chunk("lo"), format!("{}{}", chunk(" "), chunk("there")), DONE.into()];
        for event in events {
            let frame = Bytes::from(event);
            let out = tap.push(frame.clone()).unwrap();
            assert_eq!((out.as_ptr(), out.len()), (frame.as_ptr(), frame.len()), "strip={strip}");
        }
        assert_eq!(tap.content_chars(), "Hello there".len());
        assert_eq!(tap.content_events(), 4, "the empty role delta is not content");
        assert!(tap.saw_done());
        assert_eq!(tap.usage(), None);
        assert_eq!(tap.finish(), None);
    }
}

#[test]
fn split_across_three_frames_at_every_boundary() {
    let content = "Hé\"y\n!".chars().count();
    for sep in ["\n\n", "\r\n\r\n"] {
        let parts =
            [ROLE.to_owned(), chunk("Hé\"y\n"), chunk("!"), USAGE.into(), DONE.into()].map(|p| p.replace("\n\n", sep));
        let stream = parts.concat();
        let stripped = [&parts[..3], &parts[4..]].concat().concat();
        let bytes = Bytes::from(stream.clone());
        // Second splits: right after the first, around every line end, and a sample elsewhere.
        let near_line_ends: Vec<usize> =
            memchr::memchr_iter(b'\n', &bytes).flat_map(|p| p.saturating_sub(2)..p + 3).collect();
        for i in 0..=bytes.len() {
            let js = (i..i + 6).chain(near_line_ends.iter().copied()).chain((0..bytes.len()).step_by(17));
            for j in js.filter(|&j| j >= i && j <= bytes.len()) {
                for strip in [true, false] {
                    let mut tap = SseUsageTap::new(strip);
                    let out = relay(&mut tap, [bytes.slice(..i), bytes.slice(i..j), bytes.slice(j..)]);
                    let expected = if strip { &stripped } else { &stream };
                    assert_eq!(String::from_utf8_lossy(&out), expected.as_str(), "split at {i},{j} strip={strip}");
                    assert_eq!(tap.usage(), Some(TOKENS), "split at {i},{j}");
                    assert_eq!(tap.content_chars(), content, "split at {i},{j}");
                    assert!(tap.saw_done());
                }
            }
        }
    }
}

#[test]
fn usage_on_a_chunk_with_choices_is_read_not_stripped() {
    let event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\n";
    let mut tap = SseUsageTap::new(true);
    let frame = Bytes::from_static(event.as_bytes());
    assert_eq!(tap.push(frame.clone()).unwrap().as_ptr(), frame.as_ptr());
    assert_eq!(tap.usage(), Some(Tokens { prompt: 1, completion: 1, total: 2, cached: 0, cache_write: 0 }));
    // A later null usage does not erase it.
    tap.push(Bytes::from_static(b"data: {\"choices\":[],\"usage\":null}\n\n"));
    assert_eq!(tap.usage().map(|t| t.total), Some(2));
}

#[test]
fn unterminated_last_event_is_released_by_finish() {
    let mut tap = SseUsageTap::new(true);
    let first = chunk("a");
    let out = tap.push(Bytes::from(format!("{first}data: [DO"))).unwrap();
    assert_eq!(&out[..], first.as_bytes(), "the partial event is held back");
    assert_eq!(tap.push(Bytes::from_static(b"NE]\n")), None);
    assert!(!tap.saw_done());
    assert_eq!(tap.finish().as_deref(), Some(&b"data: [DONE]\n"[..]));
    assert!(tap.saw_done());
}

#[test]
fn comments_multiline_data_and_other_fields() {
    let stream = ": keep-alive\n\nevent: message\nid: 7\ndata: {\"choices\":[],\ndata: \"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
    let mut tap = SseUsageTap::new(true);
    let out = relay(&mut tap, [Bytes::from_static(stream.as_bytes())]);
    assert_eq!(String::from_utf8(out).unwrap(), ": keep-alive\n\ndata: [DONE]\n\n");
    assert_eq!(tap.usage(), Some(Tokens { prompt: 4, completion: 2, total: 6, cached: 0, cache_write: 0 }));
}

#[test]
fn content_chars_count_text_strings_only() {
    let cases: [(&str, usize); 7] = [
        (r#"{"choices":[{"delta":{"content":"héllo"}}]}"#, 5),
        (r#"{"choices":[{"delta":{"content":"a\"b\\c\n\u00e9"}}]}"#, 7),
        (r#"{"choices":[{"text":"abc","index":0}]}"#, 3),
        (r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f","arguments":"{\"x\":1}"}}]}}]}"#, 7),
        (r#"{"choices":[{"delta":{"reasoning_content": "hmm","content":null}}]}"#, 3),
        (r#"{"choices":[{"delta":{"role":"assistant"},"logprobs":{"content":[{"token":"x"}]}}]}"#, 0),
        (r#"{"choices":[{"delta":{"content":"say \"content\":\"no\""}}]}"#, 18),
    ];
    for (json, chars) in cases {
        assert_eq!(content_chars(json.as_bytes()), chars, "{json}");
    }
}

#[test]
fn an_endless_event_is_forwarded_untouched() {
    let big = vec![b'x'; MAX_CARRY / 2 + 1];
    let frames =
        [Bytes::from_static(b"data: "), Bytes::from(big.clone()), Bytes::from(big), Bytes::from_static(b"\n\n")];
    let input: Vec<u8> = frames.iter().flat_map(|f| f.to_vec()).collect();
    for strip in [true, false] {
        let mut tap = SseUsageTap::new(strip);
        assert_eq!(relay(&mut tap, frames.clone()), input, "strip={strip}");
    }
}

/// The end of a real llama.cpp `llama-server` stream (fixture): its usage chunk, which also carries
/// llama.cpp's `timings`, is read, and reaches the client without its `usage` but with the
/// `timings`; everything else passes, split at every byte.
#[test]
fn a_real_llama_server_stream_tail() {
    let tail =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/llama-server/stream-tail.txt")).unwrap();
    let usage_event = tail.split(|&b| b == b'\n').find(|l| l.windows(8).any(|w| w == b"\"usage\":")).unwrap().to_vec();
    for split in 0..tail.len() {
        let mut tap = SseUsageTap::new(true);
        let out = relay(&mut tap, [Bytes::copy_from_slice(&tail[..split]), Bytes::copy_from_slice(&tail[split..])]);
        assert_eq!(
            tap.usage(),
            Some(Tokens { prompt: 36, completion: 12, total: 48, cached: 35, cache_write: 0 }),
            "split at {split}"
        );
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("\"finish_reason\":\"stop\"") && out.ends_with("data: [DONE]\n\n"), "{out}");
        assert!(!out.contains(std::str::from_utf8(&usage_event).unwrap()), "stripped");
        assert!(!out.contains("\"usage\"") && !out.contains("prompt_tokens"), "{out}");
        let timings = out.lines().find(|l| l.contains("\"timings\"")).expect("the timings reach the client");
        let chunk: serde_json::Value = serde_json::from_str(timings.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(
            (chunk["timings"]["cache_n"].as_u64(), chunk["choices"].as_array().map(Vec::len)),
            (Some(35), Some(0))
        );
        assert!(out.find("\"timings\"") < out.find("[DONE]"), "in order: {out}");
    }
}
