//! The internal model of an embeddings exchange, which OpenAI's `/v1/embeddings` and Ollama's
//! `/api/embed` map to and from.

use crate::chat::Extras;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EmbedRequest {
    pub model: String,
    /// The texts to embed, in order.
    pub input: Vec<String>,
    /// Dimensions to truncate each embedding to, where the model allows it.
    pub dimensions: Option<u64>,
    /// Whether an input longer than the model's context is cut (Ollama's default) or an error.
    pub truncate: Option<bool>,
    /// The client wants base64 (little-endian f32) vectors, as the OpenAI SDKs ask by default.
    pub base64: bool,
    pub user: Option<String>,
    pub extra: Extras,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EmbedResponse {
    pub model: String,
    /// One vector per input, in input order.
    pub embeddings: Vec<Vec<f32>>,
    pub prompt_tokens: u64,
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A vector as OpenAI's base64 encoding: little-endian f32s, standard alphabet, padded.
pub(crate) fn vector_to_base64(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|value| value.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> shift & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The inverse of `vector_to_base64`; `None` if `text` is not base64 of whole f32s.
pub(crate) fn vector_from_base64(text: &str) -> Option<Vec<f32>> {
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer = 0u32;
    let mut bits = 0;
    for byte in text.bytes().filter(|&b| b != b'=') {
        let value = ALPHABET.iter().position(|&a| a == byte)? as u32;
        buffer = buffer << 6 | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((buffer >> bits & 0xff) as u8);
        }
    }
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for vector in [vec![], vec![1.0f32], vec![0.5, -2.25], vec![0.1, 0.2, 0.3, 1e-7]] {
            let text = vector_to_base64(&vector);
            assert_eq!(vector_from_base64(&text).unwrap(), vector);
        }
        // Known value: 1.0f32 is 00 00 80 3f.
        assert_eq!(vector_to_base64(&[1.0]), "AACAPw==");
    }
}
