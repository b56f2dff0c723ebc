//! `switchyard audit verify [--config FILE]`: walk the audit log's hash chain in the configured
//! database and say whether it is whole — every entry present, each hash matching its fields and
//! linking to the entry before. Exit status 1 names the first entry that breaks it.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use switchyard_gateway::config::Config;
use switchyard_gateway::store::{verify_run, Store, GENESIS};

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(subcommand)]
    action: AuditAction,
}

#[derive(Subcommand, Debug)]
enum AuditAction {
    /// Check the audit log's hash chain end to end.
    Verify {
        /// The gateway's config file (its `storage.url` is the database read); none: the default.
        #[arg(long, short, env = "SWITCHYARD_CONFIG")]
        config: Option<PathBuf>,
    },
}

/// Entries read per query while walking the chain.
const PAGE: i64 = 1000;

pub async fn run(args: AuditArgs) -> Result<(), String> {
    let AuditAction::Verify { config } = args.action;
    let config = match &config {
        Some(path) => crate::cli::load(path)?,
        None => Config::empty().map_err(|e| e.to_string())?,
    };
    let url = &config.storage.url;
    let store = Store::connect(url).await.map_err(|e| format!("cannot open the database: {e}"))?;
    let mut end = (0, GENESIS.to_owned());
    loop {
        let rows = store.audit_from(end.0, PAGE).await.map_err(|e| format!("cannot read the audit log: {e}"))?;
        let last_page = (rows.len() as i64) < PAGE;
        end = verify_run(end, &rows).map_err(|b| format!("audit log broken at entry {}: {}", b.seq, b.why))?;
        if last_page {
            break;
        }
    }
    println!("audit log intact: {} entries, last hash {}", end.0, end.1);
    Ok(())
}
