//! The KV-cache mock's cache contents: a radix tree of the token sequences the server processed
//! recently, sized in tokens, with least-recently-used eviction from the leaves.
//!
//! Matching is per token, as llama.cpp matches a slot's cache, so a continued conversation hits
//! exactly the previous prompt and reply. Shared prefixes are stored once (as vLLM's and SGLang's
//! prefix caches do), so a long system prompt many users share costs its tokens once.
//!
//! Eviction: every lookup and insert stamps the nodes on its path with a fresh tick, so a node is
//! never older than any of its descendants; when over capacity, the least recently used *leaf* is
//! trimmed from its end (wholly removed if more must go). A prefix therefore never leaves the
//! cache before its extensions, and a sequence larger than the whole cache keeps its head.
//! Finding that leaf scans the nodes: a mock's cache holds few enough sequences for that.

use std::collections::HashMap;

const ROOT: usize = 0;

struct Node {
    /// The edge's tokens (empty only for the root).
    tokens: Vec<u32>,
    /// Children by their first token.
    children: HashMap<u32, usize>,
    parent: usize,
    last_used: u64,
}

impl Node {
    fn new(tokens: Vec<u32>, parent: usize, last_used: u64) -> Self {
        Node { tokens, children: HashMap::new(), parent, last_used }
    }
}

/// Token radix tree with LRU eviction (see the module docs).
pub(crate) struct PrefixCache {
    capacity: usize,
    /// Arena of nodes; `None` marks a freed slot, reused through `free`.
    nodes: Vec<Option<Node>>,
    free: Vec<usize>,
    /// Tokens held (the sum of every edge's length).
    len: usize,
    clock: u64,
    /// Tokens evicted so far.
    evicted: u64,
}

impl PrefixCache {
    pub(crate) fn new(capacity: usize) -> Self {
        PrefixCache {
            capacity,
            nodes: vec![Some(Node::new(Vec::new(), ROOT, 0))],
            free: Vec::new(),
            len: 0,
            clock: 0,
            evicted: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Tokens held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Forgets everything (a restarted server).
    pub(crate) fn clear(&mut self) {
        *self = PrefixCache::new(self.capacity);
    }

    fn node(&self, i: usize) -> Option<&Node> {
        self.nodes.get(i).and_then(Option::as_ref)
    }

    fn node_mut(&mut self, i: usize) -> Option<&mut Node> {
        self.nodes.get_mut(i).and_then(Option::as_mut)
    }

    /// Follows `seq` from the root, stamping each node reached with `tick`: returns the tokens
    /// matched, the last node reached and how many of its edge's tokens matched.
    fn walk(&mut self, seq: &[u32], tick: u64) -> (usize, usize, usize) {
        let (mut at, mut pos) = (ROOT, 0);
        loop {
            let Some(&child) = seq.get(pos).and_then(|t| self.node(at).and_then(|n| n.children.get(t))) else {
                return (pos, at, self.node(at).map_or(0, |n| n.tokens.len()));
            };
            let Some(node) = self.node_mut(child) else {
                return (pos, at, 0);
            };
            node.last_used = tick;
            let common = node.tokens.iter().zip(&seq[pos..]).take_while(|(a, b)| a == b).count();
            pos += common;
            if common < node.tokens.len() {
                return (pos, child, common);
            }
            at = child;
        }
    }

    /// Length of the longest cached prefix of `seq`; marks it used.
    pub(crate) fn longest_prefix(&mut self, seq: &[u32]) -> usize {
        self.clock += 1;
        self.walk(seq, self.clock).0
    }

    /// Caches `seq` (marking it the most recently used), then evicts down to capacity.
    pub(crate) fn insert(&mut self, seq: &[u32]) {
        self.clock += 1;
        let tick = self.clock;
        let (pos, mut at, matched) = self.walk(seq, tick);
        if pos == seq.len() {
            return self.evict();
        }
        if self.node(at).is_some_and(|n| matched < n.tokens.len()) {
            at = self.split(at, matched, tick);
        }
        let leaf = self.alloc(Node::new(seq[pos..].to_vec(), at, tick));
        if let Some(parent) = self.node_mut(at) {
            parent.children.insert(seq[pos], leaf);
        }
        self.len += seq.len() - pos;
        self.evict();
    }

    /// Splits `node`'s edge after `at` tokens; returns the new node holding the edge's head.
    fn split(&mut self, node: usize, at: usize, tick: u64) -> usize {
        let Some(n) = self.node_mut(node) else {
            return node;
        };
        let tail = n.tokens.split_off(at);
        let head = std::mem::replace(&mut n.tokens, tail);
        let parent = n.parent;
        let (head_key, tail_key) = (head[0], n.tokens[0]);
        let mut mid = Node::new(head, parent, tick);
        mid.children.insert(tail_key, node);
        let mid = self.alloc(mid);
        if let Some(n) = self.node_mut(node) {
            n.parent = mid;
        }
        if let Some(p) = self.node_mut(parent) {
            p.children.insert(head_key, mid);
        }
        mid
    }

    fn alloc(&mut self, node: Node) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = Some(node);
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        }
    }

    /// Trims least-recently-used leaves until the cache fits its capacity.
    fn evict(&mut self) {
        while self.len > self.capacity {
            let lru = self
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(i, n)| n.as_ref().map(|n| (i, n)))
                .filter(|(i, n)| *i != ROOT && n.children.is_empty())
                .min_by_key(|(_, n)| n.last_used)
                .map(|(i, _)| i);
            let Some(leaf) = lru else {
                return;
            };
            let excess = self.len - self.capacity;
            let Some(node) = self.node_mut(leaf) else {
                return;
            };
            if node.tokens.len() > excess {
                // The edge keeps its first token, so its key in the parent stays right.
                let keep = node.tokens.len() - excess;
                node.tokens.truncate(keep);
                self.len -= excess;
                self.evicted += excess as u64;
                continue;
            }
            let (gone, key, parent) = (node.tokens.len(), node.tokens.first().copied(), node.parent);
            self.nodes[leaf] = None;
            self.free.push(leaf);
            if let (Some(key), Some(p)) = (key, self.node_mut(parent)) {
                p.children.remove(&key);
            }
            self.len -= gone;
            self.evicted += gone as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(range: std::ops::Range<u32>) -> Vec<u32> {
        range.collect()
    }

    #[test]
    fn matches_per_token_and_shares_prefixes() {
        let mut c = PrefixCache::new(1000);
        assert_eq!(c.longest_prefix(&seq(0..10)), 0);
        c.insert(&seq(0..10));
        assert_eq!(c.len(), 10);
        assert_eq!(c.longest_prefix(&seq(0..20)), 10);
        assert_eq!(c.longest_prefix(&seq(0..5)), 5);
        // A sequence diverging inside an edge splits it; the shared head is stored once.
        let other: Vec<u32> = (0..4).chain(100..106).collect();
        c.insert(&other);
        assert_eq!(c.len(), 16);
        assert_eq!(c.longest_prefix(&other), 10);
        assert_eq!(c.longest_prefix(&seq(0..10)), 10);
        assert_eq!(c.longest_prefix(&[0, 1, 2, 3, 7]), 4);
        assert_eq!(c.longest_prefix(&[9]), 0);
        // Inserting a cached prefix adds nothing.
        c.insert(&seq(0..3));
        assert_eq!(c.len(), 16);
    }

    #[test]
    fn evicts_least_recently_used_leaves_first() {
        let mut c = PrefixCache::new(40);
        let a = seq(0..10);
        let b = seq(100..110);
        let shared: Vec<u32> = (0..5).chain(200..210).collect();
        c.insert(&a);
        c.insert(&b);
        c.insert(&shared);
        assert_eq!(c.len(), 30);
        // Using `a` leaves `b` the least recently used; overflowing by 3 trims `b`'s end.
        assert_eq!(c.longest_prefix(&a), 10);
        c.insert(&seq(300..313));
        assert_eq!((c.len(), c.evicted()), (40, 3));
        // Overflowing by 10 removes what is left of `b` (7), then trims the next LRU leaf by 3.
        c.insert(&seq(400..410));
        assert_eq!((c.len(), c.evicted()), (40, 13));
        assert_eq!(c.longest_prefix(&b), 0);
        assert_eq!(c.longest_prefix(&shared), 12);
        assert_eq!(c.longest_prefix(&a), 10);
        assert_eq!(c.longest_prefix(&seq(300..313)), 13);
        assert_eq!(c.longest_prefix(&seq(400..410)), 10);
    }

    #[test]
    fn a_prefix_outlives_its_extensions() {
        let mut c = PrefixCache::new(12);
        c.insert(&seq(0..8));
        c.insert(&seq(0..12));
        // The head 0..8 is as recent as its extension 8..12, which is the only leaf: it goes first.
        c.insert(&seq(50..54));
        assert_eq!(c.longest_prefix(&seq(0..12)), 8);
        assert_eq!(c.longest_prefix(&seq(50..54)), 4);
    }

    #[test]
    fn a_sequence_larger_than_the_cache_keeps_its_head_and_zero_holds_nothing() {
        let mut c = PrefixCache::new(8);
        c.insert(&seq(0..20));
        assert_eq!((c.len(), c.longest_prefix(&seq(0..20))), (8, 8));
        c.clear();
        assert_eq!((c.len(), c.longest_prefix(&seq(0..20))), (0, 0));
        let mut none = PrefixCache::new(0);
        none.insert(&seq(0..20));
        assert_eq!((none.len(), none.longest_prefix(&seq(0..20))), (0, 0));
    }
}
