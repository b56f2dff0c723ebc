//! A semantic lookup's cost in the embedded store: the nearest entries of one partition holding
//! 10k and 100k 384-dimensional vectors (all-MiniLM-L6-v2's size), searched through the `Store`
//! the gateway calls. Issue 56's bar: ≤ 0.5 ms at 100k entries per partition.
//!
//! The vectors lie around 1,000 random topics, as sentence embeddings do (two unrelated ones have
//! a cosine near 0): uniformly random vectors in 384 dimensions are all equally far apart, which
//! no real embedding model produces and no graph index navigates well (about 1 ms at 10k).
//! `cargo bench -p switchyard-semcache --bench lookup`

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use switchyard_semcache::embedded::EmbeddedStore;
use switchyard_semcache::store::normalize;
use switchyard_semcache::{Entry, PartitionBuilder, Store};

const DIM: usize = 384;

/// xorshift: a uniform number in [-0.5, 0.5).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

/// Unit vectors around `topics` random centres.
struct Topics {
    centres: Vec<Vec<f32>>,
    rng: Rng,
}

impl Topics {
    fn new(topics: usize) -> Topics {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let centres = (0..topics)
            .map(|_| {
                let mut v: Vec<f32> = (0..DIM).map(|_| rng.next()).collect();
                normalize(&mut v);
                v
            })
            .collect();
        Topics { centres, rng }
    }

    fn vector(&mut self) -> Vec<f32> {
        let at = ((self.rng.next() + 0.5) * (self.centres.len() - 1) as f32) as usize;
        let centre = &self.centres[at];
        let mut v: Vec<f32> = centre.iter().map(|x| x + 0.06 * self.rng.next()).collect();
        normalize(&mut v);
        v
    }
}

fn lookup(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut builder = PartitionBuilder::default();
    builder.part("key", b"bench");
    let partition = builder.finish();
    for n in [10_000u64, 100_000] {
        let mut topics = Topics::new(1000);
        let store = runtime.block_on(EmbeddedStore::open(None, n as usize + 1, 0)).unwrap();
        for id in 0..n {
            let entry = Entry {
                id,
                partition,
                vector: topics.vector(),
                question: String::new(),
                answer: Bytes::new(),
                stored_ms: 0,
                expires_ms: i64::MAX,
            };
            runtime.block_on(store.insert(entry)).unwrap();
        }
        let queries: Vec<Vec<f32>> = (0..256).map(|_| topics.vector()).collect();
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
