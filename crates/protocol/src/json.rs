//! Reading a JSON body field by field, keeping every value raw until it is needed (so schemas and
//! tool arguments pass through byte for byte) and naming the field in every error; and writing JSON
//! strings straight into an output buffer.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::TranslateError;

/// Where a value sits in a body, for error messages: `messages[2].content`. Built on the stack as
/// a decoder descends and only formatted when something is wrong.
#[derive(Clone, Copy)]
pub(crate) enum At<'p> {
    Root,
    Key(&'p At<'p>, &'p str),
    Index(&'p At<'p>, usize),
}

impl<'p> At<'p> {
    pub(crate) fn key(&'p self, key: &'p str) -> At<'p> {
        At::Key(self, key)
    }

    pub(crate) fn index(&'p self, index: usize) -> At<'p> {
        At::Index(self, index)
    }
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Root => f.write_str("body"),
            At::Key(At::Root, key) => f.write_str(key),
            At::Key(parent, key) => write!(f, "{parent}.{key}"),
            At::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

/// A JSON string, borrowed from the input when it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text<'a>(pub Cow<'a, str>);

impl<'a> Text<'a> {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn into_owned(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// A JSON object's fields in body order, each value still raw text.
pub(crate) struct Object<'a> {
    fields: Vec<(Text<'a>, &'a RawValue)>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Object<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = Object<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<Text<'de>, &'de RawValue>()? {
                    fields.push(entry);
                }
                Ok(Object { fields })
            }
        }
        deserializer.deserialize_map(ObjectVisitor)
    }
}

impl<'a> Object<'a> {
    /// The field's raw value; `None` when it is absent or `null` (every API treats both alike).
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.fields.iter().find(|(name, _)| name.as_str() == key).map(|(_, value)| *value).filter(|v| v.get() != "null")
    }

    /// The field's raw value, or an error naming it when absent.
    pub(crate) fn require(&self, key: &str, at: &At<'_>) -> Result<&'a RawValue, TranslateError> {
        self.get(key).ok_or_else(|| TranslateError::invalid(format!("`{}` is required", at.key(key))))
    }

    pub(crate) fn fields(&self) -> impl Iterator<Item = (&str, &'a RawValue)> + '_ {
        self.fields.iter().map(|(name, value)| (name.as_str(), *value))
    }

    /// The `type` field, for tagged objects; empty when absent or not a string.
    pub(crate) fn tag(&self) -> Cow<'a, str> {
        match self.get("type").map(|raw| serde_json::from_str::<Text<'a>>(raw.get())) {
            Some(Ok(text)) => text.0,
            _ => Cow::Borrowed(""),
        }
    }
}

/// The kinds of JSON value, told apart by their first byte without parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

pub(crate) fn kind(raw: &RawValue) -> Kind {
    match raw.get().as_bytes().first() {
        Some(b'"') => Kind::String,
        Some(b'{') => Kind::Object,
        Some(b'[') => Kind::Array,
        Some(b't' | b'f') => Kind::Bool,
        Some(b'n') => Kind::Null,
        _ => Kind::Number,
    }
}

/// A request body's top-level object.
pub(crate) fn body(bytes: &[u8]) -> Result<Object<'_>, TranslateError> {
    serde_json::from_slice(bytes).map_err(|e| {
        if e.is_data() {
            TranslateError::invalid("the request body must be a JSON object")
        } else {
            TranslateError::invalid(format!("the request body is not valid JSON: {e}"))
        }
    })
}

pub(crate) fn object<'a>(raw: &'a RawValue, at: &At<'_>) -> Result<Object<'a>, TranslateError> {
    serde_json::from_str(raw.get()).map_err(|_| TranslateError::invalid(format!("`{at}` must be an object")))
}

pub(crate) fn array<'a>(raw: &'a RawValue, at: &At<'_>) -> Result<Vec<&'a RawValue>, TranslateError> {
    serde_json::from_str(raw.get()).map_err(|_| TranslateError::invalid(format!("`{at}` must be an array")))
}

pub(crate) fn string<'a>(raw: &'a RawValue, at: &At<'_>) -> Result<Cow<'a, str>, TranslateError> {
    serde_json::from_str::<Text<'a>>(raw.get())
        .map(|text| text.0)
        .map_err(|_| TranslateError::invalid(format!("`{at}` must be a string")))
}

pub(crate) fn u64_field(raw: &RawValue, at: &At<'_>) -> Result<u64, TranslateError> {
    serde_json::from_str(raw.get())
        .map_err(|_| TranslateError::invalid(format!("`{at}` must be a non-negative integer")))
}

pub(crate) fn i64_field(raw: &RawValue, at: &At<'_>) -> Result<i64, TranslateError> {
    serde_json::from_str(raw.get()).map_err(|_| TranslateError::invalid(format!("`{at}` must be an integer")))
}

pub(crate) fn f64_field(raw: &RawValue, at: &At<'_>) -> Result<f64, TranslateError> {
    serde_json::from_str(raw.get()).map_err(|_| TranslateError::invalid(format!("`{at}` must be a number")))
}

pub(crate) fn bool_field(raw: &RawValue, at: &At<'_>) -> Result<bool, TranslateError> {
    serde_json::from_str(raw.get()).map_err(|_| TranslateError::invalid(format!("`{at}` must be true or false")))
}

/// A string field, or an error when absent.
pub(crate) fn required_string<'a>(obj: &Object<'a>, key: &str, at: &At<'_>) -> Result<Cow<'a, str>, TranslateError> {
    string(obj.require(key, at)?, &at.key(key))
}

pub(crate) fn optional_string(obj: &Object<'_>, key: &str, at: &At<'_>) -> Result<Option<String>, TranslateError> {
    obj.get(key).map(|raw| string(raw, &at.key(key)).map(Cow::into_owned)).transpose()
}

pub(crate) fn optional_bool(obj: &Object<'_>, key: &str, at: &At<'_>) -> Result<Option<bool>, TranslateError> {
    obj.get(key).map(|raw| bool_field(raw, &at.key(key))).transpose()
}

/// A string or an array of strings (OpenAI's `stop`), as a list.
pub(crate) fn string_or_strings(raw: &RawValue, at: &At<'_>) -> Result<Vec<String>, TranslateError> {
    if kind(raw) == Kind::String {
        return Ok(vec![string(raw, at)?.into_owned()]);
    }
    serde_json::from_str(raw.get())
        .map_err(|_| TranslateError::invalid(format!("`{at}` must be a string or an array of strings")))
}

/// Appends `text` as a quoted JSON string.
pub(crate) fn push_str(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(byte >> 4) as usize],
                    HEX[(byte & 0xf) as usize],
                ]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends an unsigned integer.
pub(crate) fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Serialises a wire struct; a failure here means a non-string map key or similar bug, reported
/// rather than panicked on.
pub(crate) fn to_vec<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, TranslateError> {
    serde_json::to_vec(value).map_err(|e| TranslateError::invalid(format!("could not write JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_str_escapes_like_serde() {
        for text in ["plain", "quote \" and \\ slash", "lines\n\r\t", "\u{1}\u{1f}", "ünïcödé ✓", ""] {
            let mut out = Vec::new();
            push_str(&mut out, text);
            assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(text).unwrap());
        }
    }

    #[test]
    fn push_u64_writes_digits() {
        for n in [0, 7, 10, 12345, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }

    #[test]
    fn errors_name_the_field() {
        let body = br#"{"messages":[{"role":1}]}"#;
        let obj = super::body(body).unwrap();
        let root = At::Root;
        let at = root.key("messages");
        let items = array(obj.get("messages").unwrap(), &at).unwrap();
        let item_at = at.index(0);
        let message = object(items[0], &item_at).unwrap();
        let err = required_string(&message, "role", &item_at).unwrap_err();
        assert_eq!(err.to_string(), "`messages[0].role` must be a string");
        let err = message.require("content", &item_at).unwrap_err();
        assert_eq!(err.to_string(), "`messages[0].content` is required");
    }

    #[test]
    fn raw_values_keep_their_bytes() {
        let obj = body(br#"{"schema": {"z":1, "a":[2,3]}, "n": null}"#).unwrap();
        assert_eq!(obj.get("schema").unwrap().get(), r#"{"z":1, "a":[2,3]}"#);
        assert!(obj.get("n").is_none());
    }
}
