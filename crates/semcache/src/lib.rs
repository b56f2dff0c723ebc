//! The semantic layer of the response cache (`cache.semantic`): answers reused for questions that
//! mean the same. A request's **partition** (`partition.rs`) hashes everything that must match
//! exactly — tenant, model, system prompt, tools, sampling — and a search runs only inside one,
//! so no similarity can cross it. Inside, question embeddings are searched by cosine similarity
//! (`index.rs`: exact for small partitions, HNSW for large), in process and persisted to SQLite
//! (`embedded.rs`) or shared by a fleet in PostgreSQL with pgvector (`pgvector.rs`); a
//! candidate is served only after the checks of `verify.rs`. `calibrate.rs` turns labelled
//! pairs into false-hit and hit rates per threshold.

pub mod calibrate;
pub mod embedded;
pub mod index;
pub mod partition;
pub mod pgvector;
pub mod store;
pub mod text;
pub mod verify;

pub use partition::{Partition, PartitionBuilder};
pub use store::{Candidate, Entry, Store, StoreError};
pub use verify::{compare, terms_match, Check, Comparison};
