//! Key pools: several API keys (credentials) for one backend — per project, per rate-limit tier —
//! with the load spread over them by what each has left. A request takes the key with the most
//! headroom: the smaller of what is left of its own `rpm` and `tpm` this minute and of what the
//! provider last said is left (`x-ratelimit-remaining-*`, `anthropic-ratelimit-*-remaining`).
//! A key the provider rate-limits (a 429, or nothing left) rests until the provider says it is
//! back (`retry-after`, the limits' reset), and the request moves to another key of the same
//! backend; a key the provider refuses (401) is taken out until the configuration changes.
//!
//! Time is wall-clock Unix milliseconds, passed in, so that a fleet can share a key's rest
//! through Redis (the gateway does that; this crate keeps one instance's view).

mod headers;
mod pool;

pub use headers::{retry_after, Reported, Window};
pub use pool::{KeyPool, KeySpec, KeyState, Outcome};
