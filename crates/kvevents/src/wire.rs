//! The engines' event payloads, decoded: a msgpack batch of `BlockStored`, `BlockRemoved` and
//! `AllBlocksCleared`, in every encoding vLLM and SGLang have shipped.
//!
//! - The batch: a positional array `[ts, events, rank]` (vLLM ≤ 0.34, SGLang) or a map
//!   `{ts, events, data_parallel_rank}` (vLLM after #42892).
//! - An event: a map with a `type` key (vLLM ≥ 0.10, SGLang) or a positional array whose first
//!   element is the tag (vLLM's first releases), fields in declaration order.
//! - Block hashes: unsigned or signed integers, or bytes (vLLM's `ExternalBlockHash`).
//! - Token ids: integers, or `[a, b]` pairs (SGLang's bigram keys under speculative decoding,
//!   whose first element is the token).
//!
//! Fields are read by name (or position) and anything else is ignored, so a field added later
//! decodes as before.

use rmpv::Value;

/// An engine's identifier for a block, folded to 64 bits (byte hashes are digested).
pub type EngineHash = u64;

/// Where an engine keeps a block: GPU memory first, then slower tiers worth less.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    Gpu = 0,
    Cpu = 1,
    /// Disk, a remote pool, anything further.
    Other = 2,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::Gpu, Tier::Cpu, Tier::Other];

    /// `medium` as engines write it: none or `GPU` is device memory.
    pub fn from_medium(medium: Option<&str>) -> Tier {
        match medium.map(str::to_ascii_uppercase).as_deref() {
            None | Some("GPU") | Some("HBM") | Some("DEVICE") => Tier::Gpu,
            Some(m) if m.starts_with("CPU") || m == "HOST" => Tier::Cpu,
            Some(_) => Tier::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Gpu => "gpu",
            Tier::Cpu => "cpu",
            Tier::Other => "other",
        }
    }

    /// What one block held in this tier is worth to a prompt, against one in GPU memory.
    pub fn weight(self) -> f64 {
        match self {
            Tier::Gpu => 1.0,
            Tier::Cpu => 0.5,
            Tier::Other => 0.25,
        }
    }
}

/// Blocks an engine stored: `token_ids` holds `block_hashes.len()` blocks of `block_size`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub block_hashes: Vec<EngineHash>,
    pub parent: Option<EngineHash>,
    pub token_ids: Vec<u32>,
    /// Absent in some encodings: the configured block size applies.
    pub block_size: Option<usize>,
    pub tier: Tier,
    pub lora_name: Option<String>,
    /// Per block, what else went into the engine's hash (multimodal ids, cache salt), as msgpack
    /// bytes; `None` for a block with nothing else (the LoRA name, listed first, is left out: it
    /// is keyed on its own).
    pub extra_keys: Vec<Option<Vec<u8>>>,
    /// The KV-cache group (hybrid attention); 0 when absent.
    pub group: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Stored(Stored),
    Removed {
        block_hashes: Vec<EngineHash>,
        tier: Tier,
        group: u32,
    },
    Cleared,
    /// An event type this decoder does not know (kept so counts stay honest).
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The engine's clock, seconds since the epoch, when the batch was made.
    pub ts: f64,
    pub events: Vec<Event>,
}

/// Why a payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(what: impl Into<String>) -> DecodeError {
    DecodeError(what.into())
}

/// One payload (the third frame of a published message, the second of a replayed one).
pub fn decode(payload: &[u8]) -> Result<Batch, DecodeError> {
    let value = rmpv::decode::read_value(&mut &payload[..]).map_err(|e| bad(format!("not msgpack: {e}")))?;
    let (ts, events) = match &value {
        Value::Array(items) => (items.first(), items.get(1)),
        Value::Map(_) => (field(&value, "ts"), field(&value, "events")),
        _ => return Err(bad("a batch is an array or a map")),
    };
    let ts = ts.and_then(Value::as_f64).unwrap_or(0.0);
    let Some(Value::Array(events)) = events else { return Err(bad("a batch without events")) };
    let events = events.iter().map(event).collect::<Result<_, _>>()?;
    Ok(Batch { ts, events })
}

/// `name`'s value in a msgpack map.
fn field<'v>(map: &'v Value, name: &str) -> Option<&'v Value> {
    let Value::Map(entries) = map else { return None };
    entries.iter().find(|(k, _)| k.as_str() == Some(name)).map(|(_, v)| v).filter(|v| !v.is_nil())
}

/// An event's fields by name, whichever encoding it came in: positional fields are named by
/// their declaration order.
struct Fields<'v> {
    value: &'v Value,
    positional: Option<&'v [Value]>,
    order: &'static [&'static str],
}

impl<'v> Fields<'v> {
    fn get(&self, name: &str) -> Option<&'v Value> {
        match self.positional {
            Some(items) => {
                let at = self.order.iter().position(|n| *n == name)?;
                items.get(at + 1).filter(|v| !v.is_nil())
            }
            None => field(self.value, name),
        }
    }
}

const STORED: &[&str] = &[
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
];
const REMOVED: &[&str] = &["block_hashes", "medium", "group_idx"];

fn event(value: &Value) -> Result<Event, DecodeError> {
    let (tag, positional) = match value {
        Value::Map(_) => (field(value, "type").and_then(Value::as_str), None),
        Value::Array(items) => (items.first().and_then(Value::as_str), Some(&items[..])),
        _ => return Err(bad("an event is a map or an array")),
    };
    let fields = |order| Fields { value, positional, order };
    match tag {
        Some("BlockStored") => stored(&fields(STORED)).map(Event::Stored),
        Some("BlockRemoved") => {
            let f = fields(REMOVED);
            Ok(Event::Removed {
                block_hashes: hashes(f.get("block_hashes"))?,
                tier: Tier::from_medium(f.get("medium").and_then(Value::as_str)),
                group: f.get("group_idx").and_then(Value::as_u64).unwrap_or(0) as u32,
            })
        }
        Some("AllBlocksCleared") => Ok(Event::Cleared),
        Some(_) => Ok(Event::Other),
        None => Err(bad("an event without its type")),
    }
}

fn stored(f: &Fields<'_>) -> Result<Stored, DecodeError> {
    let block_hashes = hashes(f.get("block_hashes"))?;
    let parent = f.get("parent_block_hash").map(hash).transpose()?;
    let Some(Value::Array(tokens)) = f.get("token_ids") else { return Err(bad("BlockStored without token_ids")) };
    let token_ids = tokens.iter().map(token).collect::<Result<_, _>>()?;
    let lora_name = f.get("lora_name").and_then(Value::as_str).map(str::to_owned);
    let extra_keys = match f.get("extra_keys") {
        Some(Value::Array(per_block)) => per_block.iter().map(|e| extra_key(e, lora_name.as_deref())).collect(),
        _ => Vec::new(),
    };
    Ok(Stored {
        block_hashes,
        parent,
        token_ids,
        block_size: f.get("block_size").and_then(Value::as_u64).map(|n| n as usize).filter(|&n| n > 0),
        tier: Tier::from_medium(f.get("medium").and_then(Value::as_str)),
        lora_name,
        extra_keys,
        group: f.get("group_idx").and_then(Value::as_u64).unwrap_or(0) as u32,
    })
}

fn hashes(value: Option<&Value>) -> Result<Vec<EngineHash>, DecodeError> {
    match value {
        Some(Value::Array(items)) => items.iter().map(hash).collect(),
        None => Ok(Vec::new()),
        Some(_) => Err(bad("block_hashes is not a list")),
    }
}

/// A block hash as 64 bits: an integer's bits (signed or not), or a digest of bytes.
fn hash(value: &Value) -> Result<EngineHash, DecodeError> {
    match value {
        Value::Integer(n) => n.as_u64().or_else(|| n.as_i64().map(|i| i as u64)).ok_or_else(|| bad("a hash")),
        Value::Binary(b) => Ok(digest(b)),
        Value::String(s) => Ok(digest(s.as_bytes())),
        _ => Err(bad("a block hash is an integer or bytes")),
    }
}

fn digest(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x6b76_6861_7368).hash_one(bytes)
}

/// A token id, or a bigram's first token.
fn token(value: &Value) -> Result<u32, DecodeError> {
    let id = match value {
        Value::Array(pair) => pair.first().and_then(Value::as_u64),
        v => v.as_u64(),
    };
    id.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| bad("a token id is a non-negative integer"))
}

/// One block's extra keys as bytes, the LoRA name (their first entry, when the event names one)
/// left out; `None` when nothing else remains.
fn extra_key(value: &Value, lora: Option<&str>) -> Option<Vec<u8>> {
    let Value::Array(items) = value else { return None };
    let skip = usize::from(lora.is_some() && items.first().and_then(Value::as_str) == lora);
    let rest = &items[skip.min(items.len())..];
    if rest.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &Value::Array(rest.to_vec())).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    fn s(text: &str) -> Value {
        Value::from(text)
    }

    fn stored_map() -> Value {
        Value::Map(vec![
            (s("type"), s("BlockStored")),
            (s("block_hashes"), Value::Array(vec![Value::from(-5i64), Value::from(u64::MAX)])),
            (s("parent_block_hash"), Value::Nil),
            (s("token_ids"), Value::Array((0..4).map(Value::from).collect())),
            (s("block_size"), Value::from(2)),
            (s("lora_id"), Value::Nil),
            (s("medium"), s("CPU_PINNED")),
            (s("some_field_added_later"), Value::from(7)),
        ])
    }

    #[test]
    fn a_map_batch_of_map_events_decodes() {
        let batch = Value::Map(vec![
            (s("ts"), Value::from(12.5)),
            (s("events"), Value::Array(vec![stored_map(), Value::Map(vec![(s("type"), s("AllBlocksCleared"))])])),
        ]);
        let got = decode(&encode(&batch)).unwrap();
        assert_eq!(got.ts, 12.5);
        let Event::Stored(stored) = &got.events[0] else { panic!("{got:?}") };
        assert_eq!(stored.block_hashes, vec![-5i64 as u64, u64::MAX]);
        assert_eq!((stored.block_size, stored.tier, stored.parent), (Some(2), Tier::Cpu, None));
        assert_eq!(got.events[1], Event::Cleared);
    }

    #[test]
    fn positional_events_bigrams_and_byte_hashes_decode() {
        let pairs = Value::Array((0..4).map(|i| Value::Array(vec![Value::from(i), Value::from(i + 1)])).collect());
        let event = Value::Array(vec![
            s("BlockStored"),
            Value::Array(vec![Value::Binary(vec![1; 32]), Value::Binary(vec![2; 32])]),
            Value::Binary(vec![0; 32]),
            pairs,
            Value::from(2),
            Value::Nil,
            s("GPU"),
        ]);
        let removed = Value::Array(vec![s("BlockRemoved"), Value::Array(vec![Value::Binary(vec![1; 32])]), Value::Nil]);
        let batch = Value::Array(vec![Value::from(1.0), Value::Array(vec![event, removed]), Value::Nil]);
        let got = decode(&encode(&batch)).unwrap();
        let Event::Stored(stored) = &got.events[0] else { panic!("{got:?}") };
        assert_eq!(stored.token_ids, vec![0, 1, 2, 3]);
        assert_eq!(stored.parent, Some(digest(&[0; 32])));
        assert_eq!(got.events[1], Event::Removed { block_hashes: vec![digest(&[1; 32])], tier: Tier::Gpu, group: 0 });
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for payload in [&b""[..], b"\xc1", &encode(&Value::from(3)), &encode(&Value::Array(vec![Value::from(1)]))] {
            assert!(decode(payload).is_err(), "{payload:?}");
        }
        let no_tokens =
            Value::Array(vec![Value::from(1.0), Value::Array(vec![Value::Map(vec![(s("type"), s("BlockStored"))])])]);
        assert!(decode(&encode(&no_tokens)).is_err());
    }
}
