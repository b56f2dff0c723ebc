//! One OpenAI-style stream chunk as the usage tap reads it, in a single pass over its bytes: its
//! `usage`, whether it carries choices, and whether it has a top-level field of the backend's own
//! (llama.cpp's `timings`) — keys read in place, every other value skipped unparsed.

use std::borrow::Cow;
use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::super::extract::WireUsage;

/// The fields every OpenAI-compatible server's chunk has; anything else is the backend's own.
pub(super) const CHUNK_FIELDS: [&str; 9] =
    ["id", "object", "created", "model", "system_fingerprint", "service_tier", "choices", "usage", "obfuscation"];

pub(super) struct Chunk {
    pub usage: Option<WireUsage>,
    /// It carries at least one choice (a usage-only chunk has `"choices": []`, or none).
    pub has_choices: bool,
    /// A top-level field outside [`CHUNK_FIELDS`].
    pub has_own_fields: bool,
}

/// A key as it stands in the bytes (owned only when it has escapes).
#[derive(Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

impl<'de> Deserialize<'de> for Chunk {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Chunk, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Chunk;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a stream chunk object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Chunk, A::Error> {
                let mut chunk = Chunk { usage: None, has_choices: false, has_own_fields: false };
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    match key.as_ref() {
                        "usage" => chunk.usage = map.next_value()?,
                        "choices" => {
                            let choices: Option<Vec<IgnoredAny>> = map.next_value()?;
                            chunk.has_choices = choices.is_some_and(|c| !c.is_empty());
                        }
                        other => {
                            chunk.has_own_fields |= !CHUNK_FIELDS.contains(&other);
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(chunk)
            }
        }
        deserializer.deserialize_map(Fields)
    }
}
