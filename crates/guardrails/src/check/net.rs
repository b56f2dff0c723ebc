//! IP addresses: IPv4 not inside a longer dotted number nor labelled a version; IPv6 as the
//! standard library parses it, with a digit, and compressed forms long enough not to be code
//! (`abc::def`).

use std::net::Ipv6Addr;

use super::context::{glued, labelled};
use super::{Hay, NeedMore};

/// Words that say the dotted number after them is a version.
const VERSION: &[&str] = &["version", "ver", "v", "release", "build", "firmware", "kernel", "rev", "revision"];

/// An IPv4 address (the shape already bounds each octet): not `1.2.3.4` of `1.2.3.4.5`.
pub(crate) fn ipv4(hay: Hay<'_>, start: usize, end: usize) -> Result<bool, NeedMore> {
    Ok(!labelled(hay, start, VERSION) && !glued(hay, start, end, b".")?)
}

/// An IPv6 address.
pub(crate) fn ipv6(hay: Hay<'_>, start: usize, end: usize) -> bool {
    let text = &hay.bytes[start..end];
    // A colon before it: one more segment of a `a::b::c` path.
    if start > 0 && hay.bytes[start - 1] == b':' {
        return false;
    }
    let Ok(text) = std::str::from_utf8(text) else {
        return false;
    };
    if text.parse::<Ipv6Addr>().is_err() || !text.bytes().any(|byte| byte.is_ascii_digit()) {
        return false;
    }
    if text.contains('.') || !text.contains("::") || text == "::1" {
        return true;
    }
    let mut groups = text.split(':').filter(|group| !group.is_empty());
    groups.clone().count() >= 2 && groups.any(|group| group.len() >= 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hay(text: &str) -> Hay<'_> {
        Hay { bytes: text.as_bytes(), eof: true }
    }

    #[test]
    fn versions_and_longer_dotted_numbers_are_not_addresses() {
        assert!(ipv4(hay("at 10.0.0.1"), 3, 11).unwrap());
        assert!(!ipv4(hay("version 1.2.3.4"), 8, 15).unwrap());
        assert!(!ipv4(hay("1.2.3.4.5"), 0, 7).unwrap());
        assert!(!ipv4(hay("1.2.3.4.5"), 2, 9).unwrap());
    }

    #[test]
    fn ipv6_forms() {
        for text in ["2001:db8::1", "fe80::1", "::1", "2001:0db8:85a3:0000:0000:8a2e:0370:7334", "::ffff:192.0.2.1"] {
            assert!(ipv6(hay(text), 0, text.len()), "{text}");
        }
        for text in ["abc::def", "12:30:45", "dead::beef", "::", "a1::b2"] {
            assert!(!ipv6(hay(text), 0, text.len()), "{text}");
        }
    }
}
