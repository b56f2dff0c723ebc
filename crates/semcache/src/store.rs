//! What a semantic store holds and answers: entries (a question's embedding, its text and the
//! stored answer, in one partition, until it expires) and the nearest ones to a new question.

use std::sync::Arc;

use bytes::Bytes;

use crate::Partition;

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Random, so that entries made by different instances of a fleet never collide.
    pub id: u64,
    pub partition: Partition,
    /// Unit length: the dot product of two is their cosine similarity.
    pub vector: Vec<f32>,
    /// The text that was embedded, for the checks a candidate must pass.
    pub question: String,
    /// The answer as the gateway stores it (opaque here).
    pub answer: Bytes,
    pub stored_ms: i64,
    pub expires_ms: i64,
}

/// A stored entry near a question, with their cosine similarity.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub entry: Arc<Entry>,
    pub similarity: f32,
}

#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError(e.to_string())
    }
}

#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// At most `k` live entries of `partition` with a similarity of at least `min_similarity`
    /// to `vector`, most similar first.
    async fn search(
        &self,
        partition: &Partition,
        vector: &[f32],
        k: usize,
        min_similarity: f32,
        now_ms: i64,
    ) -> Result<Vec<Candidate>, StoreError>;

    async fn insert(&self, entry: Entry) -> Result<(), StoreError>;

    /// Entries held (as last known, for a shared store).
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `embedded` or `pgvector`.
    fn kind(&self) -> &'static str;
}

/// `vector` scaled to unit length (a zero vector stays zero).
pub fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Eight running sums, so the compiler keeps them in one vector register.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            sums[i] += x[i] * y[i];
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// Little-endian f32s: how vectors are kept in SQLite.
pub fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn vector_from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
