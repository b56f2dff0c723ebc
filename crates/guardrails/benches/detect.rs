//! The detectors' cost on a 4 KB English prompt: clean (one scan, nothing to mask), with ten
//! findings to mask, and streamed in 20-byte chunks through the masker (the cost per chunk is the
//! stream's time divided by its chunks). Pin it to one core: `taskset -c 1 cargo bench -p
//! switchyard-guardrails`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use switchyard_guardrails::{Engine, GuardSpec, StreamMasker};

const PROMPT: &str = include_str!("../corpus/prompt.txt");

/// One value of each common kind, ten in all.
const SEEDS: [&str; 10] = [
    "jane.doe@example.com",
    "+44 20 7946 0958",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "536-22-1234",
    "192.168.14.7",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_R8fK2mQ9xLw4Zt7Vb1Nc5Hd3Js6Pa0Ye2Ug8",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "password=Xk9$mP2!vL7q",
];

/// The prompt with the seeds spread through it, each after a space.
fn seeded() -> String {
    let spaces: Vec<usize> = PROMPT.match_indices(' ').map(|(at, _)| at).collect();
    let mut text = String::new();
    let mut copied = 0;
    for (index, seed) in SEEDS.iter().enumerate() {
        let at = spaces[(index + 1) * spaces.len() / (SEEDS.len() + 1)];
        text.push_str(&PROMPT[copied..=at]);
        text.push_str(seed);
        text.push(' ');
        copied = at + 1;
    }
    text.push_str(&PROMPT[copied..]);
    text
}

fn chunks(text: &str, size: usize) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = size.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        chunks.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    chunks
}

fn detect(c: &mut Criterion) {
    let engine = Engine::new(&[GuardSpec::pii("pii"), GuardSpec::secrets("secrets")]).expect("builtins compile");
    let seeded = seeded();
    assert!(engine.scan(PROMPT).is_empty(), "the clean prompt has findings");
    assert_eq!(engine.scan(&seeded).len(), SEEDS.len(), "{:?}", engine.mask(&seeded).text);

    let mut group = c.benchmark_group("guardrails");
    group.throughput(Throughput::Bytes(PROMPT.len() as u64));
    group.bench_function("mask_4k_clean", |b| b.iter(|| engine.mask(std::hint::black_box(PROMPT))));
    // Prose with none of the bytes every match contains (no digit, `@`, `:`, `=`, `_`, `-`, `A`,
    // `J`): passed over by the byte lookups alone.
    let prose: String = PROMPT.chars().filter(|c| !"0123456789@:=_-AJ".contains(*c)).collect();
    group.bench_function("mask_4k_prose_without_triggers", |b| b.iter(|| engine.mask(std::hint::black_box(&prose))));
    // Digits every 16 characters: the triggers' windows cover a fifth of the text, so the one
    // multi-pattern scan over their span runs rather than a walk from each window's positions.
    let dense: String =
        PROMPT.chars().enumerate().flat_map(|(at, c)| (at % 16 == 0).then_some('7').into_iter().chain([c])).collect();
    group.throughput(Throughput::Bytes(dense.len() as u64));
    group.bench_function("mask_4k_digit_every_16", |b| b.iter(|| engine.mask(std::hint::black_box(&dense))));
    group.throughput(Throughput::Bytes(seeded.len() as u64));
    group.bench_function("mask_4k_10_findings", |b| b.iter(|| engine.mask(std::hint::black_box(&seeded))));

    let pieces = chunks(&seeded, 20);
    group.throughput(Throughput::Elements(pieces.len() as u64));
    group.bench_function("stream_4k_10_findings_20b_chunks", |b| {
        b.iter_batched_ref(
            || StreamMasker::new(&engine),
            |masker| {
                let mut released = 0;
                for piece in &pieces {
                    released += masker.push(piece).len();
                }
                released + masker.finish().len()
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();

    // The texts of a short chat exchange, as `bench guardrails` sends them (the prompt, and the
    // mock's answer): here a scan's fixed costs, not its speed per byte, are what count.
    let mut short = c.benchmark_group("guardrails_short");
    for (name, text) in [("prompt", "Say hello in one short sentence."), ("answer", "tok0 tok1 tok2 tok3 tok4 ")] {
        short.bench_function(name, |b| b.iter(|| engine.scan(std::hint::black_box(text))));
    }
    short.finish();
    println!("stream chunks: {} of 20 bytes (per-chunk cost = stream time / {})", pieces.len(), pieces.len());
}

criterion_group!(benches, detect);
criterion_main!(benches);
