//! A semantic lookup's cost in the embedded store: the nearest entries of one partition holding
//! 10k and 100k 384-dimensional vectors (all-MiniLM-L6-v2's size), searched through the `Store`
//! the gateway calls. Issue 56's bar: ≤ 0.5 ms at 100k entries per partition.
//! `cargo bench -p switchyard-semcache --bench lookup`

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use switchyard_semcache::embedded::EmbeddedStore;
use switchyard_semcache::store::normalize;
use switchyard_semcache::{Entry, PartitionBuilder, Store};

const DIM: usize = 384;

fn vector(seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..DIM)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    normalize(&mut v);
    v
}

fn lookup(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut builder = PartitionBuilder::default();
    builder.part("key", b"bench");
    let partition = builder.finish();
    for n in [10_000u64, 100_000] {
        let store = runtime.block_on(EmbeddedStore::open(None, n as usize + 1, 0)).unwrap();
        for id in 0..n {
            let entry = Entry {
                id,
                partition,
                vector: vector(id),
                question: String::new(),
                answer: Bytes::new(),
                stored_ms: 0,
                expires_ms: i64::MAX,
            };
            runtime.block_on(store.insert(entry)).unwrap();
        }
        let queries: Vec<Vec<f32>> = (0..256).map(|i| vector(1_000_000 + i)).collect();
        let mut i = 0;
        c.bench_function(&format!("semantic lookup, {n} entries in the partition"), |b| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                let found = runtime.block_on(store.search(&partition, &queries[i], 4, 0.0, 1));
                black_box(found.map(|f| f.len()).unwrap_or(0))
            })
        });
    }
}

criterion_group!(benches, lookup);
criterion_main!(benches);
