//! What the text around a number says about it: glued into a longer identifier (`ab-555-1234`,
//! `1.2.3.4.5`), or labelled as something else (`order 555-123-4567`, `version 1.2.3.4`).

use super::{Hay, NeedMore};

/// How many bytes before a candidate a check may read. A stream keeps at least this much of the
/// text it already released, so a verdict on a stream reads what the whole text's would.
pub(crate) const LOOKBACK: usize = 32;

/// Whether `start..end` is part of a longer token: a joiner with a letter or digit beyond it,
/// on either side.
pub(crate) fn glued(hay: Hay<'_>, start: usize, end: usize, joiners: &[u8]) -> Result<bool, NeedMore> {
    let bytes = hay.bytes;
    if start >= 2 && joiners.contains(&bytes[start - 1]) && bytes[start - 2].is_ascii_alphanumeric() {
        return Ok(true);
    }
    match hay.at(end)? {
        Some(next) if joiners.contains(&next) => {
            Ok(hay.at(end + 1)?.is_some_and(|after| after.is_ascii_alphanumeric()))
        }
        _ => Ok(false),
    }
}

/// Whether `start..end` is one group of a longer run of digit groups (`3577 0760 4792 3266`
/// holds `0760 4792 3266`): a digit and one of `separators` on either side.
pub(crate) fn in_digit_run(hay: Hay<'_>, start: usize, end: usize, separators: &[u8]) -> Result<bool, NeedMore> {
    let bytes = hay.bytes;
    if start >= 2 && separators.contains(&bytes[start - 1]) && bytes[start - 2].is_ascii_digit() {
        return Ok(true);
    }
    match hay.at(end)? {
        Some(next) if separators.contains(&next) => Ok(hay.at(end + 1)?.is_some_and(|after| after.is_ascii_digit())),
        _ => Ok(false),
    }
}

/// Whether a `:` and a path follow `end` (`git@github.com:org/repo`: a host, not a mailbox).
pub(crate) fn path_follows(hay: Hay<'_>, end: usize) -> Result<bool, NeedMore> {
    match hay.at(end)? {
        Some(b':') => Ok(hay.at(end + 1)?.is_some_and(|after| after.is_ascii_alphanumeric() || after == b'/')),
        _ => Ok(false),
    }
}

/// Whether the word right before `start` (past spaces and `:#=-.`) is one of `labels`
/// (lower-case), or a `#` marks what follows as an identifier.
pub(crate) fn labelled(hay: Hay<'_>, start: usize, labels: &[&str]) -> bool {
    let window = hay.before(start);
    let mut end = window.len();
    while end > 0 && matches!(window[end - 1], b' ' | b'\t' | b':' | b'#' | b'=' | b'-' | b'.') {
        if window[end - 1] == b'#' {
            return true;
        }
        end -= 1;
    }
    let words = &window[..end];
    labels.iter().any(|label| ends_with_word(words, label.as_bytes()))
}

/// Whether `words` ends with the whole word `label`, in any case.
fn ends_with_word(words: &[u8], label: &[u8]) -> bool {
    let Some(at) = words.len().checked_sub(label.len()) else {
        return false;
    };
    words[at..].eq_ignore_ascii_case(label) && (at == 0 || !words[at - 1].is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hay(text: &str) -> Hay<'_> {
        Hay { bytes: text.as_bytes(), eof: true }
    }

    #[test]
    fn glued_sees_joiners_with_more_beyond() {
        assert!(glued(hay("ab-555"), 3, 6, b"-").unwrap());
        assert!(glued(hay("555-x"), 0, 3, b"-").unwrap());
        assert!(!glued(hay("555-"), 0, 3, b"-").unwrap());
        assert!(!glued(hay(" 555. "), 1, 4, b".").unwrap());
        let partial = Hay { bytes: b"555.", eof: false };
        assert_eq!(glued(partial, 0, 3, b"."), Err(NeedMore));
    }

    #[test]
    fn digit_runs_and_paths() {
        assert!(in_digit_run(hay("3577 0760 4792"), 5, 14, b" ").unwrap());
        assert!(in_digit_run(hay("0760 4792 3266"), 0, 9, b" ").unwrap());
        assert!(!in_digit_run(hay("call 0760 4792, ok"), 5, 14, b" ").unwrap());
        assert!(path_follows(hay("git@github.com:org"), 14).unwrap());
        assert!(!path_follows(hay("a@b.io: hi"), 6).unwrap());
    }

    #[test]
    fn labels_are_whole_words_before_the_number() {
        assert!(labelled(hay("Order: 1"), 7, &["order"]));
        assert!(labelled(hay("see #1"), 5, &["order"]));
        assert!(!labelled(hay("reorder 1"), 8, &["order"]));
        assert!(!labelled(hay("call 1"), 5, &["order"]));
    }
}
