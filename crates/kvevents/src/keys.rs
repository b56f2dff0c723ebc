//! The gateway's own key for a KV-cache block: a hash chained over the tokens of every block up
//! to it (and the LoRA adapter, the block's extra keys and its cache group), as llm-d keys them.
//!
//! Engines hash blocks too, but their recipes change between releases (and SGLang namespaces
//! them); the tokens do not. So an event's blocks and a prompt's blocks are keyed the same way
//! from their tokens, and an engine's own hash is kept only to find the block a removal names.

use std::hash::{BuildHasher, Hasher};

/// A block's key: equal for two blocks exactly when their whole prefixes are equal.
pub type BlockKey = u64;

fn state() -> foldhash::quality::FixedState {
    foldhash::quality::FixedState::with_seed(0x5357_4954_4348_5944)
}

/// The key before a sequence's first block: its LoRA adapter (none for the base model).
pub fn root(lora: Option<&str>) -> BlockKey {
    let mut h = state().build_hasher();
    h.write_u8(0xA5);
    if let Some(name) = lora {
        h.write(name.as_bytes());
    }
    h.finish()
}

/// The key of the block `tokens` that follows `parent`.
pub fn next(parent: BlockKey, tokens: &[u32], extra: Option<&[u8]>, group: u32) -> BlockKey {
    let mut h = state().build_hasher();
    h.write_u64(parent);
    h.write_u32(group);
    for t in tokens {
        h.write_u32(*t);
    }
    if let Some(extra) = extra {
        h.write(extra);
    }
    h.finish()
}

/// The keys of a prompt's whole blocks (a partial last block is never cached by an engine).
pub fn chain(tokens: &[u32], block_size: usize, lora: Option<&str>) -> Vec<BlockKey> {
    if block_size == 0 {
        return Vec::new();
    }
    let mut key = root(lora);
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            key = next(key, block, None, 0);
            key
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_depends_on_the_whole_prefix_and_the_adapter() {
        let a: Vec<u32> = (0..64).collect();
        let mut b = a.clone();
        b[3] = 999;
        let (ka, kb) = (chain(&a, 16, None), chain(&b, 16, None));
        assert_eq!(ka.len(), 4);
        assert!(ka.iter().zip(&kb).all(|(x, y)| x != y), "a change in block 0 changes every later key");
        assert_eq!(chain(&a[..40], 16, None), ka[..2], "a partial block has no key");
        assert_ne!(chain(&a, 16, Some("sql-lora")), ka);
    }
}
