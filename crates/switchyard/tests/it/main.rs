//! The black-box suites, linked into one test binary: each links the whole gateway, so one
//! binary instead of one per suite saves gigabytes of disk and minutes of linking. Run one suite
//! with `cargo test -p switchyard --test it -- fleet::`. `backend_faults` stays a binary of its
//! own: it counts this process's memory and descriptors, which the other suites would move.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

mod common;

mod a2a;
mod admission;
mod affinity;
mod audio;
mod audit;
mod batches;
mod bench_quick;
mod cache;
mod canary;
mod cli;
mod code_mode;
mod console;
mod crash;
mod drain;
mod endpoints;
mod epp;
mod errors;
mod experiments;
mod exports;
mod failover;
mod fallback;
mod fleet;
mod guardrails;
mod guardrails_corpus;
mod guards;
mod jwt;
mod key_pools;
mod keys;
mod kv_events;
mod limits;
mod mcp;
mod mcp_relay;
mod model_guards;
mod orgs;
mod origin;
mod passthrough;
mod policies;
mod prompt_cache;
mod providers;
mod pseudonymize;
mod realtime;
mod reload;
mod resume;
mod retry;
mod roles;
mod routing;
mod slowloris;
mod smuggling;
mod store;
mod store_batches;
mod streaming;
mod telemetry;
mod tls;
mod translation;
mod upstream;
mod usage;
