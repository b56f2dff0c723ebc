//! `switchyard cache calibrate`: labelled question pairs scored by the semantic layer of a
//! config (its embedding model and checks, through an in-process gateway on a loopback port),
//! then the false-hit and paraphrase hit rates for each threshold, with the checks and without,
//! and the lowest threshold whose false-hit rate stays under the target.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Deserialize;
use switchyard_gateway::config::{Config, ProcessEnv};
use switchyard_semcache::calibrate::{default_thresholds, plain_recommend, recommend, sweep, Row, Scored};

#[derive(Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(Subcommand, Debug)]
enum CacheCommand {
    /// Measure the semantic layer on labelled pairs: false hits and paraphrase hits per threshold.
    Calibrate {
        /// The gateway's config (its `cache.semantic` and the backend of its embedding model).
        #[arg(long, short, env = "SWITCHYARD_CONFIG")]
        config: PathBuf,
        /// JSON lines: `{"a": …, "b": …, "same": true|false}` (`split` and `kind` are reported).
        #[arg(long)]
        pairs: PathBuf,
        /// Only the pairs of this `split` (e.g. `holdout`).
        #[arg(long)]
        split: Option<String>,
        /// The false-hit rate the recommended threshold must stay within.
        #[arg(long, default_value_t = 0.01)]
        target: f64,
        /// Also write the results as JSON here (`cache.semantic.calibration` shows them in the console).
        #[arg(long)]
        write: Option<PathBuf>,
        /// Also print each pair the checks refused, and each false hit at the configured threshold.
        #[arg(long)]
        show: bool,
    },
}

#[derive(Deserialize)]
struct Pair {
    a: String,
    b: String,
    same: bool,
    #[serde(default)]
    split: Option<String>,
}

pub async fn run(args: CacheArgs) -> Result<(), String> {
    let CacheCommand::Calibrate { config, pairs, split, target, write, show } = args.command;
    let mut config = Config::load(&config, &ProcessEnv).map_err(|e| e.to_string())?;
    let threshold = config.cache.semantic.as_ref().ok_or("the config has no cache.semantic")?.threshold;
    config.listen = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
    // A gateway of its own, beside any serving one with this config: nothing shared with it on
    // disk (no database, journal or semantic store), nothing recorded, no picker listening.
    config.storage.url = "sqlite::memory:".to_owned();
    config.storage.record_usage = false;
    config.epp = None;
    if let Some(semantic) = config.cache.semantic.as_mut() {
        semantic.store = switchyard_gateway::config::SemanticStoreKind::Embedded;
        semantic.path = None;
    }
    let text = std::fs::read_to_string(&pairs).map_err(|e| format!("cannot read {}: {e}", pairs.display()))?;
    let mut labelled = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let pair: Pair = serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", pairs.display(), n + 1))?;
        if split.as_deref().is_none_or(|s| pair.split.as_deref() == Some(s)) {
            labelled.push(pair);
        }
    }
    let gateway = switchyard_gateway::server::start(config, std::future::pending()).await?;
    let mut scored = Vec::with_capacity(labelled.len());
    for pair in &labelled {
        let mut s = switchyard_gateway::proxy::score_pair(&gateway.app, &pair.a, &pair.b).await?;
        s.same = pair.same;
        scored.push(s);
    }
    let mut thresholds = default_thresholds();
    if !thresholds.iter().any(|t| (t - threshold).abs() < 1e-6) {
        thresholds.push(threshold);
        thresholds.sort_by(f32::total_cmp);
    }
    let rows = sweep(&scored, &thresholds);
    if show {
        print_pairs(&labelled, &scored, threshold);
    }
    print_report(&rows, &scored, threshold, target);
    if let Some(path) = write {
        let report = report_json(&rows, &scored, threshold, target);
        std::fs::write(&path, report.to_string()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Each paraphrase the checks refused (and why), and each false hit at `threshold`.
fn print_pairs(labelled: &[Pair], scored: &[Scored], threshold: f32) {
    let mut refused = std::collections::BTreeMap::<&str, (usize, usize)>::new();
    for (pair, s) in labelled.iter().zip(scored) {
        if let Err(check) = s.verified {
            let counts = refused.entry(check.name()).or_default();
            if pair.same {
                counts.0 += 1;
                println!("refused paraphrase ({}, {:.3}): {} | {}", check.name(), s.similarity, pair.a, pair.b);
            } else {
                counts.1 += 1;
            }
        } else if !pair.same && s.similarity >= threshold {
            println!("false hit ({:.3}): {} | {}", s.similarity, pair.a, pair.b);
        }
    }
    for (check, (same, different)) in refused {
        println!("check {check}: refused {same} paraphrases and {different} different-meaning pairs");
    }
}

fn print_report(rows: &[Row], scored: &[Scored], threshold: f32, target: f64) {
    let same = scored.iter().filter(|s| s.same).count();
    println!("{} pairs: {} same meaning, {} different", scored.len(), same, scored.len() - same);
    println!("threshold  false hits  paraphrase hits  | similarity alone: false hits  paraphrase hits");
    for r in rows {
        let mark = if (r.threshold - threshold).abs() < 1e-6 { "  <- configured" } else { "" };
        println!(
            "{:>9.3}  {:>9.1}%  {:>14.1}%  | {:>28.1}%  {:>14.1}%{mark}",
            r.threshold,
            r.false_hit_rate * 100.0,
            r.hit_rate * 100.0,
            r.plain_false_hit_rate * 100.0,
            r.plain_hit_rate * 100.0
        );
    }
    match recommend(rows, target) {
        Some(r) => println!(
            "recommended threshold: {:.3} (false hits {:.1}% <= {:.1}%, paraphrase hits {:.1}%)",
            r.threshold,
            r.false_hit_rate * 100.0,
            target * 100.0,
            r.hit_rate * 100.0
        ),
        None => println!("no threshold keeps false hits within {:.1}%", target * 100.0),
    }
    match plain_recommend(rows, target) {
        Some(r) => println!(
            "similarity alone: {:.3} keeps false hits within target, paraphrase hits {:.1}%",
            r.threshold,
            r.plain_hit_rate * 100.0
        ),
        None => println!("similarity alone: no threshold keeps false hits within {:.1}%", target * 100.0),
    }
}

fn report_json(rows: &[Row], scored: &[Scored], threshold: f32, target: f64) -> serde_json::Value {
    let row = |r: &Row| {
        serde_json::json!({"threshold": r.threshold, "false_hit_rate": r.false_hit_rate, "hit_rate": r.hit_rate,
            "plain_false_hit_rate": r.plain_false_hit_rate, "plain_hit_rate": r.plain_hit_rate})
    };
    serde_json::json!({
        "pairs": scored.len(),
        "same": scored.iter().filter(|s| s.same).count(),
        "target": target,
        "configured_threshold": threshold,
        "configured": rows.iter().find(|r| (r.threshold - threshold).abs() < 1e-6).map(row),
        "recommended": recommend(rows, target).map(row),
        "rows": rows.iter().map(row).collect::<Vec<_>>(),
        "calibrated_ms": switchyard_gateway::clock::unix_ms(),
    })
}
