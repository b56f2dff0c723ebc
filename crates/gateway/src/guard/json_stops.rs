//! Where a JSON body's structure is: the bytes a walk over it stops at (`{ } [ ] "` and `\`),
//! found 32 bytes at a time as a bit mask, in code the compiler turns into SIMD compares.
//!
//! A byte-at-a-time walk (a table lookup a byte between tokens, a word at a time inside strings)
//! was ~8.5 instructions a byte of a chat body and most of the guards' fixed cost per request
//! (callgrind); a block's mask is ~2 instructions a byte, and each stop a few more.

/// Bytes a mask covers.
const BLOCK: usize = 32;

/// Strings longer than this many blocks are searched to their end with memchr (a prompt's 4 KB
/// text: ~0.25 instructions a byte rather than the mask's 2), shorter ones through the masks.
const SHORT_STRING_BLOCKS: usize = 2;

/// A cursor over the stops of a body, in order, a block at a time.
pub(super) struct Stops<'a> {
    body: &'a [u8],
    /// Where the current block starts.
    base: usize,
    /// The current block's stops not yet taken, a bit per byte.
    mask: u32,
}

impl<'a> Stops<'a> {
    pub(super) fn new(body: &'a [u8]) -> Self {
        let mut stops = Stops { body, base: 0, mask: 0 };
        stops.load(0);
        stops
    }

    /// The next stop.
    #[inline]
    pub(super) fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            self.next_block()?;
        }
        Some(self.take())
    }

    /// The closing quote of the string whose opening quote was the last stop taken, and whether
    /// the string has an escape (a backslash) before it. The stops inside it are passed over.
    /// Inline: most of a body's stops are strings' (a call each was a third of the walk).
    #[inline(always)]
    pub(super) fn string_end(&mut self) -> Option<(usize, bool)> {
        let mut escaped = false;
        let mut blocks = 0;
        loop {
            if self.mask == 0 {
                blocks += 1;
                if blocks >= SHORT_STRING_BLOCKS {
                    return self.long_string_end(escaped);
                }
                self.next_block()?;
                continue;
            }
            let at = self.take();
            match self.body[at] {
                b'"' => return Some((at, escaped)),
                b'\\' => {
                    escaped = true;
                    // The escaped byte may be a quote or a backslash: not a stop.
                    self.skip_to(at + 2);
                }
                _ => {}
            }
        }
    }

    /// A string that runs past the current block: its end by memchr from there.
    fn long_string_end(&mut self, mut escaped: bool) -> Option<(usize, bool)> {
        let mut from = self.base + BLOCK;
        loop {
            let at = from + memchr::memchr2(b'"', b'\\', self.body.get(from..)?)?;
            if self.body[at] == b'\\' {
                (from, escaped) = (at + 2, true);
            } else {
                self.skip_to(at + 1);
                return Some((at, escaped));
            }
        }
    }

    #[inline(always)]
    fn take(&mut self) -> usize {
        let at = self.base + self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        at
    }

    /// The block after the current one; `None` past the end.
    fn next_block(&mut self) -> Option<()> {
        let next = self.base + BLOCK;
        (next < self.body.len()).then(|| self.load(next))
    }

    /// Passes over the stops before `at`.
    fn skip_to(&mut self, at: usize) {
        match at - self.base {
            offset @ 0..BLOCK => self.mask &= u32::MAX << offset,
            _ => self.load(at),
        }
    }

    fn load(&mut self, at: usize) {
        self.base = at;
        let rest = self.body.get(at..).unwrap_or_default();
        self.mask = match rest.first_chunk::<BLOCK>() {
            Some(block) => stops(block),
            None => {
                // The body's last bytes, padded with spaces (not stops).
                let mut block = [b' '; BLOCK];
                block[..rest.len()].copy_from_slice(rest);
                stops(&block)
            }
        };
    }
}

/// A bit per byte of `block` that is a stop. Written as one pass of byte compares into flags and
/// then a gather of the flags into bits, which the compiler vectorises (~60 instructions a block;
/// a shift-or per byte, or `matches!`, was not vectorised and cost ~9 times that).
#[inline(always)]
fn stops(block: &[u8; BLOCK]) -> u32 {
    let mut flags = [0u8; BLOCK];
    for (flag, &b) in flags.iter_mut().zip(block) {
        // `[` and `{` (`]` and `}`) differ in one bit.
        let bracket = (b & !0x20) == b'[' || (b & !0x20) == b']';
        *flag = u8::from(bracket | (b == b'"') | (b == b'\\'));
    }
    let (words, _) = flags.as_chunks::<8>();
    let mut mask = 0;
    for (w, word) in words.iter().enumerate() {
        // Eight 0/1 bytes to eight bits: the multiply sums each byte's bit into the top byte.
        let bits = u64::from_le_bytes(*word).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        mask |= (bits as u32) << (w * 8);
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(body: &[u8]) -> Vec<usize> {
        let mut stops = Stops::new(body);
        std::iter::from_fn(|| stops.next()).collect()
    }

    #[test]
    fn every_stop_in_order_across_blocks_and_none_else() {
        let mut body = Vec::new();
        let alphabet = b"{}[],\"\\ax:1_\x7f\xfb\xdd";
        for n in 0..200 {
            body.push(alphabet[(n * 7) % alphabet.len()]);
        }
        let expected: Vec<usize> = (0..body.len()).filter(|&i| b"{}[]\"\\".contains(&body[i])).collect();
        for len in 0..body.len() {
            let want: Vec<usize> = expected.iter().copied().filter(|&i| i < len).collect();
            assert_eq!(all(&body[..len]), want, "{len}");
        }
    }

    #[test]
    fn strings_end_at_their_closing_quote_short_or_long() {
        let long = |n: usize, tail: &str| "x,".repeat(n / 2) + &"x".repeat(n % 2) + tail;
        let (short, edge) = (long(23, ""), long(31, ""));
        let (escaped_at_the_edge, escaped_far) = (long(29, r#"\"y"#), long(100, r#"\"z"#));
        for inner in ["", "a", r#"a\"b"#, r"\\", &short[..], &edge[..], &escaped_at_the_edge[..], &escaped_far[..]] {
            for lead in 0..40 {
                let body = format!("{}\"{inner}\",[1]", " ".repeat(lead));
                let mut stops = Stops::new(body.as_bytes());
                assert_eq!(stops.next(), Some(lead));
                let end = lead + inner.len() + 1;
                assert_eq!(stops.string_end(), Some((end, inner.contains('\\'))), "{lead} {inner:?}");
                assert_eq!(stops.next(), Some(end + 2), "the stop after the string, {lead} {inner:?}");
            }
        }
        // Every position of the closing quote and of an escape, across the block boundaries.
        for n in 0..100 {
            for e in 0..n {
                let inner = format!("{}\\\"{}", "x".repeat(e), "y".repeat(n - e));
                let body = format!("\"{inner}\"tail\"");
                let mut stops = Stops::new(body.as_bytes());
                assert_eq!(stops.next(), Some(0));
                assert_eq!(stops.string_end(), Some((inner.len() + 1, true)), "{inner:?}");
            }
        }
        for open in [&br#""open \""#[..], br#""open"#, &[b"\"".as_slice(), &[b'x'; 300]].concat()] {
            let mut stops = Stops::new(open);
            assert_eq!(stops.next(), Some(0));
            assert_eq!(stops.string_end(), None);
        }
    }
}
