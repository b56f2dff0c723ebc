//! Every value of the positive corpus, embedded in every line of prose, is found exactly: one
//! finding, of its kind, over the value (a password's value only), and masking removes it.

use switchyard_guardrails::Kind;

use crate::generate::{self, Random};
use crate::{engine, lines};

/// Generated values per kind.
const GENERATED: usize = 60;

#[test]
fn every_value_is_found_in_every_prose() {
    let engine = engine();
    let templates: Vec<String> = lines(include_str!("../../corpus/prose.txt")).collect();
    let mut values: Vec<(Kind, String, String)> = lines(include_str!("../../corpus/positive.tsv"))
        .map(|line| {
            let mut fields = line.split('\t');
            let kind: Kind = fields.next().unwrap().parse().unwrap();
            let text = fields.next().unwrap().to_owned();
            let found = fields.next().map_or_else(|| text.clone(), str::to_owned);
            (kind, text, found)
        })
        .collect();
    let random = Random::new(7);
    for kind in Kind::PII.into_iter().chain(Kind::SECRETS) {
        for _ in 0..GENERATED {
            let value = generate::value(&random, kind);
            values.push((kind, value.text, value.found));
        }
    }
    let mut per_kind = std::collections::BTreeMap::<Kind, usize>::new();
    let mut failures = Vec::new();
    for (kind, text, found) in &values {
        for template in &templates {
            let prose = template.replace("{}", text);
            let masked = engine.mask(&prose);
            let findings: Vec<(Kind, &str)> =
                masked.findings.iter().map(|f| (f.kind, &prose[f.start..f.end])).collect();
            if findings != [(*kind, found.as_str())] || masked.text.contains(found.as_str()) {
                failures.push(format!("{kind} {text:?} in {template:?}: {findings:?}"));
            }
            *per_kind.entry(*kind).or_default() += 1;
        }
    }
    println!("positive corpus: {} texts", per_kind.values().sum::<usize>());
    for (kind, count) in &per_kind {
        println!("  {:<16} {count}", kind.name());
    }
    assert!(failures.is_empty(), "{} missed:\n{}", failures.len(), failures.join("\n"));
}
