//! The kinds of sensitive text the engine finds: their names in configuration and the placeholders
//! that replace them when masked.

use std::fmt;
use std::str::FromStr;

use crate::error::BuildError;

/// What a finding is. The built-in kinds are personal data (`Kind::PII`) and credentials
/// (`Kind::SECRETS`); `Keyword` and `Pattern` come from a guard's own lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Email,
    Phone,
    Card,
    Iban,
    Ssn,
    Ipv4,
    Ipv6,
    AwsAccessKey,
    GithubToken,
    OpenaiKey,
    AnthropicKey,
    GoogleApiKey,
    SlackToken,
    PrivateKey,
    Jwt,
    Password,
    /// A word of a guard's deny list.
    Keyword,
    /// A match of one of a guard's named regexes (the finding's detector names which).
    Pattern,
}

impl Kind {
    /// The personal-data kinds: what `type: pii` checks when no `kinds:` narrows it.
    pub const PII: [Kind; 7] = [Kind::Email, Kind::Phone, Kind::Card, Kind::Iban, Kind::Ssn, Kind::Ipv4, Kind::Ipv6];

    /// The credential kinds: what `type: secrets` checks.
    pub const SECRETS: [Kind; 9] = [
        Kind::AwsAccessKey,
        Kind::GithubToken,
        Kind::OpenaiKey,
        Kind::AnthropicKey,
        Kind::GoogleApiKey,
        Kind::SlackToken,
        Kind::PrivateKey,
        Kind::Jwt,
        Kind::Password,
    ];

    /// The name configuration uses (`kinds: [email, card]`) and findings report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Email => "email",
            Kind::Phone => "phone",
            Kind::Card => "card",
            Kind::Iban => "iban",
            Kind::Ssn => "ssn",
            Kind::Ipv4 => "ipv4",
            Kind::Ipv6 => "ipv6",
            Kind::AwsAccessKey => "aws_access_key",
            Kind::GithubToken => "github_token",
            Kind::OpenaiKey => "openai_key",
            Kind::AnthropicKey => "anthropic_key",
            Kind::GoogleApiKey => "google_api_key",
            Kind::SlackToken => "slack_token",
            Kind::PrivateKey => "private_key",
            Kind::Jwt => "jwt",
            Kind::Password => "password",
            Kind::Keyword => "keyword",
            Kind::Pattern => "pattern",
        }
    }

    /// What replaces a finding of this kind when masked. A `Pattern` finding is replaced by its
    /// pattern's own placeholder instead (`Engine::placeholder`).
    pub fn placeholder(self) -> &'static str {
        match self {
            Kind::Email => "[EMAIL]",
            Kind::Phone => "[PHONE]",
            Kind::Card => "[CARD]",
            Kind::Iban => "[IBAN]",
            Kind::Ssn => "[SSN]",
            Kind::Ipv4 => "[IPV4]",
            Kind::Ipv6 => "[IPV6]",
            Kind::AwsAccessKey => "[AWS_ACCESS_KEY]",
            Kind::GithubToken => "[GITHUB_TOKEN]",
            Kind::OpenaiKey => "[OPENAI_KEY]",
            Kind::AnthropicKey => "[ANTHROPIC_KEY]",
            Kind::GoogleApiKey => "[GOOGLE_API_KEY]",
            Kind::SlackToken => "[SLACK_TOKEN]",
            Kind::PrivateKey => "[PRIVATE_KEY]",
            Kind::Jwt => "[JWT]",
            Kind::Password => "[PASSWORD]",
            Kind::Keyword => "[KEYWORD]",
            Kind::Pattern => "[PATTERN]",
        }
    }

    /// Whether this is one of the built-in detectors (personal data or credentials).
    pub fn is_builtin(self) -> bool {
        !matches!(self, Kind::Keyword | Kind::Pattern)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = BuildError;

    /// Reads a built-in kind by its configuration name (`"email"`, `"aws_access_key"`, ...).
    fn from_str(name: &str) -> Result<Kind, BuildError> {
        Kind::PII
            .into_iter()
            .chain(Kind::SECRETS)
            .find(|kind| kind.name() == name)
            .ok_or_else(|| BuildError::UnknownKind(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_name_reads_back() {
        for kind in Kind::PII.into_iter().chain(Kind::SECRETS) {
            assert_eq!(kind.name().parse::<Kind>().unwrap(), kind);
            assert!(kind.is_builtin());
            assert_eq!(kind.placeholder(), format!("[{}]", kind.name().to_ascii_uppercase()));
        }
        assert!("keyword".parse::<Kind>().is_err());
        assert!("mail".parse::<Kind>().is_err());
    }
}
