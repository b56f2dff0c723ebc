//! What one rule costs per request: a typical condition (a tag, a model prefix, a header) bound
//! to one request's attributes and evaluated (issue 58's bar: ≤ 1 µs).
//! `cargo bench -p switchyard-policy --bench evaluate`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use cel::Value;
use criterion::{criterion_group, criterion_main, Criterion};
use switchyard_policy::{Condition, Phase, Values};

fn values() -> Values {
    let mut v = Values::default();
    let headers: HashMap<String, Value> = [("x-data-class".to_owned(), Value::from("restricted"))].into();
    v.set("request.model", "gpt-4o-mini")
        .set("request.headers", headers)
        .set("key.tags", vec![Value::from("intern"), Value::from("eu")])
        .set("key.team", "research");
    v
}

fn evaluate(c: &mut Criterion) {
    c.bench_function("bind a request's attributes", |b| b.iter(|| values().bind()));
    let values = values().bind();
    for (name, source) in [
        ("tag and model prefix", "'intern' in key.tags && request.model.startsWith('gpt-4')"),
        ("header equals", "request.headers['x-data-class'] == 'restricted'"),
        ("team in list", "key.team in ['research', 'ops']"),
    ] {
        let condition = Condition::compile(source, Phase::Request).unwrap();
        c.bench_function(name, |b| b.iter(|| condition.holds(std::hint::black_box(&values)).unwrap()));
    }
}

criterion_group!(benches, evaluate);
criterion_main!(benches);
