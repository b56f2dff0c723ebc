//! IBANs: a registered country's exact length and the ISO 13616 mod-97 check.

/// Countries in the IBAN registry and the length of their IBANs.
const LENGTHS: &[([u8; 2], usize)] = &[
    (*b"AD", 24),
    (*b"AE", 23),
    (*b"AL", 28),
    (*b"AT", 20),
    (*b"AZ", 28),
    (*b"BA", 20),
    (*b"BE", 16),
    (*b"BG", 22),
    (*b"BH", 22),
    (*b"BI", 27),
    (*b"BR", 29),
    (*b"BY", 28),
    (*b"CH", 21),
    (*b"CR", 22),
    (*b"CY", 28),
    (*b"CZ", 24),
    (*b"DE", 22),
    (*b"DJ", 27),
    (*b"DK", 18),
    (*b"DO", 28),
    (*b"EE", 20),
    (*b"EG", 29),
    (*b"ES", 24),
    (*b"FI", 18),
    (*b"FK", 18),
    (*b"FO", 18),
    (*b"FR", 27),
    (*b"GB", 22),
    (*b"GE", 22),
    (*b"GI", 23),
    (*b"GL", 18),
    (*b"GR", 27),
    (*b"GT", 28),
    (*b"HR", 21),
    (*b"HU", 28),
    (*b"IE", 22),
    (*b"IL", 23),
    (*b"IQ", 23),
    (*b"IS", 26),
    (*b"IT", 27),
    (*b"JO", 30),
    (*b"KW", 30),
    (*b"KZ", 20),
    (*b"LB", 28),
    (*b"LC", 32),
    (*b"LI", 21),
    (*b"LT", 20),
    (*b"LU", 20),
    (*b"LV", 21),
    (*b"LY", 25),
    (*b"MC", 27),
    (*b"MD", 24),
    (*b"ME", 22),
    (*b"MK", 19),
    (*b"MN", 20),
    (*b"MR", 27),
    (*b"MT", 31),
    (*b"MU", 30),
    (*b"NI", 28),
    (*b"NL", 18),
    (*b"NO", 15),
    (*b"OM", 23),
    (*b"PK", 24),
    (*b"PL", 28),
    (*b"PS", 29),
    (*b"PT", 25),
    (*b"QA", 29),
    (*b"RO", 24),
    (*b"RS", 22),
    (*b"RU", 33),
    (*b"SA", 24),
    (*b"SC", 31),
    (*b"SD", 18),
    (*b"SE", 24),
    (*b"SI", 19),
    (*b"SK", 24),
    (*b"SM", 27),
    (*b"SO", 23),
    (*b"ST", 25),
    (*b"SV", 28),
    (*b"TL", 23),
    (*b"TN", 24),
    (*b"TR", 26),
    (*b"UA", 29),
    (*b"VA", 22),
    (*b"VG", 24),
    (*b"XK", 20),
    (*b"YE", 30),
];

/// The longest registered IBAN.
const LONGEST: usize = 34;

/// Whether `text` (upper-case letters and digits, single spaces between) is an IBAN.
pub(crate) fn valid(text: &[u8]) -> bool {
    let mut chars = [0u8; LONGEST];
    let mut count = 0;
    for &byte in text.iter().filter(|&&byte| byte != b' ') {
        let Some(slot) = chars.get_mut(count) else {
            return false;
        };
        *slot = byte;
        count += 1;
    }
    let chars = &chars[..count];
    let registered = LENGTHS.iter().find(|(country, _)| chars.starts_with(country));
    registered.is_some_and(|&(_, length)| length == count) && remainder(chars) == 1
}

/// The IBAN, its first four characters moved to the end and letters read as 10–35, modulo 97.
fn remainder(chars: &[u8]) -> u32 {
    chars[4..].iter().chain(&chars[..4]).fold(0, |remainder, &char| match char {
        b'0'..=b'9' => (remainder * 10 + u32::from(char - b'0')) % 97,
        _ => (remainder * 100 + u32::from(char - b'A') + 10) % 97,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_examples_pass() {
        for iban in [
            "DE89370400440532013000",
            "DE89 3704 0044 0532 0130 00",
            "GB29NWBK60161331926819",
            "FR1420041010050500013M02606",
            "NL91ABNA0417164300",
            "NO9386011117947",
        ] {
            assert!(valid(iban.as_bytes()), "{iban}");
        }
    }

    #[test]
    fn wrong_checks_lengths_and_countries_fail() {
        for iban in
            ["DE89370400440532013001", "DE8937040044053201300", "ZZ89370400440532013000", "GB29NWBK6016133192681"]
        {
            assert!(!valid(iban.as_bytes()), "{iban}");
        }
    }
}
