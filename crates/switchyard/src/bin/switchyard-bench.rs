//! The `switchyard-bench` binary: the benchmark suite (`switchyard-bench`'s library), kept out of the
//! shipped gateway (issue 29: its load generator, reports and PNG charts were ~1.2 MB of every
//! `switchyard`). `switchyard bench ARGS` runs this binary from beside itself, so both spellings work.
//! It starts the gateway and the mock backends from the `switchyard` binary beside it, and the bare
//! hyper proxy (`bench floor`'s baseline) from itself.

use std::process::ExitCode;

use clap::Parser;

#[allow(dead_code)] // the gateway raises by its max_connections; the bench only by a fixed count
#[path = "../fd_limit.rs"]
mod fd_limit;

#[path = "../exit.rs"]
mod exit;

/// The argument that makes this binary the bare proxy (spawned by `bench floor`).
const BARE_PROXY: &str = switchyard_bench::procs::BARE_PROXY_COMMAND;

#[derive(Parser)]
#[command(name = "switchyard-bench", version, about = "Benchmark the gateway against direct calls")]
struct Cli {
    #[command(flatten)]
    args: switchyard_bench::BenchArgs,
}

#[derive(Parser)]
struct BareProxy {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    #[arg(long)]
    upstream: String,
}

fn main() -> ExitCode {
    let bare = std::env::args().nth(1).is_some_and(|a| a == BARE_PROXY);
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    // The benchmark holds as many connections as a gateway does (`bench abuse` opens 10,000 at once).
    fd_limit::raise_to(2 * 10_000 + 1024);
    let command = if bare {
        let proxy = BareProxy::parse_from(std::env::args().skip(1));
        Command::BareProxy(proxy)
    } else {
        let cli = Cli::parse();
        // Pin the load generator before the runtime starts its threads, so they inherit the mask.
        let pinned = switchyard_bench::Pinning::parse(cli.args.pin.as_deref())
            .and_then(|p| p.load.map_or(Ok(()), |cpus| switchyard_bench::procs::pin_self(&cpus)));
        if let Err(e) = pinned {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        Command::Bench(Box::new(cli.args))
    };
    exit::run_to_exit(async move {
        match command {
            Command::Bench(args) => switchyard_bench::run(*args).await,
            Command::BareProxy(p) => switchyard_bench::bare_proxy::run(p.listen, &p.upstream).await,
        }
    })
}

enum Command {
    Bench(Box<switchyard_bench::BenchArgs>),
    BareProxy(BareProxy),
}
