//! What inference engines hold in their KV cache, from the events they publish (vLLM's and
//! SGLang's `--kv-events-config`): `feed` follows one engine over ZeroMQ, `wire` decodes its
//! batches, `keys` keys blocks by their tokens, and `index` answers which backend holds the
//! longest run of a prompt's blocks.

pub mod feed;
pub mod index;
pub mod keys;
pub mod wire;

pub use feed::{FeedConfig, FeedStats};
pub use index::{KvIndex, Run};
pub use keys::BlockKey;
pub use wire::Tier;
