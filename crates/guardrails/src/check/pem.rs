//! PEM private-key blocks. The automaton finds the BEGIN line; this finds the rest: through the
//! END line when one follows the body, else through the base64 lines right after BEGIN (a key
//! pasted without its end is still masked). Everything is read within `CAP` bytes of BEGIN, so a
//! stream holds a block back at most that long.

use super::{Hay, Verdict};

/// The longest block, BEGIN to END, read as one: an 8192-bit RSA key in PKCS#8 is about 6.5 KiB.
/// A longer block is masked through its first `CAP` bytes; the rest of its body (base64 lines,
/// which no detector matches) is left as it is.
pub(crate) const CAP: usize = 16 * 1024;

const END: &[u8] = b"-----END ";
const DASHES: &[u8] = b"-----";
/// The longest label between `-----END ` and `-----` (`ENCRYPTED PRIVATE KEY` is 21).
const LABEL: usize = 64;

/// The block that begins at `start` with the BEGIN line `start..head_end`.
pub(crate) fn block(hay: Hay<'_>, start: usize, head_end: usize) -> Verdict {
    let window = &hay.bytes[..hay.bytes.len().min(start + CAP)];
    // Whether nothing after the window can change the answer: the text ends, or the cap does.
    let complete = hay.eof || start + CAP <= hay.bytes.len();
    let mut at = head_end;
    while at < window.len() {
        let byte = window[at];
        if byte == b'-' {
            match end_line(window, at, complete) {
                EndLine::At(end) => return Verdict::Accept { start, end },
                EndLine::Unknown => return Verdict::NeedMore,
                EndLine::No => {}
            }
        }
        if !in_body(byte) {
            break;
        }
        at += 1;
    }
    if at == window.len() && !complete {
        return Verdict::NeedMore;
    }
    Verdict::Accept { start, end: base64_lines_end(window, head_end, at, at == window.len()) }
}

/// What a body and its headers (`Proc-Type: 4,ENCRYPTED`) are made of, with line breaks written
/// as themselves or as `\n` escapes (a key inside a JSON string).
fn in_body(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"+/=\r\n\t \\:,-".contains(&byte)
}

enum EndLine {
    At(usize),
    No,
    Unknown,
}

/// Whether an END line (`-----END <LABEL>-----`) starts at `at`, and where it ends.
fn end_line(window: &[u8], at: usize, complete: bool) -> EndLine {
    let rest = &window[at..];
    let unknown_if_prefix = |text: &[u8], of: &[u8]| match !complete && of.starts_with(text) {
        true => EndLine::Unknown,
        false => EndLine::No,
    };
    if rest.len() < END.len() {
        return unknown_if_prefix(rest, END);
    }
    if !rest.starts_with(END) {
        return EndLine::No;
    }
    let label = rest[END.len()..]
        .iter()
        .take(LABEL + 1)
        .take_while(|&&byte| byte.is_ascii_uppercase() || byte.is_ascii_digit() || byte == b' ')
        .count();
    let tail = &rest[END.len() + label..];
    if label > LABEL {
        return EndLine::No;
    }
    if tail.len() < DASHES.len() {
        return unknown_if_prefix(tail, DASHES);
    }
    match tail.starts_with(DASHES) {
        true => EndLine::At(at + END.len() + label + DASHES.len()),
        false => EndLine::No,
    }
}

/// The end of the base64 (and header) lines in `from..to`, which starts right after BEGIN; `from`
/// when there are none. A last line reaching `to` counts only when `to` is the end of all there
/// is (`open_end`); otherwise something that is not body cut it.
fn base64_lines_end(window: &[u8], from: usize, to: usize, open_end: bool) -> usize {
    let region = &window[from..to];
    let mut end = 0;
    let mut at = 0;
    while let Some(length) = line_break(&region[at..]) {
        at += length;
        let line_end = next_line_break(region, at);
        let line = &region[at..line_end];
        if line.is_empty() {
            continue;
        }
        let terminated = line_end < region.len() || open_end;
        let base64 = line.iter().all(|&byte| byte.is_ascii_alphanumeric() || b"+/=".contains(&byte));
        let header = line.starts_with(b"Proc-Type:") || line.starts_with(b"DEK-Info:");
        if !terminated || !(base64 || header) {
            break;
        }
        end = line_end;
        at = line_end;
    }
    from + end
}

/// The length of the line break `text` starts with: a newline (`\n`, `\r\n`) or its escape.
fn line_break(text: &[u8]) -> Option<usize> {
    [&b"\r\n"[..], b"\n", b"\\r\\n", b"\\n"]
        .iter()
        .find(|line_break| text.starts_with(line_break))
        .map(|line_break| line_break.len())
}

fn next_line_break(region: &[u8], from: usize) -> usize {
    (from..region.len()).find(|&at| line_break(&region[at..]).is_some()).unwrap_or(region.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "-----BEGIN RSA PRIVATE KEY-----";

    fn verdict(text: &str, eof: bool) -> Verdict {
        block(Hay { bytes: text.as_bytes(), eof }, 0, BEGIN.len())
    }

    #[test]
    fn a_block_runs_through_its_end_line() {
        let text = format!("{BEGIN}\nMIIBOgIBAAJBAKj34GkxFhD9\nabc+/==\n-----END RSA PRIVATE KEY-----\nthanks");
        let end = text.find("\nthanks").unwrap();
        assert_eq!(verdict(&text, true), Verdict::Accept { start: 0, end });
        assert_eq!(verdict(&text[..end - 3], false), Verdict::NeedMore);
        assert_eq!(verdict(&text, false), Verdict::Accept { start: 0, end });
    }

    #[test]
    fn escaped_newlines_count_as_breaks() {
        let text = format!("\"{BEGIN}\\nMIIBOgIBAAJBAKj34Gkx\\n-----END RSA PRIVATE KEY-----\\n\"");
        let end = text.rfind("\\n").unwrap();
        assert_eq!(
            block(Hay { bytes: text.as_bytes(), eof: true }, 1, 1 + BEGIN.len()),
            Verdict::Accept { start: 1, end }
        );
    }

    #[test]
    fn without_an_end_line_the_base64_lines_are_the_block() {
        let text = format!("{BEGIN}\nMIIBOgIBAAJBAKj34GkxFhD9\nabc+/==\nThat's all it said.");
        let end = text.find("\nThat").unwrap();
        assert_eq!(verdict(&text, true), Verdict::Accept { start: 0, end });
        // Until something that cannot be body arrives, the END line may still come.
        assert_eq!(verdict(&text[..end + 5], false), Verdict::NeedMore);
        assert_eq!(verdict(&text, false), Verdict::Accept { start: 0, end });
    }
}
