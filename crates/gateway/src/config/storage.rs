//! `storage:` — the database, the usage journal and where files are kept.

use serde::Deserialize;

use super::{ConfigError, ObjectFormat, S3Target, StorageConfig};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStorage {
    url: Option<String>,
    usage_journal_dir: Option<String>,
    /// Where uploaded files and batch results are kept (`/v1/files`).
    files_dir: Option<String>,
    /// … or an S3-compatible bucket for them (a fleet's instances then share them).
    files: Option<RawBucket>,
    usage_journal_file_bytes: Option<super::cache::RawSize>,
    record_usage: Option<bool>,
}

/// `storage.files`: a bucket, a key prefix, and where and how to reach it (else the `AWS_*`
/// variables), as for an `s3` export.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBucket {
    bucket: String,
    prefix: Option<String>,
    endpoint: Option<String>,
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
}

fn validate_bucket(raw: RawBucket) -> Result<S3Target, ConfigError> {
    if raw.bucket.trim().is_empty() {
        return Err(ConfigError::at("storage.files.bucket", "must not be empty"));
    }
    if let Some(endpoint) = &raw.endpoint {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(ConfigError::at("storage.files.endpoint", format!("`{endpoint}` is not an http(s) URL")));
        }
    }
    if raw.access_key_id.is_some() != raw.secret_access_key.is_some() {
        return Err(ConfigError::at("storage.files.access_key_id", "give both access_key_id and secret_access_key"));
    }
    let prefix = raw.prefix.unwrap_or_else(|| "switchyard-files/".to_owned());
    let prefix = if prefix.is_empty() || prefix.ends_with('/') { prefix } else { format!("{prefix}/") };
    Ok(S3Target {
        bucket: raw.bucket,
        prefix,
        endpoint: raw.endpoint,
        region: raw.region,
        access_key_id: raw.access_key_id,
        secret_access_key: raw.secret_access_key,
        format: ObjectFormat::JsonLines,
    })
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
        files_bucket: raw.files.map(validate_bucket).transpose()?.map(Box::new),
        journal_file_bytes: journal_file_bytes as u64,
        url,
        record_usage: raw.record_usage.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::config::Config;

    fn load(yaml: &str) -> Result<Config, String> {
        Config::from_yaml(yaml, &HashMap::new()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_files_bucket_is_checked_and_its_prefix_gets_a_slash() {
        for (yaml, path) in [
            ("storage: {files: {bucket: ''}}", "storage.files.bucket"),
            ("storage: {files: {bucket: b, endpoint: 'ftp://x'}}", "storage.files.endpoint"),
            ("storage: {files: {bucket: b, access_key_id: a}}", "storage.files.access_key_id"),
            ("storage: {files: {prefix: p}}", "storage"),
        ] {
            assert!(load(yaml).unwrap_err().starts_with(path), "{yaml}: {:?}", load(yaml).err());
        }
        let files = load("storage: {files: {bucket: b, prefix: team}}").unwrap().storage.files_bucket.unwrap();
        assert_eq!((files.bucket.as_str(), files.prefix.as_str()), ("b", "team/"));
    }
}
