//! The nearest-neighbour index of one partition: an exact scan while it is small (a few thousand
//! vectors scan faster than a graph is searched), a hierarchical navigable small-world graph
//! (hnsw_rs) once it grows. Removed entries are left as tombstones the search skips; the
//! partition is rebuilt when they outnumber the living.

use std::collections::HashMap;

use hnsw_rs::anndists::dist::Distance;
use hnsw_rs::hnsw::Hnsw;

use crate::store::dot;

/// Up to this many vectors, an exact scan (about 0.1 ms at 384 dimensions).
pub const FLAT_MAX: usize = 2048;
/// Graph links per node and the breadth of its construction and search.
const LINKS: usize = 16;
const EF_CONSTRUCTION: usize = 100;
const EF_SEARCH: usize = 64;
const LAYERS: usize = 16;

/// Cosine distance of unit vectors, `1 - a·b`, never below zero (hnsw_rs's own `DistDot`
/// asserts on the rounding of two equal vectors, which must never take the gateway down).
#[derive(Default, Clone, Copy)]
pub struct UnitCosine;

impl Distance<f32> for UnitCosine {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - dot(a, b)).max(0.0)
    }
}

pub struct PartitionIndex {
    dim: usize,
    /// The entry id of each slot.
    ids: Vec<u64>,
    vectors: Vec<f32>,
    dead: Vec<bool>,
    dead_count: usize,
    slot_of: HashMap<u64, usize>,
    graph: Option<Hnsw<'static, f32, UnitCosine>>,
}

impl PartitionIndex {
    pub fn new(dim: usize) -> Self {
        PartitionIndex {
            dim,
            ids: Vec::new(),
            vectors: Vec::new(),
            dead: Vec::new(),
            dead_count: 0,
            slot_of: HashMap::new(),
            graph: None,
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Living entries.
    pub fn len(&self) -> usize {
        self.ids.len() - self.dead_count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Add a unit vector of this index's dimension (another dimension is ignored: the embedding
    /// model changed, and the partition will hold the new ones).
    pub fn insert(&mut self, id: u64, vector: &[f32]) {
        if vector.len() != self.dim || self.slot_of.contains_key(&id) {
            return;
        }
        let slot = self.ids.len();
        self.ids.push(id);
        self.vectors.extend_from_slice(vector);
        self.dead.push(false);
        self.slot_of.insert(id, slot);
        match &self.graph {
            Some(graph) => graph.insert_slice((vector, slot)),
            None if self.ids.len() > FLAT_MAX => self.build_graph(),
            None => {}
        }
    }

    pub fn remove(&mut self, id: u64) {
        let Some(slot) = self.slot_of.remove(&id) else { return };
        self.dead[slot] = true;
        self.dead_count += 1;
        if self.dead_count > 64 && self.dead_count > self.len() {
            self.compact();
        }
    }

    /// The `k` nearest living entries: `(id, cosine similarity)`, most similar first.
    pub fn search(&self, query: &[f32], k: usize) -> Vec<(u64, f32)> {
        if query.len() != self.dim || k == 0 {
            return Vec::new();
        }
        let mut found: Vec<(u64, f32)> = match &self.graph {
            Some(graph) => {
                let ef = EF_SEARCH.max(k);
                // hnsw_rs's filtered search costs about three times its plain one: filter only
                // while there are tombstones.
                let found = if self.dead_count == 0 {
                    graph.search(query, k, ef)
                } else {
                    let alive = |slot: &usize| !self.dead.get(*slot).copied().unwrap_or(true);
                    graph.search_filter(query, k, ef, Some(&alive))
                };
                found.into_iter().map(|n| (self.ids[n.d_id], 1.0 - n.distance)).collect()
            }
            None => self.scan(query, k),
        };
        found.sort_by(|a, b| b.1.total_cmp(&a.1));
        found.truncate(k);
        found
    }

    fn scan(&self, query: &[f32], k: usize) -> Vec<(u64, f32)> {
        let mut best: Vec<(u64, f32)> = Vec::with_capacity(k + 1);
        for (slot, vector) in self.vectors.chunks_exact(self.dim).enumerate() {
            if self.dead[slot] {
                continue;
            }
            let similarity = dot(query, vector);
            if best.len() < k || similarity > best[best.len() - 1].1 {
                let at = best.partition_point(|(_, s)| *s >= similarity);
                best.insert(at, (self.ids[slot], similarity));
                best.truncate(k);
            }
        }
        best
    }

    fn build_graph(&mut self) {
        let graph = Hnsw::new(LINKS, (self.ids.len() * 2).max(FLAT_MAX * 4), LAYERS, EF_CONSTRUCTION, UnitCosine);
        for (slot, vector) in self.vectors.chunks_exact(self.dim).enumerate() {
            if !self.dead[slot] {
                graph.insert_slice((vector, slot));
            }
        }
        self.graph = Some(graph);
    }

    /// Drop the tombstones: the living entries, renumbered, in a new graph when large.
    fn compact(&mut self) {
        let mut fresh = PartitionIndex::new(self.dim);
        for (slot, vector) in self.vectors.chunks_exact(self.dim).enumerate() {
            if !self.dead[slot] {
                fresh.insert(self.ids[slot], vector);
            }
        }
        *self = fresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::normalize;

    /// A deterministic pseudo-random unit vector.
    pub fn vector(seed: u64, dim: usize) -> Vec<f32> {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut v: Vec<f32> = (0..dim)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect();
        normalize(&mut v);
        v
    }

    #[test]
    fn flat_and_graph_find_the_same_nearest_entry() {
        for n in [100, FLAT_MAX + 500] {
            let mut index = PartitionIndex::new(32);
            for i in 0..n as u64 {
                index.insert(i, &vector(i, 32));
            }
            let mut hits = 0;
            for i in (0..n as u64).step_by(37) {
                let found = index.search(&vector(i, 32), 3);
                hits += usize::from(found.first().map(|f| f.0) == Some(i));
                assert!(found.first().is_some_and(|f| f.1 > 0.999));
            }
            assert!(hits as f64 >= 0.95 * (n as f64 / 37.0).floor(), "{n}: {hits}");
        }
    }

    #[test]
    fn removed_entries_are_not_found_and_compaction_keeps_the_living() {
        let mut index = PartitionIndex::new(16);
        for i in 0..300u64 {
            index.insert(i, &vector(i, 16));
        }
        for i in 0..200u64 {
            index.remove(i);
        }
        assert_eq!(index.len(), 100);
        assert!(index.search(&vector(5, 16), 1).first().is_none_or(|f| f.0 != 5));
        assert_eq!(index.search(&vector(250, 16), 1)[0].0, 250);
        index.insert(7, &[0.0; 3]);
        assert_eq!(index.len(), 100, "a vector of another dimension is ignored");
    }
}
