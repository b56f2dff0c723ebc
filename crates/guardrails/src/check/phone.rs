//! Phone numbers: a plausible count of digits for the form, balanced parentheses, no doubled
//! separators, and not a number something else labels or a longer identifier holds.

use super::context::{glued, in_digit_run, labelled};
use super::{Hay, NeedMore};

/// Words that say the number after them is not a phone number.
const NOT_PHONE: &[&str] = &[
    "order",
    "invoice",
    "ref",
    "reference",
    "tracking",
    "serial",
    "isbn",
    "sku",
    "ticket",
    "version",
    "build",
    "account",
];

/// The characters that join a number into a longer token.
const JOINERS: &[u8] = b"-./_";

/// `+` and 8–15 digits (E.164 allows 15).
pub(crate) fn international(hay: Hay<'_>, start: usize, end: usize) -> Result<bool, NeedMore> {
    let text = &hay.bytes[start..end];
    let plausible = (8..=15).contains(&digits(text)) && well_formed(text);
    Ok(plausible && !labelled(hay, start, NOT_PHONE) && !glued(hay, start, end, JOINERS)?)
}

/// `(NPA) NXX-XXXX` and its dashed and dotted forms; the area code is not an N11 service code.
pub(crate) fn north_american(hay: Hay<'_>, start: usize, end: usize) -> Result<bool, NeedMore> {
    let text = &hay.bytes[start..end];
    let mut area = text.iter().filter(|byte| byte.is_ascii_digit());
    if digits(text) == 11 {
        area.next();
    }
    let service = matches!((area.next(), area.next(), area.next()), (Some(_), Some(b'1'), Some(b'1')));
    Ok(!service && !labelled(hay, start, NOT_PHONE) && !glued(hay, start, end, JOINERS)?)
}

/// A trunk `0` and 10–12 digits in groups (UK, DE, FR and most of Europe), not part of a longer
/// run of digit groups, and not a date (`08/12/2013 04`, `01.02.2023 12`).
pub(crate) fn national(hay: Hay<'_>, start: usize, end: usize) -> Result<bool, NeedMore> {
    let text = &hay.bytes[start..end];
    let plausible = (10..=12).contains(&digits(text)) && well_formed(text) && national_separators(text);
    Ok(plausible
        && !labelled(hay, start, NOT_PHONE)
        && !glued(hay, start, end, JOINERS)?
        && !in_digit_run(hay, start, end, b" ./-")?)
}

/// Spaces between groups; or dots between pairs throughout (FR: 06.12.34.56.78); or one slash
/// after the area code (DE: 030/1234567).
fn national_separators(text: &[u8]) -> bool {
    let groups: Vec<&[u8]> = text.split(|byte| matches!(byte, b' ' | b'.' | b'/')).collect();
    let dots = text.iter().filter(|&&byte| byte == b'.').count();
    let slashes = text.iter().filter(|&&byte| byte == b'/').count();
    let slash_after_area =
        slashes == 0 || (slashes == 1 && text.iter().position(|&byte| byte == b'/') == Some(groups[0].len()));
    let dotted_pairs = dots == 0 || (dots == groups.len() - 1 && groups.iter().all(|group| group.len() == 2));
    slash_after_area && dotted_pairs
}

fn digits(text: &[u8]) -> usize {
    text.iter().filter(|byte| byte.is_ascii_digit()).count()
}

/// At most one pair of parentheses, in order, with digits in it; no two separators in a row.
fn well_formed(text: &[u8]) -> bool {
    let opens = text.iter().filter(|&&byte| byte == b'(').count();
    let closes = text.iter().filter(|&&byte| byte == b')').count();
    let open = text.iter().position(|&byte| byte == b'(');
    let close = text.iter().position(|&byte| byte == b')');
    let parentheses = match (open, close) {
        (None, None) => true,
        (Some(open), Some(close)) => opens == 1 && closes == 1 && close > open + 1,
        _ => false,
    };
    let separator = |byte: &u8| matches!(byte, b' ' | b'.' | b'-' | b'/');
    parentheses && !text.windows(2).any(|pair| separator(&pair[0]) && separator(&pair[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(check: fn(Hay<'_>, usize, usize) -> Result<bool, NeedMore>, text: &str) -> bool {
        check(Hay { bytes: text.as_bytes(), eof: true }, 0, text.len()).unwrap()
    }

    #[test]
    fn forms_pass_and_malformed_fail() {
        assert!(whole(international, "+44 20 7946 0958"));
        assert!(whole(international, "+1 (415) 555-2671"));
        assert!(!whole(international, "+1 (415 555-2671"));
        assert!(!whole(international, "+1 415  555 2671"));
        assert!(!whole(international, "+1 234 5"));
        assert!(whole(north_american, "(555) 123-4567"));
        assert!(!whole(north_american, "(911) 123-4567"));
        assert!(whole(national, "020 7946 0958"));
        assert!(whole(national, "01 23 45 67 89"));
        assert!(!whole(national, "01 02 2023"));
        assert!(whole(national, "030/12345678"));
        assert!(whole(national, "06.12.34.56.78"));
        assert!(!whole(national, "08/12/2013 0423"));
        assert!(!whole(national, "01.02.2023 1234"));
    }

    #[test]
    fn labelled_numbers_fail() {
        let text = "order 555-123-4567";
        assert!(!north_american(Hay { bytes: text.as_bytes(), eof: true }, 6, text.len()).unwrap());
    }
}
