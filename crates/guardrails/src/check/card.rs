//! Payment card numbers: 13–19 digits with one kind of separator, a prefix some network issues at
//! that length, and a valid Luhn check digit.

/// An issuer's prefix range and the lengths its cards have.
struct Issuer {
    /// The range of the number's first `digits` digits.
    low: u32,
    high: u32,
    digits: usize,
    /// Bit `n` set: the network issues `n`-digit numbers.
    lengths: u32,
}

const fn lengths(from: u32, to: u32) -> u32 {
    (1 << (to + 1)) - (1 << from)
}

const ISSUERS: &[Issuer] = &[
    // Visa
    Issuer { low: 4, high: 4, digits: 1, lengths: 1 << 13 | 1 << 16 | 1 << 19 },
    // Mastercard
    Issuer { low: 51, high: 55, digits: 2, lengths: 1 << 16 },
    Issuer { low: 2221, high: 2720, digits: 4, lengths: 1 << 16 },
    // American Express
    Issuer { low: 34, high: 34, digits: 2, lengths: 1 << 15 },
    Issuer { low: 37, high: 37, digits: 2, lengths: 1 << 15 },
    // Discover
    Issuer { low: 6011, high: 6011, digits: 4, lengths: lengths(16, 19) },
    Issuer { low: 644, high: 649, digits: 3, lengths: lengths(16, 19) },
    Issuer { low: 65, high: 65, digits: 2, lengths: lengths(16, 19) },
    // UnionPay (and Discover's co-branded 622126–622925)
    Issuer { low: 62, high: 62, digits: 2, lengths: lengths(16, 19) },
    // Diners Club
    Issuer { low: 300, high: 305, digits: 3, lengths: lengths(14, 19) },
    Issuer { low: 3095, high: 3095, digits: 4, lengths: lengths(14, 19) },
    Issuer { low: 36, high: 36, digits: 2, lengths: lengths(14, 19) },
    Issuer { low: 38, high: 39, digits: 2, lengths: lengths(16, 19) },
    // JCB
    Issuer { low: 3528, high: 3589, digits: 4, lengths: lengths(16, 19) },
    // Maestro
    Issuer { low: 50, high: 50, digits: 2, lengths: lengths(13, 19) },
    Issuer { low: 56, high: 58, digits: 2, lengths: lengths(13, 19) },
    Issuer { low: 639, high: 639, digits: 3, lengths: lengths(13, 19) },
    Issuer { low: 67, high: 67, digits: 2, lengths: lengths(13, 19) },
    // Mir
    Issuer { low: 2200, high: 2204, digits: 4, lengths: lengths(16, 19) },
];

/// Whether `text` (digits and at most one kind of separator) is a card number.
pub(crate) fn valid(text: &[u8]) -> bool {
    let mut digits = [0u8; 19];
    let mut count = 0;
    let mut separator = None;
    for &byte in text {
        if byte.is_ascii_digit() {
            let Some(slot) = digits.get_mut(count) else {
                return false;
            };
            *slot = byte - b'0';
            count += 1;
        } else if *separator.get_or_insert(byte) != byte {
            return false;
        }
    }
    let digits = &digits[..count];
    (13..=19).contains(&count) && issued(digits) && luhn(digits)
}

fn issued(digits: &[u8]) -> bool {
    ISSUERS.iter().any(|issuer| {
        let prefix = digits[..issuer.digits].iter().fold(0, |prefix, &digit| prefix * 10 + u32::from(digit));
        (issuer.low..=issuer.high).contains(&prefix) && issuer.lengths & (1 << digits.len()) != 0
    })
}

/// The Luhn check: every second digit from the right doubled (less 9 past 9), the sum a
/// multiple of 10.
pub(crate) fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(at, &digit)| {
            let digit = u32::from(digit);
            match at % 2 {
                0 => digit,
                _ if digit * 2 > 9 => digit * 2 - 9,
                _ => digit * 2,
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_numbers_of_every_network_pass() {
        for number in [
            "4111111111111111",
            "4012888888881881",
            "5555555555554444",
            "2223003122003222",
            "378282246310005",
            "6011111111111117",
            "3530111333300000",
            "30569309025904",
            "6200000000000005",
            "4111 1111 1111 1111",
            "3782-822463-10005",
        ] {
            assert!(valid(number.as_bytes()), "{number}");
        }
    }

    #[test]
    fn bad_checksums_prefixes_and_separators_fail() {
        for number in ["4111111111111112", "9111111111111111", "1234567812345670", "4111 1111-1111 1111", "41111111111"]
        {
            assert!(!valid(number.as_bytes()), "{number}");
        }
    }
}
