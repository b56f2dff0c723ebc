//! `switchyard bench floor`: the gateway's CPU per request beside the floor, a bare hyper proxy
//! (`bare_proxy.rs`) in front of the same mock, under the same load (plain requests at 16
//! connections), in the same run, taken in turns. The gateway runs as it would in production: a
//! virtual key with rpm, tpm, parallel and budget limits, and usage recorded. Idle resident
//! memory of both is read before any load.

use super::{chat_body, loaded_rps_and_cpu, own_setup, start_gateway, start_mock, BENCH_MASTER_KEY};

use crate::procs::{self, Proc};
use crate::report::Report;
use crate::{BenchArgs, Pinning};

/// Measured in turns: each round measures both, so drift (thermal, noisy neighbours) hits both.
const ROUNDS: usize = 3;

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let mock = start_mock(&args.model, args.stream_chunks, None, pin)?;
    let bare = Proc::start_bare_proxy(&mock.url, pin.gateway.as_deref())?;
    let config = format!(
        "listen: 127.0.0.1:0\nauth: {{master_key: '{BENCH_MASTER_KEY}'}}\nbackends:\n  - {{name: mock, url: '{}'}}\n",
        mock.url
    );
    let gateway = start_gateway(&config, pin)?;
    // Idle, before any request: what each costs to keep running, read once start-up is over (the
    // gateway lets go of the pages only start-up touched 5 s after it starts: server.rs).
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    for (label, proc) in [("bare proxy", &bare), ("gateway", &gateway)] {
        if let Some(rss) = proc.rss_bytes() {
            report.finding("floor", format!("idle RSS, {label}"), rss as f64 / (1 << 20) as f64, "MiB");
        }
    }
    let key = procs::create_key(&gateway.url, BENCH_MASTER_KEY).await?;
    let auth = http::HeaderValue::from_str(&format!("Bearer {key}")).map_err(|e| e.to_string())?;
    let body = chat_body(&args.model, false, "hello");
    let mut totals = [(0.0, 0.0); 2];
    for round in 1..=ROUNDS {
        for (i, (label, proc)) in
            [("bare proxy", &bare), ("gateway, key + limits + usage", &gateway)].into_iter().enumerate()
        {
            let mut setup = own_setup(proc, &mock, &args.model);
            if i == 1 {
                setup.headers.push((http::header::AUTHORIZATION, auth.clone()));
            }
            let label = format!("{label}, round {round}");
            let (rps, cpu) = loaded_rps_and_cpu("floor", &label, &setup, proc, &body, args, report).await?;
            totals[i].0 += rps / ROUNDS as f64;
            totals[i].1 += cpu / ROUNDS as f64;
        }
    }
    let [(bare_rps, bare_cpu), (gateway_rps, gateway_cpu)] = totals;
    report.finding("floor", "CPU per request, bare proxy (mean of rounds)", bare_cpu, "µs");
    report.finding("floor", "CPU per request, gateway (mean of rounds)", gateway_cpu, "µs");
    report.finding("floor", "CPU per request, gateway ÷ bare proxy", gateway_cpu / bare_cpu, "×");
    report.finding("floor", "throughput, gateway ÷ bare proxy", gateway_rps / bare_rps, "×");
    Ok(())
}
