//! `SseUsageTap`: watches an OpenAI-style SSE stream frame by frame as the relay forwards it —
//! the usage chunk's token counts, how much content went by (for estimating when no usage
//! comes), whether `[DONE]` arrived — and removes the usage-only chunk when the gateway asked
//! for it on the client's behalf.
//!
//! Cost per frame: one `memchr` pass for event ends, a short scan of each event for content
//! strings, and a JSON parse only of events containing the bytes `"usage"`. A frame is forwarded
//! as the same `Bytes` (no copy) unless something in it is removed or held back.
//!
//! Events end at a blank line (`\n\n`, `\r\n\r\n`). An event split across frames is kept in a
//! small carry-over buffer until complete. With stripping on, its bytes are also held back from
//! the client until then (a client cannot use half an event anyway), because the event might be
//! the one to remove; call `finish` when the upstream ends to release anything still held.

use std::borrow::Cow;
use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};
use memchr::memmem;

use super::extract::WireUsage;
use super::Tokens;
use chunk::Chunk;

/// An "event" longer than this is not SSE as we know it: stop tapping, forward as it comes.
const MAX_CARRY: usize = 1 << 20;

static USAGE_KEY: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"\"usage\""));
static KEY_END: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"\":"));

/// JSON string members counted as generated text (chat, completions, tool calls, reasoning).
const CONTENT_KEYS: [&[u8]; 6] = [b"content", b"text", b"arguments", b"reasoning_content", b"reasoning", b"refusal"];

#[derive(Debug, Default)]
pub struct SseUsageTap {
    strip: bool,
    /// Gave up on a stream that never ends its events: forward everything untouched.
    bypass: bool,
    carry: Vec<u8>,
    usage: Option<Tokens>,
    content_chars: usize,
    content_events: usize,
    done: bool,
}

impl SseUsageTap {
    /// `strip_usage_chunk`: remove the usage-only chunk (`"choices":[]`) from what the client
    /// sees — set it exactly when `inject_include_usage` returned `Some`.
    pub fn new(strip_usage_chunk: bool) -> Self {
        SseUsageTap { strip: strip_usage_chunk, ..Self::default() }
    }

    /// Observe one upstream frame; returns what to forward to the client (`None`: nothing).
    pub fn push(&mut self, frame: Bytes) -> Option<Bytes> {
        if self.bypass {
            return non_empty(frame);
        }
        let mut out = Out::Slice(0, 0);
        let mut pos = 0;
        if !self.carry.is_empty() {
            let Some(taken) = boundary_across(&self.carry, &frame) else {
                return self.carry_whole(frame);
            };
            self.carry.extend_from_slice(&frame[..taken]);
            let carried = std::mem::take(&mut self.carry);
            match self.observe(&carried) {
                Fate::Keep if self.strip => out.keep_bytes(&carried),
                Fate::Replace(kept) => out.keep_bytes(&kept),
                _ => {}
            }
            self.carry = carried;
            self.carry.clear();
            pos = taken;
        }
        while let Some(len) = event_end(&frame[pos..]) {
            match self.observe(&frame[pos..pos + len]) {
                Fate::Keep if self.strip => out.keep(&frame, pos, pos + len),
                Fate::Replace(kept) => out.append(&frame, &kept),
                _ => {}
            }
            pos += len;
        }
        if pos < frame.len() {
            if frame.len() - pos > MAX_CARRY {
                self.bypass = true;
                out.keep(&frame, pos, frame.len());
            } else {
                self.carry.extend_from_slice(&frame[pos..]);
            }
        }
        if !self.strip {
            return non_empty(frame);
        }
        out.finish(frame)
    }

    /// The upstream ended: account for an unterminated last event and return any bytes still
    /// held back from the client.
    pub fn finish(&mut self) -> Option<Bytes> {
        if self.carry.is_empty() || self.bypass {
            return None;
        }
        let carried = std::mem::take(&mut self.carry);
        match self.observe(&carried) {
            Fate::Keep if self.strip => Some(Bytes::from(carried)),
            Fate::Replace(kept) => Some(Bytes::from(kept)),
            _ => None,
        }
    }

    /// Token counts from the last event that carried a non-null `usage`.
    pub fn usage(&self) -> Option<Tokens> {
        self.usage
    }

    /// Characters of generated text seen (content, text, tool-call arguments, reasoning), for
    /// `estimate_tokens` when the backend reports no usage.
    pub fn content_chars(&self) -> usize {
        self.content_chars
    }

    /// Events that carried some generated text (most servers send about one token per event).
    pub fn content_events(&self) -> usize {
        self.content_events
    }

    pub fn saw_done(&self) -> bool {
        self.done
    }

    /// The whole frame continues the carried event.
    fn carry_whole(&mut self, frame: Bytes) -> Option<Bytes> {
        if self.carry.len() + frame.len() <= MAX_CARRY {
            self.carry.extend_from_slice(&frame);
            return if self.strip { None } else { non_empty(frame) };
        }
        self.bypass = true;
        let held = std::mem::take(&mut self.carry);
        if !self.strip {
            return non_empty(frame);
        }
        let mut out = BytesMut::with_capacity(held.len() + frame.len());
        out.extend_from_slice(&held);
        out.extend_from_slice(&frame);
        Some(out.freeze())
    }

    /// Account for one complete event, and say what of it the client gets.
    fn observe(&mut self, event: &[u8]) -> Fate {
        let Some(data) = event_data(event) else { return Fate::Keep };
        if data.trim_ascii() == b"[DONE]" {
            self.done = true;
            return Fate::Keep;
        }
        let chars = content_chars(&data);
        if chars > 0 {
            self.content_chars += chars;
            self.content_events += 1;
        }
        if USAGE_KEY.find(&data).is_none() {
            return Fate::Keep;
        }
        let Ok(chunk) = serde_json::from_slice::<Chunk>(&data) else { return Fate::Keep };
        let Some(tokens) = chunk.usage.as_ref().and_then(WireUsage::tokens) else { return Fate::Keep };
        self.usage = Some(tokens);
        match (chunk.has_choices, self.strip && chunk.has_own_fields) {
            (true, _) => Fate::Keep,
            (false, true) => without_usage(&data).map_or(Fate::Remove, Fate::Replace),
            (false, false) => Fate::Remove,
        }
    }
}

/// What the client gets of an event.
enum Fate {
    Keep,
    /// The usage-only chunk the gateway asked for on the client's behalf.
    Remove,
    /// That chunk, when the backend added fields of its own to it (llama.cpp's `timings`), as an
    /// event without its `usage`: what the backend adds reaches the client.
    Replace(Vec<u8>),
}

/// The usage-only chunk `data`, which has fields of the backend's own, as an event without
/// `usage` (read whole only then: once per stream, from such backends).
fn without_usage(data: &[u8]) -> Option<Vec<u8>> {
    let mut chunk: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(data).ok()?;
    chunk.remove("usage");
    let mut event = b"data: ".to_vec();
    serde_json::to_writer(&mut event, &chunk).ok()?;
    event.extend_from_slice(b"\n\n");
    Some(event)
}

fn non_empty(frame: Bytes) -> Option<Bytes> {
    (!frame.is_empty()).then_some(frame)
}

/// What to forward from one frame: a single slice of it (no copy) until that is not enough.
enum Out {
    Slice(usize, usize),
    Owned(BytesMut),
}

impl Out {
    fn keep(&mut self, frame: &Bytes, start: usize, end: usize) {
        match self {
            Out::Slice(a, b) if a == b => *self = Out::Slice(start, end),
            Out::Slice(_, b) if *b == start => *b = end,
            Out::Slice(a, b) => {
                let mut owned = BytesMut::with_capacity(frame.len());
                owned.extend_from_slice(&frame[*a..*b]);
                owned.extend_from_slice(&frame[start..end]);
                *self = Out::Owned(owned);
            }
            Out::Owned(owned) => owned.extend_from_slice(&frame[start..end]),
        }
    }

    /// Bytes of the gateway's own after what is kept so far of `frame`.
    fn append(&mut self, frame: &Bytes, bytes: &[u8]) {
        if let Out::Slice(a, b) = *self {
            let mut owned = BytesMut::with_capacity(frame.len() + bytes.len());
            owned.extend_from_slice(&frame[a..b]);
            *self = Out::Owned(owned);
        }
        if let Out::Owned(owned) = self {
            owned.extend_from_slice(bytes);
        }
    }

    /// Bytes from the carry-over: they come before anything of the frame.
    fn keep_bytes(&mut self, bytes: &[u8]) {
        let mut owned = BytesMut::with_capacity(bytes.len() + 256);
        owned.extend_from_slice(bytes);
        *self = Out::Owned(owned);
    }

    fn finish(self, frame: Bytes) -> Option<Bytes> {
        match self {
            Out::Slice(a, b) if a == b => None,
            Out::Slice(0, b) if b == frame.len() => Some(frame),
            Out::Slice(a, b) => Some(frame.slice(a..b)),
            Out::Owned(owned) => Some(owned.freeze()),
        }
    }
}

/// Length of the first complete event in `buf`, blank line included.
fn event_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', buf).find_map(|i| match buf.get(i + 1) {
        Some(b'\n') => Some(i + 2),
        Some(b'\r') if buf.get(i + 2) == Some(&b'\n') => Some(i + 3),
        _ => None,
    })
}

/// Bytes of `frame` that complete the event in `carry` (which holds no complete event). A
/// blank line is at most 3 bytes, so one straddling the join lies in the last 2 bytes of
/// `carry` and the first 2 of `frame`.
fn boundary_across(carry: &[u8], frame: &[u8]) -> Option<usize> {
    let tail = &carry[carry.len().saturating_sub(2)..];
    let head = &frame[..frame.len().min(2)];
    let mut window = [0u8; 4];
    window[..tail.len()].copy_from_slice(tail);
    window[tail.len()..tail.len() + head.len()].copy_from_slice(head);
    match event_end(&window[..tail.len() + head.len()]) {
        Some(end) => Some(end - tail.len()),
        None => event_end(frame),
    }
}

/// The event's data: its `data:` lines joined by `\n` (borrowed when there is one).
fn event_data(event: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut data: Option<Cow<[u8]>> = None;
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(value) = line.strip_prefix(b"data:") else { continue };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        data = Some(match data {
            None => Cow::Borrowed(value),
            Some(prev) => {
                let mut joined = prev.into_owned();
                joined.push(b'\n');
                joined.extend_from_slice(value);
                Cow::Owned(joined)
            }
        });
    }
    data
}

/// Characters in the string values of `CONTENT_KEYS` members, without parsing the JSON: a key
/// is a `"…"` right before `:`, which cannot occur inside a string (its quotes are escaped).
fn content_chars(json: &[u8]) -> usize {
    let mut total = 0;
    for colon_quote in KEY_END.find_iter(json) {
        let Some(open) = memchr::memrchr(b'"', &json[..colon_quote]) else { continue };
        if !CONTENT_KEYS.contains(&&json[open + 1..colon_quote]) {
            continue;
        }
        let value = &json[colon_quote + 2..];
        let value = &value[value.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
        if let Some(string) = value.strip_prefix(b"\"") {
            total += string_chars(string);
        }
    }
    total
}

/// Characters of a JSON string body up to its closing quote; an escape is one character.
fn string_chars(s: &[u8]) -> usize {
    let utf8_chars = |b: &[u8]| b.iter().filter(|&&c| c & 0xC0 != 0x80).count();
    let mut chars = 0;
    let mut i = 0;
    while let Some(k) = memchr::memchr2(b'"', b'\\', &s[i..]) {
        chars += utf8_chars(&s[i..i + k]);
        i += k;
        if s[i] == b'"' {
            return chars;
        }
        chars += 1;
        i += if s.get(i + 1) == Some(&b'u') { 6 } else { 2 };
        if i >= s.len() {
            return chars;
        }
    }
    chars + utf8_chars(&s[i..])
}

mod chunk;

#[cfg(test)]
mod tests;
