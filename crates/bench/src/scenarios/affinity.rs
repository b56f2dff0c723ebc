//! KV-cache affinity scenarios. `affinity`: ten-turn conversations at several context lengths,
//! interleaved across backends, time to first token per turn for each routing strategy (the
//! shape of the published two-node experiment). `shared-prefix`: many users whose conversations
//! share a long system prompt, across 4 backends: prefill tokens computed, cache hit ratio and
//! backend balance per strategy, against the best possible assignment, and the cache-aware
//! strategy through a fleet of three instances (each turn to the next instance), with and without
//! Redis sharing where conversations went. Both run against KV-cache
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

/// Health rounds a gateway has run past before traffic starts: routing is measured as it runs all
/// its life (backends' slots and load read), not as it runs in the seconds before the first round.
const STEADY_ROUNDS: u64 = 3;

/// Wait until every backend of the gateway at `url` has been probed `STEADY_ROUNDS` times (the
/// start-up probe and two rounds), polling `/metrics`, and the gateway has run `--steady-secs`
/// since `started`.
async fn steady(url: &str, backends: usize, started: Instant, args: &BenchArgs) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60 + args.steady_secs);
    for i in 0..backends {
        let name = format!("switchyard_backend_probes_total{{backend=\"b{i}\"}}");
        while super::counter(url, &name).await? < STEADY_ROUNDS {
            if std::time::Instant::now() > deadline {
                return Err(format!("{url}: backend b{i} was not probed {STEADY_ROUNDS} times within 60 s"));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    // A wait for a wall-clock age the user asked for, not a readiness check.
    tokio::time::sleep((started + Duration::from_secs(args.steady_secs)).saturating_duration_since(Instant::now()))
        .await;
    Ok(())
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

/// What one streamed chat turn gave back.
struct Reply {
    /// Time to the first content byte.
    ttft: Duration,
    text: String,
    /// `x-switchyard-backend` (through the gateway).
    backend: Option<String>,
    /// The prompt's tokens, and how many of them the server took from its cache: from llama.cpp's
    /// `timings` (`prompt_n` computed + `cache_n` reused) or OpenAI's `usage.prompt_tokens` and
    /// `prompt_tokens_details.cached_tokens` (the KV-cache mock, vLLM, recent llama.cpp).
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
}

/// Read the prompt accounting of one streamed event into `reply`.
fn read_prompt_counts(event: &Value, reply: &mut Reply) {
    let timings = &event["timings"];
    if let (Some(computed), Some(cached)) = (timings["prompt_n"].as_u64(), timings["cache_n"].as_u64()) {
        reply.prompt_tokens = Some(computed + cached);
        reply.cached_tokens = Some(cached);
        return;
    }
    let usage = &event["usage"];
    if let Some(prompt) = usage["prompt_tokens"].as_u64() {
        if reply.cached_tokens.is_none() || reply.prompt_tokens != Some(prompt) {
            reply.prompt_tokens = Some(prompt);
            reply.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"].as_u64();
        }
    }
}

/// One streamed chat request. With `usage`, asks for the usage chunk (`stream_options`) so the
/// prompt accounting can be read.
async fn chat(
    client: &HttpClient,
    gateway: &str,
    model: &str,
    messages: &[Value],
    session: Option<&str>,
    usage: bool,
) -> Result<Reply, String> {
    let mut body = json!({"model": model, "stream": true, "max_tokens": 8, "messages": messages});
    if usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    let body = Bytes::from(body.to_string());
    let request = || {
        let mut req = http::Request::post(format!("{gateway}/v1/chat/completions"))
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(s) = session {
            req = req.header("x-session-id", s);
        }
        req.body(Full::new(body.clone())).map_err(|e| e.to_string())
    };
    let mut sent = Instant::now();
    let resp = match client.request(request()?).await {
        Ok(resp) => resp,
        // No answer at all (the connection failed before one): once more on a fresh connection,
        // timed from the retry (a benchmark of routing, not of the client's pool).
        Err(e) => {
            eprintln!("  (request failed before any answer, {e}; retrying once)");
            sent = Instant::now();
            client.request(request()?).await.map_err(|e| format!("request failed: {e}"))?
        }
    };
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status()));
    }
    let backend = resp.headers().get("x-switchyard-backend").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut reply =
        Reply { ttft: Duration::ZERO, text: String::new(), backend, prompt_tokens: None, cached_tokens: None };
    let (mut ttft, mut pending) = (None, Vec::new());
    let mut body = resp.into_body();
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
                reply.text.push_str(delta);
            }
            read_prompt_counts(&v, &mut reply);
        }
    }
    // A stream that produced no text did not answer: never count it as a fast first token.
    reply.ttft = ttft.ok_or_else(|| "the stream produced no text".to_owned())?;
    Ok(reply)
}

/// Forget every backend's cache between strategies (mocks only; real servers get fresh texts).
async fn reset(client: &HttpClient, urls: &[String]) {
    for u in urls {
        if let Ok(req) = http::Request::post(format!("{u}/mock/reset")).body(Full::new(Bytes::new())) {
            let _ = client.request(req).await;
        }
    }
}

fn http_client() -> HttpClient {
    // Real servers close keep-alive connections idle for a few seconds (llama.cpp's HTTP library
    // after 5 s); while other users' prompts prefill, pooled connections sit that long. Drop them
    // first, so a request never goes out on a connection the server has just closed.
    Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(1)).build_http()
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
            let started = Instant::now();
            let gateway = start_gateway(&gateway_config(&backends.urls, &args.model, routing), pin)?;
            steady(&gateway.url, backends.urls.len(), started, args).await?;
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
                    let reply =
                        chat(&client, &gateway.url, &args.model, messages, session.then_some(key.as_str()), false)
                            .await?;
                    turn_ttfts.push(ms(reply.ttft));
                    messages.push(json!({"role": "assistant", "content": reply.text}));
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

/// One `shared-prefix` run: its name, the gateway's routing (None: straight to the backends), whether
/// clients send a session header, how many gateway instances, and whether they share Redis.
type PrefixRun = (String, Option<&'static str>, bool, usize, bool);

/// The `shared-prefix` runs: the best balanced assignment first (user i's whole conversation on
/// backend i mod 4, sent directly), then each wanted strategy, then cache-aware on three instances.
fn shared_prefix_runs(args: &BenchArgs, quick: bool) -> Vec<PrefixRun> {
    let mut runs: Vec<PrefixRun> = vec![("best balanced assignment".into(), None, false, 0, false)];
    runs.extend(
        STRATEGIES.iter().filter(|s| wanted(args, s.0)).map(|(n, r, s)| (n.to_string(), Some(*r), *s, 1, false)),
    );
    if !quick && !args.no_fleet && wanted(args, "cache-aware") {
        let cache_aware = STRATEGIES.iter().find(|s| s.0 == "cache-aware").map_or("", |s| s.1);
        runs.push(("cache-aware, 3 instances sharing Redis".into(), Some(cache_aware), false, 3, true));
        runs.push(("cache-aware, 3 instances alone".into(), Some(cache_aware), false, 3, false));
    }
    runs
}

/// Each user's turns, as (backend, prompt tokens, cached tokens, time to first token in ms).
type UserTurns = Result<Vec<(usize, u64, u64, f64)>, String>;

/// What a run's warm turns (the second on) cost: prefill tokens, and each one's time to first token.
#[derive(Default)]
struct WarmTurns {
    prefill: u64,
    ttfts: Vec<f64>,
}

/// The users' turns summed per backend, as (requests, prompt tokens, cached tokens), and what
/// the warm turns cost.
async fn per_backend_totals(
    mut tasks: tokio::task::JoinSet<UserTurns>,
    n: usize,
) -> Result<(Vec<(u64, u64, u64)>, WarmTurns), String> {
    let mut per_backend = vec![(0u64, 0u64, 0u64); n];
    let mut warm = WarmTurns::default();
    while let Some(done) = tasks.join_next().await {
        for (turn, (backend, prompt, cached, ttft)) in done.map_err(|e| e.to_string())??.into_iter().enumerate() {
            let slot = per_backend.get_mut(backend).ok_or(format!("backend index {backend} out of range"))?;
            *slot = (slot.0 + 1, slot.1 + prompt, slot.2 + cached);
            if turn > 0 {
                warm.ttfts.push(ttft);
                warm.prefill += prompt.saturating_sub(cached);
            }
        }
    }
    Ok((per_backend, warm))
}

/// One `shared-prefix` run's findings (and its requests per backend, as a chart series): the
/// prefill tokens it computed.
fn report_prefix_run(
    report: &mut Report,
    name: &str,
    per_backend: &[(u64, u64, u64)],
    warm: WarmTurns,
    best_prefill: f64,
    load_series: &mut Vec<Series>,
) -> f64 {
    let prompt = per_backend.iter().map(|b| b.1).sum::<u64>() as f64;
    let cached = per_backend.iter().map(|b| b.2).sum::<u64>() as f64;
    let prefill = prompt - cached;
    let best = if best_prefill > 0.0 { best_prefill } else { prefill };
    let requests: Vec<f64> = per_backend.iter().map(|b| b.0 as f64).collect();
    let (max, min) = requests.iter().fold((0.0f64, f64::MAX), |(a, b), &r| (a.max(r), b.min(r)));
    report.finding("shared-prefix", format!("{name}: prefill tokens computed"), prefill, "tok");
    report.finding("shared-prefix", format!("{name}: prefill vs best"), prefill / best.max(1.0), "x");
    report.finding("shared-prefix", format!("{name}: cache hit ratio"), cached / prompt.max(1.0), "");
    report.finding("shared-prefix", format!("{name}: warm-turn prefill tokens"), warm.prefill as f64, "tok");
    let mut warm_ttfts = warm.ttfts;
    warm_ttfts.sort_by(f64::total_cmp);
    let p90 = warm_ttfts.get(warm_ttfts.len() * 9 / 10).copied().unwrap_or(0.0);
    report.finding("shared-prefix", format!("{name}: warm-turn TTFT p50"), median(warm_ttfts), "ms");
    report.finding("shared-prefix", format!("{name}: warm-turn TTFT p90"), p90, "ms");
    report.finding("shared-prefix", format!("{name}: requests per backend, max"), max, "");
    report.finding("shared-prefix", format!("{name}: requests per backend, min"), min, "");
    let points = requests.iter().enumerate().map(|(i, r)| ((i + 1) as f64, *r)).collect();
    load_series.push(Series { name: name.to_owned(), points });
    report.extra.insert(
        format!("shared-prefix/{name}"),
        json!({"prefill_tokens": prefill, "prompt_tokens": prompt, "cached_tokens": cached, "requests_per_backend": requests}),
    );
    prefill
}

/// `shared-prefix`: users sharing a long system prompt over 4 backends.
pub async fn shared_prefix(args: &BenchArgs, pin: &Pinning, report: &mut Report, quick: bool) -> Result<(), String> {
    let (users, turns, system_tokens) = if quick { (8, 2, 256) } else { (args.users, args.turns, args.system_tokens) };
    let backends = backends(args, 4, pin)?;
    let client = http_client();
    // Real servers keep their caches between runs: each run gets texts of its own.
    let fresh = !args.backends.is_empty();
    let runs = shared_prefix_runs(args, quick);
    let n = backends.urls.len();
    let mut best_prefill = 0.0;
    let mut load_series = Vec::new();
    for (ri, (name, routing, session, instances, shared)) in runs.into_iter().enumerate() {
        let redis = if shared { Some(super::fleet::Redis::start(None)?) } else { None };
        let mut gateways = Vec::new();
        let started = Instant::now();
        if let Some(r) = routing {
            let mut config = gateway_config(&backends.urls, &args.model, r);
            if let Some(redis) = &redis {
                config.push_str(&format!("redis: {{url: '{}', timeout: 1s}}\n", redis.url()));
            }
            for _ in 0..instances {
                gateways.push(start_gateway(&config, pin)?);
            }
        }
        let urls: Vec<String> = gateways.iter().map(|g| g.url.clone()).collect();
        for url in &urls {
            steady(url, n, started, args).await?;
        }
        reset(&client, &backends.urls).await;
        eprintln!("  ▸ shared-prefix: {users} users × {turns} turns, {name}");
        let seed = if fresh { ri as u64 * 100_000 } else { 0 };
        let system = filler(system_tokens, 7 + seed);
        let mut tasks = tokio::task::JoinSet::new();
        for u in 0..users {
            // Direct to user u's backend, or turn t through instance (u + t) mod instances.
            let targets = if urls.is_empty() { vec![backends.urls[u % n].clone()] } else { urls.clone() };
            let (client, model, system, think_ms) = (client.clone(), args.model.clone(), system.clone(), args.think_ms);
            let user_tokens = if quick { 60 } else { args.user_tokens };
            tasks.spawn(async move {
                let key = format!("user-{u}");
                let mut messages = vec![
                    json!({"role": "system", "content": system}),
                    json!({"role": "user", "content": format!("user {u}: {}", filler(user_tokens, seed + 1000 + u as u64))}),
                ];
                let mut served = Vec::new();
                for t in 0..turns {
                    if t > 0 && think_ms > 0 {
                        // Up to `--think-ms` between turns, varied by user and turn.
                        let pause = (u as u64 * 7919 + t as u64 * 104_729) % (think_ms + 1);
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                    }
                    let target = &targets[(u + t) % targets.len()];
                    let reply = chat(&client, target, &model, &messages, session.then_some(key.as_str()), true).await?;
                    // Direct, user u's backend is u mod n; through the gateway, its header says (`b{i}`).
                    let backend = match &reply.backend {
                        Some(b) => b.strip_prefix('b').and_then(|i| i.parse().ok()).ok_or(format!("backend `{b}`"))?,
                        None => u % n,
                    };
                    let (Some(prompt), Some(cached)) = (reply.prompt_tokens, reply.cached_tokens) else {
                        return Err("the backend reported no prompt/cached token counts (llama.cpp `timings` or \
                                    `usage.prompt_tokens_details.cached_tokens`)"
                            .to_owned());
                    };
                    served.push((backend, prompt, cached, ms(reply.ttft)));
                    messages.push(json!({"role": "assistant", "content": reply.text}));
                    messages.push(json!({"role": "user", "content": format!("user {u} turn {t}: go on")}));
                }
                Ok::<_, String>(served)
            });
        }
        // Per backend: requests, prompt tokens, cached tokens.
        let (per_backend, warm) = per_backend_totals(tasks, n).await?;
        let prefill = report_prefix_run(report, &name, &per_backend, warm, best_prefill, &mut load_series);
        if routing.is_none() {
            best_prefill = prefill;
        }
    }
    report.charts.push((
        "shared-prefix-requests-per-backend".into(),
        Chart {
            title: format!("Requests each backend served, {users} users sharing a system prompt"),
            x_label: "backend".into(),
            y_label: "requests".into(),
            series: load_series,
            x_log: false,
            markers: vec![],
        },
    ));
    Ok(())
}
