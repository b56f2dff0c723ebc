//! US Social Security numbers: the area, group and serial ranges never issued are not numbers.

use super::context::{glued, in_digit_run};
use super::{Hay, NeedMore};

/// Numbers published as examples and never valid (the Woolworth wallet card, a 1940s ad).
const NEVER_ISSUED: [u32; 2] = [78_051_120, 219_099_999];

/// Whether `start..end` (`AAA-GG-SSSS` or with spaces) is an SSN that could be issued.
pub(crate) fn valid(hay: Hay<'_>, start: usize, end: usize) -> Result<bool, NeedMore> {
    let number = hay.bytes[start..end]
        .iter()
        .filter(|byte| byte.is_ascii_digit())
        .fold(0u32, |number, &digit| number * 10 + u32::from(digit - b'0'));
    let (area, group, serial) = (number / 1_000_000, number / 10_000 % 100, number % 10_000);
    let issued = area != 0 && area != 666 && area < 900 && group != 0 && serial != 0 && !NEVER_ISSUED.contains(&number);
    // Spaced, it could be three groups of a longer run of numbers.
    let spaced = hay.bytes[start..end].contains(&b' ');
    Ok(issued && !glued(hay, start, end, b"-./_")? && !(spaced && in_digit_run(hay, start, end, b" -.")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> bool {
        valid(Hay { bytes: text.as_bytes(), eof: true }, 0, text.len()).unwrap()
    }

    #[test]
    fn unissued_ranges_fail() {
        assert!(check("536-22-1234"));
        assert!(check("123 45 6789"));
        let run = "8402 5 509 75 1488";
        assert!(!valid(Hay { bytes: run.as_bytes(), eof: true }, 7, run.len()).unwrap());
        for number in ["000-12-3456", "666-12-3456", "912-12-3456", "536-00-1234", "536-22-0000", "078-05-1120"] {
            assert!(!check(number), "{number}");
        }
    }
}
