//! The streaming masker releases exactly what masking the whole text gives, however the text is
//! split: at every byte offset, at every pair of offsets for a short text, in chunks of every size,
//! and at random; and it holds back no more than the engine's bound.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use switchyard_guardrails::{Engine, Finding, GuardSet, GuardSpec, StreamMasker};

const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

fn engine() -> Engine {
    Engine::new(&[
        GuardSpec::pii("pii"),
        GuardSpec::secrets("secrets"),
        GuardSpec::new("blocker").keywords(["project-nightingale", "Zürich"]).pattern("employee_id", r"EMP-\d{6}"),
    ])
    .unwrap()
}

/// Streams `chunks` through a masker; returns what it released and its findings.
fn stream(engine: &Engine, chunks: &[&str]) -> (String, Vec<Finding>) {
    let mut masker = StreamMasker::new(engine);
    let mut released = String::new();
    for chunk in chunks {
        released += &masker.push(chunk);
        assert!(masker.held_back() <= engine.max_hold(), "held {} > {}", masker.held_back(), engine.max_hold());
    }
    released += &masker.finish();
    (released, masker.findings().to_vec())
}

/// Every split of `text` in two (at char boundaries) streams to the whole text's masking.
fn assert_every_split(engine: &Engine, text: &str) {
    let whole = engine.mask(text);
    for at in (0..=text.len()).filter(|&at| text.is_char_boundary(at)) {
        let (released, findings) = stream(engine, &[&text[..at], &text[at..]]);
        assert_eq!(released, whole.text, "split at {at} of {text:?}");
        assert_eq!(findings, whole.findings, "split at {at} of {text:?}");
    }
}

#[test]
fn every_split_of_texts_with_each_kind_masks_as_the_whole() {
    let engine = engine();
    let texts = [
        "Write to jane.doe@example.com today.".to_owned(),
        "Card 4111 1111 1111 1111 and 4111111111111111, not 4111 1111 1111 1112.".to_owned(),
        "Call +44 20 7946 0958 or (555) 123-4567, or 020 7946 0958.".to_owned(),
        format!("Authorization: Bearer {JWT}. Done"),
        "Key AKIAIOSFODNN7EXAMPLE, ghp_R8fK2mQ9xLw4Zt7Vb1Nc5Hd3Js6Pa0Ye2Ug8 and password=Xk9$mP2!vL7q end".to_owned(),
        "IBAN DE89 3704 0044 0532 0130 00, SSN 536-22-1234, hosts 10.0.0.1 and 2001:db8::1, version 1.2.3.4.".to_owned(),
        "A PEM: -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oGjJ8Z7E0nQfoAoGCCqGSM49\n-----END EC PRIVATE KEY-----\nok".to_owned(),
        "In Zürich, project-nightingale met EMP-123456 (ünïcödé text: ✓ 日本語).".to_owned(),
    ];
    for text in &texts {
        assert!(!engine.scan(text).is_empty(), "{text}");
        assert_every_split(&engine, text);
    }
}

#[test]
fn every_pair_of_splits_of_a_short_text_masks_as_the_whole() {
    let engine = engine();
    let text = "Mail a@b.io or 4111111111111111; +1 415-555-2671.";
    let whole = engine.mask(text).text;
    for first in 0..=text.len() {
        for second in first..=text.len() {
            let (released, _) = stream(&engine, &[&text[..first], &text[first..second], &text[second..]]);
            assert_eq!(released, whole, "splits at {first} and {second}");
        }
    }
}

#[test]
fn chunks_of_every_size_mask_as_the_whole() {
    let engine = engine();
    let prompt = include_str!("../corpus/prompt.txt");
    let text = format!("{prompt} jane.doe@example.com {JWT} 5555-5555-5555-4444 {prompt}");
    let whole = engine.mask(&text).text;
    for size in 1..=40 {
        let chunks: Vec<&str> = text.as_bytes().chunks(size).map(|chunk| std::str::from_utf8(chunk).unwrap()).collect();
        assert_eq!(stream(&engine, &chunks).0, whole, "chunks of {size}");
    }
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound as u64) as usize
    }
}

#[test]
fn random_texts_split_at_random_mask_as_the_whole() {
    let engine = engine();
    // Fragments that make and break candidates: digits, separators, prefixes, halves of values.
    let fragments = [
        " ",
        "\n",
        ".",
        "-",
        "@",
        ":",
        "=",
        "4111",
        "1111",
        "555",
        "0",
        "+44",
        "(555)",
        "jane",
        "example.com",
        "sk-",
        "proj-",
        "AKIA",
        "IOSFODNN7EXAMPLE",
        "ghp_",
        "eyJ",
        "hbGciOiJIUzI1NiJ9",
        "password",
        "Xk9$mP2!vL7q",
        "DE89",
        "3704",
        "fe80",
        "::",
        "1",
        "10.0",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "MIIBOgIBAAJBAKj",
        "é",
        "✓",
        "project-nightingale",
        "EMP-",
        "123456",
        "version",
        "the",
        "a@b.io",
        JWT,
    ];
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    // STREAM_CASES=30000 for a longer hunt; the seed is fixed, so a failure reproduces.
    for _ in 0..std::env::var("STREAM_CASES").map_or(400, |cases| cases.parse().unwrap()) {
        let text: String = (0..random.below(30) + 1).map(|_| fragments[random.below(fragments.len())]).collect();
        let whole = engine.mask(&text);
        let mut chunks = Vec::new();
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let mut cut = (random.below(12) + 1).min(rest.len());
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            chunks.push(&rest[..cut]);
            rest = &rest[cut..];
        }
        let (released, findings) = stream(&engine, &chunks);
        assert_eq!(released, whole.text, "{text:?} in {chunks:?}");
        assert_eq!(findings, whole.findings, "{text:?} in {chunks:?}");
    }
}

#[test]
fn a_masker_for_some_guards_masks_as_mask_for_at_every_split() {
    let engine = engine();
    let secrets_only = GuardSet::from_bits(0b010);
    let text = "a@b.io sent AKIAIOSFODNN7EXAMPLE and 4111111111111111 to 10.0.0.1";
    let whole = engine.mask_for(text, secrets_only);
    assert_eq!(whole.text, "a@b.io sent [AWS_ACCESS_KEY] and 4111111111111111 to 10.0.0.1");
    for at in 0..=text.len() {
        let mut masker = StreamMasker::for_guards(&engine, secrets_only);
        let released = masker.push(&text[..at]) + &masker.push(&text[at..]) + &masker.finish();
        assert_eq!(released, whole.text, "split at {at}");
        assert_eq!(masker.findings(), whole.findings, "split at {at}");
    }
}

#[test]
fn prose_is_held_back_no_further_than_its_last_word() {
    let engine = engine();
    let mut masker = StreamMasker::new(&engine);
    assert_eq!(masker.push("Hello there, how are "), "Hello there, how are ");
    assert_eq!(masker.push("you tod"), "you ");
    assert_eq!(masker.held_back(), 3);
    assert_eq!(masker.push("ay? Mail jane@exam"), "today? Mail ");
    // A trailing "now." could still become an email's local part.
    assert_eq!(masker.push("ple.com now."), "[EMAIL] ");
    assert_eq!(masker.push(" Bye"), "now. ");
    assert_eq!(masker.finish(), "Bye");
}

#[test]
fn a_pem_block_is_held_until_its_end_line_and_released_masked() {
    let engine = engine();
    let mut masker = StreamMasker::new(&engine);
    assert_eq!(masker.push("key: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"), "key: ");
    assert_eq!(masker.push("BKcwggSjAgEAAoIBAQC7\n-----END PRIV"), "");
    assert_eq!(masker.push("ATE KEY-----\nthanks!"), "[PRIVATE_KEY]\nthanks!");
    assert_eq!(masker.finish(), "");
    assert_eq!(masker.findings().len(), 1);
}
