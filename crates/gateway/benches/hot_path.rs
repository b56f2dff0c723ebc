//! Criterion micro-benchmarks of the gateway's hot path: routing decision, request parsing, SSE relay.
//!
//! Run with `cargo bench --bench hot_path` (add a filter such as `-- route_select` for one group).
//!
//! * `route_select/<strategy>/<N>`: one `Router::select("m", &[])` over N backends that are all up
//!   and idle. Backend `i` has `weight: 1 + i % 5` and `priority: (i % 4) * 10`, so the priority
//!   strategy's top tier is a quarter of the backends.
//! * `route_cache_aware/decision_32k_tokens_16_backends`: the cache-aware decision for a 32k-token
//!   prompt among 16 warm backends; after criterion's figures, the per-call p50/p99/p99.9/max of
//!   200k individually timed calls is printed (the bar is a per-call p99).
//! * `parse_request/<case>/<size>`: `parse_request` of a realistic chat body (~1 KB, ~100 KB);
//!   `passthrough` keeps the model (zero-copy body), `alias` resolves `fast` → `real-model` and
//!   splices the new model into a fresh body. Throughput is in body bytes.
//! * `bedrock/{encode,sign}/1KB`: what a request to a Bedrock backend adds: translating a ~1 KB
//!   OpenAI chat body to a Converse body (decode + encode), and SigV4-signing the result
//!   (`aws-sigv4`: a SHA-256 of the body, the canonical request, four HMACs).
//! * `sse_relay/{direct,gateway}/<chunks>`: one whole streamed chat completion (`"stream": true`)
//!   over keep-alive HTTP/1.1 on loopback, straight to the mock backend (`direct`) or through an
//!   in-process gateway (`gateway`), with the mock streaming 1 or 200 content chunks back to back
//!   (no `chunk_delay`). Client, mock and gateway share one *current-thread* tokio runtime, so
//!   every number is the summed CPU + syscall cost of all three, serialised; a multi-thread
//!   runtime on a 2-core box measures cross-core wake-ups instead (≈10× slower, ±15 % noise) and
//!   overlaps the gateway's work with the mock's, hiding it. How to read it:
//!     - gateway/1 − direct/1 ≈ fixed per-request gateway cost (parse, route, upstream request,
//!       one extra loopback hop);
//!     - per-chunk relay cost ≈ (gateway/200 − gateway/1 − (direct/200 − direct/1)) / 199,
//!       i.e. what the gateway adds for each relayed SSE chunk beyond what the mock and the client
//!       already spend on it. Caveat: the mock's back-to-back chunks leave it in a few large
//!       writes, while the gateway relays frame by frame (one write per chunk), so this is the
//!       burst case; with real token spacing both paths write once per chunk.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::too_many_lines)] // bench scenarios read top to bottom; splitting them hides the story

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use switchyard_gateway::endpoint::Endpoint;
use switchyard_gateway::http::parse::parse_request;
use switchyard_gateway::route::Router;
use switchyard_gateway::Config;
use switchyard_testkit::{MockConfig, MockServer, TestClient};

fn config(yaml: &str) -> Config {
    Config::from_yaml(yaml, &HashMap::<String, String>::new()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// 1. Routing decision

fn router_yaml(strategy: &str, n: usize) -> String {
    let mut yaml = format!("routing: {{strategy: {strategy}}}\nbackends:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - {{name: b{i}, url: 'http://127.0.0.1:{}', models: [m], weight: {}, priority: {}}}\n",
            20000 + i,
            1 + i % 5,
            (i % 4) * 10
        ));
    }
    yaml
}

fn route_select(c: &mut Criterion) {
    let mut group = c.benchmark_group("route_select");
    group.sample_size(30).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for strategy in ["round-robin", "least-connections", "priority", "weighted"] {
        for n in [2usize, 8, 32, 256] {
            let cfg = config(&router_yaml(strategy, n));
            let router = Router::new(&cfg).unwrap();
            for b in &router.backends {
                b.health.set_up(true);
            }
            assert_eq!(router.policy_name(), strategy);
            assert!(router.select("m", &[]).is_ok());
            group.bench_with_input(BenchmarkId::new(strategy, n), &router, |b, router| {
                b.iter(|| router.select(black_box("m"), black_box(&[])))
            });
        }
    }
    group.finish();
}

/// Cache-aware decision for a 32k-token prompt (128 KB: 2,048 blocks) among 16 backends whose
/// indexes already hold many conversations; and hashing such a prompt into its block chain.
fn route_cache_aware(c: &mut Criterion) {
    use switchyard_gateway::route::{prefix, RouteHints};
    let mut group = c.benchmark_group("route_cache_aware");
    group.sample_size(30).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    let n = 16;
    let mut yaml = String::from("routing: {strategy: cache-aware, sticky_sessions: false}\nbackends:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - {{name: b{i}, url: 'http://127.0.0.1:{}', models: [m], cache_tokens: 262144}}\n",
            20000 + i
        ));
    }
    let router = Router::new(&config(&yaml)).unwrap();
    for b in &router.backends {
        b.health.set_up(true);
    }
    let text = |seed: u64, bytes: usize| -> Vec<u8> {
        let mut x = seed | 1;
        (0..bytes)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b'a' + (x % 26) as u8
            })
            .collect()
    };
    let system = text(1, 16 << 10);
    // 64 conversations sharing a 4k-token system prompt, spread over the backends by the router.
    for conv in 0..64u64 {
        let mut prompt = system.clone();
        prompt.extend(text(100 + conv, 112 << 10));
        let hints = RouteHints { chain: prefix::chain(&[&prompt]), ..RouteHints::default() };
        router.select_with("m", &hints, &[]).unwrap();
    }
    let mut prompt = system.clone();
    prompt.extend(text(100, 112 << 10)); // conversation 0's next turn
    prompt.extend(text(9999, 512));
    let chain = prefix::chain(&[&prompt]);
    assert_eq!(chain.len(), prompt.len() / prefix::BLOCK_BYTES);
    let hints = RouteHints { chain: chain.clone(), ..RouteHints::default() };
    group.bench_function("decision_32k_tokens_16_backends", |b| {
        b.iter(|| router.select_with(black_box("m"), black_box(&hints), black_box(&[])).unwrap())
    });
    group.throughput(Throughput::Bytes(prompt.len() as u64));
    group.bench_function("hash_32k_token_prompt", |b| b.iter(|| prefix::chain(black_box(&[&prompt]))));
    group.finish();

    // Criterion reports means of samples; the bar is a per-call p99. Time each of 200k calls on
    // its own (the clock read, ~20 ns, is included: the figures err high) into a histogram.
    let mut per_call = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    for i in 0..220_000 {
        let start = std::time::Instant::now();
        black_box(router.select_with(black_box("m"), black_box(&hints), black_box(&[])).unwrap());
        let ns = start.elapsed().as_nanos() as u64;
        if i >= 20_000 {
            per_call.record(ns).unwrap();
        }
    }
    let q = |p: f64| per_call.value_at_quantile(p) as f64 / 1e3;
    println!(
        "route_cache_aware/decision_32k_tokens_16_backends per call ({} calls): p50 {:.2} µs, p99 {:.2} µs, \
         p99.9 {:.2} µs, max {:.2} µs",
        per_call.len(),
        q(0.5),
        q(0.99),
        q(0.999),
        per_call.max() as f64 / 1e3
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Request parsing and model rewrite

/// A chat body shaped like a real client's: model first, a system prompt, alternating
/// user/assistant turns (with escapes, unicode and code), sampling params last; grown with more
/// turns until it is at least `target` bytes.
fn chat_body(model: &str, target: usize) -> Bytes {
    let user = [
        "Can you explain how a circuit breaker works in an HTTP gateway?",
        "And what happens when the \"half-open\" trial request fails?\nPlease be specific.",
        "Write me a Rust function that retries a request up to three times.",
        "Thanks! Can you translate the summary into French — résumé, s'il vous plaît?",
    ];
    let assistant = [
        "A circuit breaker counts consecutive failures per backend. Once the count crosses a threshold it \
         opens and the gateway stops sending traffic there for a cooldown period.",
        "If the trial fails, the breaker re-opens and the cooldown starts again; only one request at a time \
         is allowed to probe a recovering backend, so a flapping server never sees a thundering herd.",
        "```rust\nasync fn with_retry<F, T, E>(mut f: impl FnMut() -> F) -> Result<T, E>\nwhere F: Future<Output = \
         Result<T, E>> {\n    let mut last = None;\n    for _ in 0..3 {\n        match f().await {\n            Ok(v) => \
         return Ok(v),\n            Err(e) => last = Some(e),\n        }\n    }\n    Err(last.unwrap())\n}\n```",
        "Bien sûr : un disjoncteur compte les échecs consécutifs et coupe le trafic vers le serveur \
         défaillant pendant un temps de refroidissement. 🚦",
    ];
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": "You are a concise, helpful assistant for platform engineers."}),
    ];
    let render = |messages: &Vec<serde_json::Value>| {
        serde_json::to_vec(&serde_json::json!({
            "model": model,
            "messages": messages,
            "stream": false,
            "temperature": 0.7,
            "max_tokens": 512,
            "user": "bench-user-42",
        }))
        .unwrap()
    };
    let mut turn = 0;
    loop {
        let body = render(&messages);
        if body.len() >= target {
            return Bytes::from(body);
        }
        messages.push(serde_json::json!({"role": "user", "content": user[turn % user.len()]}));
        messages.push(serde_json::json!({"role": "assistant", "content": assistant[turn % assistant.len()]}));
        turn += 1;
    }
}

fn parse(c: &mut Criterion) {
    let cfg = config("aliases: {fast: real-model}");
    let mut group = c.benchmark_group("parse_request");
    group.sample_size(30).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for (label, size) in [("1KB", 1024usize), ("100KB", 100 * 1024)] {
        for (case, model, expect) in [("passthrough", "real-model", "real-model"), ("alias", "fast", "real-model")] {
            let body = chat_body(model, size);
            let parsed = parse_request(Endpoint::ChatCompletions, body.clone(), &cfg).unwrap();
            assert_eq!(parsed.model, expect);
            assert_eq!(parsed.body.as_ptr() == body.as_ptr(), case == "passthrough", "zero-copy only without alias");
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_with_input(BenchmarkId::new(case, label), &body, |b, body| {
                b.iter(|| parse_request(Endpoint::ChatCompletions, black_box(body.clone()), &cfg).unwrap())
            });
        }
    }
    group.finish();
}

fn bedrock(c: &mut Criterion) {
    let mut group = c.benchmark_group("bedrock");
    group.sample_size(30).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    let body = chat_body("anthropic.claude-3-5-haiku-20241022-v1:0", 1024);
    group.bench_function("encode/1KB", |b| {
        b.iter(|| {
            let request = switchyard_protocol::openai_chat::decode_request(black_box(&body)).unwrap();
            switchyard_protocol::bedrock::encode_request(&request).unwrap()
        })
    });
    let request = switchyard_protocol::openai_chat::decode_request(&body).unwrap();
    let converse = switchyard_protocol::bedrock::encode_request(&request).unwrap();
    let signer = switchyard_gateway::upstream::sigv4::SigV4::new("AKIDEXAMPLE", "secret", Some("token"), "us-east-1");
    let uri =
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse";
    group.bench_function("sign/1KB", |b| {
        b.iter(|| {
            let mut req = http::Request::post(uri).header("content-type", "application/json").body(()).unwrap();
            signer.sign(&mut req, black_box(&converse), std::time::SystemTime::now()).unwrap();
            req
        })
    });
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// 3. SSE relay, end to end in-process

const STREAM_BODY: &[u8] = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]}"#;

fn sse_relay(c: &mut Criterion) {
    // One thread on purpose: see the module docs.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = TestClient::new();
    let mut group = c.benchmark_group("sse_relay");
    group.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for chunks in [1usize, 200] {
        let (mock, gateway) = rt.block_on(async {
            let mock = MockServer::start(
                "127.0.0.1:0".parse().unwrap(),
                MockConfig { models: vec!["m".into()], stream_chunks: chunks, ..Default::default() },
            )
            .await
            .unwrap();
            let yaml = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: b0, url: '{}'}}\n", mock.url());
            let gateway = switchyard_gateway::start(config(&yaml), std::future::pending()).await.unwrap();
            (mock, gateway)
        });
        for (target, base) in [("direct", mock.url()), ("gateway", gateway.url())] {
            let url = format!("{base}/v1/chat/completions");
            // Sanity: the stream arrives whole on this path before we time it.
            let (status, _, frames) = rt.block_on(client.post_stream(&url, STREAM_BODY, &[])).unwrap();
            assert_eq!(status, 200, "{target}/{chunks}");
            let text: Vec<u8> = frames.concat();
            let text = String::from_utf8_lossy(&text);
            assert!(text.contains("[DONE]"), "{target}/{chunks}: stream not terminated");
            assert!(text.matches("data:").count() > chunks, "{target}/{chunks}: too few events");
            group.bench_function(BenchmarkId::new(target, chunks), |b| {
                b.iter(|| rt.block_on(client.post_stream(&url, STREAM_BODY, &[])).unwrap())
            });
        }
        drop(gateway);
        drop(mock);
    }
    group.finish();
}

criterion_group!(benches, route_select, route_cache_aware, parse, bedrock, sse_relay);
criterion_main!(benches);
