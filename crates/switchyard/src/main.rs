//! The `switchyard` binary: its subcommands (`cli.rs`) over the gateway library
//! (`switchyard-gateway`), the benchmark suite (`switchyard-bench`) and the mock backends
//! (`switchyard-testkit`).

mod audit;
mod cli;
mod demo;
mod fd_limit;
mod keys;
mod orgs;
mod seed;

fn main() -> std::process::ExitCode {
    cli::main()
}
