//! Raising the process's open-file limit at start-up, so `limits.max_connections` is what bounds
//! client connections rather than a soft limit of 1024 that many systems default to.

/// Descriptors kept for everything that is not a client connection: upstream connections (about
/// one per client connection in flight), the database pool, journal files, the listener.
const HEADROOM: u64 = 1024;

/// Raise the soft `RLIMIT_NOFILE` towards twice `max_connections` plus headroom, capped by the
/// hard limit (which only root may raise); warns when the cap leaves too few.
#[cfg(unix)]
pub fn raise(max_connections: usize) {
    let want = (max_connections as u64).saturating_mul(2).saturating_add(HEADROOM);
    let limit = raise_to(want);
    if limit < want {
        tracing::warn!(
            limit,
            max_connections,
            "the open-file limit is below what limits.max_connections needs (raise the hard limit, e.g. LimitNOFILE=)"
        );
    }
}

/// Raise the soft `RLIMIT_NOFILE` towards `want`, capped by the hard limit: the limit now.
#[cfg(unix)]
pub fn raise_to(want: u64) -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 0 };
    let target = want.min(hard);
    if target > soft {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
            tracing::warn!(error = %e, soft, "could not raise the open-file limit");
            return soft;
        }
    }
    target.max(soft)
}

#[cfg(not(unix))]
pub fn raise(_max_connections: usize) {}

#[cfg(not(unix))]
pub fn raise_to(_want: u64) -> u64 {
    0
}
