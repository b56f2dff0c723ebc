//! The checks a candidate must pass once the automaton has proposed it: checksums (Luhn, mod 97),
//! issued ranges (card prefixes, SSN areas), parsers (IPv6), context (a version number, an order
//! number, a longer identifier), entropy, and for PEM blocks and JWTs the rest of the match.
//!
//! A check reads the candidate and a bounded window around it: at most `context::LOOKBACK` bytes
//! before, and after it a few bytes (or, for PEM blocks and JWTs, up to `Check::reach`). While
//! that window is not all known yet (a stream still coming) it answers `NeedMore`, so the verdict
//! on a stream is always the one on the whole text.

mod card;
pub(crate) mod context;
mod iban;
mod jwt;
mod net;
mod pem;
mod phone;
mod ssn;
mod token;

pub(crate) use context::LOOKBACK;

/// Which check a built-in shape's candidates go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// The shape says it all (fixed prefixes and lengths; keywords; custom patterns).
    Shape,
    Email,
    PhoneInternational,
    PhoneNorthAmerican,
    PhoneNational,
    Card,
    Iban,
    Ssn,
    Ipv4,
    Ipv6,
    OpenaiKey,
    AnthropicKey,
    SlackToken,
    Password,
    PrivateKey,
    Jwt,
}

/// A check's answer on one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A finding, `start..end` (the candidate's span, or part of it: a password's value; or
    /// more: a PEM block's body).
    Accept {
        start: usize,
        end: usize,
    },
    Reject,
    /// The answer depends on text not seen yet.
    NeedMore,
}

/// The answer depends on text not seen yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NeedMore;

/// The text a check may read: all of it known so far, and whether that is the end of it.
#[derive(Clone, Copy)]
pub(crate) struct Hay<'a> {
    pub bytes: &'a [u8],
    pub eof: bool,
}

impl Hay<'_> {
    /// The byte at `at`: `None` past the end of the text, `NeedMore` past what is known of it.
    pub(crate) fn at(&self, at: usize) -> Result<Option<u8>, NeedMore> {
        match self.bytes.get(at) {
            Some(&byte) => Ok(Some(byte)),
            None if self.eof => Ok(None),
            None => Err(NeedMore),
        }
    }

    /// The bytes a check may read before `at` (at most `LOOKBACK`).
    pub(crate) fn before(&self, at: usize) -> &[u8] {
        &self.bytes[at.saturating_sub(LOOKBACK)..at]
    }
}

impl Check {
    /// The verdict on the candidate `start..end` of `hay`.
    pub(crate) fn verdict(self, hay: Hay<'_>, start: usize, end: usize) -> Verdict {
        let text = &hay.bytes[start..end];
        let judged = |valid: Result<bool, NeedMore>| match valid {
            Ok(true) => Verdict::Accept { start, end },
            Ok(false) => Verdict::Reject,
            Err(NeedMore) => Verdict::NeedMore,
        };
        match self {
            Check::Shape => Verdict::Accept { start, end },
            Check::Email => judged(token::email(hay, start, end)),
            Check::PhoneInternational => judged(phone::international(hay, start, end)),
            Check::PhoneNorthAmerican => judged(phone::north_american(hay, start, end)),
            Check::PhoneNational => judged(phone::national(hay, start, end)),
            Check::Card => judged(Ok(card::valid(text))),
            Check::Iban => judged(Ok(iban::valid(text))),
            Check::Ssn => judged(ssn::valid(hay, start, end)),
            Check::Ipv4 => judged(net::ipv4(hay, start, end)),
            Check::Ipv6 => judged(Ok(net::ipv6(hay, start, end))),
            Check::OpenaiKey => judged(Ok(token::openai(text))),
            Check::AnthropicKey => judged(Ok(token::anthropic(text))),
            Check::SlackToken => judged(Ok(token::slack(text))),
            Check::Password => token::password(text, start),
            Check::PrivateKey => pem::block(hay, start, end),
            Check::Jwt => jwt::token(hay, start),
        }
    }

    /// How far past a candidate's start its check may read, for the checks that find the end of
    /// the match themselves; `None` for the others (they read a few bytes past the candidate).
    pub(crate) fn reach(self) -> Option<usize> {
        match self {
            Check::PrivateKey => Some(pem::CAP),
            Check::Jwt => Some(jwt::CAP),
            _ => None,
        }
    }
}

/// How many bytes past a candidate's end the checks other than PEM blocks and JWTs read.
pub(crate) const LOOKAHEAD: usize = 2;
