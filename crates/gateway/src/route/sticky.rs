//! Sticky sessions: a conversation's requests go to the backend its first request went to, so
//! its KV cache stays warm. Keyed by (model, session key); entries expire after an idle TTL and
//! the table is capped (the least recently used entries go first when it is full).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct StickyTable {
    ttl: Duration,
    max_entries: usize,
    entries: Mutex<HashMap<(String, String), Pin>>,
}

#[derive(Clone, Copy)]
struct Pin {
    backend: usize,
    used: Instant,
}

impl StickyTable {
    pub fn new(ttl: Duration, max_entries: usize) -> StickyTable {
        StickyTable { ttl, max_entries: max_entries.max(1), entries: Mutex::new(HashMap::new()) }
    }

    /// The backend `session` is pinned to for `model`, if the pin is still fresh.
    pub fn get(&self, model: &str, session: &str, now: Instant) -> Option<usize> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // Borrowed lookup without allocating the key: scan only on a miss would be worse, so
        // build the tuple key once (two short strings).
        let pin = entries.get(&(model.to_owned(), session.to_owned()))?;
        (now.duration_since(pin.used) < self.ttl).then_some(pin.backend)
    }

    /// Pin (or re-pin) `session` to `backend`, refreshing its idle clock.
    pub fn pin(&self, model: &str, session: &str, backend: usize, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.max_entries && !entries.contains_key(&(model.to_owned(), session.to_owned())) {
            let ttl = self.ttl;
            entries.retain(|_, pin| now.duration_since(pin.used) < ttl);
            if entries.len() >= self.max_entries {
                // Still full of live sessions: drop the least recently used tenth.
                let mut ages: Vec<Instant> = entries.values().map(|p| p.used).collect();
                let cut = ages.len() / 10;
                let (_, oldest_kept, _) = ages.select_nth_unstable(cut);
                let cutoff = *oldest_kept;
                entries.retain(|_, pin| pin.used >= cutoff);
            }
        }
        entries.insert((model.to_owned(), session.to_owned()), Pin { backend, used: now });
    }

    /// Sessions pinned now (for tests and metrics).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_expire_and_are_scoped_to_the_model() {
        let t = StickyTable::new(Duration::from_secs(60), 100);
        let now = Instant::now();
        t.pin("m", "s1", 2, now);
        assert_eq!(t.get("m", "s1", now + Duration::from_secs(59)), Some(2));
        assert_eq!(t.get("other", "s1", now), None, "scoped to the model");
        assert_eq!(t.get("m", "s1", now + Duration::from_secs(61)), None, "idle TTL");
        t.pin("m", "s1", 0, now + Duration::from_secs(61));
        assert_eq!(t.get("m", "s1", now + Duration::from_secs(62)), Some(0), "re-pinned");
    }

    #[test]
    fn the_table_is_capped() {
        let t = StickyTable::new(Duration::from_secs(3600), 50);
        let start = Instant::now();
        for i in 0..200 {
            t.pin("m", &format!("s{i}"), i % 3, start + Duration::from_millis(i as u64));
        }
        assert!(t.len() <= 50, "{}", t.len());
        let last = start + Duration::from_millis(199);
        assert_eq!(t.get("m", "s199", last), Some(199 % 3), "the newest session survives");
    }
}
