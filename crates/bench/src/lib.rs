//! `switchyard bench`: overhead, throughput, streaming, payload, burst, sustained/endurance,
//! failover and memory — measured against direct calls to the same backend, on this machine,
//! with the gateway (ours by default, any OpenAI-compatible one with `--target`) as a child
//! process. Scenarios live in `bench/scenarios.rs`; the load generator in `bench/load.rs`.

pub mod bare_proxy;
pub mod chart;
pub mod load;
pub mod procs;
pub mod report;
pub mod scenarios;

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// overhead | throughput | stream | large-payload | burst | sustained | endurance | failover | failover-fallback | abuse | soak | fleet | cache | shadow | policy | a2a | guardrails | batch | telemetry | usage-query |
    /// mcp | code-mode | mixed | affinity | shared-prefix | affinity-quick | quick | all
    #[arg(default_value = "quick")]
    pub scenario: String,
    /// Seconds per measured phase (scenario defaults apply when omitted).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds of warm-up before each measured phase (excluded from the figures).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Requests per second for fixed-rate phases (overhead, burst baseline, sustained, endurance).
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Connection counts for the throughput scenario.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    pub concurrency: Vec<usize>,
    /// Chunks per streamed response in the stream scenario.
    #[arg(long, default_value_t = 20)]
    pub stream_chunks: usize,
    /// Measure this gateway (base URL, e.g. http://127.0.0.1:4000) instead of starting ours.
    #[arg(long, requires = "direct")]
    pub target: Option<String>,
    /// The backend the target fronts, called directly for the comparison (base URL).
    #[arg(long)]
    pub direct: Option<String>,
    /// Model name sent in requests.
    #[arg(long, default_value = "bench-model")]
    pub model: String,
    /// Extra request header for the target, `Name: value` (repeatable), e.g. an API key.
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// PID of an external target, for its RSS.
    #[arg(long)]
    pub target_pid: Option<u32>,
    /// Response header naming the backend that served a request.
    #[arg(long, default_value = "x-switchyard-backend")]
    pub backend_header: String,
    /// Pin processes to CPUs: `gateway=0,mock=1,load=1`. `--pin` alone uses that layout.
    #[arg(long, num_args = 0..=1, default_missing_value = "gateway=0,mock=1,load=1")]
    pub pin: Option<String>,
    /// The API clients speak to the gateway: openai (passthrough to the OpenAI-compatible mock),
    /// anthropic (Messages, translated) or responses (OpenAI Responses, translated). The direct
    /// baseline is always the mock's own OpenAI API, so the difference includes the translation.
    #[arg(long, default_value = "openai", value_parser = ["openai", "anthropic", "responses"])]
    pub api: String,
    /// Send every request with a virtual key (auth, model allow-list, rpm/tpm/parallel limits and
    /// a budget, none of them reached) created on the gateway this run starts.
    #[arg(long, conflicts_with = "target")]
    pub virtual_key: bool,
    /// With --virtual-key: the key belongs to a team with limits and a budget of its own (none
    /// reached), so every request is admitted and reserved at both levels.
    #[arg(long, requires = "virtual_key")]
    pub team: bool,
    /// Start the gateway with `storage.record_usage: false` (no usage records): with neither
    /// this nor --virtual-key, the run measures the core alone, on the same build.
    #[arg(long, conflicts_with_all = ["target", "virtual_key"])]
    pub no_usage: bool,
    /// affinity / shared-prefix: real backends to use instead of KV-cache mocks (repeatable),
    /// e.g. llama.cpp servers started by scripts/bench-llamacpp.
    #[arg(long = "backend")]
    pub backends: Vec<String>,
    /// affinity: context lengths (tokens) of the conversations.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096,16384")]
    pub contexts: Vec<usize>,
    /// affinity: conversations per context length.
    #[arg(long, default_value_t = 5)]
    pub conversations: usize,
    /// shared-prefix: users, each with its own conversation, all at once.
    #[arg(long, default_value_t = 32)]
    pub users: usize,
    /// shared-prefix: tokens of the system prompt every user shares.
    #[arg(long, default_value_t = 2000)]
    pub system_tokens: usize,
    /// shared-prefix: tokens of each user's own first message (a document of its own): more than
    /// the shared system prompt makes a conversation's own context what routing must keep warm.
    #[arg(long, default_value_t = 60)]
    pub user_tokens: usize,
    /// shared-prefix: leave out the runs through 3 gateway instances.
    #[arg(long)]
    pub no_fleet: bool,
    /// shared-prefix: a user waits up to this many milliseconds between turns (varied per turn).
    #[arg(long, default_value_t = 0)]
    pub think_ms: u64,
    /// affinity / shared-prefix: traffic starts once each gateway has run this many seconds (and
    /// probed every backend three times), so routing is measured in steady state.
    #[arg(long, default_value_t = 0)]
    pub steady_secs: u64,
    /// affinity / shared-prefix: only these strategies (e.g. `round-robin,cache-aware`); all by default.
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// affinity / shared-prefix: turns per conversation.
    #[arg(long, default_value_t = 10)]
    pub turns: usize,
    /// Failover: kill/restart cycles.
    #[arg(long, default_value_t = 3)]
    pub cycles: usize,
    /// Failover: seconds a backend stays dead before it is restarted.
    #[arg(long, default_value_t = 2.0)]
    pub down_for: f64,
    /// usage-query: how many generated usage records to write before querying (0: query the
    /// database `--storage` names as it is).
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// usage-query: database URL (default: a scratch SQLite file).
    #[arg(long)]
    pub storage: Option<String>,
    /// Write every figure as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write charts (SVG and PNG) into this directory.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// CPU placement parsed from `--pin`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pinning {
    pub gateway: Option<String>,
    pub mock: Option<String>,
    pub load: Option<String>,
    /// Where the telemetry bench's export receiver runs, a mock of its own (`sink=1`: the
    /// collector or webhook being another machine's work, as in production). Unset, the
    /// backend mock doubles as the receiver, on the measured core.
    pub sink: Option<String>,
}

impl Pinning {
    pub fn parse(spec: Option<&str>) -> Result<Pinning, String> {
        let mut p = Pinning::default();
        let Some(spec) = spec else { return Ok(p) };
        for part in spec.split(',').filter(|s| !s.is_empty()) {
            let (role, cpus) = part.split_once('=').ok_or(format!("--pin: `{part}` is not ROLE=CPUS"))?;
            let cpus = cpus.replace('+', ",");
            if cpus.is_empty() || !cpus.chars().all(|c| c.is_ascii_digit() || c == ',' || c == '-') {
                return Err(format!("--pin: `{cpus}` is not a CPU list"));
            }
            match role {
                "gateway" => p.gateway = Some(cpus),
                "mock" => p.mock = Some(cpus),
                "load" => p.load = Some(cpus),
                "sink" => p.sink = Some(cpus),
                other => return Err(format!("--pin: unknown role `{other}` (gateway, mock, load, sink)")),
            }
        }
        Ok(p)
    }
}

impl BenchArgs {
    pub fn phase(&self, default_secs: f64) -> Duration {
        Duration::from_secs_f64(self.duration.unwrap_or(default_secs).max(0.05))
    }

    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup.max(0.0))
    }
}

/// Entry point from the CLI (already inside the runtime; `--pin load=` was applied before it started).
pub async fn run(args: BenchArgs) -> Result<(), String> {
    let pinning = Pinning::parse(args.pin.as_deref())?;
    let report = scenarios::run_all(&args, &pinning).await?;
    report::print(&report);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json()).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        for (stem, c) in &report.charts {
            chart::write_chart(c, dir, stem).map_err(|e| format!("chart {stem}: {e}"))?;
        }
        eprintln!("wrote {} charts to {}", report.charts.len(), dir.display());
    }
    let errors = report.unexpected_errors();
    if errors > 0 {
        return Err(format!("{errors} requests failed where none should have (see the table)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_layouts() {
        let p = Pinning::parse(Some("gateway=0,mock=1,load=1")).unwrap();
        assert_eq!(p.gateway.as_deref(), Some("0"));
        assert_eq!(p.load.as_deref(), Some("1"));
        assert_eq!(Pinning::parse(Some("gateway=0+1")).unwrap().gateway.as_deref(), Some("0,1"));
        assert!(Pinning::parse(Some("gpu=0")).is_err());
        assert!(Pinning::parse(Some("gateway=x")).is_err());
        assert_eq!(Pinning::parse(None).unwrap(), Pinning::default());
    }
}
