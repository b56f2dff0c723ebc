//! Random but valid values of every kind in several formats (the positive corpus), and random
//! look-alikes (the negative one): cards that fail Luhn, 16-digit order numbers, UUIDs, hashes,
//! ISBNs with valid check digits, timestamps, base64 that is not a JWT. Seeded, so every run
//! generates the same corpus.

use std::cell::Cell;

use switchyard_guardrails::Kind;

/// xorshift64: small, deterministic. Shared (`&self`) so draws can nest in one expression.
pub struct Random(Cell<u64>);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(Cell::new(seed.max(1)))
    }

    pub fn below(&self, bound: usize) -> usize {
        let mut state = self.0.get();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        self.0.set(state);
        (state % bound as u64) as usize
    }

    pub fn pick<'a>(&self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }

    pub fn from(&self, alphabet: &str, length: usize) -> String {
        let alphabet = alphabet.as_bytes();
        (0..length).map(|_| char::from(alphabet[self.below(alphabet.len())])).collect()
    }

    pub fn digits(&self, length: usize) -> String {
        self.from(DIGITS, length)
    }

    /// A number in `low..=high`, written out.
    pub fn number(&self, low: usize, high: usize) -> String {
        (low + self.below(high - low + 1)).to_string()
    }
}

pub const DIGITS: &str = "0123456789";
pub const ALPHANUMERIC: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_ALPHANUMERIC: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const BASE64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const BASE64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub const HEX: &str = "0123456789abcdef";

/// A generated value: its text, and the part a detector should find (the value of a
/// `password=value` pair; all of it otherwise).
pub struct Value {
    pub text: String,
    pub found: String,
}

impl Value {
    fn whole(text: String) -> Value {
        Value { found: text.clone(), text }
    }
}

/// A random valid value of `kind`, in one of its formats.
pub fn value(random: &Random, kind: Kind) -> Value {
    match kind {
        Kind::Email => Value::whole(email(random)),
        Kind::Phone => Value::whole(phone(random)),
        Kind::Card => Value::whole(group_card(random, &card(random, true))),
        Kind::Iban => Value::whole(iban(random)),
        Kind::Ssn => Value::whole(ssn(random)),
        Kind::Ipv4 => Value::whole(ipv4(random)),
        Kind::Ipv6 => Value::whole(ipv6(random)),
        Kind::AwsAccessKey => {
            Value::whole(format!("{}{}", random.pick(&["AKIA", "ASIA"]), random.from(UPPER_ALPHANUMERIC, 16)))
        }
        Kind::GithubToken => Value::whole(github_token(random)),
        Kind::OpenaiKey => Value::whole(openai_key(random)),
        Kind::AnthropicKey => Value::whole(format!("sk-ant-api03-{}AA", key_body(random, BASE64URL, 93))),
        Kind::GoogleApiKey => Value::whole(format!("AIza{}", random.from(BASE64URL, 35))),
        Kind::SlackToken => Value::whole(slack_token(random)),
        Kind::PrivateKey => Value::whole(private_key(random)),
        Kind::Jwt => Value::whole(jwt(random)),
        Kind::Password => password(random),
        Kind::Keyword | Kind::Pattern => unreachable!("not built in"),
    }
}

fn email(random: &Random) -> String {
    let local = format!(
        "{}{}{}",
        random.from("abcdefghijklmnopqrstuvwxyz", 1 + random.below(8)),
        random.pick(&["", ".", "_", "+", "-"]),
        random.from("abcdefghijklmnopqrstuvwxyz0123456789", 1 + random.below(8))
    );
    let domain = random.from("abcdefghijklmnopqrstuvwxyz", 3 + random.below(10));
    format!(
        "{local}@{}{domain}.{}",
        random.pick(&["", "mail.", "eu.corp."]),
        random.pick(&["com", "org", "io", "de", "co.uk"])
    )
}

fn phone(random: &Random) -> String {
    let area = format!("{}{}", random.number(2, 9), random.pick(&["02", "12", "55", "78", "40"]));
    match random.below(8) {
        0 => format!("+44 20 {} {}", random.digits(4), random.digits(4)),
        1 => format!("+1 ({area}) {}-{}", random.digits(3), random.digits(4)),
        2 => format!("+49 {} {}", random.number(30, 89), random.digits(8)),
        3 => format!(
            "+33 {} {} {} {} {}",
            random.number(1, 9),
            random.digits(2),
            random.digits(2),
            random.digits(2),
            random.digits(2)
        ),
        4 => format!("({area}) {}-{}", random.digits(3), random.digits(4)),
        5 => format!("{area}-{}-{}", random.digits(3), random.digits(4)),
        6 => format!("07{} {}", random.digits(3), random.digits(6)),
        _ => format!(
            "0{} {} {} {} {}",
            random.number(1, 9),
            random.digits(2),
            random.digits(2),
            random.digits(2),
            random.digits(2)
        ),
    }
}

/// A card number of a random network: valid when `valid`, else with a wrong check digit.
pub fn card(random: &Random, valid: bool) -> String {
    let (prefix, length) = match random.below(7) {
        0 => ("4".to_owned(), 16),
        1 => (random.number(51, 55), 16),
        2 => (random.number(2221, 2720), 16),
        3 => (random.pick(&["34", "37"]).to_owned(), 15),
        4 => ("6011".to_owned(), 16),
        5 => (random.number(3528, 3589), 16),
        _ => ("36".to_owned(), 14),
    };
    let body = format!("{prefix}{}", random.digits(length - 1 - prefix.len()));
    let check = luhn_check_digit(&body);
    let check = if valid { check } else { (check + 1 + random.below(9) as u32) % 10 };
    format!("{body}{check}")
}

/// The digit that makes `body` followed by it pass the Luhn check.
fn luhn_check_digit(body: &str) -> u32 {
    let sum: u32 = body
        .bytes()
        .rev()
        .enumerate()
        .map(|(at, digit)| {
            let digit = u32::from(digit - b'0');
            match at % 2 {
                0 if digit * 2 > 9 => digit * 2 - 9,
                0 => digit * 2,
                _ => digit,
            }
        })
        .sum();
    (10 - sum % 10) % 10
}

/// The number as written: plain, or grouped by spaces or dashes (Amex 4-6-5).
pub fn group_card(random: &Random, number: &str) -> String {
    let separator = random.pick(&["", " ", "-"]);
    let groups: &[usize] = if number.len() == 15 { &[4, 6, 5] } else { &[4, 4, 4, 4, 4] };
    let mut grouped = String::new();
    let mut rest = number;
    for &size in groups {
        if rest.is_empty() {
            break;
        }
        if !grouped.is_empty() {
            grouped.push_str(separator);
        }
        let size = size.min(rest.len());
        grouped.push_str(&rest[..size]);
        rest = &rest[size..];
    }
    grouped
}

fn iban(random: &Random) -> String {
    let (country, length) =
        [("DE", 22), ("GB", 22), ("FR", 27), ("NL", 18), ("ES", 24), ("IT", 27), ("CH", 21)][random.below(7)];
    let bban = random.from(UPPER_ALPHANUMERIC, length - 4);
    let remainder = format!("{bban}{country}00").bytes().fold(0u32, |remainder, char| match char {
        b'0'..=b'9' => (remainder * 10 + u32::from(char - b'0')) % 97,
        _ => (remainder * 100 + u32::from(char - b'A') + 10) % 97,
    });
    let compact = format!("{country}{:02}{bban}", 98 - remainder);
    match random.below(2) {
        0 => compact,
        _ => {
            compact.as_bytes().chunks(4).map(|chunk| std::str::from_utf8(chunk).unwrap()).collect::<Vec<_>>().join(" ")
        }
    }
}

fn ssn(random: &Random) -> String {
    let area = loop {
        let area = 1 + random.below(899);
        if area != 666 {
            break area;
        }
    };
    let separator = random.pick(&["-", " "]);
    format!("{area:03}{separator}{:02}{separator}{:04}", 1 + random.below(99), 1 + random.below(9999))
}

fn ipv4(random: &Random) -> String {
    format!("{}.{}.{}.{}", random.number(1, 223), random.below(256), random.below(256), 1 + random.below(254))
}

fn ipv6(random: &Random) -> String {
    let group = |random: &Random| format!("{:x}", random.below(0x10000));
    match random.below(3) {
        0 => (0..8).map(|_| group(random)).collect::<Vec<_>>().join(":"),
        1 => format!("2001:db8::{}:{}", group(random), group(random)),
        _ => format!("fe80::{}:{}ff:fe{}", group(random), random.from(HEX, 2), random.from(HEX, 2)),
    }
}

fn github_token(random: &Random) -> String {
    match random.below(2) {
        0 => format!("gh{}_{}", random.pick(&["p", "o", "u", "s", "r"]), key_body(random, ALPHANUMERIC, 36)),
        _ => format!("github_pat_{}_{}", key_body(random, ALPHANUMERIC, 22), key_body(random, ALPHANUMERIC, 59)),
    }
}

fn openai_key(random: &Random) -> String {
    match random.below(3) {
        0 => format!("sk-{}", key_body(random, ALPHANUMERIC, 48)),
        1 => format!("sk-proj-{}", key_body(random, BASE64URL, 156)),
        _ => format!("sk-svcacct-{}", key_body(random, BASE64URL, 100)),
    }
}

/// A random key body with upper and lower case and a digit, as generated keys have.
fn key_body(random: &Random, alphabet: &str, length: usize) -> String {
    format!("A7q{}", random.from(alphabet, length - 3))
}

fn slack_token(random: &Random) -> String {
    match random.below(2) {
        0 => format!("xoxb-{}-{}-{}", random.digits(12), random.digits(13), random.from(ALPHANUMERIC, 24)),
        _ => format!("xoxp-{}-{}-{}-{}", random.digits(12), random.digits(12), random.digits(12), random.from(HEX, 32)),
    }
}

fn private_key(random: &Random) -> String {
    let label = random.pick(&[
        "RSA PRIVATE KEY",
        "PRIVATE KEY",
        "EC PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
    ]);
    let lines: Vec<String> = (0..2 + random.below(20)).map(|_| random.from(BASE64, 64)).collect();
    format!("-----BEGIN {label}-----\n{}\n{}=\n-----END {label}-----", lines.join("\n"), random.from(BASE64, 23))
}

pub fn base64url(bytes: &[u8]) -> String {
    let alphabet = BASE64URL.as_bytes();
    let mut encoded = String::new();
    for chunk in bytes.chunks(3) {
        let block = chunk.iter().enumerate().fold(0u32, |block, (at, &byte)| block | u32::from(byte) << (16 - 8 * at));
        for sextet in 0..=chunk.len() {
            encoded.push(char::from(alphabet[(block >> (18 - 6 * sextet) & 63) as usize]));
        }
    }
    encoded
}

fn jwt(random: &Random) -> String {
    let header = random.pick(&[
        r#"{"alg":"HS256","typ":"JWT"}"#,
        r#"{"typ":"JWT","alg":"RS256","kid":"k1"}"#,
        r#"{"kid":"2024-01","alg":"ES256"}"#,
    ]);
    let payload = format!(r#"{{"sub":"{}","iat":{},"scope":"read write"}}"#, random.digits(8), random.digits(10));
    let signature = random.from(BASE64URL, random.pick(&["43", "86", "342"]).parse().unwrap());
    format!("{}.{}.{signature}", base64url(header.as_bytes()), base64url(payload.as_bytes()))
}

fn password(random: &Random) -> Value {
    let key = random.pick(&["password", "passwd", "DB_PASSWORD", "secret", "api_key", "client_secret", "auth_token"]);
    let value = format!("{}9!", random.from("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789$%&#@!?", 14));
    let text = match random.below(4) {
        0 => format!("{key}={value}"),
        1 => format!("{key}: {value}"),
        2 => format!("{key} = '{value}'"),
        _ => format!("\"{key}\": \"{value}\""),
    };
    Value { text, found: value }
}
