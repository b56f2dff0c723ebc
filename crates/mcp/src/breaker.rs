//! A circuit breaker per upstream MCP server, like the LLM backends': after `THRESHOLD` failures
//! in a row (unreachable, timed out, an HTTP error, an answer that is not MCP), the server is left
//! out of catalogues and its calls fail at once for `COOL_DOWN`; then calls are let through
//! again, and the first failure re-opens it. A JSON-RPC error from the server is an answer, not a
//! failure.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::upstream::UpstreamError;

pub const THRESHOLD: u32 = 5;
pub const COOL_DOWN: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Breaker {
    failures: AtomicU32,
    /// Milliseconds (since the process's first breaker use) until which it is open; 0 = closed.
    open_until_ms: AtomicU64,
}

fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

impl Breaker {
    /// Whether calls may go upstream now.
    pub fn allows(&self) -> bool {
        now_ms() >= self.open_until_ms.load(Relaxed)
    }

    /// Record how an upstream exchange ended; returns true when this opened the breaker.
    pub fn record<T>(&self, outcome: &Result<T, UpstreamError>) -> bool {
        match outcome {
            Ok(_) | Err(UpstreamError::Rpc(_)) => {
                self.failures.store(0, Relaxed);
                self.open_until_ms.store(0, Relaxed);
                false
            }
            Err(_) => {
                let n = self.failures.fetch_add(1, Relaxed) + 1;
                if n >= THRESHOLD {
                    self.open_until_ms.store(now_ms() + COOL_DOWN.as_millis() as u64, Relaxed);
                    return n == THRESHOLD;
                }
                false
            }
        }
    }

    pub fn is_open(&self) -> bool {
        !self.allows()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_and_an_answer_closes_it() {
        let b = Breaker::default();
        let fail: Result<(), UpstreamError> = Err(UpstreamError::Timeout);
        for _ in 1..THRESHOLD {
            assert!(!b.record(&fail));
            assert!(b.allows());
        }
        assert!(b.record(&fail), "the fifth failure in a row opens it");
        assert!(b.is_open());
        let rpc: Result<(), UpstreamError> = Err(UpstreamError::Rpc(crate::jsonrpc::RpcError::new(-32602, "x")));
        b.record(&rpc);
        assert!(b.allows(), "a JSON-RPC error is an answer: the server is up");
    }
}
