//! Aggregated tool names: `{server}__{tool}`, kept within what every model provider accepts
//! (`^[A-Za-z0-9_-]{1,64}$`). Characters outside that set become `_`; a name that would be
//! longer keeps its first characters and ends in an 8-hex-digit hash of the full name, so it is
//! stable across restarts and instances. Two tools that end up with the same name are a
//! configuration error, reported when the catalogue is built.

use sha2::{Digest, Sha256};

pub const MAX_LEN: usize = 64;
pub const SEPARATOR: &str = "__";

/// The name a tool gets in the aggregated catalogue.
pub fn aggregated(server: &str, tool: &str) -> String {
    let full = format!("{server}{SEPARATOR}{tool}");
    let clean: String =
        full.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if clean.len() <= MAX_LEN && clean == full {
        return clean;
    }
    if clean.len() <= MAX_LEN {
        // Characters were replaced: add the hash too, so `a.b` and `a_b` cannot collide.
        let keep = clean.len().min(MAX_LEN - 9);
        return format!("{}_{}", &clean[..keep], short_hash(&full));
    }
    format!("{}_{}", &clean[..MAX_LEN - 9], short_hash(&full))
}

fn short_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a server alias is valid: `[a-z0-9-]{1,16}`.
pub fn valid_alias(name: &str) -> bool {
    (1..=16).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        (1..=MAX_LEN).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }

    #[test]
    fn short_names_are_prefixed_long_and_odd_ones_hashed_deterministically() {
        assert_eq!(aggregated("github", "create_issue"), "github__create_issue");
        let long = "a".repeat(80);
        let a = aggregated("files", &long);
        assert_eq!(a.len(), MAX_LEN);
        assert!(valid(&a) && a.starts_with("files__aaa"));
        assert_eq!(a, aggregated("files", &long), "the same name every time");
        assert_ne!(a, aggregated("files", &format!("{long}b")), "names differing past the cut stay distinct");
        let dotted = aggregated("db", "query.run");
        assert!(valid(&dotted) && dotted.starts_with("db__query_run_"), "{dotted}");
        assert_ne!(dotted, aggregated("db", "query_run"));
    }

    #[test]
    fn aliases() {
        assert!(valid_alias("github") && valid_alias("my-files-2"));
        assert!(!valid_alias("") && !valid_alias("GitHub") && !valid_alias("a_b") && !valid_alias(&"a".repeat(17)));
    }
}
