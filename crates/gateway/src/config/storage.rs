//! `storage:` — the database, the usage journal and where files are kept.

use serde::Deserialize;

use super::{ConfigError, StorageConfig};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStorage {
    url: Option<String>,
    usage_journal_dir: Option<String>,
    /// Where uploaded files and batch results are kept (`/v1/files`).
    files_dir: Option<String>,
    usage_journal_file_bytes: Option<super::cache::RawSize>,
    record_usage: Option<bool>,
}

/// `storage:` checked, with its defaults.
pub fn validate(raw: RawStorage) -> Result<StorageConfig, ConfigError> {
    let url = raw.url.unwrap_or_else(|| "sqlite://./switchyard.db".to_owned());
    if !(url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(ConfigError::at("storage.url", "use sqlite://PATH or postgres://USER:PASS@HOST/DB"));
    }
    let journal_file_bytes =
        super::cache::size("storage.usage_journal_file_bytes", raw.usage_journal_file_bytes, 64 << 20)?;
    if journal_file_bytes < 4096 {
        return Err(ConfigError::at("storage.usage_journal_file_bytes", "must be at least 4KiB"));
    }
    let journal_dir: std::path::PathBuf =
        raw.usage_journal_dir.unwrap_or_else(|| "./switchyard-usage".to_owned()).into();
    // Beside the journal unless told: a scratch directory for the one holds the other too.
    let files_dir = match raw.files_dir {
        Some(dir) if dir.trim().is_empty() => return Err(ConfigError::at("storage.files_dir", "must not be empty")),
        Some(dir) => dir.into(),
        None => journal_dir.parent().unwrap_or(std::path::Path::new(".")).join("switchyard-files"),
    };
    Ok(StorageConfig {
        journal_dir,
        files_dir,
        journal_file_bytes: journal_file_bytes as u64,
        url,
        record_usage: raw.record_usage.unwrap_or(true),
    })
}
