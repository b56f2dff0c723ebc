//! A2A agents behind the gateway (issue 59): what an agent call costs the gateway next to a model
//! request, through the same gateway to the same fast mock, in alternating turns at 8
//! connections. The agent is the mock itself: its configured card names the mock's chat endpoint
//! as the JSON-RPC interface, and each call's JSON-RPC body carries a chat request beside its
//! `method` (the relay reads only the method), so both paths end in the same answer. The A2A path
//! does what every call does: read the method, check the key's agents, the agent's rpm, relay,
//! read the answer's task and write a usage record.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::{chat_body, fleet, measure, own_setup, start_gateway, start_mock, Mode};
use crate::load::RequestSpec;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

const TURNS: usize = 3;

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let model = args.model.as_str();
    let mock = start_mock(model, 1, None, pin)?;
    let dir = std::env::temp_dir().join(format!("switchyard-bench-a2a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let card = dir.join("card.json");
    let interface = format!("{}/v1/chat/completions", mock.url);
    let card_json = json!({"name": "bench", "supportedInterfaces": [{"url": interface, "protocolBinding": "JSONRPC"}]});
    std::fs::write(&card, card_json.to_string()).map_err(|e| format!("cannot write {}: {e}", card.display()))?;
    let config = format!(
        "listen: 127.0.0.1:0\nbackends:\n  - {{name: b, url: '{0}', models: ['{model}']}}\n\
         agents:\n  bench: {{url: '{0}', card: '{1}', rpm: 100000000}}\n",
        mock.url,
        card.display()
    );
    let gateway = start_gateway(&config, pin)?;
    let (_, model_request) = own_setup(&gateway, &mock, model).pair(&chat_body(model, false, "a2a bench"), false)?;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a2a bench"}]}},
        "model": model, "messages": [{"role": "user", "content": "a2a bench"}]});
    let agent_call = Arc::new(RequestSpec {
        uri: format!("{}/a2a/bench/", gateway.url).parse().map_err(|e| format!("bad URL: {e}"))?,
        body: Bytes::from(call.to_string()),
        headers: Vec::new(),
        stream: false,
        stream_end: b"",
        backend_header: model_request.backend_header.clone(),
        timeout: Duration::from_secs(30),
    });
    let (d, w) = (args.phase(4.0), args.warmup());
    let specs = [("model request", &model_request), ("A2A call", &agent_call)];
    let mut cpu = [(0u64, 0u64); 2];
    let mut p50 = [0f64; 2];
    for turn in 0..TURNS {
        for (i, (label, spec)) in specs.iter().enumerate() {
            let warm = if turn == 0 { w } else { Duration::ZERO };
            let before = fleet::cpu_us(gateway.pid());
            let stats = measure(&format!("{label}, turn {}", turn + 1), spec, Mode::Closed(8), warm, d).await;
            let after = fleet::cpu_us(gateway.pid());
            stats.all_ok(label)?;
            if let (Some(a), Some(b)) = (before, after) {
                cpu[i].0 += b.saturating_sub(a);
                cpu[i].1 += stats.ok;
            }
            p50[i] += stats.latency.value_at_quantile(0.5) as f64 / TURNS as f64;
            report.row("a2a", format!("closed c=8, {label}, turn {}", turn + 1), "gateway", &stats);
        }
    }
    let per = |(us, n): (u64, u64)| us as f64 / n.max(1) as f64;
    for (i, (label, _)) in specs.iter().enumerate() {
        report.finding("a2a", format!("gateway CPU per request, {label}"), per(cpu[i]), "µs");
        report.finding("a2a", format!("latency p50, {label}"), p50[i], "µs");
    }
    report.finding("a2a", "CPU an A2A call takes beside a model request", per(cpu[1]) - per(cpu[0]), "µs");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
