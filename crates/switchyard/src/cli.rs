//! Command line: `serve`, `check`, `mock`, `demo`, `keys`, `bench`. Logs go to stderr; stdout carries only
//! machine-readable lines (`listening on http://ADDR`) and the output a command exists for.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use switchyard_testkit::{MockApi, MockConfig};

use switchyard_gateway::config::{Config, ProcessEnv};

#[derive(Parser)]
#[command(name = "switchyard", version, about = "One fast gateway in front of every LLM backend")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        /// YAML config file. Without one the gateway starts with no backends.
        #[arg(long, short, env = "SWITCHYARD_CONFIG")]
        config: Option<PathBuf>,
        /// Override `listen` from the config.
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Validate a config file and print the model → backends table.
    Check {
        #[arg(long, short, env = "SWITCHYARD_CONFIG")]
        config: PathBuf,
        /// Do not contact backends; show only statically configured models.
        #[arg(long)]
        offline: bool,
    },
    /// Tokenize OpenAI chat requests (JSON lines on stdin) as the gateway keys prompts for
    /// event-publishing engines: the model's chat template, then its tokenizer.json.
    Tokenize {
        /// The model's directory: tokenizer.json and tokenizer_config.json (as `models.*.tokenizer`).
        #[arg(long)]
        tokenizer: PathBuf,
        /// Print the rendered prompt text (`{"text": ...}`) instead of token ids.
        #[arg(long)]
        render: bool,
        /// Time tokenizing chats of these many tokens instead (p50/p99 µs, new and repeated prompts).
        #[arg(long, value_delimiter = ',')]
        bench: Vec<usize>,
        /// Prompts per size for --bench.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
    },
    /// Run a mock backend speaking the OpenAI, Anthropic or Ollama API (for tests, demos and benchmarks).
    Mock {
        #[arg(long, default_value = "127.0.0.1:8000")]
        listen: SocketAddr,
        /// Comma-separated model names.
        #[arg(long, value_delimiter = ',', default_value = "mock-model")]
        models: Vec<String>,
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        #[arg(long, default_value_t = 5)]
        stream_chunks: usize,
        #[arg(long, default_value_t = 0)]
        chunk_delay_ms: u64,
        /// Fraction of requests (0..1) answered with --fail-status.
        #[arg(long, default_value_t = 0.0)]
        fail_rate: f64,
        #[arg(long, default_value_t = 503)]
        fail_status: u16,
        /// API to serve: openai (/v1/chat/completions, ...), anthropic (/v1/messages, ...) or
        /// ollama (/api/chat, /api/generate, ... and its OpenAI-compatible /v1).
        #[arg(long, default_value_t = MockApi::OpenAi)]
        api: MockApi,
        /// Require this key: `Authorization: Bearer KEY` (openai) or `x-api-key: KEY` (anthropic).
        #[arg(long)]
        api_key: Option<String>,
        /// Same as `--api ollama` (kept for older scripts).
        #[arg(long, hide = true, conflicts_with = "api")]
        ollama: bool,
        /// Simulate an inference server's prefix (KV) cache holding N tokens, with LRU eviction:
        /// time to first token = --ttft-fixed-us + --prefill-us-per-token × uncached prompt tokens.
        /// Also serves llama.cpp's `GET /slots` and `GET /metrics`.
        #[arg(long, value_name = "N")]
        kv_cache_tokens: Option<usize>,
        /// Prefill time per uncached prompt token (needs --kv-cache-tokens).
        #[arg(long, value_name = "P", requires = "kv_cache_tokens",
            default_value_t = switchyard_testkit::KvCacheConfig::default().prefill_us_per_token)]
        prefill_us_per_token: u64,
        /// Time per generated token, --stream-chunks tokens per reply; replaces --chunk-delay-ms
        /// (needs --kv-cache-tokens).
        #[arg(long, value_name = "D", requires = "kv_cache_tokens",
            default_value_t = switchyard_testkit::KvCacheConfig::default().decode_ms_per_token)]
        decode_ms_per_token: u64,
        /// Fixed part of the time to first token (needs --kv-cache-tokens).
        #[arg(long, requires = "kv_cache_tokens",
            default_value_t = switchyard_testkit::KvCacheConfig::default().fixed_ttft_us)]
        ttft_fixed_us: u64,
        /// Requests processed at once; more wait for a slot (needs --kv-cache-tokens).
        #[arg(long, value_name = "K", requires = "kv_cache_tokens",
            default_value_t = switchyard_testkit::KvCacheConfig::default().slots)]
        slots: usize,
    },
    /// Run a mock MCP server over Streamable HTTP (for tests, demos and benchmarks).
    MockMcp {
        #[arg(long, default_value = "127.0.0.1:8100")]
        listen: SocketAddr,
        /// Generated `tool_{i}` tools besides the fixed ones (echo, add, slow, fail, large, write_file).
        #[arg(long, default_value_t = 0)]
        extra_tools: usize,
        /// Tools per `tools/list` page.
        #[arg(long, default_value_t = 100)]
        page_size: usize,
        /// Answer every request as an SSE stream instead of JSON.
        #[arg(long)]
        sse: bool,
        /// Delay before answering each tool call.
        #[arg(long, default_value_t = 0)]
        call_delay_ms: u64,
        /// Serve on stdin/stdout instead of HTTP (a stdio MCP server; `--listen` is ignored).
        #[arg(long)]
        stdio: bool,
    },
    /// Manage virtual keys through a running gateway's admin API.
    Keys(crate::keys::KeysArgs),
    /// Manage teams and their members through a running gateway's admin API.
    Teams(crate::orgs::TeamsArgs),
    /// Manage users through a running gateway's admin API.
    Users(crate::orgs::UsersArgs),
    /// Check the audit log's hash chain in the configured database.
    Audit(crate::audit::AuditArgs),
    /// Experiments on live traffic through a running gateway's admin API; `simulate` runs the
    /// adaptive allocation's seeded simulation.
    Experiments(crate::experiments::ExperimentsArgs),
    /// Policies as code: `test` evaluates the configured rules against a request without serving it.
    Policy(crate::policy::PolicyArgs),
    /// The response cache: `calibrate` measures the semantic layer's false hits on labelled pairs.
    Cache(crate::cache::CacheArgs),
    /// Benchmark the gateway against direct calls: overhead, throughput, streaming, failover, memory
    /// (runs the `switchyard-bench` binary beside this one; `switchyard bench --help` lists its options).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Start mock backends and the real gateway, show routing and failover, then keep serving.
    Demo {
        /// Address for the demo gateway (falls back to a free port if taken).
        #[arg(long, default_value = "127.0.0.1:4100")]
        listen: SocketAddr,
        /// Requests in the demo burst.
        #[arg(long, default_value_t = 600)]
        requests: usize,
        /// Exit after the summary instead of serving until Ctrl-C.
        #[arg(long)]
        no_wait: bool,
    },
    /// Fill a database with generated usage records (for `bench usage-query`).
    #[command(hide = true)]
    SeedUsage {
        /// Database URL (sqlite://… or postgres://…).
        #[arg(long)]
        storage: String,
        #[arg(long, default_value_t = 10_000_000)]
        records: u64,
        /// Where the generated 30 days end (unix ms); default a fixed instant, so runs repeat.
        #[arg(long)]
        end_ms: Option<i64>,
    },
}

pub fn main() -> ExitCode {
    // Before any thread allocates: few malloc arenas, so freed memory is not spread over dozens.
    switchyard_gateway::memory::limit_arenas();
    let cli = Cli::parse();
    if let Command::Bench { args } = cli.command {
        return crate::bench::run(args);
    }
    init_tracing();
    // A mock holds as many connections as a gateway does (`bench abuse` opens 10,000 at once).
    if matches!(cli.command, Command::Mock { .. }) {
        crate::fd_limit::raise_to(2 * 10_000 + 1024);
    }
    crate::exit::run_to_exit(async move {
        match cli.command {
            Command::Serve { config, listen } => serve(config, listen).await,
            Command::Check { config, offline } => check(config, offline).await,
            Command::Tokenize { tokenizer, render, bench, rounds } => match bench.is_empty() {
                true => crate::tokenize::run(&tokenizer, render),
                false => crate::tokenize::bench(&tokenizer, &bench, rounds.max(1)),
            },
            Command::Mock {
                listen,
                models,
                latency_ms,
                stream_chunks,
                chunk_delay_ms,
                fail_rate,
                fail_status,
                api,
                api_key,
                ollama,
                kv_cache_tokens,
                prefill_us_per_token,
                decode_ms_per_token,
                ttft_fixed_us,
                slots,
            } => {
                if !(0.0..=1.0).contains(&fail_rate) {
                    return Err("--fail-rate must be between 0 and 1".to_owned());
                }
                if slots == 0 {
                    return Err("--slots must be at least 1".to_owned());
                }
                let kv_cache = kv_cache_tokens.map(|capacity_tokens| switchyard_testkit::KvCacheConfig {
                    capacity_tokens,
                    prefill_us_per_token,
                    decode_ms_per_token,
                    fixed_ttft_us: ttft_fixed_us,
                    slots,
                });
                let cfg = MockConfig {
                    models,
                    latency: Duration::from_millis(latency_ms),
                    stream_chunks,
                    chunk_delay: Duration::from_millis(chunk_delay_ms),
                    fail_rate,
                    fail_status,
                    api: if ollama { MockApi::Ollama } else { api },
                    api_key,
                    kv_cache,
                };
                switchyard_testkit::run_cli(listen, cfg).await.map_err(|e| format!("mock: {e}"))
            }
            Command::MockMcp { listen, extra_tools, page_size, sse, call_delay_ms, stdio } => {
                let cfg = switchyard_testkit::McpMockConfig { extra_tools, page_size, sse, call_delay_ms, stdio };
                let served = if stdio {
                    switchyard_testkit::mcp::run_stdio(cfg).await
                } else {
                    switchyard_testkit::mcp::run_cli(listen, cfg).await
                };
                served.map_err(|e| format!("mock-mcp: {e}"))
            }
            Command::Bench { .. } => Ok(()), // run above, without a runtime of this process
            Command::Keys(args) => crate::keys::run(args).await,
            Command::Teams(args) => crate::orgs::teams(args).await,
            Command::Users(args) => crate::orgs::users(args).await,
            Command::Audit(args) => crate::audit::run(args).await,
            Command::Cache(args) => crate::cache::run(args).await,
            Command::Experiments(args) => crate::experiments::run(args).await,
            Command::Policy(args) => crate::policy::run(args).await,
            Command::Demo { listen, requests, no_wait } => crate::demo::run(listen, requests, no_wait).await,
            Command::SeedUsage { storage, records, end_ms } => {
                crate::seed::run(&storage, records, end_ms.unwrap_or(crate::seed::END_MS)).await
            }
        }
    })
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
}

pub fn load(path: &std::path::Path) -> Result<Config, String> {
    Config::load(path, &ProcessEnv).map_err(|e| format!("{}: {e}", path.display()))
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed when this is called (not when the
/// future is first polled), so a signal that arrives right after start-up is not lost.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn serve(path: Option<PathBuf>, listen: Option<SocketAddr>) -> Result<(), String> {
    let mut config = match &path {
        Some(p) => load(p)?,
        None => Config::empty().map_err(|e| e.to_string())?,
    };
    if let Some(addr) = listen {
        config.listen = addr;
    }
    if config.backends.is_empty() {
        tracing::warn!(
            "no backends configured: write a config with a `backends:` list (see config/switchyard.example.yaml) \
             and start with `switchyard serve --config FILE`"
        );
    }
    crate::fd_limit::raise(config.listener.max_connections);
    let strategy = config.strategy.as_str();
    let signal = shutdown_signal();
    let gateway = switchyard_gateway::start(config, signal).await?;
    for b in &gateway.app.router.backends {
        tracing::info!(
            backend = b.name(),
            url = %b.cfg.url,
            up = b.health.is_up(),
            models = b.models().len(),
            "backend"
        );
    }
    tracing::info!(strategy, addr = %gateway.addr, "switchyard ready");
    #[cfg(unix)]
    {
        // SIGHUP re-reads the config file; the outcome is logged by the gateway.
        use tokio::signal::unix::{signal, SignalKind};
        let reloader = gateway.reloader();
        if let Ok(mut hangups) = signal(SignalKind::hangup()) {
            tokio::spawn(async move {
                while hangups.recv().await.is_some() {
                    let _ = switchyard_gateway::request_reload(&reloader).await;
                }
            });
        }
    }
    println!("listening on {}", gateway.url());
    gateway.wait().await;
    Ok(())
}

async fn check(path: PathBuf, offline: bool) -> Result<(), String> {
    let config = load(&path)?;
    let app = switchyard_gateway::App::new(config, None)?;
    if !offline {
        switchyard_gateway::route::health::probe_all(&app.router, &app.client, &app.config.health).await;
    }
    println!("config OK: {} (strategy {}, listen {})", path.display(), app.config.strategy.as_str(), app.config.listen);
    println!();
    println!("{:<20} {:<8} {:<8} {:<7} URL", "BACKEND", "TYPE", "STATE", "MODELS");
    for b in &app.router.backends {
        let state = if offline {
            "-"
        } else if b.health.is_up() {
            "up"
        } else {
            "down"
        };
        let source = if b.cfg.models.is_some() { "static" } else { "found" };
        println!(
            "{:<20} {:<8} {:<8} {:<7} {}",
            b.name(),
            b.cfg.kind.as_str(),
            state,
            format!("{} {source}", b.models().len()),
            b.cfg.url
        );
    }
    let mut table: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for b in &app.router.backends {
        for m in b.models().iter() {
            table.entry(m.clone()).or_default().push(b.name().to_owned());
        }
    }
    println!();
    println!("{:<32} BACKENDS", "MODEL");
    for (model, backends) in &table {
        println!("{:<32} {}", model, backends.join(", "));
    }
    let mut aliases: Vec<_> = app.config.aliases.iter().collect();
    aliases.sort();
    for (alias, target) in aliases {
        let backends = table.get(target).map(|b| b.join(", ")).unwrap_or_else(|| "(no backend serves it yet)".into());
        println!("{:<32} {}", format!("{alias} -> {target}"), backends);
    }
    if table.is_empty() {
        println!("(no models yet: backends without a static `models` list are discovered when reachable)");
    }
    Ok(())
}
