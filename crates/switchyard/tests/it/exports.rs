//! Export sinks (`exports:`): every request's usage record reaches a webhook exactly once, across
//! a sink outage and a gateway restart, and no request waits for a sink.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::HashSet;
use std::time::{Duration, Instant};

use switchyard_testkit::{MockServer, TestClient};

use crate::common::*;

/// Send `n` chat requests; their request ids (= their usage records' ids).
async fn send(client: &TestClient, gw: &switchyard_gateway::RunningGateway, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let r = chat(client, gw, "m").await;
        assert_eq!(r.status, 200, "{}", r.text());
        ids.push(r.header("x-request-id").unwrap().to_owned());
    }
    ids
}

/// Wait (bounded) until the hook has every id of `sent`; then it must have nothing else, nothing twice.
async fn delivered_exactly(hook: &MockServer, sent: &[String]) {
    let want: HashSet<&String> = sent.iter().collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = hook.control().delivered_ids();
        let have: HashSet<&String> = got.iter().collect();
        if want.is_subset(&have) {
            assert_eq!(got.len(), have.len(), "a record was delivered twice");
            assert_eq!(have.len(), want.len(), "records that were never sent were delivered");
            return;
        }
        assert!(Instant::now() < deadline, "{} of {} records delivered", want.intersection(&have).count(), want.len());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(line_start)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_reaches_the_webhook_once_across_an_outage_and_a_restart() {
    let backend = mock(&["m"]).await;
    let hook = mock(&[]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nshutdown_grace: 1s\n\
         storage: {{url: 'sqlite://{0}/switchyard.db', usage_journal_dir: '{0}/usage'}}\n\
         exports:\n  - {{name: hook, type: webhook, url: '{1}/hooks/usage', batch_size: 20, batch_delay: 20ms}}\n\
         backends:\n  - {{name: b0, url: '{2}'}}\n",
        dir.display(),
        hook.url(),
        backend.url()
    );
    let client = TestClient::new();
    let gw = gateway_yaml(&yaml).await;
    let mut sent = send(&client, &gw, 50).await;
    delivered_exactly(&hook, &sent).await;

    // The hook is down: requests are not held up, the records wait in the journal.
    hook.control().set_fail_rate(1.0);
    sent.extend(send(&client, &gw, 50).await);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
        if metric(&text, "switchyard_export_failures_total{sink=\"hook\"} ") > 0 {
            assert!(metric(&text, "switchyard_export_records_total{sink=\"hook\",state=\"spilled\"} ") > 0, "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "no failed delivery counted:\n{text}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    hook.control().set_fail_rate(0.0);
    delivered_exactly(&hook, &sent).await;

    // Down again, and the gateway restarts meanwhile: the next instance delivers what the first could not.
    hook.control().set_fail_rate(1.0);
    sent.extend(send(&client, &gw, 30).await);
    gw.shutdown().await;
    let gw = gateway_yaml(&yaml).await;
    sent.extend(send(&client, &gw, 20).await);
    hook.control().set_fail_rate(0.0);
    delivered_exactly(&hook, &sent).await;
    let text = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(
        metric(&text, "switchyard_export_last_delivery_timestamp_seconds{sink=\"hook\"} ") > 1_700_000_000,
        "{text}"
    );
}

#[test]
fn exports_need_the_usage_journal() {
    let yaml = "storage: {record_usage: false}\nexports:\n  - {name: h, type: webhook, url: 'http://127.0.0.1:1/x'}\n";
    let e = switchyard_gateway::Config::from_yaml(yaml, &test_env(yaml)).unwrap_err();
    assert_eq!(e.path, "exports");
    let yaml = "exports:\n  - {name: h, type: carrier-pigeon}\n";
    assert_eq!(switchyard_gateway::Config::from_yaml(yaml, &test_env(yaml)).unwrap_err().path, "exports[0].type");
}
