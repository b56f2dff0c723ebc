//! The built-in detectors as regexes, one or more per kind, each with the check its matches must
//! pass. The regexes only propose candidates: every shape a kind takes, bounded in length (what a
//! stream holds back is bounded by the longest), anchored on half word boundaries (not preceded,
//! not followed by an ASCII letter, digit or `_`), ASCII only so the lazy DFA never gives up on
//! other text. Checksums, ranges and context are the checks' job (`check`).

use crate::check::Check;
use crate::kind::Kind;

/// Not preceded by an ASCII word character (or at the start of the text).
macro_rules! sh {
    () => {
        r"(?-u:\b{start-half})"
    };
}

/// Not followed by an ASCII word character (or at the end of the text).
macro_rules! eh {
    () => {
        r"(?-u:\b{end-half})"
    };
}

/// One IPv4 octet, 0–255 without leading zeros.
macro_rules! octet {
    () => {
        r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
    };
}

/// One candidate shape of a built-in kind.
pub(crate) struct Shape {
    pub regex: &'static str,
    pub check: Check,
}

const EMAIL: &[Shape] = &[Shape {
    regex: concat!(sh!(), r"[A-Za-z0-9._%+\-]{1,64}@(?:[A-Za-z0-9\-]{1,63}\.){1,6}[A-Za-z]{2,24}", eh!()),
    check: Check::Email,
}];

const PHONE: &[Shape] = &[
    // E.164 and international forms: +44 20 7946 0958, +1 (415) 555-2671, +49-30-1234567.
    Shape { regex: concat!(sh!(), r"\+[1-9][0-9 .()\-]{5,22}[0-9]", eh!()), check: Check::PhoneInternational },
    // North American: (555) 123-4567, 555-123-4567, 555.123.4567, 1-800-555-0199. Plain spaces
    // ("300 200 1000") are too often other numbers.
    Shape {
        regex: concat!(
            sh!(),
            r"(?:1[ .\-]?)?(?:\([2-9][0-9]{2}\) ?[0-9]{3}[ .\-]|[2-9][0-9]{2}-[0-9]{3}-|[2-9][0-9]{2}\.[0-9]{3}\.)[0-9]{4}",
            eh!()
        ),
        check: Check::PhoneNorthAmerican,
    },
    // National forms with a trunk 0 and separated groups: 020 7946 0958 (UK), 030 12345678 and
    // (030) 1234567 (DE), 01 23 45 67 89 (FR).
    Shape {
        regex: concat!(sh!(), r"\(?0[1-9][0-9]{0,3}\)?(?:[ /.][0-9]{2,8}){1,4}", eh!()),
        check: Check::PhoneNational,
    },
];

const CARD: &[Shape] = &[
    Shape { regex: concat!(sh!(), r"[0-9]{13,19}", eh!()), check: Check::Card },
    // Grouped by spaces or dashes: 4-4-4-4(-3), Amex's 4-6-5, Diners' 4-6-4.
    Shape {
        regex: concat!(sh!(), r"[0-9]{4}(?:[ \-][0-9]{4,6}){2}(?:[ \-][0-9]{1,4}){0,2}", eh!()),
        check: Check::Card,
    },
];

const IBAN: &[Shape] =
    &[Shape { regex: concat!(sh!(), r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){10,30}", eh!()), check: Check::Iban }];

const SSN: &[Shape] = &[
    Shape { regex: concat!(sh!(), r"[0-9]{3}-[0-9]{2}-[0-9]{4}", eh!()), check: Check::Ssn },
    Shape { regex: concat!(sh!(), r"[0-9]{3} [0-9]{2} [0-9]{4}", eh!()), check: Check::Ssn },
];

const IPV4: &[Shape] =
    &[Shape { regex: concat!(sh!(), r"(?:", octet!(), r"\.){3}", octet!(), eh!()), check: Check::Ipv4 }];

const IPV6: &[Shape] = &[Shape {
    regex: concat!(
        sh!(),
        r"(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:",
        octet!(),
        r"\.){3}",
        octet!(),
        r")?",
        eh!()
    ),
    check: Check::Ipv6,
}];

const AWS_ACCESS_KEY: &[Shape] =
    &[Shape { regex: concat!(sh!(), r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}", eh!()), check: Check::Shape }];

const GITHUB_TOKEN: &[Shape] = &[Shape {
    regex: concat!(sh!(), r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{60,244})", eh!()),
    check: Check::Shape,
}];

const OPENAI_KEY: &[Shape] = &[Shape {
    regex: concat!(sh!(), r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,200}", eh!()),
    check: Check::OpenaiKey,
}];

const ANTHROPIC_KEY: &[Shape] = &[Shape {
    regex: concat!(sh!(), r"sk-ant-[a-z0-9]{2,10}-[A-Za-z0-9_\-]{32,150}", eh!()),
    check: Check::AnthropicKey,
}];

const GOOGLE_API_KEY: &[Shape] =
    &[Shape { regex: concat!(sh!(), r"AIza[0-9A-Za-z_\-]{35}", eh!()), check: Check::Shape }];

const SLACK_TOKEN: &[Shape] =
    &[Shape { regex: concat!(sh!(), r"xox[baprs]-[0-9A-Za-z\-]{10,250}", eh!()), check: Check::SlackToken }];

// Only the BEGIN line: the block's body and END line are found by the check, which bounds them
// (a bounded repetition thousands long would make the automaton huge).
const PRIVATE_KEY: &[Shape] =
    &[Shape { regex: r"-----BEGIN (?:[A-Z0-9]{1,16} ){0,3}PRIVATE KEY(?: BLOCK)?-----", check: Check::PrivateKey }];

// Only the start of the header (`{"` base64url-encoded, then a little): the check reads the
// three parts and the header itself.
const JWT: &[Shape] = &[Shape { regex: concat!(sh!(), r"eyJ[A-Za-z0-9_\-]{8}"), check: Check::Jwt }];

// `key = value`, `"key": "value"`, `key: value`, `key := value`, `key => value`, with the key
// possibly the end of a longer name (DB_PASSWORD, aws_secret_access_key). The value is printable
// ASCII up to a space, quote, `<`, `>`, `,`, `;` or backtick; its entropy is the check's.
const PASSWORD: &[Shape] = &[Shape {
    regex: concat!(
        sh!(),
        r"[A-Za-z0-9_.\-]{0,32}(?i-u:password|passwd|passphrase|pwd|secret|api[_\-]?key|access[_\-]?key|secret[_\-]?key|",
        r"auth[_\-]?token|access[_\-]?token|client[_\-]?secret|token)[\x22']?[ \t]{0,4}(?::=|=>|[:=])[ \t]{0,4}[\x22']?",
        r"[\x21\x23-\x26\x28-\x2B\x2D-\x3A\x3D\x3F-\x5F\x61-\x7E]{8,128}",
        eh!()
    ),
    check: Check::Password,
}];

/// A byte every match of a kind contains, and how far past a match's start it may first be: a
/// whole text's scan looks for matches only just before these (`prefilter.rs`). Chosen from each
/// kind's regexes above; `prefilter::tests` checks the scan finds what a full scan finds.
pub(crate) struct Trigger {
    pub bytes: &'static [u8],
    pub back: usize,
    /// The bytes that can come between a match's start and the trigger (None: any).
    pub reach: Option<&'static [u8]>,
}

const DIGITS: &[u8] = b"0123456789";

/// An IBAN's country code.
const UPPERCASE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// An email's local part, as `EMAIL` has it.
const LOCAL_PART: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-";

/// What a built-in kind's matches always contain (none for `Keyword` and `Pattern`).
pub(crate) fn triggers(kind: Kind) -> &'static [Trigger] {
    match kind {
        // The local part is at most 64 bytes before the `@`.
        Kind::Email => &[Trigger { bytes: b"@", back: 64, reach: Some(LOCAL_PART) }],
        // A digit first, or (a phone number's) after a `+` or `(`, or after an IBAN's two
        // letters: `tok7` or `v2` opens no window (a mock's or a model's numbered words were
        // ~700 instructions a text, callgrind).
        Kind::Card | Kind::Ssn | Kind::Ipv4 => &[Trigger { bytes: DIGITS, back: 0, reach: Some(b"") }],
        Kind::Phone => &[Trigger { bytes: DIGITS, back: 1, reach: Some(b"+(") }],
        Kind::Iban => &[Trigger { bytes: DIGITS, back: 2, reach: Some(UPPERCASE) }],
        // A `:` within the first group of at most four hex digits.
        Kind::Ipv6 => &[Trigger { bytes: b":", back: 4, reach: None }],
        // AKIA/ASIA/ABIA/ACCA, AIza.
        Kind::AwsAccessKey | Kind::GoogleApiKey => &[Trigger { bytes: b"A", back: 0, reach: None }],
        // gh?_ or github_pat_.
        Kind::GithubToken => &[Trigger { bytes: b"_", back: 6, reach: None }],
        // sk-, sk-ant-, xox?-, -----BEGIN.
        Kind::OpenaiKey | Kind::AnthropicKey => &[Trigger { bytes: b"-", back: 2, reach: None }],
        Kind::SlackToken => &[Trigger { bytes: b"-", back: 4, reach: None }],
        Kind::PrivateKey => &[Trigger { bytes: b"-", back: 0, reach: None }],
        // eyJ.
        Kind::Jwt => &[Trigger { bytes: b"J", back: 2, reach: None }],
        // The assignment after the key: up to 32 bytes of prefix, the key (13 at most), a quote
        // and four blanks before it.
        Kind::Password => &[Trigger { bytes: b":=", back: 52, reach: None }],
        Kind::Keyword | Kind::Pattern => &[],
    }
}

/// The shapes of a built-in kind (none for `Keyword` and `Pattern`, which come from specs).
pub(crate) fn shapes(kind: Kind) -> &'static [Shape] {
    match kind {
        Kind::Email => EMAIL,
        Kind::Phone => PHONE,
        Kind::Card => CARD,
        Kind::Iban => IBAN,
        Kind::Ssn => SSN,
        Kind::Ipv4 => IPV4,
        Kind::Ipv6 => IPV6,
        Kind::AwsAccessKey => AWS_ACCESS_KEY,
        Kind::GithubToken => GITHUB_TOKEN,
        Kind::OpenaiKey => OPENAI_KEY,
        Kind::AnthropicKey => ANTHROPIC_KEY,
        Kind::GoogleApiKey => GOOGLE_API_KEY,
        Kind::SlackToken => SLACK_TOKEN,
        Kind::PrivateKey => PRIVATE_KEY,
        Kind::Jwt => JWT,
        Kind::Password => PASSWORD,
        Kind::Keyword | Kind::Pattern => &[],
    }
}

/// The order in which built-in kinds are compiled: where two detectors match the same span,
/// the earlier wins (the more specific credential shapes before the generic `password`, and
/// Anthropic's `sk-ant-` before OpenAI's `sk-`).
pub(crate) const PRIORITY: [Kind; 16] = [
    Kind::PrivateKey,
    Kind::Jwt,
    Kind::AwsAccessKey,
    Kind::GithubToken,
    Kind::AnthropicKey,
    Kind::OpenaiKey,
    Kind::GoogleApiKey,
    Kind::SlackToken,
    Kind::Password,
    Kind::Email,
    Kind::Iban,
    Kind::Card,
    Kind::Ssn,
    Kind::Phone,
    Kind::Ipv6,
    Kind::Ipv4,
];
