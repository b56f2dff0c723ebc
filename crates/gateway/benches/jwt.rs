//! What checking a client's JWT costs (`auth.jwt`), once its issuer's keys are cached: the
//! signature and registered claims of a token seen for the first time, for each accepted family —
//! RS256 (2048-bit), ES256 and EdDSA — with keys made from the JWKS as the gateway makes them
//! (`jwt_verify`); and a token seen before, which the gateway's `JwtVerifier` remembers until its
//! `exp` (`jwt_remembered`: what every request after a client's first costs).
//!
//! Run with `cargo bench --bench jwt`. Keys: the test-only ones in
//! `crates/switchyard/tests/fixtures/jwt`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../switchyard/tests/fixtures/jwt");

fn jwt(c: &mut Criterion) {
    let jwks: JwkSet = serde_json::from_slice(&std::fs::read(format!("{FIXTURES}/jwks.json")).unwrap()).unwrap();
    let key_of = |kid: &str| {
        let jwk = jwks.keys.iter().find(|k| k.common.key_id.as_deref() == Some(kid)).unwrap();
        DecodingKey::from_jwk(jwk).unwrap()
    };
    let pem = |file: &str| std::fs::read(format!("{FIXTURES}/{file}")).unwrap();
    let claims = serde_json::json!({"iss": "https://id.example", "sub": "svc", "aud": ["switchyard"],
        "exp": 4_000_000_000u64, "groups": ["ml"]});
    let cases = [
        ("RS256", Algorithm::RS256, "rsa-1", EncodingKey::from_rsa_pem(&pem("rsa1.pem")).unwrap()),
        ("ES256", Algorithm::ES256, "ec-1", EncodingKey::from_ec_pem(&pem("ec1.pem")).unwrap()),
        ("EdDSA", Algorithm::EdDSA, "ed-1", EncodingKey::from_ed_pem(&pem("ed1.pem")).unwrap()),
    ];
    let mut group = c.benchmark_group("jwt_verify");
    for (name, alg, kid, signing) in cases {
        let header = Header { kid: Some(kid.to_owned()), ..Header::new(alg) };
        let token = jsonwebtoken::encode(&header, &claims, &signing).unwrap();
        let key = key_of(kid);
        let mut v = Validation::new(alg);
        v.leeway = 60;
        v.validate_nbf = true;
        v.set_issuer(&["https://id.example"]);
        v.set_audience(&["switchyard"]);
        group.bench_function(name, |b| {
            b.iter(|| jsonwebtoken::decode::<serde_json::Value>(black_box(&token), &key, &v).unwrap());
        });
    }
    group.finish();

    let issuer = switchyard_gateway::config::jwt::JwtIssuer {
        issuer: "https://id.example".to_owned(),
        audiences: vec!["switchyard".to_owned()],
        jwks_url: Some("http://127.0.0.1:9/unused".to_owned()),
        user_claim: "sub".to_owned(),
        team_claim: Some("groups".to_owned()),
        roles_claim: None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = switchyard_gateway::upstream::build(std::time::Duration::from_secs(1)).unwrap();
    let verifier = switchyard_gateway::auth::jwt::JwtVerifier::new(&[issuer], client);
    verifier.preload("https://id.example", &jwks);
    let mut group = c.benchmark_group("jwt_remembered");
    for (name, alg, kid, signing) in [
        ("RS256", Algorithm::RS256, "rsa-1", EncodingKey::from_rsa_pem(&pem("rsa1.pem")).unwrap()),
        ("ES256", Algorithm::ES256, "ec-1", EncodingKey::from_ec_pem(&pem("ec1.pem")).unwrap()),
        ("EdDSA", Algorithm::EdDSA, "ed-1", EncodingKey::from_ed_pem(&pem("ed1.pem")).unwrap()),
    ] {
        let header = Header { kid: Some(kid.to_owned()), ..Header::new(alg) };
        let token = jsonwebtoken::encode(&header, &claims, &signing).unwrap();
        runtime.block_on(verifier.verify(&token, 0)).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(verifier.verify(black_box(&token), 0)).unwrap());
        });
    }
    group.finish();
}

criterion_group!(benches, jwt);
criterion_main!(benches);
