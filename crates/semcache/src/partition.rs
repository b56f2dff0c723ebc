//! A partition: the SHA-256 of everything two requests must share exactly before one may be
//! served the other's answer (tenant, model, system prompt, tools, sampling parameters, the
//! conversation before the question). Searches never leave one, so no similarity crosses tenants.

use sha2::{Digest as _, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Partition(pub [u8; 32]);

impl Partition {
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Parts are written with their label and length, so no two different sets of parts hash alike.
pub struct PartitionBuilder(Sha256);

impl Default for PartitionBuilder {
    fn default() -> Self {
        // Version 1 of this form: a change to it starts new partitions rather than mixing two.
        let mut hash = Sha256::new();
        hash.update(b"switchyard-semantic-partition-1\0");
        PartitionBuilder(hash)
    }
}

impl PartitionBuilder {
    pub fn part(&mut self, label: &str, value: &[u8]) -> &mut Self {
        for bytes in [label.as_bytes(), value] {
            self.0.update((bytes.len() as u64).to_le_bytes());
            self.0.update(bytes);
        }
        self
    }

    pub fn finish(self) -> Partition {
        Partition(self.0.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_delimited() {
        let hash = |parts: &[(&str, &str)]| {
            let mut b = PartitionBuilder::default();
            for (label, value) in parts {
                b.part(label, value.as_bytes());
            }
            b.finish()
        };
        assert_eq!(hash(&[("key", "a"), ("model", "m")]), hash(&[("key", "a"), ("model", "m")]));
        assert_ne!(hash(&[("key", "ab"), ("model", "")]), hash(&[("key", "a"), ("model", "b")]));
        assert_ne!(hash(&[("key", "a")]), hash(&[("team", "a")]));
        assert_eq!(hash(&[]).hex().len(), 64);
    }
}
