//! `switchyard bench quick`: every scenario at tiny durations against the real binaries. Checks
//! the structure of the report and that no request failed — never timings.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::Command;

#[test]
fn quick_runs_every_scenario_without_errors() {
    let dir = std::env::temp_dir().join(format!("sy-bench-quick-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("quick.json");
    let charts = dir.join("charts");
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["bench", "quick", "--json"])
        .arg(&json)
        .arg("--report")
        .arg(&charts)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for heading in ["== overhead ==", "== throughput ==", "== stream ==", "== failover ==", "== findings =="] {
        assert!(stdout.contains(heading), "missing {heading} in\n{stdout}");
    }

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(report["machine"]["cpus"].as_u64().unwrap() >= 1);
    let phases = report["phases"].as_array().unwrap();
    let scenarios: std::collections::BTreeSet<&str> = phases.iter().map(|p| p["scenario"].as_str().unwrap()).collect();
    for s in ["overhead", "throughput", "stream", "large-payload", "burst", "sustained", "failover"] {
        assert!(scenarios.contains(s), "no {s} phase");
    }
    for p in phases {
        let f = &p["figures"];
        assert!(f["ok"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(f["ok"], f["requests"], "no request may fail: {p}");
        let l = &f["latency_us"];
        assert!(l["p50"].as_u64() <= l["p99"].as_u64() && l["p99"].as_u64() <= l["max"].as_u64(), "{p}");
    }
    // The direct and gateway sides of a comparison both ran, and the gateway named its backend.
    let overhead: Vec<_> = phases.iter().filter(|p| p["scenario"] == "overhead").collect();
    assert!(overhead.iter().any(|p| p["target"] == "direct") && overhead.iter().any(|p| p["target"] == "gateway"));
    assert!(overhead.iter().any(|p| p["figures"]["backends"]["mock"].as_u64().unwrap_or(0) > 0));
    let findings = report["findings"].as_array().unwrap();
    let find = |name: &str| findings.iter().find(|f| f["name"].as_str().unwrap().contains(name)).cloned();
    assert_eq!(find("client-visible failures").unwrap()["value"], 0.0);
    assert!(find("gateway RSS at idle").unwrap()["value"].as_f64().unwrap() > 0.0);
    assert!(find("b marked down").is_some() && find("b takes traffic").is_some());
    for chart in ["overhead-latency-cdf", "throughput-over-time", "failover-timeline", "burst-latency", "sustained-rss"]
    {
        for ext in ["svg", "png"] {
            assert!(charts.join(format!("{chart}.{ext}")).is_file(), "missing {chart}.{ext}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_query_fills_and_queries_a_database() {
    let json = std::env::temp_dir().join(format!("sy-bench-usage-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["bench", "usage-query", "--records", "3000", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let q = &report["extra"]["usage_query"];
    assert_eq!(q["records"], 3000);
    let queries = q["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 5);
    assert_eq!(queries[0]["requests_counted"], 3000, "the report counts every record");
    assert!(queries.iter().all(|x| x["p50_ms"].as_f64().unwrap() >= 0.0));
    let _ = std::fs::remove_file(&json);
}

/// `bench affinity-quick`: the affinity and shared-prefix scenarios at tiny sizes over KV-cache
/// mocks. Checks that every strategy was measured and the structural claims hold (the warm
/// turn under cache-aware routing hit the cache and cost less prefill than the first-512-bytes hash),
/// never timings beyond "a cache hit is cheaper than a miss".
#[test]
fn affinity_scenarios_run_at_tiny_sizes() {
    let dir = std::env::temp_dir().join(format!("sy-bench-affinity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("affinity.json");
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["bench", "affinity-quick", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let extra = &report["extra"];
    for strategy in ["round-robin", "least-connections", "sticky (x-session-id)", "cache-aware"] {
        assert!(extra[format!("affinity/256/{strategy}")]["ttft_p50_ms_per_turn"].is_array(), "{strategy}");
    }
    let cache_aware = &extra["shared-prefix/cache-aware"];
    let hash = &extra["shared-prefix/prefix-hash (first 512 bytes)"];
    assert!(cache_aware["cached_tokens"].as_f64().unwrap() > 0.0);
    let idle = |v: &serde_json::Value| {
        v["requests_per_backend"].as_array().unwrap().iter().filter(|r| r.as_f64() == Some(0.0)).count()
    };
    assert_eq!(idle(cache_aware), 0, "cache-aware uses every backend: {cache_aware}");
    // In steady state (the bench waits past the first health rounds, so every backend's slots are
    // known) the hash's one backend is full at once and the rest spill anywhere: their warm turns
    // miss. Before the slots were known it piled everyone onto one backend instead.
    let prefill = |v: &serde_json::Value| v["prefill_tokens"].as_f64().unwrap();
    assert!(prefill(cache_aware) < prefill(hash), "cache-aware {cache_aware} vs the hash {hash}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `switchyard bench a2a` at tiny durations: both paths answer every request, and the findings
/// it reports are there (an A2A call beside a model request).
#[test]
fn the_a2a_scenario_runs_without_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["bench", "a2a", "--duration", "0.2", "--warmup", "0"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for finding in ["gateway CPU per request, model request", "gateway CPU per request, A2A call"] {
        assert!(stdout.contains(finding), "missing `{finding}` in\n{stdout}");
    }
}
