//! `switchyard audit verify [--config FILE] [--expect SEQ:HASH]`: walk the audit log's hash chain
//! in the configured database and say whether it is whole — every entry present, each hash
//! matching its fields and linking to the entry before. Exit status 1 names the first entry that
//! breaks it. A chain cut short (its newest entries deleted) still links up, so its end is
//! checked against anchors kept outside the chain: how far the export sinks have taken it, and an
//! entry's hash from an earlier run (`--expect`, which the success line prints for the end).

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
        /// An entry the chain must still hold with this hash, as `SEQ:HASH` (e.g. the end an
        /// earlier run printed); repeatable.
        #[arg(long, value_parser = parse_anchor)]
        expect: Vec<(i64, String)>,
    },
}

/// Entries read per query while walking the chain.
const PAGE: i64 = 1000;

pub async fn run(args: AuditArgs) -> Result<(), String> {
    let AuditAction::Verify { config, expect } = args.action;
    let config = match &config {
        Some(path) => crate::cli::load(path)?,
        None => Config::empty().map_err(|e| e.to_string())?,
    };
    let url = &config.storage.url;
    let store = Store::connect(url).await.map_err(|e| format!("cannot open the database: {e}"))?;
    let mut end = (0, GENESIS.to_owned());
    let mut seen: Vec<Option<String>> = vec![None; expect.len()];
    loop {
        let rows = store.audit_from(end.0, PAGE).await.map_err(|e| format!("cannot read the audit log: {e}"))?;
        let last_page = (rows.len() as i64) < PAGE;
        end = verify_run(end, &rows).map_err(|b| format!("audit log broken at entry {}: {}", b.seq, b.why))?;
        for (want, got) in expect.iter().zip(seen.iter_mut()) {
            if let Some(row) = rows.iter().find(|r| r.seq == want.0) {
                *got = Some(row.hash.clone());
            }
        }
        if last_page {
            break;
        }
    }
    for ((seq, hash), got) in expect.iter().zip(&seen) {
        match got {
            None => return Err(format!("audit log broken: entry {seq} is gone (the chain ends at entry {})", end.0)),
            Some(got) if got != hash => return Err(format!("audit log broken at entry {seq}: not the entry expected")),
            Some(_) => {}
        }
    }
    let marks = store.audit_export_marks().await.map_err(|e| format!("cannot read the export marks: {e}"))?;
    if let Some((sink, seq)) = marks.iter().find(|(_, seq)| *seq > end.0) {
        return Err(format!(
            "audit log broken: it ends at entry {}, but export sink `{sink}` was given entries up to {seq}",
            end.0
        ));
    }
    println!("audit log intact: {} entries, last hash {} (--expect {}:{})", end.0, end.1, end.0, end.1);
    Ok(())
}

/// `SEQ:HASH`.
fn parse_anchor(text: &str) -> Result<(i64, String), String> {
    let (seq, hash) = text.split_once(':').ok_or("use SEQ:HASH")?;
    let seq = seq.parse().map_err(|_| format!("`{seq}` is not an entry number"))?;
    Ok((seq, hash.to_owned()))
}
