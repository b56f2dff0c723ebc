//! Which backend holds which block, by tier, as the engines' events say: applied batch by batch,
//! looked up with a prompt's block keys for the longest run of consecutive blocks each backend
//! holds.
//!
//! One map from block key to the backends holding it (a bit mask per tier, 64 backends at most)
//! answers a lookup in one pass over the prompt's keys, stopping where the last backend's run
//! ends. Per backend, a map from the engine's hash to the block key resolves removals. A block
//! under which two different blocks were stored is a branch point: a prompt whose run ends there
//! only shares a prefix others share (a common system prompt), the way the estimate's index marks
//! it.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use crate::keys::{self, BlockKey};
use crate::wire::{EngineHash, Event, Stored, Tier};

/// Backends with an id beyond this are not indexed (one bit each).
pub const MAX_BACKENDS: usize = 64;

#[derive(Default)]
struct Held {
    /// Per tier, the backends holding the block there.
    tiers: [u64; 3],
    /// The first block seen stored under this one, and whether another followed.
    child: Option<BlockKey>,
    branch: bool,
}

impl Held {
    fn any(&self) -> u64 {
        self.tiers[0] | self.tiers[1] | self.tiers[2]
    }
}

#[derive(Default)]
struct BackendBlocks {
    /// The engine's hash (and cache group) → the block's key and the tiers it is held in here.
    by_engine: HashMap<(EngineHash, u32), (BlockKey, u8)>,
    /// Blocks held here, per tier.
    counts: [usize; 3],
}

#[derive(Default)]
struct Inner {
    blocks: HashMap<BlockKey, Held>,
    backends: Vec<BackendBlocks>,
    /// LoRA adapters some engine stored blocks for: a request naming one is keyed under it.
    loras: HashSet<String>,
}

/// What applying a batch did, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Events that changed or confirmed the index.
    pub applied: u64,
    /// Stored blocks whose parent the index does not know (stored before the subscription began
    /// and beyond the replay buffer): they cannot be keyed, so they are skipped.
    pub orphaned: u64,
}

/// How much of a prompt one backend holds, from its events.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Run {
    /// Consecutive blocks from the prompt's start held in any tier.
    pub blocks: usize,
    /// The same run weighted by tier (a GPU block 1, a CPU one ½, further ¼).
    pub score: f64,
}

/// Every event-publishing backend's blocks.
#[derive(Default)]
pub struct KvIndex {
    inner: RwLock<Inner>,
}

impl KvIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one batch of `backend`'s events; `block_size` is the engine's, for events that do
    /// not say.
    pub fn apply(&self, backend: usize, block_size: usize, events: &[Event]) -> Applied {
        let mut done = Applied::default();
        if backend >= MAX_BACKENDS {
            return done;
        }
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if inner.backends.len() <= backend {
            inner.backends.resize_with(backend + 1, BackendBlocks::default);
        }
        for event in events {
            match event {
                Event::Stored(stored) => {
                    if inner.store(backend, block_size, stored) {
                        done.applied += 1;
                    } else {
                        done.orphaned += 1;
                    }
                }
                Event::Removed { block_hashes, tier, group } => {
                    for hash in block_hashes {
                        inner.remove(backend, (*hash, *group), Some(*tier));
                    }
                    done.applied += 1;
                }
                Event::Cleared => {
                    inner.clear(backend);
                    done.applied += 1;
                }
                Event::Other => {}
            }
        }
        done
    }

    /// Forgets everything `backend` held (it restarted, or its events can no longer be trusted).
    pub fn clear(&self, backend: usize) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if backend < inner.backends.len() {
            inner.clear(backend);
        }
    }

    /// For each of `backends`, the run of `keys` (a prompt's block keys, from its start) it holds.
    pub fn runs(&self, keys: &[BlockKey], backends: &[usize]) -> Vec<Run> {
        let mut runs = vec![Run::default(); backends.len()];
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let mut alive: u64 = backends.iter().filter(|&&b| b < MAX_BACKENDS).fold(0, |m, &b| m | 1 << b);
        for key in keys {
            let Some(held) = inner.blocks.get(key) else { break };
            alive &= held.any();
            if alive == 0 {
                break;
            }
            for (run, &b) in runs.iter_mut().zip(backends) {
                if b < MAX_BACKENDS && alive & (1 << b) != 0 {
                    let tier = Tier::ALL.into_iter().find(|t| held.tiers[*t as usize] & (1 << b) != 0);
                    run.blocks += 1;
                    run.score += tier.map_or(0.0, Tier::weight);
                }
            }
        }
        runs
    }

    /// Whether some backend holds block `key` (in any tier).
    pub fn held_anywhere(&self, key: BlockKey) -> bool {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.blocks.get(&key).is_some_and(|h| h.any() != 0)
    }

    /// Whether a run ending at block `key`, where the prompt goes on with block `next`, only
    /// shares a prefix with another sequence: something other than `next` was stored under
    /// `key` (a second conversation after a common system prompt), or two different blocks
    /// were. A continuation ends where its previous turn's blocks end: nothing else under it.
    pub fn ends_shared(&self, key: BlockKey, next: Option<BlockKey>) -> bool {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.blocks.get(&key).is_some_and(|h| h.branch || h.child.is_some_and(|c| Some(c) != next))
    }

    /// Whether some engine holds blocks for the LoRA adapter `name`.
    pub fn knows_lora(&self, name: &str) -> bool {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        !inner.loras.is_empty() && inner.loras.contains(name)
    }

    /// Blocks `backend` holds, per tier (`Tier::ALL` order).
    pub fn counts(&self, backend: usize) -> [usize; 3] {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.backends.get(backend).map_or([0; 3], |b| b.counts)
    }
}

impl Inner {
    /// Keys and records `stored`'s blocks; false when its parent is unknown here.
    fn store(&mut self, backend: usize, default_size: usize, stored: &Stored) -> bool {
        let size = stored.block_size.unwrap_or(default_size).max(1);
        let lora = stored.lora_name.as_deref();
        let mut parent = match stored.parent {
            None => keys::root(lora),
            Some(hash) => match self.backends[backend].by_engine.get(&(hash, stored.group)) {
                Some(&(key, _)) => key,
                None => return false,
            },
        };
        if let Some(name) = lora {
            if !self.loras.contains(name) {
                self.loras.insert(name.to_owned());
            }
        }
        for (i, (hash, tokens)) in stored.block_hashes.iter().zip(stored.token_ids.chunks(size)).enumerate() {
            if tokens.len() < size {
                break;
            }
            let extra = stored.extra_keys.get(i).and_then(Option::as_deref);
            let key = keys::next(parent, tokens, extra, stored.group);
            let above = self.blocks.entry(parent).or_default();
            match above.child {
                None => above.child = Some(key),
                Some(child) if child != key => above.branch = true,
                Some(_) => {}
            }
            self.hold(backend, (*hash, stored.group), key, stored.tier);
            parent = key;
        }
        true
    }

    fn hold(&mut self, backend: usize, engine: (EngineHash, u32), key: BlockKey, tier: Tier) {
        let bit = 1u64 << backend;
        let here = &mut self.backends[backend];
        let entry = here.by_engine.entry(engine).or_insert((key, 0));
        if entry.0 != key {
            // The engine reused a hash for other content: the old block is gone.
            let old = *entry;
            *entry = (key, 0);
            for t in Tier::ALL.into_iter().filter(|t| old.1 & (1 << *t as u8) != 0) {
                here.counts[t as usize] -= 1;
                if let Some(h) = self.blocks.get_mut(&old.0) {
                    h.tiers[t as usize] &= !bit;
                }
            }
        }
        let mask = 1u8 << tier as u8;
        if entry.1 & mask == 0 {
            entry.1 |= mask;
            here.counts[tier as usize] += 1;
        }
        self.blocks.entry(key).or_default().tiers[tier as usize] |= bit;
    }

    /// `backend` no longer holds the block in `tier` (in any tier when `None`).
    fn remove(&mut self, backend: usize, engine: (EngineHash, u32), tier: Option<Tier>) {
        let bit = 1u64 << backend;
        let here = &mut self.backends[backend];
        let Some(entry) = here.by_engine.get_mut(&engine) else { return };
        let (key, held) = *entry;
        let gone: u8 = match tier {
            Some(t) => held & (1 << t as u8),
            None => held,
        };
        for t in Tier::ALL.into_iter().filter(|t| gone & (1 << *t as u8) != 0) {
            here.counts[t as usize] -= 1;
        }
        entry.1 &= !gone;
        if entry.1 == 0 {
            here.by_engine.remove(&engine);
        }
        if let Some(h) = self.blocks.get_mut(&key) {
            for t in Tier::ALL.into_iter().filter(|t| gone & (1 << *t as u8) != 0) {
                h.tiers[t as usize] &= !bit;
            }
            if h.any() == 0 && !h.branch {
                self.blocks.remove(&key);
            }
        }
    }

    fn clear(&mut self, backend: usize) {
        let engines: Vec<(EngineHash, u32)> = self.backends[backend].by_engine.keys().copied().collect();
        for engine in engines {
            self.remove(backend, engine, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(hashes: &[u64], parent: Option<u64>, tokens: &[u32], tier: Tier) -> Event {
        Event::Stored(Stored {
            block_hashes: hashes.to_vec(),
            parent,
            token_ids: tokens.to_vec(),
            block_size: Some(4),
            tier,
            lora_name: None,
            extra_keys: Vec::new(),
            group: 0,
        })
    }

    #[test]
    fn a_prompt_is_found_where_its_longest_run_of_blocks_is_held_and_lost_when_removed() {
        let index = KvIndex::new();
        let prompt: Vec<u32> = (0..16).collect();
        let keys = keys::chain(&prompt, 4, None);
        // Backend 0 holds three blocks (stored in two events), backend 1 the first one only.
        index.apply(0, 4, &[stored(&[10, 11], None, &prompt[..8], Tier::Gpu)]);
        index.apply(0, 4, &[stored(&[12], Some(11), &prompt[8..12], Tier::Gpu)]);
        index.apply(1, 4, &[stored(&[7], None, &prompt[..4], Tier::Cpu)]);
        let runs = index.runs(&keys, &[0, 1, 2]);
        assert_eq!(runs.iter().map(|r| r.blocks).collect::<Vec<_>>(), vec![3, 1, 0]);
        assert_eq!(runs[1].score, 0.5, "a CPU block counts half");
        assert_eq!(index.counts(0), [3, 0, 0]);
        // Removing the middle block cuts backend 0's run there.
        index.apply(0, 4, &[Event::Removed { block_hashes: vec![11], tier: Tier::Gpu, group: 0 }]);
        assert_eq!(index.runs(&keys, &[0])[0].blocks, 1);
        index.apply(1, 4, &[Event::Cleared]);
        assert_eq!(index.runs(&keys, &[1])[0].blocks, 0);
        assert_eq!(index.counts(1), [0, 0, 0]);
    }

    #[test]
    fn an_unknown_parent_is_skipped_and_a_shared_prefix_is_a_branch() {
        let index = KvIndex::new();
        let done = index.apply(0, 4, &[stored(&[5], Some(404), &[1, 2, 3, 4], Tier::Gpu)]);
        assert_eq!(done, Applied { applied: 0, orphaned: 1 });
        let system = [9u32, 9, 9, 9];
        index.apply(0, 4, &[stored(&[1, 2], None, &[&system[..], &[1, 1, 1, 1]].concat(), Tier::Gpu)]);
        let keys = keys::chain(&system, 4, None);
        let first = keys::chain(&[&system[..], &[1, 1, 1, 1]].concat(), 4, None)[1];
        assert!(!index.ends_shared(keys[0], Some(first)), "the conversation's own continuation");
        assert!(index.ends_shared(keys[0], Some(404)), "another conversation after the same system prompt");
        index.apply(0, 4, &[stored(&[3], Some(1), &[2, 2, 2, 2], Tier::Gpu)]);
        assert!(index.ends_shared(keys[0], Some(first)));
    }
}
