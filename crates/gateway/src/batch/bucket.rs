//! Files in an S3-compatible bucket (`storage.files`), one object per file id under the
//! configured prefix, so every instance of a fleet reads the same files. An upload up to one part
//! is a single PUT; a larger one is a multipart upload sent part by part as it arrives (at most
//! two parts in memory), completed only when the whole file is in, and aborted otherwise: an
//! object is whole or absent, as on disk. Files are read back as the bucket sends them.

use std::io::{Error, ErrorKind};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use object_store::aws::AmazonS3;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};

use super::filestore::WriteError;
use crate::config::S3Target;

/// A multipart upload's part: S3's smallest (but for the last).
const PART: usize = 5 << 20;

pub struct Bucket {
    store: AmazonS3,
    prefix: String,
}

fn io(e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { .. } => Error::new(ErrorKind::NotFound, e.to_string()),
        e => Error::other(e.to_string()),
    }
}

/// The upload's next chunk, None at its end.
async fn next<S, E>(chunks: &mut S) -> Result<Option<Bytes>, WriteError>
where
    S: futures_util::Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    chunks.next().await.transpose().map_err(|e| WriteError::Read(e.to_string()))
}

fn write_error(e: object_store::Error) -> WriteError {
    WriteError::Io(e.to_string())
}

impl Bucket {
    pub fn new(target: &S3Target, timeout: Duration, connect_timeout: Duration) -> Result<Bucket, String> {
        let store = crate::telemetry::s3::bucket(target, timeout, connect_timeout)
            .build()
            .map_err(|e| format!("storage.files: {e}"))?;
        Ok(Bucket { store, prefix: target.prefix.clone() })
    }

    fn path(&self, id: &str) -> Path {
        Path::from(format!("{}{id}", self.prefix))
    }

    pub async fn write<S, E>(&self, id: &str, mut chunks: S, limit: u64) -> Result<u64, WriteError>
    where
        S: futures_util::Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut written = 0u64;
        // The first part's worth: a small file is one PUT.
        let mut first = BytesMut::new();
        while first.len() < PART {
            let Some(chunk) = next(&mut chunks).await? else {
                written += first.len() as u64;
                if written > limit {
                    return Err(WriteError::TooLarge);
                }
                let payload = PutPayload::from(first.freeze());
                self.store.put(&self.path(id), payload).await.map_err(write_error)?;
                return Ok(written);
            };
            first.extend_from_slice(&chunk);
            if first.len() as u64 > limit {
                return Err(WriteError::TooLarge);
            }
        }
        let upload = self.store.put_multipart(&self.path(id)).await.map_err(write_error)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        written += first.len() as u64;
        writer.put(first.freeze());
        loop {
            let chunk = match next(&mut chunks).await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(e);
                }
            };
            written += chunk.len() as u64;
            if written > limit {
                let _ = writer.abort().await;
                return Err(WriteError::TooLarge);
            }
            if let Err(e) = writer.wait_for_capacity(1).await {
                let _ = writer.abort().await;
                return Err(write_error(e));
            }
            writer.put(chunk);
        }
        writer.finish().await.map_err(write_error)?;
        Ok(written)
    }

    pub async fn read(&self, id: &str) -> std::io::Result<Bytes> {
        self.store.get(&self.path(id)).await.map_err(io)?.bytes().await.map_err(io)
    }

    pub async fn read_stream(&self, id: &str) -> std::io::Result<(tokio::sync::mpsc::Receiver<Vec<u8>>, u64)> {
        let got = self.store.get(&self.path(id)).await.map_err(io)?;
        let size = got.meta.size;
        Ok((super::filestore::pump(got.into_stream().map(|chunk| chunk.map(|c| c.to_vec()))), size))
    }

    pub async fn delete(&self, id: &str) -> std::io::Result<()> {
        match self.store.delete(&self.path(id)).await {
            Err(e) if !matches!(e, object_store::Error::NotFound { .. }) => Err(io(e)),
            _ => Ok(()),
        }
    }
}
