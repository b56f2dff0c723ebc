//! KV-cache affinity scenarios. `affinity`: ten-turn conversations at several context lengths,
//! interleaved across backends, time to first token per turn for each routing strategy (the
//! shape of the published two-node experiment). `shared-prefix`: many users whose conversations
//! share a long system prompt, across 4 backends: prefill tokens computed, cache hit ratio and
//! backend balance per strategy, against the best possible assignment. Both run against KV-cache
//! mocks (started here) or against real servers given with `--backend URL` (llama.cpp:
//! `scripts/bench-llamacpp`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use super::super::chart::{Chart, Series};
use super::super::procs::Proc;
use super::super::report::Report;
use super::super::{BenchArgs, Pinning};
use super::start_gateway;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// Strategies compared, as gateway config and whether requests carry a session header.
const STRATEGIES: [(&str, &str, bool); 5] = [
    ("round-robin", "routing: {strategy: round-robin, sticky_sessions: false}", false),
    ("least-connections", "routing: {strategy: least-connections, sticky_sessions: false}", false),
    ("prefix-hash (first 512 bytes)", "routing: {strategy: prefix-hash, sticky_sessions: false}", false),
    ("sticky (x-session-id)", "routing: {strategy: least-connections, sticky_sessions: true}", true),
    ("cache-aware", "routing: {strategy: cache-aware, sticky_sessions: false}", false),
];

/// Whether `--strategies` selects this one (by the first word of its name).
fn wanted(args: &BenchArgs, name: &str) -> bool {
    let short = name.split(' ').next().unwrap_or(name);
    args.strategies.is_empty() || args.strategies.iter().any(|s| s == short)
}

/// The backends: `--backend` URLs, or KV-cache mocks started here (kept alive by `_procs`).
struct Backends {
    urls: Vec<String>,
    _procs: Vec<Proc>,
}

fn backends(args: &BenchArgs, n: usize, pin: &Pinning) -> Result<Backends, String> {
    if !args.backends.is_empty() {
        return Ok(Backends { urls: args.backends.clone(), _procs: Vec::new() });
    }
    let mut procs = Vec::new();
    for _ in 0..n {
        let a: Vec<String> = [
            "mock",
            "--listen",
            "127.0.0.1:0",
            "--models",
            &args.model,
            "--kv-cache-tokens",
            "200000",
            "--prefill-us-per-token",
            "20",
            "--ttft-fixed-us",
            "500",
            "--stream-chunks",
            "8",
            "--slots",
            "2",
        ]
        .map(String::from)
        .to_vec();
        procs.push(Proc::start("kv-mock", &a, pin.mock.as_deref())?);
    }
    Ok(Backends { urls: procs.iter().map(|p| p.url.clone()).collect(), _procs: procs })
}

fn gateway_config(urls: &[String], model: &str, routing: &str) -> String {
    // A real server busy prefilling a long prompt may answer a probe late; that is not down.
    let mut c = format!("listen: 127.0.0.1:0\n{routing}\nhealth: {{timeout: 120s}}\nbackends:\n");
    for (i, u) in urls.iter().enumerate() {
        c.push_str(&format!("  - {{name: b{i}, url: '{u}', models: ['{model}'], cache_tokens: 200000}}\n"));
    }
    c
}

/// Text of about `tokens` tokens (4 bytes each), different for every `seed`.
fn filler(tokens: usize, seed: u64) -> String {
    let words = ["alpha", "delta", "kappa", "omega", "sigma", "theta", "gamma", "lambda"];
    let mut out = String::with_capacity(tokens * 4);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < tokens * 4 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(words[(x % words.len() as u64) as usize]);
        out.push_str(&format!("{} ", x % 1000));
    }
    out
}

/// One chat request; returns the time to the first content byte and the reply text.
async fn chat(
    client: &HttpClient,
    gateway: &str,
    model: &str,
    messages: &[Value],
    session: Option<&str>,
) -> Result<(Duration, String), String> {
    let body = json!({"model": model, "stream": true, "max_tokens": 8, "messages": messages}).to_string();
    let mut req = http::Request::post(format!("{gateway}/v1/chat/completions"))
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(s) = session {
        req = req.header("x-session-id", s);
    }
    let req = req.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())?;
    let sent = Instant::now();
    let resp = client.request(req).await.map_err(|e| format!("request failed: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status()));
    }
    let mut body = resp.into_body();
    let (mut ttft, mut text, mut pending) = (None, String::new(), Vec::new());
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() else { continue };
        // Some servers end SSE lines with CRLF.
        pending.extend(data.iter().filter(|&&b| b != b'\r'));
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            let Some(payload) = std::str::from_utf8(&event).ok().and_then(|e| e.trim().strip_prefix("data: ")) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(payload) else { continue };
            if let Some(error) = v.get("error") {
                return Err(format!("the stream ended in an error: {error}"));
            }
            if let Some(delta) = v["choices"][0]["delta"]["content"].as_str().filter(|d| !d.is_empty()) {
                ttft.get_or_insert_with(|| sent.elapsed());
                text.push_str(delta);
            }
        }
    }
    // A stream that produced no text did not answer: never count it as a fast first token.
    let ttft = ttft.ok_or_else(|| "the stream produced no text".to_owned())?;
    Ok((ttft, text))
}

/// Forget every backend's cache between strategies (mocks only; real servers get fresh texts).
async fn reset(client: &HttpClient, urls: &[String]) {
    for u in urls {
        if let Ok(req) = http::Request::post(format!("{u}/mock/reset")).body(Full::new(Bytes::new())) {
            let _ = client.request(req).await;
        }
    }
}

/// `/mock/stats` of every backend (empty for servers that have none).
async fn stats(client: &HttpClient, urls: &[String]) -> Vec<Value> {
    let mut out = Vec::new();
    for u in urls {
        let Ok(uri) = format!("{u}/mock/stats").parse::<http::Uri>() else { continue };
        if let Ok(resp) = client.get(uri).await {
            if let Ok(body) = resp.into_body().collect().await {
                out.extend(serde_json::from_slice::<Value>(&body.to_bytes()).ok());
            }
        }
    }
    out
}

fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `affinity`: per context length and strategy, time to first token per turn.
pub async fn affinity(args: &BenchArgs, pin: &Pinning, report: &mut Report, quick: bool) -> Result<(), String> {
    let contexts: Vec<usize> = if quick { vec![256] } else { args.contexts.clone() };
    let (conversations, turns) = if quick { (2, 3) } else { (args.conversations, args.turns) };
    let backends = backends(args, 2, pin)?;
    let client = http_client();
    let strategies: Vec<_> =
        STRATEGIES.iter().filter(|s| !s.0.starts_with("prefix-hash") && wanted(args, s.0)).collect();
    let mut series = Vec::new();
    for (ci, &context) in contexts.iter().enumerate() {
        for (si, (name, routing, session)) in strategies.iter().enumerate() {
            let gateway = start_gateway(&gateway_config(&backends.urls, &args.model, routing), pin)?;
            reset(&client, &backends.urls).await;
            eprintln!("  ▸ affinity: {context} tokens, {name}");
            let seed = (ci * 100 + si) as u64 * 1000;
            let mut convs: Vec<Vec<Value>> = (0..conversations)
                .map(|c| {
                    let document = filler(context, seed + c as u64);
                    vec![json!({"role": "user", "content": format!("Read this and answer briefly.\n{document}")})]
                })
                .collect();
            let mut per_turn: Vec<Vec<f64>> = vec![Vec::new(); turns];
            // Interleaved: turn t of every conversation, then turn t + 1.
            for (t, turn_ttfts) in per_turn.iter_mut().enumerate() {
                for (c, messages) in convs.iter_mut().enumerate() {
                    let key = format!("conv-{seed}-{c}");
                    let (ttft, reply) =
                        chat(&client, &gateway.url, &args.model, messages, session.then_some(key.as_str())).await?;
                    turn_ttfts.push(ms(ttft));
                    messages.push(json!({"role": "assistant", "content": reply}));
                    messages.push(json!({"role": "user", "content": format!("Follow-up {t}: and then?")}));
                }
            }
            let p50: Vec<f64> = per_turn.into_iter().map(median).collect();
            report.finding("affinity", format!("{context} tok, {name}: turn-1 TTFT p50"), p50[0], "ms");
            if let Some(t2) = p50.get(1) {
                report.finding("affinity", format!("{context} tok, {name}: turn-2 TTFT p50"), *t2, "ms");
            }
            if p50.len() > 2 {
                let later = median(p50[2..].to_vec());
                report.finding("affinity", format!("{context} tok, {name}: turns 3+ TTFT p50"), later, "ms");
            }
            if ci + 1 == contexts.len() {
                let points = p50.iter().enumerate().map(|(t, v)| ((t + 1) as f64, *v)).collect();
                series.push(Series { name: name.to_string(), points });
            }
            report.extra.insert(format!("affinity/{context}/{name}"), json!({"ttft_p50_ms_per_turn": p50}));
        }
    }
    let longest = contexts.last().copied().unwrap_or(0);
    report.charts.push((
        "affinity-ttft-per-turn".into(),
        Chart {
            title: format!("Time to first token per turn, {longest}-token context"),
            x_label: "turn".into(),
            y_label: "TTFT p50 (ms)".into(),
            series,
            x_log: false,
            markers: vec![],
        },
    ));
    Ok(())
}

/// `shared-prefix`: users sharing a long system prompt over 4 backends.
pub async fn shared_prefix(args: &BenchArgs, pin: &Pinning, report: &mut Report, quick: bool) -> Result<(), String> {
    let (users, turns, system_tokens) =
        if quick { (8, 2, 256) } else { (args.conversations.max(32), args.turns, 2000) };
    let backends = backends(args, 4, pin)?;
    let client = http_client();
    let system = filler(system_tokens, 7);
    // The best balanced assignment: user i's whole conversation on backend i mod 4, sent directly.
    let mut runs: Vec<(String, Option<&str>, bool)> = vec![("best balanced assignment".into(), None, false)];
    runs.extend(STRATEGIES.iter().filter(|s| wanted(args, s.0)).map(|(n, r, s)| (n.to_string(), Some(*r), *s)));
    let mut best_prefill = 0.0;
    for (name, routing, session) in runs {
        let gateway = match routing {
            Some(r) => Some(start_gateway(&gateway_config(&backends.urls, &args.model, r), pin)?),
            None => None,
        };
        reset(&client, &backends.urls).await;
        eprintln!("  ▸ shared-prefix: {users} users × {turns} turns, {name}");
        let mut tasks = tokio::task::JoinSet::new();
        for u in 0..users {
            let target =
                gateway.as_ref().map_or_else(|| backends.urls[u % backends.urls.len()].clone(), |g| g.url.clone());
            let (client, model, system) = (client.clone(), args.model.clone(), system.clone());
            tasks.spawn(async move {
                let key = format!("user-{u}");
                let mut messages = vec![
                    json!({"role": "system", "content": system}),
                    json!({"role": "user", "content": format!("user {u}: {}", filler(60, 1000 + u as u64))}),
                ];
                for t in 0..turns {
                    let (_, reply) = chat(&client, &target, &model, &messages, session.then_some(key.as_str())).await?;
                    messages.push(json!({"role": "assistant", "content": reply}));
                    messages.push(json!({"role": "user", "content": format!("user {u} turn {t}: go on")}));
                }
                Ok::<(), String>(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(|e| e.to_string())??;
        }
        let per_backend = stats(&client, &backends.urls).await;
        if per_backend.len() != backends.urls.len() {
            eprintln!("  (shared-prefix needs the mocks' /mock/stats: skipped for real servers)");
            return Ok(());
        }
        let sum = |k: &str| per_backend.iter().map(|s| s[k].as_f64().unwrap_or(0.0)).sum::<f64>();
        let (prefill, prompt, cached) = (sum("prefill_tokens"), sum("prompt_tokens"), sum("cached_tokens"));
        let requests: Vec<f64> = per_backend.iter().map(|s| s["requests"].as_f64().unwrap_or(0.0)).collect();
        let (max, min) = requests.iter().fold((0.0f64, f64::MAX), |(a, b), &r| (a.max(r), b.min(r)));
        if routing.is_none() {
            best_prefill = prefill;
        }
        report.finding("shared-prefix", format!("{name}: prefill tokens computed"), prefill, "tok");
        report.finding("shared-prefix", format!("{name}: prefill vs best"), prefill / best_prefill.max(1.0), "x");
        report.finding("shared-prefix", format!("{name}: cache hit ratio"), cached / prompt.max(1.0), "");
        report.finding("shared-prefix", format!("{name}: requests per backend, max"), max, "");
        report.finding("shared-prefix", format!("{name}: requests per backend, min"), min, "");
        report.extra.insert(
            format!("shared-prefix/{name}"),
            json!({"prefill_tokens": prefill, "prompt_tokens": prompt, "cached_tokens": cached, "requests_per_backend": requests}),
        );
    }
    Ok(())
}
