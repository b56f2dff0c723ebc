//! Prefix affinity: an approximate index of the prompt prefixes the gateway recently sent to each
//! backend, so a request can go where the longest part of its prompt is probably still in the
//! backend's KV cache.
//!
//! A prompt (the raw bytes of its system prompt and messages, which clients re-send unchanged
//! turn after turn) is cut into blocks of [`BLOCK_BYTES`]; block k is identified by the hash of
//! everything up to its end (`chain`), so two prompts share block k's hash only if they share the
//! whole prefix. The index maps a block hash to the set of backends it was sent to (a bit mask)
//! and keeps, per backend, its blocks in the order they were added, dropping the oldest beyond
//! the backend's cache capacity. Since a backend holding block k held every block before it when
//! it was sent, the longest cached prefix is found by binary search over the chain: O(log n)
//! lookups per backend, whatever the prompt's length.
//!
//! Shared prefixes. A block where two different prompts went on differently (a system prompt
//! every conversation starts with) is marked as a branch point. A request whose longest cached
//! prefix ends at a branch point is a new conversation that only shares that prefix, so load may
//! decide where it goes; one whose match ends inside its own history is a continuation.
//!
//! Lost blocks. Blocks a backend no longer holds (dropped beyond its capacity, or forgotten when
//! it restarted) are remembered, newest first and bounded, with the backend that lost them: a
//! prompt that matches nowhere but runs through a lost block is a conversation whose cache was
//! evicted, not a new one (`switchyard_affinity_given_up_total{reason="evicted"}`).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

/// Bytes per block: about 16 tokens of English text or JSON.
pub const BLOCK_BYTES: usize = 64;
/// Approximate bytes per token, to size a backend's share of the index from its token capacity.
pub const BYTES_PER_TOKEN: usize = 4;
/// Backends with an id beyond this do not take part (one bit each in a `u64`).
pub const MAX_BACKENDS: usize = 64;
/// Lost blocks remembered (the newest): about 16 bytes each.
const LOST_CAP: usize = 8192;
/// How many blocks from a prompt's end are looked up among the lost ones (a previous turn's last
/// block sits a reply and a question before the end).
const LOST_SCAN: usize = 32;

/// The chained block hashes of `parts` read as one byte stream: entry k identifies the prefix
/// made of the first k + 1 whole blocks. A partial last block is not included (it cannot be
/// matched reliably: the next turn extends it).
pub fn chain(parts: &[&[u8]]) -> Vec<u64> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(total / BLOCK_BYTES);
    let mut hasher = PrefixHasher::default();
    // Whole blocks only reach the hasher, so where the parts split does not matter.
    let mut block = [0u8; BLOCK_BYTES];
    let mut in_block = 0;
    for part in parts {
        let mut rest: &[u8] = part;
        while !rest.is_empty() {
            if in_block == 0 && rest.len() >= BLOCK_BYTES {
                hasher.write(&rest[..BLOCK_BYTES]);
                out.push(hasher.finish());
                rest = &rest[BLOCK_BYTES..];
                continue;
            }
            let take = (BLOCK_BYTES - in_block).min(rest.len());
            block[in_block..in_block + take].copy_from_slice(&rest[..take]);
            rest = &rest[take..];
            in_block += take;
            if in_block == BLOCK_BYTES {
                hasher.write(&block);
                out.push(hasher.finish());
                in_block = 0;
            }
        }
    }
    out
}

/// One digest of `parts` read as one byte stream, with the hash the chain uses (the same on every
/// instance of a fleet: no per-process seed).
pub fn digest(parts: &[&[u8]]) -> u64 {
    let mut hasher = PrefixHasher::default();
    for part in parts {
        hasher.write(part);
    }
    hasher.finish()
}

/// A fast, non-cryptographic running hash (multiply-xorshift over 8-byte words). Collisions only
/// cost a wrong routing guess, never correctness; the state carries over blocks, so each block's
/// digest covers the whole prefix.
#[derive(Default)]
struct PrefixHasher {
    state: u64,
}

const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for PrefixHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let w = u64::from_le_bytes([word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7]]);
            self.state = (self.state ^ w).wrapping_mul(MULTIPLIER).rotate_left(29);
        }
        for &b in words.remainder() {
            self.state = (self.state ^ u64::from(b)).wrapping_mul(MULTIPLIER).rotate_left(29);
        }
    }

    fn finish(&self) -> u64 {
        // Final avalanche (splitmix64's), so similar states give unrelated digests.
        let mut z = self.state.wrapping_add(MULTIPLIER);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The keys are hashes already: use them as they are.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type BlockMap = HashMap<u64, Block, BuildHasherDefault<Identity>>;

#[derive(Default, Clone, Copy)]
struct Block {
    /// Backends the block was sent to, one bit per backend id.
    mask: u64,
    /// Some prompt went on past this block.
    has_child: bool,
    /// Prompts went on past this block in different ways (a shared prefix).
    branch: bool,
}

pub struct PrefixIndex {
    inner: Mutex<Inner>,
}

struct Inner {
    /// Block hash → which backends hold it, and whether prompts branch there.
    holders: BlockMap,
    /// Per backend: its blocks, oldest first, and how many it may keep.
    order: Vec<VecDeque<u64>>,
    capacity: Vec<usize>,
    /// Lost block hash → the backend that lost it, and those hashes oldest first.
    lost: LostMap,
    lost_order: VecDeque<u64>,
}

type LostMap = HashMap<u64, u8, BuildHasherDefault<Identity>>;

impl Inner {
    fn lose(&mut self, hash: u64, bit: u64, id: usize) {
        remove_holder(&mut self.holders, hash, bit);
        if self.lost.insert(hash, id as u8).is_none() {
            self.lost_order.push_back(hash);
        }
        while self.lost_order.len() > LOST_CAP {
            let Some(old) = self.lost_order.pop_front() else { break };
            self.lost.remove(&old);
        }
    }
}

impl PrefixIndex {
    /// `capacity_tokens[id]`: how many prompt tokens backend `id` keeps cached.
    pub fn new(capacity_tokens: &[usize]) -> PrefixIndex {
        let n = capacity_tokens.len().min(MAX_BACKENDS);
        let capacity = capacity_tokens[..n].iter().map(|t| (t * BYTES_PER_TOKEN / BLOCK_BYTES).max(1)).collect();
        PrefixIndex {
            inner: Mutex::new(Inner {
                holders: BlockMap::default(),
                order: vec![VecDeque::new(); n],
                capacity,
                lost: LostMap::default(),
                lost_order: VecDeque::new(),
            }),
        }
    }

    /// For each backend id in `backends`, how many leading blocks of `chain` it holds.
    pub fn matches(&self, chain: &[u64], backends: &[usize]) -> Vec<usize> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        backends
            .iter()
            .map(|&id| {
                if id >= MAX_BACKENDS || chain.is_empty() {
                    return 0;
                }
                let bit = 1u64 << id;
                let held = |k: usize| inner.holders.get(&chain[k]).is_some_and(|b| b.mask & bit != 0);
                // Largest k with blocks 0..k held: binary search on the monotone "held" predicate.
                let (mut lo, mut hi) = (0, chain.len());
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if held(mid - 1) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            })
            .collect()
    }

    /// Record that `chain` was sent to backend `id` (its first `known` blocks are already held).
    pub fn insert(&self, id: usize, chain: &[u64], known: usize) {
        if id >= MAX_BACKENDS {
            return;
        }
        let bit = 1u64 << id;
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Inner { holders, order, .. } = &mut *inner;
        if known > 0 && known < chain.len() {
            // This prompt leaves the cached path after block known - 1: if another prompt already
            // went on from there, the two branch at that block.
            if let Some(at) = holders.get_mut(&chain[known - 1]) {
                at.branch |= at.has_child;
                at.has_child = true;
            }
        }
        for (k, &hash) in chain.iter().enumerate().skip(known) {
            let block = holders.entry(hash).or_default();
            block.has_child |= k + 1 < chain.len();
            if block.mask & bit == 0 {
                block.mask |= bit;
                order[id].push_back(hash);
            }
        }
        while inner.order[id].len() > inner.capacity[id] {
            let Some(old) = inner.order[id].pop_front() else { break };
            inner.lose(old, bit, id);
        }
    }

    /// The backend that lost a block of `chain` past its first `matched` (the first block no
    /// backend matched, or one of the last [`LOST_SCAN`]): this prompt's cache was evicted.
    pub fn lost_by(&self, chain: &[u64], matched: usize) -> Option<usize> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.lost.is_empty() {
            return None;
        }
        let tail = chain.len().saturating_sub(LOST_SCAN).max(matched);
        let probes = chain.get(matched).into_iter().chain(chain.get(tail..).unwrap_or_default().iter().rev());
        probes.filter_map(|h| inner.lost.get(h)).map(|&id| usize::from(id)).next()
    }

    /// Whether prompts branch after `block` (it is a prefix several conversations share).
    pub fn is_shared(&self, block: u64) -> bool {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).holders.get(&block).is_some_and(|b| b.branch)
    }

    /// Forget everything backend `id` held (it restarted, or went down: its cache is gone).
    pub fn forget(&self, id: usize) {
        if id >= MAX_BACKENDS {
            return;
        }
        let bit = 1u64 << id;
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let blocks = std::mem::take(&mut inner.order[id]);
        for hash in blocks {
            inner.lose(hash, bit, id);
        }
    }

    /// Blocks held by backend `id` (for tests and metrics).
    pub fn held(&self, id: usize) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).order.get(id).map_or(0, VecDeque::len)
    }
}

fn remove_holder(holders: &mut BlockMap, hash: u64, bit: u64) {
    if let Some(block) = holders.get_mut(&hash) {
        block.mask &= !bit;
        if block.mask == 0 {
            holders.remove(&hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| b'a' + ((i as u8).wrapping_mul(7).wrapping_add(seed) % 26)).collect()
    }

    #[test]
    fn chains_identify_prefixes_across_part_boundaries() {
        let whole = text(1000, 1);
        let a = chain(&[&whole]);
        let b = chain(&[&whole[..100], &whole[100..]]);
        assert_eq!(a, b, "the same bytes, however split, give the same chain");
        assert_eq!(a.len(), 1000 / BLOCK_BYTES);
        let mut longer = whole.clone();
        longer.extend(text(500, 2));
        let c = chain(&[&longer]);
        assert_eq!(&c[..a.len()], &a[..], "a longer prompt extends the chain");
        let mut changed = whole.clone();
        changed[10] ^= 1;
        let d = chain(&[&changed]);
        assert!(d.iter().zip(&a).all(|(x, y)| x != y), "a change early on changes every later block");
    }

    #[test]
    fn longest_prefix_per_backend() {
        let index = PrefixIndex::new(&[1 << 20, 1 << 20, 1 << 20]);
        let system = text(640, 3); // 10 blocks shared by everyone
        let mut convo = system.clone();
        convo.extend(text(640, 4)); // 10 more blocks of one conversation
        index.insert(0, &chain(&[&system]), 0);
        index.insert(1, &chain(&[&convo]), 0);
        let mut next_turn = convo.clone();
        next_turn.extend(text(320, 5));
        let c = chain(&[&next_turn]);
        assert_eq!(index.matches(&c, &[0, 1, 2]), vec![10, 20, 0]);
        assert_eq!(index.matches(&[], &[0, 1]), vec![0, 0]);
    }

    #[test]
    fn a_prefix_two_conversations_went_on_from_is_shared_and_a_continuation_is_not() {
        let index = PrefixIndex::new(&[1 << 20]);
        let system = text(640, 3);
        let convo = |seed| {
            let mut c = system.clone();
            c.extend(text(640, seed));
            c
        };
        let (one, two) = (chain(&[&convo(4)]), chain(&[&convo(5)]));
        index.insert(0, &one, 0);
        let last_system_block = one[9];
        assert!(!index.is_shared(last_system_block), "one conversation so far");
        // The same conversation's next turn extends it: no branch.
        let mut next = convo(4);
        next.extend(text(320, 6));
        let next = chain(&[&next]);
        index.insert(0, &next, index.matches(&next, &[0])[0]);
        assert!(!index.is_shared(one[19]));
        // A second conversation leaves the first after the system prompt: that block is shared.
        index.insert(0, &two, index.matches(&two, &[0])[0]);
        assert!(index.is_shared(last_system_block));
    }

    #[test]
    fn capacity_evicts_the_oldest_blocks_and_forget_clears_a_backend() {
        // Room for 8 blocks.
        let index = PrefixIndex::new(&[8 * BLOCK_BYTES / BYTES_PER_TOKEN]);
        let first = chain(&[&text(6 * BLOCK_BYTES, 1)]);
        let second = chain(&[&text(6 * BLOCK_BYTES, 9)]);
        index.insert(0, &first, 0);
        index.insert(0, &second, 0);
        assert_eq!(index.held(0), 8);
        assert_eq!(index.matches(&second, &[0]), vec![6], "the newest prompt is whole");
        // The oldest blocks went first: the first prompt's head is gone, so nothing of it matches.
        assert_eq!(index.matches(&first, &[0]), vec![0]);
        assert_eq!(index.lost_by(&first, 0), Some(0), "the first prompt's cache was evicted");
        assert_eq!(index.lost_by(&chain(&[&text(6 * BLOCK_BYTES, 5)]), 0), None, "a new prompt lost nothing");
        index.forget(0);
        assert_eq!((index.held(0), index.matches(&second, &[0])[0]), (0, 0));
        assert_eq!(index.lost_by(&second, 0), Some(0), "forgotten (a restart) counts as lost");
    }
}
