//! The scenarios and the setup they share: start (or point at) the mock backend and the
//! gateway, run phases direct and through the gateway, and turn the stats into rows, findings
//! and charts. Failover, which needs two backends it can kill, lives in `scenarios/failover.rs`.

mod a2a;
mod abuse;
mod affinity;
mod batch;
mod cache;
mod code_mode;
mod failover;
mod fleet;
mod floor;
mod guardrails;
mod mcp;
mod policy;
mod shadow;
mod soak;
mod telemetry;
mod usage_query;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde_json::json;

use super::chart::{Chart, Series};
use super::load::{self, RequestSpec, Stats, TICK};
use super::procs::{self, Proc};
use super::report::Report;
use super::{BenchArgs, Pinning};

const ALL: [&str; 7] = ["overhead", "throughput", "stream", "large-payload", "burst", "sustained", "failover"];

/// Where requests go: the backend directly, and the gateway in front of it.
pub struct Setup {
    pub direct: String,
    pub target: String,
    pub model: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub backend_header: HeaderName,
    pub gateway_pid: Option<u32>,
    /// The API requests to the gateway are spoken in (`--api`).
    pub api: String,
    // Kept alive for the run; dropped (terminated) at the end.
    _procs: Vec<Proc>,
}

impl Setup {
    fn spec(
        &self,
        base: &str,
        path: &str,
        body: Bytes,
        stream: bool,
        with_headers: bool,
        stream_end: &'static [u8],
    ) -> Result<Arc<RequestSpec>, String> {
        Ok(Arc::new(RequestSpec {
            stream_end,
            uri: format!("{}{path}", base.trim_end_matches('/')).parse().map_err(|e| format!("bad URL {base}: {e}"))?,
            body,
            headers: if with_headers { self.headers.clone() } else { Vec::new() },
            stream,
            backend_header: self.backend_header.clone(),
            timeout: Duration::from_secs(30),
        }))
    }

    /// The same request, direct (OpenAI Chat) and through the gateway (in `--api`'s shape).
    pub fn pair(&self, body: &str, stream: bool) -> Result<(Arc<RequestSpec>, Arc<RequestSpec>), String> {
        let direct =
            self.spec(&self.direct, "/v1/chat/completions", Bytes::from(body.to_owned()), stream, false, DONE)?;
        let (path, body, end) = in_api(&self.api, body)?;
        Ok((direct, self.spec(&self.target, path, body, stream, true, end)?))
    }

    pub fn rss(&self) -> Option<u64> {
        self.gateway_pid.and_then(procs::rss_of)
    }
}

const DONE: &[u8] = b"data: [DONE]";

/// An OpenAI chat body re-spoken in `api`: the gateway path, the body, and how its stream ends.
fn in_api(api: &str, openai_body: &str) -> Result<(&'static str, Bytes, &'static [u8]), String> {
    if api == "openai" {
        return Ok(("/v1/chat/completions", Bytes::from(openai_body.to_owned()), DONE));
    }
    let v: serde_json::Value = serde_json::from_str(openai_body).map_err(|e| e.to_string())?;
    let (model, stream, messages) = (&v["model"], &v["stream"], &v["messages"]);
    let (path, body, end): (_, _, &'static [u8]) = match api {
        "anthropic" => (
            "/v1/messages",
            json!({"model": model, "max_tokens": 256, "stream": stream, "messages": messages}),
            br#""type":"message_stop""#,
        ),
        "responses" => (
            "/v1/responses",
            json!({"model": model, "stream": stream, "input": messages}),
            br#""type":"response.completed""#,
        ),
        other => return Err(format!("--api {other}: not one of openai, anthropic, responses")),
    };
    Ok((path, Bytes::from(body.to_string()), end))
}

pub fn chat_body(model: &str, stream: bool, content: &str) -> String {
    let content = serde_json::to_string(content).unwrap_or_default();
    format!(r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":{content}}}]}}"#)
}

async fn setup(args: &BenchArgs, pin: &Pinning) -> Result<Setup, String> {
    let mut headers = Vec::new();
    for h in &args.headers {
        let (k, v) = h.split_once(':').ok_or(format!("--header `{h}` is not `Name: value`"))?;
        let name = HeaderName::from_bytes(k.trim().as_bytes()).map_err(|e| format!("--header {k}: {e}"))?;
        let value = HeaderValue::from_str(v.trim()).map_err(|e| format!("--header {k}: {e}"))?;
        headers.push((name, value));
    }
    let backend_header = HeaderName::from_bytes(args.backend_header.as_bytes()).map_err(|e| e.to_string())?;
    if let (Some(target), Some(direct)) = (&args.target, &args.direct) {
        return Ok(Setup {
            direct: direct.clone(),
            target: target.clone(),
            model: args.model.clone(),
            headers,
            backend_header,
            gateway_pid: args.target_pid,
            api: args.api.clone(),
            _procs: Vec::new(),
        });
    }
    let mock = start_mock(&args.model, args.stream_chunks, None, pin)?;
    let mut config = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: mock, url: '{}'}}\n", mock.url);
    if args.virtual_key {
        config.push_str(&format!("auth: {{master_key: '{BENCH_MASTER_KEY}'}}\n"));
    }
    let gateway = if args.no_usage {
        start_gateway_with(&config, pin, "record_usage: false")?
    } else {
        start_gateway(&config, pin)?
    };
    if args.virtual_key {
        let key = if args.team {
            let team = procs::create_team(&gateway.url, BENCH_MASTER_KEY).await?;
            let body = format!(
                r#"{{"models":["*"],"rpm":1000000000,"tpm":1000000000000,"max_parallel":1000000,"budget_usd":1000000000,"team_id":"{team}","metadata":{{"user":"bench"}}}}"#
            );
            procs::create_key_with(&gateway.url, BENCH_MASTER_KEY, &body).await?
        } else {
            procs::create_key(&gateway.url, BENCH_MASTER_KEY).await?
        };
        let value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|e| e.to_string())?;
        headers.push((http::header::AUTHORIZATION, value));
    }
    Ok(Setup {
        direct: mock.url.clone(),
        target: gateway.url.clone(),
        model: args.model.clone(),
        headers,
        backend_header,
        gateway_pid: Some(gateway.pid()),
        api: args.api.clone(),
        _procs: vec![gateway, mock],
    })
}

pub fn start_mock(model: &str, chunks: usize, port: Option<u16>, pin: &Pinning) -> Result<Proc, String> {
    let listen = format!("127.0.0.1:{}", port.unwrap_or(0));
    let args: Vec<String> = ["mock", "--listen", &listen, "--models", model, "--stream-chunks", &chunks.to_string()]
        .map(String::from)
        .to_vec();
    Proc::start("mock", &args, pin.mock.as_deref())
}

/// A [`Setup`] for a gateway and mock a scenario started itself (OpenAI API, no key).
pub fn own_setup(gateway: &Proc, mock: &Proc, model: &str) -> Setup {
    Setup {
        direct: mock.url.clone(),
        target: gateway.url.clone(),
        model: model.to_owned(),
        headers: Vec::new(),
        backend_header: http::HeaderName::from_static("x-switchyard-backend"),
        gateway_pid: Some(gateway.pid()),
        api: "openai".to_owned(),
        _procs: Vec::new(),
    }
}

/// The master key of a gateway started with `--virtual-key` (loopback only, for the run's length).
const BENCH_MASTER_KEY: &str = "bench-master-key-not-secret";

/// Start `switchyard serve` with `config`, its usage database and journal in a scratch directory
/// that is removed when the process is dropped (never the working directory's `switchyard.db`).
pub fn start_gateway(config: &str, pin: &Pinning) -> Result<Proc, String> {
    start_gateway_with(config, pin, "")
}

/// `switchyard serve` with `config` exactly as given (its own `storage:`), from a scratch
/// directory removed when the process is dropped.
pub fn start_gateway_as_is(config: &str, pin: &Pinning) -> Result<Proc, String> {
    let dir = std::env::temp_dir().join(format!("switchyard-bench-{}-{}", std::process::id(), procs::free_port()?));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, config).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let args: Vec<String> = vec!["serve".into(), "--config".into(), path.display().to_string()];
    Ok(Proc::start("gateway", &args, pin.gateway.as_deref())?.with_scratch(dir))
}

/// `start_gateway` with more `storage` settings (YAML flow-mapping entries, e.g. `record_usage: false`).
fn start_gateway_with(config: &str, pin: &Pinning, storage: &str) -> Result<Proc, String> {
    let storage = if storage.is_empty() { String::new() } else { format!(", {storage}") };
    let dir = std::env::temp_dir().join(format!("switchyard-bench-{}-{}", std::process::id(), procs::free_port()?));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let config = format!(
        "{config}storage: {{url: 'sqlite://{0}/usage.db', usage_journal_dir: '{0}/journal'{storage}}}\n",
        dir.display()
    );
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, config).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let args: Vec<String> = vec!["serve".into(), "--config".into(), path.display().to_string()];
    let proc = Proc::start("gateway", &args, pin.gateway.as_deref());
    match proc {
        Ok(p) => Ok(p.with_scratch(dir)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// How a phase drives load.
#[derive(Clone, Copy)]
pub enum Mode {
    Closed(usize),
    Open(f64),
}

/// Warm up (discarded), then measure.
/// A counter's value from a gateway's `/metrics` (0 when it has none).
pub async fn counter(url: &str, name: &str) -> Result<u64, String> {
    let client = switchyard_testkit::TestClient::new();
    let text = client.get(&format!("{url}/metrics")).await.map_err(|e| e.to_string())?.text();
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

/// Plain requests at 16 connections through `gateway` (after a warm-up): its throughput and its
/// CPU per request, as a row and two findings of `scenario`; any failed request is an error.
pub async fn loaded_rps_and_cpu(
    scenario: &'static str,
    label: &str,
    setup: &Setup,
    gateway: &Proc,
    body: &str,
    args: &BenchArgs,
    report: &mut Report,
) -> Result<(f64, f64), String> {
    loaded_rps_and_cpu_at(16, (scenario, label), setup, gateway, body, args, report).await
}

/// `loaded_rps_and_cpu` at `c` connections.
pub async fn loaded_rps_and_cpu_at(
    c: usize,
    (scenario, label): (&'static str, &str),
    setup: &Setup,
    gateway: &Proc,
    body: &str,
    args: &BenchArgs,
    report: &mut Report,
) -> Result<(f64, f64), String> {
    let (d, w) = (args.phase(5.0), args.warmup());
    let (_, through) = setup.pair(body, false)?;
    let _ = measure(&format!("{label} warm-up"), &through, Mode::Closed(c), w, Duration::from_millis(1)).await;
    let cpu_before = fleet::cpu_us(gateway.pid());
    let stats = measure(&format!("{label}, {c} connections"), &through, Mode::Closed(c), Duration::ZERO, d).await;
    let cpu_after = fleet::cpu_us(gateway.pid());
    report.row(scenario, format!("closed c={c}, {label}"), "gateway", &stats);
    stats.all_ok(label)?;
    let cpu = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) if stats.ok > 0 => b.saturating_sub(a) as f64 / stats.ok as f64,
        _ => f64::NAN,
    };
    let rps = stats.ok as f64 / d.as_secs_f64();
    report.finding(scenario, format!("throughput at {c} connections, {label}"), rps, "req/s");
    report.finding(scenario, format!("gateway CPU per request at {c} connections, {label}"), cpu, "µs");
    Ok((rps, cpu))
}

pub async fn measure(label: &str, spec: &Arc<RequestSpec>, mode: Mode, warmup: Duration, duration: Duration) -> Stats {
    let bar = progress(label, warmup + duration);
    let run = |d: Duration| {
        let spec = spec.clone();
        async move {
            match mode {
                Mode::Closed(c) => load::closed_loop(spec, c, d).await,
                Mode::Open(rate) => load::open_loop(spec, &[(rate, d)]).await,
            }
        }
    };
    if !warmup.is_zero() {
        run(warmup).await;
    }
    let stats = run(duration).await;
    bar.finish();
    stats
}

/// A phase's progress line.
struct Progress(Option<tokio::task::JoinHandle<()>>);

impl Progress {
    fn finish(self) {
        if let Some(task) = self.0 {
            task.abort();
            eprintln!();
        }
    }
}

/// Announce a phase; on a terminal, redraw a progress bar on the same line until aborted.
fn progress(label: &str, duration: Duration) -> Progress {
    use std::io::{IsTerminal, Write};
    let label = label.to_owned();
    if !std::io::stderr().is_terminal() {
        eprintln!("  ▸ {label} ({:.1} s)", duration.as_secs_f64());
        return Progress(None);
    }
    Progress(Some(tokio::spawn(async move {
        let start = Instant::now();
        let total = duration.as_secs_f64().max(0.001);
        loop {
            let done = (start.elapsed().as_secs_f64() / total).min(1.0);
            let filled = (done * 24.0) as usize;
            eprint!(
                "\r  ▸ {label:<44} [{}{}] {:>5.1}/{:.1} s",
                "#".repeat(filled),
                ".".repeat(24 - filled),
                done * total,
                total
            );
            let _ = std::io::stderr().flush();
            if done >= 1.0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })))
}

/// Samples a process's RSS every second until dropped.
pub struct RssSampler {
    samples: Arc<Mutex<Vec<(f64, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    pub fn start(pid: Option<u32>) -> RssSampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let out = samples.clone();
        let task = tokio::spawn(async move {
            let Some(pid) = pid else { return };
            let start = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let (Some(rss), Ok(mut s)) = (procs::rss_of(pid), out.lock()) {
                    s.push((start.elapsed().as_secs_f64(), rss));
                }
            }
        });
        RssSampler { samples, task }
    }

    pub fn finish(self, pid: Option<u32>) -> Vec<(f64, u64)> {
        self.task.abort();
        let mut s = self.samples.lock().map(|s| s.clone()).unwrap_or_default();
        if let Some(rss) = pid.and_then(procs::rss_of) {
            let t = s.last().map_or(0.0, |l| l.0 + 0.001);
            s.push((t, rss));
        }
        s
    }
}

pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Latency CDF points (µs, fraction) from a histogram.
pub fn cdf(stats: &Stats) -> Vec<(f64, f64)> {
    if stats.ok == 0 {
        return Vec::new();
    }
    stats.latency.iter_quantiles(2).map(|v| (v.value_iterated_to().max(1) as f64, v.quantile_iterated_to())).collect()
}

/// Requests per second per timeline tick.
pub fn rate_series(stats: &Stats, errors: bool) -> Vec<(f64, f64)> {
    let per_sec = 1.0 / TICK.as_secs_f64();
    // The last tick is usually partial; leave it out rather than draw a false drop.
    let full = stats.timeline.len().saturating_sub(1);
    stats
        .timeline
        .iter()
        .take(full)
        .enumerate()
        .map(|(i, (ok, err))| (i as f64 * TICK.as_secs_f64(), (if errors { *err } else { *ok }) as f64 * per_sec))
        .collect()
}

pub async fn run_all(args: &BenchArgs, pin: &Pinning) -> Result<Report, String> {
    let quick = args.scenario == "quick";
    let names: Vec<&str> = match args.scenario.as_str() {
        "all" | "quick" => ALL.to_vec(),
        one if ALL.contains(&one) || one == "endurance" || one == "failover-fallback" => vec![one],
        other => return run_standalone(other, args, pin).await,
    };
    let mut args = args.clone();
    if quick {
        args.duration.get_or_insert(0.3);
        args.warmup = args.warmup.min(0.1);
        args.concurrency = vec![1, 8];
        args.cycles = 1;
        args.down_for = args.down_for.min(0.5);
        args.rate = args.rate.min(500.0);
    }
    let mut report = Report { machine: machine(), params: params(&args), ..Report::default() };
    let setup = setup(&args, pin).await?;
    // Idle memory: the gateway has started, probed its backend and served nothing yet.
    tokio::time::sleep(Duration::from_millis(if quick { 100 } else { 1000 })).await;
    if let Some(idle) = setup.rss() {
        report.finding("memory", "gateway RSS at idle", mb(idle), "MB");
    }
    for name in names {
        eprintln!("{name}:");
        let rss = RssSampler::start(setup.gateway_pid);
        match name {
            "overhead" => overhead(&args, &setup, &mut report).await?,
            "throughput" => throughput(&args, &setup, &mut report).await?,
            "stream" => stream(&args, &setup, &mut report).await?,
            "large-payload" => large_payload(&args, &setup, &mut report).await?,
            "burst" => burst(&args, &setup, &mut report).await?,
            "sustained" => sustained("sustained", args.phase(10.0), &args, &setup, &mut report).await?,
            "endurance" => sustained("endurance", args.phase(60.0), &args, &setup, &mut report).await?,
            "failover" => failover::run(&args, pin, &mut report, false).await?,
            "failover-fallback" => failover::run(&args, pin, &mut report, true).await?,
            _ => {}
        }
        // Failover runs its own gateway and reports on it; everything else ran on `setup`'s.
        if !name.starts_with("failover") {
            if let Some(peak) = rss.finish(setup.gateway_pid).iter().map(|s| s.1).max() {
                report.finding("memory", format!("gateway RSS peak during {name}"), mb(peak), "MB");
            }
        }
    }
    Ok(report)
}

/// The scenarios that bring their own backends and gateways instead of sharing `setup`'s.
async fn run_standalone(scenario: &str, args: &BenchArgs, pin: &Pinning) -> Result<Report, String> {
    let mut report = Report::default();
    match scenario {
        // No backends: a database filled with generated records, queried through the admin API.
        "usage-query" => usage_query::run(args.records, args.storage.as_deref(), pin, &mut report).await?,
        // A long run at 60% of capacity with client aborts, watching for leaks.
        "soak" => soak::run(args, pin, &mut report).await?,
        // The shared limiter (Redis) against the in-memory one, and a fleet's exactness.
        "fleet" => fleet::run(args, pin, &mut report).await?,
        // The response cache: hits against a backend round trip.
        "cache" => cache::run(args, pin, &mut report).await?,
        // A gateway mirroring every request to a shadow model beside one that does not.
        "shadow" => shadow::run(args, pin, &mut report).await?,
        // Gateways with no, five and twenty policy rules, side by side.
        "policy" => policy::run(args, pin, &mut report).await?,
        // An A2A call beside a model request through the same gateway, side by side.
        "a2a" => a2a::run(args, pin, &mut report).await?,
        // The same gateway with guardrails off and on.
        "guardrails" => guardrails::run(args, pin, &mut report).await?,
        // A batch beside interactive traffic.
        "batch" => batch::run(args, pin, &mut report).await?,
        // CPU per request and idle memory beside a bare hyper proxy's, in the same run.
        "floor" => floor::run(args, pin, &mut report).await?,
        // The same build with OpenTelemetry traces off and on.
        "telemetry" => telemetry::run(args, pin, &mut report).await?,
        // Slowloris beside real traffic, then overload of a capped backend.
        "abuse" => abuse::run(args, pin, &mut report).await?,
        // Mock MCP servers and a gateway in front of them.
        "mcp" => mcp::run(args, pin, &mut report).await?,
        "code-mode" => code_mode::run(args, pin, &mut report).await?,
        "mixed" => mcp::mixed(args, pin, &mut report).await?,
        // Their own backends (KV-cache mocks or `--backend` servers) and a gateway per strategy.
        "affinity" | "shared-prefix" | "affinity-quick" => {
            let quick = scenario == "affinity-quick";
            if scenario != "shared-prefix" {
                affinity::affinity(args, pin, &mut report, quick).await?;
            }
            if scenario != "affinity" {
                affinity::shared_prefix(args, pin, &mut report, quick).await?;
            }
        }
        other => {
            return Err(format!(
                "unknown scenario `{other}` ({}, endurance, failover-fallback, soak, fleet, cache, shadow, policy, a2a, floor, telemetry, usage-query, mcp, code-mode, mixed, affinity, shared-prefix, affinity-quick, quick, all)",
                ALL.join(", ")
            ))
        }
    }
    Ok(report)
}

/// The machine the report was measured on.
fn machine() -> serde_json::Value {
    json!({
        "cpus": procs::cpu_count(),
        "cpus_for_load_generator": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu_model": procs::cpu_model(),
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
    })
}

/// The run's parameters, as the report records them.
fn params(args: &BenchArgs) -> serde_json::Value {
    json!({
        "scenario": args.scenario, "duration_s": args.duration, "warmup_s": args.warmup, "rate": args.rate,
        "concurrency": args.concurrency, "stream_chunks": args.stream_chunks, "target": args.target,
        "direct": args.direct, "model": args.model, "pin": args.pin, "cycles": args.cycles, "down_for_s": args.down_for,
    })
}

async fn overhead(args: &BenchArgs, setup: &Setup, report: &mut Report) -> Result<(), String> {
    let (direct, gateway) = setup.pair(&chat_body(&setup.model, false, "hello"), false)?;
    let (d, w) = (args.phase(5.0), args.warmup());
    let dc = measure("direct, 1 connection", &direct, Mode::Closed(1), w, d).await;
    let gc = measure("gateway, 1 connection", &gateway, Mode::Closed(1), w, d).await;
    let rate = args.rate;
    let dopen = measure(&format!("direct, {rate:.0} req/s"), &direct, Mode::Open(rate), w, d).await;
    let gopen = measure(&format!("gateway, {rate:.0} req/s"), &gateway, Mode::Open(rate), w, d).await;
    let (sd, sg) =
        (report.row("overhead", "closed c=1", "direct", &dc), report.row("overhead", "closed c=1", "gateway", &gc));
    let (od, og) = (
        report.row("overhead", format!("open {rate:.0}/s"), "direct", &dopen),
        report.row("overhead", format!("open {rate:.0}/s"), "gateway", &gopen),
    );
    report.finding("overhead", "added latency p50, 1 connection", sg.p50 as f64 - sd.p50 as f64, "µs");
    report.finding("overhead", "added latency p99, 1 connection", sg.p99 as f64 - sd.p99 as f64, "µs");
    report.finding(
        "overhead",
        format!("added latency p50, open loop {rate:.0}/s"),
        og.p50 as f64 - od.p50 as f64,
        "µs",
    );
    report.finding(
        "overhead",
        format!("added latency p99, open loop {rate:.0}/s"),
        og.p99 as f64 - od.p99 as f64,
        "µs",
    );
    if let Some(o) = sg.reported_overhead_p50 {
        report.finding("overhead", "gateway-reported own time p50 (server-timing)", o as f64, "µs");
    }
    report.charts.push((
        "overhead-latency-cdf".into(),
        Chart {
            title: "Latency CDF at 1 connection: direct vs through the gateway".into(),
            x_label: "latency (µs)".into(),
            y_label: "fraction of requests".into(),
            series: vec![
                Series { name: "direct".into(), points: cdf(&dc) },
                Series { name: "gateway".into(), points: cdf(&gc) },
            ],
            x_log: true,
            markers: vec![],
        },
    ));
    Ok(())
}

async fn throughput(args: &BenchArgs, setup: &Setup, report: &mut Report) -> Result<(), String> {
    let (direct, gateway) = setup.pair(&chat_body(&setup.model, false, "hello"), false)?;
    let (d, w) = (args.phase(5.0), args.warmup());
    let mut timeline = None;
    for &c in &args.concurrency {
        let ds = measure(&format!("direct, {c} connections"), &direct, Mode::Closed(c), w, d).await;
        let rss = RssSampler::start(setup.gateway_pid);
        let gs = measure(&format!("gateway, {c} connections"), &gateway, Mode::Closed(c), w, d).await;
        let peak = rss.finish(setup.gateway_pid).iter().map(|s| s.1).max();
        report.row("throughput", format!("closed c={c}"), "direct", &ds);
        let sg = report.row("throughput", format!("closed c={c}"), "gateway", &gs);
        report.finding("throughput", format!("gateway req/s at {c} connections"), sg.rps, "req/s");
        report.finding(
            "throughput",
            format!("gateway/direct throughput at {c} connections"),
            sg.rps / ds.throughput().max(1.0),
            "x",
        );
        if let Some(p) = peak {
            report.finding("memory", format!("gateway RSS peak at {c} connections"), mb(p), "MB");
        }
        if c == 32 || timeline.is_none() {
            timeline = Some((c, rate_series(&ds, false), rate_series(&gs, false)));
        }
    }
    if let Some((c, d, g)) = timeline {
        report.charts.push((
            "throughput-over-time".into(),
            Chart {
                title: format!("Throughput over time at {c} connections"),
                x_label: "seconds".into(),
                y_label: "requests/s".into(),
                series: vec![Series { name: "direct".into(), points: d }, Series { name: "gateway".into(), points: g }],
                x_log: false,
                markers: vec![],
            },
        ));
    }
    Ok(())
}

async fn stream(args: &BenchArgs, setup: &Setup, report: &mut Report) -> Result<(), String> {
    let (direct, gateway) = setup.pair(&chat_body(&setup.model, true, "stream please"), true)?;
    let (d, w) = (args.phase(5.0), args.warmup());
    for c in [1usize, 8] {
        let ds = measure(&format!("direct stream, {c} connections"), &direct, Mode::Closed(c), w, d).await;
        let gs = measure(&format!("gateway stream, {c} connections"), &gateway, Mode::Closed(c), w, d).await;
        let sd = report.row("stream", format!("sse c={c}"), "direct", &ds);
        let sg = report.row("stream", format!("sse c={c}"), "gateway", &gs);
        if let (Some(fd), Some(fg)) = (sd.first_chunk_p50, sg.first_chunk_p50) {
            report.finding(
                "stream",
                format!("added time to first chunk p50, {c} connections"),
                fg as f64 - fd as f64,
                "µs",
            );
        }
        let chunks = (args.stream_chunks + 2) as f64; // content chunks + stop chunk + [DONE]
        report.finding(
            "stream",
            format!("added time per chunk p50, {c} connections"),
            (sg.p50 as f64 - sd.p50 as f64) / chunks,
            "µs",
        );
    }
    Ok(())
}

async fn large_payload(args: &BenchArgs, setup: &Setup, report: &mut Report) -> Result<(), String> {
    let filler = "lorem ipsum dolor sit amet ".repeat(100 * 1024 / 27);
    let (direct, gateway) = setup.pair(&chat_body(&setup.model, false, &filler), false)?;
    let (d, w) = (args.phase(5.0), args.warmup());
    let ds = measure("direct, 100 KB bodies, 8 connections", &direct, Mode::Closed(8), w, d).await;
    let rss = RssSampler::start(setup.gateway_pid);
    let gs = measure("gateway, 100 KB bodies, 8 connections", &gateway, Mode::Closed(8), w, d).await;
    let peak = rss.finish(setup.gateway_pid).iter().map(|s| s.1).max();
    let sd = report.row("large-payload", "100 KB c=8", "direct", &ds);
    let sg = report.row("large-payload", "100 KB c=8", "gateway", &gs);
    report.finding("large-payload", "added latency p50, 100 KB bodies", sg.p50 as f64 - sd.p50 as f64, "µs");
    if let Some(p) = peak {
        report.finding("memory", "gateway RSS peak, 100 KB bodies", mb(p), "MB");
    }
    Ok(())
}

/// Baseline rate, a 10× spike, then baseline again, in one uninterrupted open-loop run: how long
/// after the spike until the median latency is back to the baseline's.
async fn burst(args: &BenchArgs, setup: &Setup, report: &mut Report) -> Result<(), String> {
    let (_, gateway) = setup.pair(&chat_body(&setup.model, false, "hello"), false)?;
    let d = args.phase(3.0);
    let rate = args.rate;
    let (base, spike) = (d, d / 3);
    let schedule = [(rate, base), (rate * 10.0, spike), (rate, d)];
    let bar = progress(&format!("gateway {rate:.0}/s → {:.0}/s → {rate:.0}/s", rate * 10.0), base + spike + d);
    if !args.warmup().is_zero() {
        load::open_loop(gateway.clone(), &[(rate, args.warmup())]).await;
    }
    let stats = load::open_loop(gateway, &schedule).await;
    bar.finish();
    report.row("burst", format!("{rate:.0}→{:.0}→{rate:.0}/s", rate * 10.0), "gateway", &stats);
    let ticks = stats.tick_p50();
    let tick = TICK.as_secs_f64();
    let (spike_from, spike_to) = ((base.as_secs_f64() / tick) as usize, ((base + spike).as_secs_f64() / tick) as usize);
    let mut baseline: Vec<u64> = ticks.iter().take(spike_from).copied().filter(|&p| p > 0).collect();
    baseline.sort_unstable();
    let baseline_p50 = baseline.get(baseline.len() / 2).copied().unwrap_or(0);
    let peak = ticks.iter().skip(spike_from).take(spike_to.saturating_sub(spike_from) + 1).max().copied().unwrap_or(0);
    // Recovered: from the first tick after the spike from which every tick stays within 1.5× baseline (+50 µs).
    let limit = baseline_p50 as f64 * 1.5 + 50.0;
    let after = ticks.get(spike_to.min(ticks.len())..).unwrap_or_default();
    let recovered = (0..=after.len()).find(|&i| after[i..].iter().all(|&p| p as f64 <= limit || p == 0));
    report.finding("burst", "baseline p50", baseline_p50 as f64, "µs");
    report.finding("burst", "worst 100 ms p50 during the spike", peak as f64, "µs");
    let ms = recovered.map_or(f64::NAN, |i| i as f64 * tick * 1000.0);
    report.finding("burst", "time after the spike until p50 is back to baseline", ms, "ms");
    report.charts.push((
        "burst-latency".into(),
        Chart {
            title: format!("Burst: {rate:.0} → {:.0} → {rate:.0} req/s, median latency per 100 ms", rate * 10.0),
            x_label: "seconds".into(),
            y_label: "p50 latency (µs)".into(),
            series: vec![Series {
                name: "gateway p50".into(),
                points: ticks
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| **p > 0)
                    .map(|(i, p)| (i as f64 * tick, *p as f64))
                    .collect(),
            }],
            x_log: false,
            markers: vec![
                (base.as_secs_f64(), "spike".into()),
                ((base + spike).as_secs_f64(), "back to baseline".into()),
            ],
        },
    ));
    Ok(())
}

async fn sustained(
    name: &'static str,
    d: Duration,
    args: &BenchArgs,
    setup: &Setup,
    report: &mut Report,
) -> Result<(), String> {
    let (_, gateway) = setup.pair(&chat_body(&setup.model, false, "hello"), false)?;
    let rate = args.rate;
    let rss = RssSampler::start(setup.gateway_pid);
    let s = measure(&format!("gateway {rate:.0}/s"), &gateway, Mode::Open(rate), args.warmup(), d).await;
    let samples = rss.finish(setup.gateway_pid);
    report.row(name, format!("open {rate:.0}/s"), "gateway", &s);
    if let (Some(first), Some(peak), Some(last)) = (samples.first(), samples.iter().map(|s| s.1).max(), samples.last())
    {
        report.finding(name, "gateway RSS first / peak / last sample", mb(first.1), "MB");
        report.finding(name, "gateway RSS peak", mb(peak), "MB");
        report.finding(name, "gateway RSS growth first→last", mb(last.1) - mb(first.1), "MB");
    }
    report.extra.insert(format!("{name}_rss_bytes"), json!(samples));
    report.charts.push((
        format!("{name}-rss"),
        Chart {
            title: format!("Gateway RSS during {name} load ({rate:.0} req/s)"),
            x_label: "seconds".into(),
            y_label: "RSS (MB)".into(),
            series: vec![Series {
                name: "gateway RSS".into(),
                points: samples.iter().map(|(t, b)| (*t, mb(*b))).collect(),
            }],
            x_log: false,
            markers: vec![],
        },
    ));
    report.charts.push((
        format!("{name}-throughput"),
        Chart {
            title: format!("Throughput during {name} load"),
            x_label: "seconds".into(),
            y_label: "requests/s".into(),
            series: vec![Series { name: "gateway".into(), points: rate_series(&s, false) }],
            x_log: false,
            markers: vec![],
        },
    ));
    Ok(())
}
