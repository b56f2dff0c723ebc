//! Where files' bytes are kept: one file per id under `storage.files_dir`, written to a
//! temporary name and renamed into place, so a file is either whole or absent; or one object
//! per id in the `storage.files` bucket (`bucket.rs`), where an upload is likewise whole or absent.

use std::path::PathBuf;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;

/// Bytes read from disk at a time when a file is sent.
const CHUNK: usize = 64 * 1024;

/// The configured place.
pub enum FileStore {
    Disk(Disk),
    Bucket(super::bucket::Bucket),
}

impl FileStore {
    /// Keep `chunks` as `id`, at most `limit` bytes: how many there were.
    pub async fn write<S, E>(&self, id: &str, chunks: S, limit: u64) -> Result<u64, WriteError>
    where
        S: futures_util::Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        match self {
            FileStore::Disk(disk) => disk.write(id, chunks, limit).await,
            FileStore::Bucket(bucket) => bucket.write(id, chunks, limit).await,
        }
    }

    /// Keep `bytes` as `id`.
    pub async fn write_all(&self, id: &str, bytes: Bytes) -> Result<u64, WriteError> {
        let once = futures_util::stream::iter([Ok::<Bytes, std::convert::Infallible>(bytes)]);
        self.write(id, once, u64::MAX).await
    }

    /// The whole of `id`.
    pub async fn read(&self, id: &str) -> std::io::Result<Bytes> {
        match self {
            FileStore::Disk(disk) => disk.read(id).await,
            FileStore::Bucket(bucket) => bucket.read(id).await,
        }
    }

    /// `id`'s bytes as a stream of chunks, and its size: read as the client takes them.
    pub async fn read_stream(&self, id: &str) -> std::io::Result<(tokio::sync::mpsc::Receiver<Vec<u8>>, u64)> {
        match self {
            FileStore::Disk(disk) => disk.read_stream(id).await,
            FileStore::Bucket(bucket) => bucket.read_stream(id).await,
        }
    }

    pub async fn delete(&self, id: &str) -> std::io::Result<()> {
        match self {
            FileStore::Disk(disk) => disk.delete(id).await,
            FileStore::Bucket(bucket) => bucket.delete(id).await,
        }
    }
}

/// Files under a directory.
pub struct Disk {
    dir: PathBuf,
}

impl Disk {
    pub fn new(dir: PathBuf) -> Disk {
        Disk { dir }
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    async fn write<S, E>(&self, id: &str, mut chunks: S, limit: u64) -> Result<u64, WriteError>
    where
        S: futures_util::Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        use futures_util::StreamExt;
        tokio::fs::create_dir_all(&self.dir).await.map_err(|e| WriteError::Io(e.to_string()))?;
        let partial = self.dir.join(format!(".{id}.partial"));
        let mut file = tokio::fs::File::create(&partial).await.map_err(|e| WriteError::Io(e.to_string()))?;
        let mut written = 0u64;
        let outcome = async {
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|e| WriteError::Read(e.to_string()))?;
                written += chunk.len() as u64;
                if written > limit {
                    return Err(WriteError::TooLarge);
                }
                file.write_all(&chunk).await.map_err(|e| WriteError::Io(e.to_string()))?;
            }
            file.flush().await.map_err(|e| WriteError::Io(e.to_string()))?;
            file.sync_all().await.map_err(|e| WriteError::Io(e.to_string()))
        }
        .await;
        if let Err(e) = outcome {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(e);
        }
        tokio::fs::rename(&partial, self.path(id)).await.map_err(|e| WriteError::Io(e.to_string()))?;
        Ok(written)
    }

    async fn read(&self, id: &str) -> std::io::Result<Bytes> {
        tokio::fs::read(self.path(id)).await.map(Bytes::from)
    }

    async fn read_stream(&self, id: &str) -> std::io::Result<(tokio::sync::mpsc::Receiver<Vec<u8>>, u64)> {
        use tokio::io::AsyncReadExt;
        let file = tokio::fs::File::open(self.path(id)).await?;
        let size = file.metadata().await?.len();
        let chunks = futures_util::stream::unfold(file, |mut file| async move {
            let mut chunk = vec![0u8; CHUNK];
            match file.read(&mut chunk).await {
                Ok(0) => None,
                Ok(n) => {
                    chunk.truncate(n);
                    Some((Ok(chunk), file))
                }
                Err(e) => Some((Err(e), file)),
            }
        });
        Ok((pump(chunks), size))
    }

    async fn delete(&self, id: &str) -> std::io::Result<()> {
        match tokio::fs::remove_file(self.path(id)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A file's chunks, read on a task of their own as the client takes them: the body's channel.
/// A read error ends the body short of its content-length, so the client sees the failure.
pub(super) fn pump<S, E>(chunks: S) -> tokio::sync::mpsc::Receiver<Vec<u8>>
where
    S: futures_util::Stream<Item = Result<Vec<u8>, E>> + Send + 'static,
    E: std::fmt::Display + Send,
{
    use futures_util::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let mut chunks = std::pin::pin!(chunks);
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(chunk) => {
                    if tx.send(chunk).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a file could not be read to the end");
                    return;
                }
            }
        }
    });
    rx
}

/// Why a file could not be kept.
#[derive(Debug)]
pub enum WriteError {
    /// More than the limit arrived.
    TooLarge,
    /// The upload could not be read.
    Read(String),
    /// The disk failed.
    Io(String),
}
