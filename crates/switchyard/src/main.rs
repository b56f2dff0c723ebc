//! The `switchyard` binary: its subcommands (`cli.rs`) over the gateway library
//! (`switchyard-gateway`) and the mock backends (`switchyard-testkit`). The benchmark suite is the
//! `switchyard-bench` binary (src/bin), which `switchyard bench` runs.

mod audit;
mod bench;
mod cache;
mod cli;
mod demo;
mod exit;
mod experiments;
mod fd_limit;
mod keys;
mod orgs;
mod policy;
mod seed;
mod tokenize;

fn main() -> std::process::ExitCode {
    cli::main()
}
