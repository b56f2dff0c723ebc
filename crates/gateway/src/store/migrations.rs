//! The schema migrations, embedded in the binary with `include_str!` (no `sqlx::migrate!`, so sqlx's proc-macro
//! crate and its second copy of the drivers are not built). Versions, descriptions and checksums match what
//! `migrate!`/sqlx-cli would record, so either tool can manage the same database.
//!
//! Adding a migration: put `NNNN_name.sql` in both `migrations/sqlite/` and `migrations/postgres/` and list it
//! below; a test fails if the lists and the directories disagree.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

/// `(version, file name, SQL)`, in version order.
type Embedded = &'static [(i64, &'static str, &'static str)];

const SQLITE: Embedded = &[
    (1, "0001_init.sql", include_str!("../../../../migrations/sqlite/0001_init.sql")),
    (2, "0002_journal_checkpoints.sql", include_str!("../../../../migrations/sqlite/0002_journal_checkpoints.sql")),
    (3, "0003_all_keys_rollup.sql", include_str!("../../../../migrations/sqlite/0003_all_keys_rollup.sql")),
    (4, "0004_mcp.sql", include_str!("../../../../migrations/sqlite/0004_mcp.sql")),
    (5, "0005_request_log.sql", include_str!("../../../../migrations/sqlite/0005_request_log.sql")),
    (6, "0006_daily_rollup.sql", include_str!("../../../../migrations/sqlite/0006_daily_rollup.sql")),
    (7, "0007_request_bodies.sql", include_str!("../../../../migrations/sqlite/0007_request_bodies.sql")),
    (8, "0008_request_log_failures.sql", include_str!("../../../../migrations/sqlite/0008_request_log_failures.sql")),
    (9, "0009_teams_users.sql", include_str!("../../../../migrations/sqlite/0009_teams_users.sql")),
    (10, "0010_audit_log.sql", include_str!("../../../../migrations/sqlite/0010_audit_log.sql")),
    (11, "0011_user_sessions.sql", include_str!("../../../../migrations/sqlite/0011_user_sessions.sql")),
    (12, "0012_audit_exports.sql", include_str!("../../../../migrations/sqlite/0012_audit_exports.sql")),
    (13, "0013_guardrails.sql", include_str!("../../../../migrations/sqlite/0013_guardrails.sql")),
    (
        14,
        "0014_guard_calls_and_units.sql",
        include_str!("../../../../migrations/sqlite/0014_guard_calls_and_units.sql"),
    ),
    (15, "0015_files_and_batches.sql", include_str!("../../../../migrations/sqlite/0015_files_and_batches.sql")),
    (16, "0016_batch_runners.sql", include_str!("../../../../migrations/sqlite/0016_batch_runners.sql")),
    (17, "0017_batch_passthrough.sql", include_str!("../../../../migrations/sqlite/0017_batch_passthrough.sql")),
    (
        18,
        "0018_prompt_cache_and_key_pools.sql",
        include_str!("../../../../migrations/sqlite/0018_prompt_cache_and_key_pools.sql"),
    ),
    (19, "0019_experiments.sql", include_str!("../../../../migrations/sqlite/0019_experiments.sql")),
    (20, "0020_policies.sql", include_str!("../../../../migrations/sqlite/0020_policies.sql")),
    (21, "0021_org_policies.sql", include_str!("../../../../migrations/sqlite/0021_org_policies.sql")),
    (22, "0022_agents.sql", include_str!("../../../../migrations/sqlite/0022_agents.sql")),
];

const POSTGRES: Embedded = &[
    (1, "0001_init.sql", include_str!("../../../../migrations/postgres/0001_init.sql")),
    (2, "0002_journal_checkpoints.sql", include_str!("../../../../migrations/postgres/0002_journal_checkpoints.sql")),
    (3, "0003_all_keys_rollup.sql", include_str!("../../../../migrations/postgres/0003_all_keys_rollup.sql")),
    (4, "0004_mcp.sql", include_str!("../../../../migrations/postgres/0004_mcp.sql")),
    (5, "0005_request_log.sql", include_str!("../../../../migrations/postgres/0005_request_log.sql")),
    (6, "0006_daily_rollup.sql", include_str!("../../../../migrations/postgres/0006_daily_rollup.sql")),
    (7, "0007_request_bodies.sql", include_str!("../../../../migrations/postgres/0007_request_bodies.sql")),
    (8, "0008_request_log_failures.sql", include_str!("../../../../migrations/postgres/0008_request_log_failures.sql")),
    (9, "0009_teams_users.sql", include_str!("../../../../migrations/postgres/0009_teams_users.sql")),
    (10, "0010_audit_log.sql", include_str!("../../../../migrations/postgres/0010_audit_log.sql")),
    (11, "0011_user_sessions.sql", include_str!("../../../../migrations/postgres/0011_user_sessions.sql")),
    (12, "0012_audit_exports.sql", include_str!("../../../../migrations/postgres/0012_audit_exports.sql")),
    (13, "0013_guardrails.sql", include_str!("../../../../migrations/postgres/0013_guardrails.sql")),
    (
        14,
        "0014_guard_calls_and_units.sql",
        include_str!("../../../../migrations/postgres/0014_guard_calls_and_units.sql"),
    ),
    (15, "0015_files_and_batches.sql", include_str!("../../../../migrations/postgres/0015_files_and_batches.sql")),
    (16, "0016_batch_runners.sql", include_str!("../../../../migrations/postgres/0016_batch_runners.sql")),
    (17, "0017_batch_passthrough.sql", include_str!("../../../../migrations/postgres/0017_batch_passthrough.sql")),
    (
        18,
        "0018_prompt_cache_and_key_pools.sql",
        include_str!("../../../../migrations/postgres/0018_prompt_cache_and_key_pools.sql"),
    ),
    (19, "0019_experiments.sql", include_str!("../../../../migrations/postgres/0019_experiments.sql")),
    (20, "0020_policies.sql", include_str!("../../../../migrations/postgres/0020_policies.sql")),
    (21, "0021_org_policies.sql", include_str!("../../../../migrations/postgres/0021_org_policies.sql")),
    (22, "0022_agents.sql", include_str!("../../../../migrations/postgres/0022_agents.sql")),
];

#[derive(Debug)]
struct Source(Embedded);

impl MigrationSource<'static> for Source {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 'static>> {
        let migrations = self.0.iter().map(|&(version, file, sql)| to_migration(version, file, sql)).collect();
        Box::pin(async move { Ok(migrations) })
    }
}

/// Mirrors sqlx's directory resolver: description from the file name, `-- no-transaction` on the first line.
fn to_migration(version: i64, file: &str, sql: &'static str) -> Migration {
    let stem = file.trim_end_matches(".sql");
    let description = stem.split_once('_').map_or("", |(_, rest)| rest).replace('_', " ");
    let no_tx = sql.starts_with("-- no-transaction");
    Migration::new(version, Cow::Owned(description), MigrationType::Simple, Cow::Borrowed(sql), no_tx)
}

pub(super) async fn sqlite() -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Source(SQLITE)).await
}

pub(super) async fn postgres() -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Source(POSTGRES)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files_in(dialect: &str) -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations").join(dialect);
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn embedded_lists_match_the_directories() {
        for (dialect, embedded) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let listed: Vec<String> = embedded.iter().map(|(_, f, _)| f.to_string()).collect();
            assert_eq!(listed, files_in(dialect), "{dialect} migrations not all embedded");
            for (version, file, _) in embedded {
                let prefix: i64 = file.split('_').next().unwrap().parse().unwrap();
                assert_eq!(prefix, *version, "{file}");
            }
        }
    }

    #[test]
    fn description_follows_sqlx() {
        assert_eq!(to_migration(1, "0001_init.sql", "").description, "init");
        assert_eq!(to_migration(2, "0002_add_thing.sql", "").description, "add thing");
    }
}
