//! `switchyard experiments list|show|pairs|create|delete|simulate`: a thin client of the admin
//! API's `/admin/experiments` (the same checks and storage as HTTP callers), and `simulate`, the
//! seeded simulation of adaptive allocation that BENCHMARKS.md reports (no gateway needed).

use clap::{Args, Subcommand};
use http::Method;
use serde_json::Value;
use switchyard_experiments::simulate::Simulation;
use switchyard_experiments::AdaptiveSettings;

#[derive(Args, Debug)]
pub struct ExperimentsArgs {
    #[command(flatten)]
    admin: crate::orgs::Admin,
    #[command(subcommand)]
    action: ExperimentsAction,
}

#[derive(Subcommand, Debug)]
enum ExperimentsAction {
    /// Every experiment, with its variants' shares now.
    List,
    /// One experiment's results: per variant and metric, count, mean, 95% interval, difference.
    Show {
        name: String,
    },
    /// The newest shadow pairs (the request, the primary's answer, the shadow's).
    Pairs {
        name: String,
    },
    /// Create (or with --replace, replace) an experiment from a YAML or JSON file in the shape
    /// `experiments.NAME` takes in the configuration.
    Create {
        name: String,
        #[arg(long)]
        file: std::path::PathBuf,
        #[arg(long)]
        replace: bool,
    },
    Delete {
        name: String,
    },
    /// Adaptive allocation on simulated variants of known success rates, over many seeds: how
    /// often the better one is declared, and after how many requests.
    Simulate {
        /// Each variant's success rate, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "0.60,0.66")]
        rates: Vec<f64>,
        #[arg(long, default_value_t = 200)]
        runs: u64,
        #[arg(long, default_value_t = 0.1)]
        floor: f64,
        #[arg(long, default_value_t = 0.05)]
        alpha: f64,
    },
}

pub async fn run(args: ExperimentsArgs) -> Result<(), String> {
    let base = args.admin.url.trim_end_matches('/');
    let key = args.admin.master_key.as_deref();
    let (method, path, body) = match args.action {
        ExperimentsAction::Simulate { rates, runs, floor, alpha } => return simulate(rates, runs, floor, alpha),
        ExperimentsAction::List => (Method::GET, "/admin/experiments".to_owned(), Value::Null),
        ExperimentsAction::Show { name } => (Method::GET, format!("/admin/experiments/{name}"), Value::Null),
        ExperimentsAction::Pairs { name } => (Method::GET, format!("/admin/experiments/{name}/pairs"), Value::Null),
        ExperimentsAction::Delete { name } => (Method::DELETE, format!("/admin/experiments/{name}"), Value::Null),
        ExperimentsAction::Create { name, file, replace } => {
            let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let spec: Value = yaml_serde::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
            match replace {
                true => (Method::PUT, format!("/admin/experiments/{name}"), spec),
                false => {
                    let mut spec = spec;
                    if let Some(fields) = spec.as_object_mut() {
                        fields.insert("name".to_owned(), Value::String(name));
                    }
                    (Method::POST, "/admin/experiments".to_owned(), spec)
                }
            }
        }
    };
    crate::keys::admin_call(base, key, method, &path, &body).await
}

fn simulate(rates: Vec<f64>, runs: u64, floor: f64, alpha: f64) -> Result<(), String> {
    if rates.len() < 2 || rates.iter().any(|r| !(0.0..=1.0).contains(r)) {
        return Err("--rates: two success rates or more, each between 0 and 1".to_owned());
    }
    if !(alpha > 0.0 && alpha < 0.5 && (0.0..=1.0 / rates.len() as f64).contains(&floor)) {
        return Err("--alpha is above 0 and below 0.5; --floor times the variants is at most 1".to_owned());
    }
    let settings = AdaptiveSettings { alpha, floor, ..AdaptiveSettings::default() };
    let sim = Simulation { rates: rates.clone(), settings, refresh: 100, max_requests: 200_000 };
    let r = sim.repeat(0..runs);
    println!(
        "rates {rates:?}, floor {floor}, alpha {alpha}: {} runs; the best declared {} times, another {} times, \
         undecided after 200,000 requests {} times; requests to decide: median {}, p90 {}; the best variant's \
         share of all requests {:.1}%",
        r.runs,
        r.correct,
        r.wrong,
        r.undecided,
        r.median_requests,
        r.p90_requests,
        r.best_share * 100.0
    );
    Ok(())
}
