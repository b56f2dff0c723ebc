//! A finding: where sensitive text is, what kind it is, and which guards and detector found it.

use crate::kind::Kind;

/// A guard's index in the specs the engine was built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GuardId(pub(crate) u8);

impl GuardId {
    /// The guard's position in the slice given to `Engine::new`.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// The guards a finding concerns: a built-in kind asked for by several guards is compiled once
/// and its findings name all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GuardSet(u64);

impl GuardSet {
    /// How many guards one engine can hold.
    pub const CAPACITY: usize = 64;

    /// Every guard.
    pub const ALL: GuardSet = GuardSet(u64::MAX);

    /// The guards whose bits are set (bit `i`: the guard of index `i`).
    pub fn from_bits(bits: u64) -> GuardSet {
        GuardSet(bits)
    }

    /// Bit `i` set for the guard of index `i`.
    pub fn bits(self) -> u64 {
        self.0
    }

    /// Whether the two sets share a guard.
    pub fn intersects(self, other: GuardSet) -> bool {
        self.0 & other.0 != 0
    }

    pub(crate) fn insert(&mut self, guard: GuardId) {
        self.0 |= 1 << guard.0;
    }

    /// Whether `guard` is one of them.
    pub fn contains(self, guard: GuardId) -> bool {
        self.0 & (1 << guard.0) != 0
    }

    /// The guards, in the order of the engine's specs.
    pub fn iter(self) -> impl Iterator<Item = GuardId> {
        // The set bits only, lowest first: testing all 64 cost ~650 instructions a finding.
        let mut bits = self.0;
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let guard = GuardId(bits.trailing_zeros() as u8);
                bits &= bits - 1;
                guard
            })
        })
    }
}

/// A detector's index in the engine: one per built-in kind, keyword list or named pattern.
/// `Engine::detector_name` and `Engine::placeholder` say more about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DetectorId(pub(crate) u32);

impl DetectorId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One validated match: `text[start..end]` (byte offsets, on char boundaries). The findings of
/// one text never overlap and come in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finding {
    pub start: usize,
    pub end: usize,
    pub kind: Kind,
    pub guards: GuardSet,
    pub detector: DetectorId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_lists_its_guards_lowest_first() {
        let listed = |bits: u64| GuardSet::from_bits(bits).iter().map(|g| g.0).collect::<Vec<_>>();
        assert_eq!(listed(0), Vec::<u8>::new());
        assert_eq!(listed(1 | 1 << 5 | 1 << 7 | 1 << 63), [0, 5, 7, 63]);
        assert_eq!(listed(u64::MAX).len(), 64);
    }
}
