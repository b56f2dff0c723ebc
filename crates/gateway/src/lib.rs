//! Switchyard: one fast binary in front of every LLM backend. The binary's subcommands live in
//! `cli.rs`; everything else is the gateway as a library, so tests run the real thing in-process.

pub mod app;
pub mod auth;
pub mod bench;
pub mod cli;
pub mod config;
pub mod demo;
pub mod error;
pub mod http;
pub mod keys_cli;
pub mod limit;
pub mod metrics;
pub mod proxy;
pub mod records;
pub mod route;
pub mod server;
pub mod store;
pub mod translate;
pub mod upstream;
pub mod usage;

pub use app::{start, App, RunningGateway};
pub use config::Config;
