//! `*` globs, as used by key model allow-lists, MCP tool rules and MCP key permissions: `*`
//! matches any run of characters (including none); everything else matches itself.

/// Whether `pattern` matches all of `text`.
pub fn matches(pattern: &str, text: &str) -> bool {
    matches_bytes(pattern.as_bytes(), text.as_bytes())
}

/// Whether any of `patterns` matches `text`.
pub fn any(patterns: &[String], text: &str) -> bool {
    patterns.iter().any(|p| matches(p, text))
}

fn matches_bytes(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| matches_bytes(rest, &text[i..])),
        Some((c, rest)) => text.split_first().is_some_and(|(t, text_rest)| t == c && matches_bytes(rest, text_rest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_match_any_run() {
        assert!(matches("write_*", "write_file") && matches("*", "") && matches("a*c", "abbc"));
        assert!(!matches("write_*", "read_file") && !matches("a*c", "abcd"));
        assert!(any(&["x".into(), "git*".into()], "github") && !any(&[], "github"));
    }
}
