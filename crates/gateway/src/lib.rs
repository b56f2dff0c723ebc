//! Switchyard's gateway: the request pipeline as a library, so tests run the real thing
//! in-process and the `switchyard` binary (crates/switchyard) is a thin command line over it.
//!
//! A request's path, outer to inner (each module imports only modules below it in this list):
//!
//! 1. `server` — accept (HTTP/1.1 keep-alive or h2c), header-read timeout, graceful drain;
//!    `server/routes.rs` is the route table: request id, counting, which handler answers.
//! 2. `console` — the operator's console at `/ui`, which composes the handlers below it.
//! 3. handlers — `proxy` (every model endpoint), `mcp` (`/mcp`, `/mcp/{server}`: the MCP
//!    gateway, protocol in the `switchyard-mcp` crate), `admin` (`/admin`, master key), `catalog`
//!    (`/v1/models`, Ollama's catalogue, `/health`, `/ready`, `/metrics`).
//! 4. `proxy` as its phases: authenticate (`auth` → an `Identity`) → read and parse only
//!    `model`/`stream`/routing hints (`http/parse.rs`) → admit: the key's model allow-list, rate
//!    limits and budget (`limit`) → guard the request (`guard`) → cache → route and attempt
//!    (`route`, `translate`, `upstream`; a failure before anything reached the client is retried
//!    on another backend, then fallback models) → relay frame by frame with the answer guards
//!    (`http/relay.rs`), metering usage (`http/metering.rs` → `usage` journal → `store`) → settle:
//!    one owned value (`proxy/settle.rs`) settles limits, budget, usage and trace however the
//!    request ends. docs/ARCHITECTURE.md has the table of phases.
//! 5. `app` — the shared state all of the above read: built once, never imports a handler.
//! 6. `http` — response bodies, JSON and error responses, body reading, relay, metering.
//!    `experiments` — experiments on live traffic (issue 57): the live set, assignment, state,
//!    results and the refresh task; it reads the store, below it.
//! 7. `auth`, `limit` (across a fleet through `shared`, the Redis connection), `route` (health probes and discovery run beside the pipeline, one task
//!    per backend: `route/health.rs`), `translate`, `usage`, `store`, `metrics`, `error`, `telemetry`
//!    (OpenTelemetry spans, built and exported off the request path).
//! 8. `upstream`, `config`, `records`, `endpoint`, `clock`, `glob`, `redact` — the bottom: they import no
//!    other pipeline module (`config` and `records` nothing at all).

// A future awaited by value is copied with every move of the future that awaits it, and hyper
// moves the request's future into place for every request: big ones are boxed (see
// `server/routes.rs`), and this keeps new ones from creeping in (`future-size-threshold` in clippy.toml).
#![warn(clippy::large_futures)]

pub mod a2a;
pub mod admin;
pub mod agents;
pub mod app;
pub mod auth;
pub mod batch;
pub mod cache;
pub mod catalog;
pub mod clock;
pub mod config;
pub mod console;
pub mod endpoint;
pub mod epp;
pub mod error;
pub mod experiments;
pub mod glob;
pub mod guard;
pub mod http;
pub mod limit;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod org_rules;
pub mod policy;
pub mod proxy;
pub mod records;
pub mod redact;
pub mod route;
pub mod server;
pub mod shared;
pub mod store;
pub mod telemetry;
pub mod translate;
pub mod upstream;
pub mod usage;

pub use app::App;
pub use config::Config;
pub use server::{request_reload, start, start_guarded, RunningGateway};
