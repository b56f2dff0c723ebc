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

/// The five rules of `switchyard bench policy` and the callgrind run, against a request with and
/// without a key (without one, the rules reading `key.*` cannot be evaluated: they do not apply).
fn decide_five(c: &mut Criterion) {
    use switchyard_policy::{decide, RawRule, Rule, RuleSet};
    let rules: Vec<RawRule> = serde_json::from_str(
        r#"[
        {"name": "interns", "when": "'intern' in key.tags && request.model != 'small'", "then": "route", "route": {"model": "m"}},
        {"name": "restricted", "when": "request.headers['x-data-class'] == 'restricted'", "then": "deny"},
        {"name": "nights", "when": "request.model == 'big' && time.now.getHours('Europe/Paris') >= 22", "then": "deny"},
        {"name": "big-bodies", "when": "request.size > 1000000 || request.stream && request.size > 500000", "then": "deny"},
        {"name": "research", "when": "key.team == 'research'", "then": "set", "set": {"tags": ["research"]}}]"#,
    )
    .unwrap();
    let set = RuleSet::new(rules.into_iter().map(|r| Rule::compile(r, &|_| true).unwrap()).collect()).unwrap();
    for keyed in [true, false] {
        let mut v = Values::default();
        let headers: HashMap<String, Value> = [
            ("content-type".to_owned(), Value::from("application/json")),
            ("x-data-class".to_owned(), Value::from("public")),
        ]
        .into();
        v.set("request.model", "m")
            .set("request.headers", headers)
            .set("request.size", 120i64)
            .set("request.stream", false);
        v.set_time(1_780_000_000_000);
        if keyed {
            v.set("key.tags", vec![Value::from("eu")]).set("key.team", "ops");
        }
        let bound = v.bind();
        let name = if keyed { "five rules, a key" } else { "five rules, no key" };
        c.bench_function(name, |b| b.iter(|| decide(&[&set], Phase::Request, std::hint::black_box(&bound))));
    }
}

criterion_group!(benches, evaluate, decide_five);
criterion_main!(benches);
