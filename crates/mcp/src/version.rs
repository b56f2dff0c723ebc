//! Protocol revisions and negotiation. The gateway speaks the current stateless revision and
//! the session revisions most deployed clients still use; a client asking for one it does not
//! know gets the newest session revision back, as the spec's negotiation says, and decides.

/// The stateless revision: no `initialize`, version and capabilities in each request's `_meta`.
pub const STATELESS: &str = "2026-07-28";

/// Where a stateless-revision request names its version: `params._meta[META_KEY]`.
pub const META_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// Where a stateless-revision request names what its client offers: `params._meta[CAPABILITIES_KEY]`.
pub const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// Session revisions (an `initialize` handshake and `Mcp-Session-Id`), newest first.
pub const SESSION: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The revision assumed when a session-era client sends no `MCP-Protocol-Version` header, as the
/// 2025-06-18 transport section says.
pub const ASSUMED_WITHOUT_HEADER: &str = "2025-03-26";

pub fn is_supported(version: &str) -> bool {
    version == STATELESS || SESSION.contains(&version)
}

/// The answer to `initialize` asking for `requested`: the same revision when it is a session
/// revision, else the newest session revision.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    SESSION.iter().copied().find(|v| Some(*v) == requested).unwrap_or(SESSION[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_keeps_a_known_session_revision_and_offers_the_newest_otherwise() {
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate(Some("2024-11-05")), "2025-11-25");
        assert_eq!(negotiate(Some(STATELESS)), "2025-11-25", "the stateless revision has no initialize");
        assert_eq!(negotiate(None), "2025-11-25");
        assert!(is_supported(STATELESS) && is_supported("2025-11-25") && !is_supported("2024-11-05"));
    }
}
