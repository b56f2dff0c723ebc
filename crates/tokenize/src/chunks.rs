//! Long text cut into chunks between words, so a prompt is tokenized from its start only as far
//! as a caller needs (a cache lookup stops where nothing holds the prompt any more), and a
//! re-sent long message is found in the piece cache chunk by chunk.
//!
//! A cut goes only before a single space between two ASCII letters (`abc| def`): every
//! pre-tokenizer family in use (GPT-2's and cl100k's patterns, Llama 3's, Qwen's, SentencePiece's
//! metaspace) ends a word there and starts the next with that space, and a Unicode normal form
//! does not reach across it. Whether a tokenizer really tokenizes both halves as the whole is
//! checked when it is loaded (`cuts_compose`); one that does not is never cut.

/// Chunks are at least this long (the last one aside): about 450 tokens of English.
const CHUNK_BYTES: usize = 2048;

/// `text`'s chunks, as byte ranges covering it in order.
pub fn cut(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    while bytes.len() - start > CHUNK_BYTES {
        match safe_cut(bytes, start + CHUNK_BYTES) {
            Some(at) => {
                out.push((start, at));
                start = at;
            }
            None => break,
        }
    }
    out.push((start, bytes.len()));
    out
}

/// The first place from `from` on where a space stands between two ASCII letters (always a
/// character boundary: its neighbours are ASCII).
fn safe_cut(bytes: &[u8], from: usize) -> Option<usize> {
    let end = bytes.len().saturating_sub(1);
    (from.max(1)..end)
        .find(|&i| bytes[i] == b' ' && bytes[i - 1].is_ascii_alphabetic() && bytes[i + 1].is_ascii_alphabetic())
}

/// Whether `encode` gives a text's ids as the ids of its two halves at every cut place of a
/// varied sample (prose, code, numbers, other scripts, runs of spaces and newlines).
pub fn cuts_compose(encode: impl Fn(&str) -> Result<Vec<u32>, String>) -> bool {
    const SAMPLE: &str = "The gateway routes every request to the engine holding its prefix. It's \
        fast, isn't it?\n\n  Indented   text\twith tabs and  double spaces then words.\nfn main() { let x = \
        vec![1, 2, 3]; println!(\"{x:?}\"); } // code and numbers 12345 67.89 and 1e-5 here\nCafé \
        naïve résumé façade: accents then words. 東京 は 日本 の 首都 です and then English again.\n\
        Emoji 🎉 party then words; URLs https://example.com/a?b=c then words. ALLCAPS WORDS and \
        MixedCase Words then lowercase words. Trailing spaces   \n\n\nNew paragraph starts here with words.";
    let Ok(whole) = encode(SAMPLE) else { return false };
    let bytes = SAMPLE.as_bytes();
    let mut at = 1;
    let mut checked = 0;
    while let Some(cut) = safe_cut(bytes, at) {
        let (Ok(mut left), Ok(right)) = (encode(&SAMPLE[..cut]), encode(&SAMPLE[cut..])) else { return false };
        left.extend(right);
        if left != whole {
            return false;
        }
        checked += 1;
        at = cut + 1;
    }
    checked > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_text_and_cut_only_between_words() {
        let text = "word ".repeat(2000) + "东京".repeat(900).as_str() + " tail";
        let chunks = cut(&text);
        assert!(chunks.len() > 3, "{}", chunks.len());
        assert_eq!(chunks.first().map(|c| c.0), Some(0));
        assert_eq!(chunks.last().map(|c| c.1), Some(text.len()));
        for pair in chunks.windows(2) {
            assert_eq!(pair[0].1, pair[1].0);
            assert!(
                text[pair[1].0..].starts_with(' ') && text[..pair[0].1].ends_with(|c: char| c.is_ascii_alphabetic())
            );
        }
        assert_eq!(cut("short"), vec![(0, 5)]);
    }
}
