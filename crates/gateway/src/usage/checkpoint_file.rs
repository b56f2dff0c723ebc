//! An export sink's checkpoint in a file beside the journal (`exports/NAME.checkpoint`), and the
//! end of the batch it is sending (`NAME.sending`): a sink with one freezes a batch once offered
//! and the writer cuts the same batch again after a restart (`writer.rs`).

use std::io;
use std::path::PathBuf;

/// A sink's checkpoint, as a decimal number in a file, replaced atomically (write, rename).
pub struct CheckpointFile(PathBuf);

impl CheckpointFile {
    pub fn new(path: PathBuf) -> CheckpointFile {
        CheckpointFile(path)
    }
}

impl CheckpointFile {
    pub fn load(&self) -> Result<u64, String> {
        match std::fs::read_to_string(&self.0) {
            Ok(text) => text.trim().parse().map_err(|_| format!("{} is not a checkpoint", self.0.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(format!("reading {}: {e}", self.0.display())),
        }
    }

    pub fn store(&self, checkpoint: u64) -> Result<(), String> {
        write_atomically(&self.0, checkpoint)
    }

    /// Where the batch being sent ends (`NAME.sending` beside the checkpoint): a restart cuts
    /// that batch again, so its resend carries the same `Idempotency-Key`.
    pub fn intend(&self, end: u64) -> Result<(), String> {
        write_atomically(&self.0.with_extension("sending"), end)
    }

    pub fn intended(&self) -> Result<Option<u64>, String> {
        let path = self.0.with_extension("sending");
        match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse().map(Some).map_err(|_| format!("{} is not a checkpoint", path.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }
}

/// `value` in decimal into `path`, replaced atomically (write, rename).
fn write_atomically(path: &std::path::Path, value: u64) -> Result<(), String> {
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
    std::fs::write(&tmp, value.to_string())
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}
