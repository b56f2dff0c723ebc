//! `switchyard demo`: three mock backends and the real gateway on localhost, a burst of mixed
//! streaming and plain traffic with one backend killed (and restarted) mid-burst, a summary of
//! what the clients saw, then the gateway keeps serving for hands-on use.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use switchyard_testkit::{MockConfig, MockServer, TestClient};
use tokio::sync::mpsc;

use switchyard_bench::load::overhead_us;
use switchyard_gateway::config::{Config, ProcessEnv};
use switchyard_gateway::RunningGateway;

const MODELS: [&str; 2] = ["llama3.2:1b", "qwen2.5:0.5b"];
const CONCURRENCY: usize = 12;

#[derive(Default)]
struct Tally {
    per_backend: BTreeMap<String, usize>,
    errors: usize,
    streams: usize,
    overhead_us: Vec<u64>,
    first_after_restart: Option<Instant>,
}

pub async fn run(listen: SocketAddr, requests: usize, no_wait: bool) -> Result<(), String> {
    let mut mocks = start_mocks().await?;
    let gateway = start_gateway(listen, &mocks).await?;
    let base = gateway.url();
    println!("Switchyard demo: gateway at {base} in front of 3 mock backends (gpu-a, gpu-b, gpu-c)");
    println!("Sending {requests} requests ({CONCURRENCY} at a time, 1 in 3 streaming); gpu-b is killed at 1/3 and restarted at 2/3.\n");

    let tally = Arc::new(Mutex::new(Tally::default()));
    let (events, milestones) = mpsc::unbounded_channel::<usize>();
    let started = Instant::now();
    let mut workers = spawn_workers(&base, requests, &tally, events);
    let restarted_at = kill_and_restart_gpu_b(&mut mocks, milestones, requests, started, &tally).await?;
    while workers.join_next().await.is_some() {}
    let elapsed = started.elapsed();

    let t = std::mem::take(&mut *tally.lock().map_err(|_| "poisoned")?);
    print_summary(requests, elapsed, &t, restarted_at)?;

    println!("\nThe gateway keeps serving at {base}. Try:");
    println!(
        "  curl -s {base}/v1/chat/completions -H 'content-type: application/json' \\\n    -d '{{\"model\":\"fast\",\"messages\":[{{\"role\":\"user\",\"content\":\"hello\"}}]}}'"
    );
    println!("  curl -s {base}/v1/models    curl -s {base}/metrics");
    if no_wait {
        return Ok(());
    }
    println!("Press Ctrl-C to stop.");
    gateway.wait().await;
    drop(mocks);
    Ok(())
}

/// Three mock backends serving both models, streams a few milliseconds long.
async fn start_mocks() -> Result<Vec<MockServer>, String> {
    let mut mocks = Vec::new();
    for _ in 0..3 {
        let cfg = MockConfig {
            models: MODELS.iter().map(|m| m.to_string()).collect(),
            latency: Duration::from_millis(3),
            stream_chunks: 6,
            chunk_delay: Duration::from_millis(1),
            ..MockConfig::default()
        };
        let mock = MockServer::start("127.0.0.1:0".parse().map_err(|_| "bad address")?, cfg)
            .await
            .map_err(|e| format!("cannot start a mock backend: {e}"))?;
        mocks.push(mock);
    }
    Ok(mocks)
}

/// The gateway in front of the mocks, on `listen`, or on any free port when that one is taken.
async fn start_gateway(listen: SocketAddr, mocks: &[MockServer]) -> Result<RunningGateway, String> {
    let backends: String = ["gpu-a", "gpu-b", "gpu-c"]
        .iter()
        .zip(mocks)
        .map(|(name, m)| format!("  - {{name: {name}, url: '{}', type: openai}}\n", m.url()))
        .collect();
    // The demo keeps its database and usage journal out of the working directory.
    let dir = std::env::temp_dir().join(format!("switchyard-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let storage =
        format!("storage: {{url: 'sqlite://{0}/switchyard.db', usage_journal_dir: '{0}/usage'}}", dir.display());
    let yaml = |addr: SocketAddr| {
        format!("listen: '{addr}'\n{storage}\nrouting: {{strategy: least-connections}}\naliases: {{fast: 'qwen2.5:0.5b'}}\nbackends:\n{backends}")
    };
    let config = |addr| Config::from_yaml(&yaml(addr), &ProcessEnv).map_err(|e| e.to_string());
    match switchyard_gateway::start(config(listen)?, crate::cli::shutdown_signal()).await {
        Ok(g) => Ok(g),
        Err(_) => {
            switchyard_gateway::start(
                config("127.0.0.1:0".parse().map_err(|_| "bad address")?)?,
                crate::cli::shutdown_signal(),
            )
            .await
        }
    }
}

/// `CONCURRENCY` workers sending the burst between them; each sends `events` the count of requests
/// done when it reaches a third and two thirds of them.
fn spawn_workers(
    base: &str,
    requests: usize,
    tally: &Arc<Mutex<Tally>>,
    events: mpsc::UnboundedSender<usize>,
) -> tokio::task::JoinSet<()> {
    let done = Arc::new(AtomicUsize::new(0));
    let client = TestClient::new();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..CONCURRENCY {
        let (client, base, tally, done, events) =
            (client.clone(), base.to_owned(), tally.clone(), done.clone(), events.clone());
        workers.spawn(async move {
            let mut i = w;
            while i < requests {
                let stream = i % 3 == 0;
                let model = if i % 2 == 0 { "fast" } else { MODELS[0] };
                one_request(&client, &base, model, stream, &tally).await;
                let n = done.fetch_add(1, Relaxed) + 1;
                if n == requests / 3 || n == 2 * requests / 3 {
                    let _ = events.send(n);
                }
                i += CONCURRENCY;
            }
        });
    }
    workers
}

/// Kills gpu-b when a third of the requests are done and restarts it at two thirds; returns when
/// the restart happened (None when the burst ended first).
async fn kill_and_restart_gpu_b(
    mocks: &mut [MockServer],
    mut milestones: mpsc::UnboundedReceiver<usize>,
    requests: usize,
    started: Instant,
    tally: &Mutex<Tally>,
) -> Result<Option<Instant>, String> {
    let mut restarted_at = None;
    while let Some(n) = milestones.recv().await {
        if n == requests / 3 {
            mocks[1].kill();
            println!(
                "  [{:>6.1} ms] killed gpu-b (connections dropped, port closed)",
                started.elapsed().as_secs_f64() * 1e3
            );
        } else {
            mocks[1].restart().await.map_err(|e| format!("restart gpu-b: {e}"))?;
            restarted_at = Some(Instant::now());
            tally.lock().map_err(|_| "poisoned")?.first_after_restart = None;
            println!("  [{:>6.1} ms] restarted gpu-b", started.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(restarted_at)
}

/// What the clients saw: who served, streams, errors, the gateway's own time, and how soon
/// gpu-b took traffic again.
fn print_summary(requests: usize, elapsed: Duration, t: &Tally, restarted_at: Option<Instant>) -> Result<(), String> {
    println!("\nSummary ({requests} requests in {:.2} s)", elapsed.as_secs_f64());
    for (name, count) in &t.per_backend {
        println!("  {name:<8} served {count}");
    }
    println!("  streams relayed            {}", t.streams);
    println!("  client-visible errors      {}", t.errors);
    let mut h = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for v in &t.overhead_us {
        let _ = h.record(*v);
    }
    println!(
        "  gateway's own time         p50 {} µs, p99 {} µs per request (server-timing: time in the gateway, upstream waits excluded)",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99)
    );
    match (restarted_at, t.first_after_restart) {
        (Some(r), Some(f)) if f > r => {
            println!("  gpu-b back in rotation     {:.0} ms after restart", (f - r).as_secs_f64() * 1e3)
        }
        _ => println!("  gpu-b back in rotation     (burst ended before it took traffic)"),
    }
    Ok(())
}

async fn one_request(client: &TestClient, base: &str, model: &str, stream: bool, tally: &Mutex<Tally>) {
    let body = format!(
        r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"Say hello from the demo"}}]}}"#
    );
    let url = format!("{base}/v1/chat/completions");
    let (ok, backend, overhead) = if stream {
        match client.post_stream(&url, body.as_bytes(), &[]).await {
            Ok((status, headers, frames)) => {
                let text: Vec<u8> = frames.concat();
                let clean = status.is_success()
                    && text.ends_with(b"data: [DONE]\n\n")
                    && !text.windows(9).any(|w| w == b"\"error\":{");
                (clean, header(&headers, "x-switchyard-backend"), overhead_us(&headers))
            }
            Err(_) => (false, None, None),
        }
    } else {
        match client.post_json(&url, body.as_bytes(), &[]).await {
            Ok(r) => (r.status.is_success(), header(&r.headers, "x-switchyard-backend"), overhead_us(&r.headers)),
            Err(_) => (false, None, None),
        }
    };
    let Ok(mut t) = tally.lock() else { return };
    if !ok {
        t.errors += 1;
    }
    if stream && ok {
        t.streams += 1;
    }
    if let Some(b) = backend {
        if b == "gpu-b" && t.first_after_restart.is_none() {
            t.first_after_restart = Some(Instant::now());
        }
        *t.per_backend.entry(b).or_default() += 1;
    }
    if let Some(o) = overhead {
        t.overhead_us.push(o);
    }
}

fn header(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}
