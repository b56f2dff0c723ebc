//! Export sinks (`exports:`): every request's usage record reaches a webhook exactly once, across
//! a sink outage and a gateway restart, and no request waits for a sink.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::HashSet;
use std::time::{Duration, Instant};

use switchyard_testkit::{MockServer, TestClient};

use crate::common::moto::{moto_with_bucket, Moto};
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
    let deadline = Instant::now() + Duration::from_secs(60);
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
        if metric(&text, "switchyard_export_failures_total{sink=\"hook\"} ").unwrap_or(0) > 0 {
            assert!(
                metric(&text, "switchyard_export_records_total{sink=\"hook\",state=\"spilled\"} ").unwrap_or(0) > 0,
                "{text}"
            );
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
        metric(&text, "switchyard_export_last_delivery_timestamp_seconds{sink=\"hook\"} ").unwrap_or(0) > 1_700_000_000,
        "{text}"
    );
}

/// A sink down long enough to fall more than `max_backlog` behind loses its oldest records, whole
/// journal files at a time, and counts them; the journal on disk stays bounded; everything newer
/// is delivered once when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_past_its_max_backlog_drops_its_oldest_records_and_counts_them() {
    let backend = mock(&["m"]).await;
    let hook = mock(&[]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nshutdown_grace: 1s\n\
         storage: {{url: 'sqlite://{0}/switchyard.db', usage_journal_dir: '{0}/usage', usage_journal_file_bytes: 8KiB}}\n\
         exports:\n  - {{name: hook, type: webhook, url: '{1}/hooks/usage', batch_size: 20, batch_delay: 20ms, max_backlog: 32KiB}}\n\
         backends:\n  - {{name: b0, url: '{2}'}}\n",
        dir.display(),
        hook.url(),
        backend.url()
    );
    let client = TestClient::new();
    let gw = gateway_yaml(&yaml).await;
    let mut sent = send(&client, &gw, 10).await;
    delivered_exactly(&hook, &sent).await;

    hook.control().set_fail_rate(1.0);
    let outage = send(&client, &gw, 400).await;
    sent.extend(outage.iter().cloned());
    let dropped_metric = "switchyard_export_records_total{sink=\"hook\",state=\"dropped\"} ";
    // Sealed journal files (all but the newest, which is being written and mapped ahead).
    let sealed_bytes = || {
        let mut files: Vec<_> = std::fs::read_dir(dir.join("usage"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".journal"))
            .map(|e| (e.file_name(), e.metadata().map_or(0, |m| m.len())))
            .collect();
        files.sort();
        files.pop();
        files.iter().map(|f| f.1).sum::<u64>()
    };
    // Dropped and counted, and the journal on disk back within max_backlog (plus one file).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
        let (dropped, on_disk) = (metric(&text, dropped_metric).unwrap_or(0), sealed_bytes());
        if dropped > 0 && on_disk <= (32 + 8) * 1024 {
            assert!(dropped < outage.len() as u64, "dropped {dropped} of {}", outage.len());
            break;
        }
        assert!(Instant::now() < deadline, "{dropped} dropped, {on_disk} bytes of sealed journal:\n{text}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // Back: everything not dropped arrives once; what was dropped is the oldest of the outage, in
    // one run, and exactly as many as the counter says.
    hook.control().set_fail_rate(0.0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
        let dropped = metric(&text, dropped_metric).unwrap_or(0);
        let got = hook.control().delivered_ids();
        let have: HashSet<&String> = got.iter().collect();
        assert_eq!(got.len(), have.len(), "a record was delivered twice");
        let missing: Vec<usize> = (0..sent.len()).filter(|&i| !have.contains(&sent[i])).collect();
        if missing.len() as u64 == dropped {
            assert!(have.iter().all(|id| sent.contains(id)), "records that were never sent were delivered");
            let (first, last) = (missing[0], missing[missing.len() - 1]);
            assert_eq!(last - first + 1, missing.len(), "the dropped records are not one run: {missing:?}");
            assert!(first >= 10 && last < sent.len() - 20, "dropped {first}..={last} of {}", sent.len());
            break;
        }
        assert!(Instant::now() < deadline, "{} missing, {dropped} dropped", missing.len());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `format: parquet` needs a build with the `parquet` feature (the test command's); the default
/// build refuses it at config time, naming the field.
#[test]
fn parquet_objects_need_a_build_with_parquet() {
    let yaml = "exports:\n  - {name: p, type: s3, bucket: b, format: parquet}\n";
    let loaded = switchyard_gateway::Config::from_yaml(yaml, &test_env(yaml));
    if cfg!(feature = "parquet") {
        assert!(loaded.is_ok(), "{:?}", loaded.err());
    } else {
        let e = loaded.unwrap_err();
        assert!(e.path == "exports[0].format" && e.message.contains("--features parquet"), "{e:?}");
    }
}

#[test]
fn exports_need_the_usage_journal() {
    let yaml = "storage: {record_usage: false}\nexports:\n  - {name: h, type: webhook, url: 'http://127.0.0.1:1/x'}\n";
    let e = switchyard_gateway::Config::from_yaml(yaml, &test_env(yaml)).unwrap_err();
    assert_eq!(e.path, "exports");
    let yaml = "exports:\n  - {name: h, type: carrier-pigeon}\n";
    assert_eq!(switchyard_gateway::Config::from_yaml(yaml, &test_env(yaml)).unwrap_err().path, "exports[0].type");
}

/// Wait (bounded) until the bucket holds exactly `sent`'s records, each once. The bound is past the
/// writer's longest backoff (30 s) plus a put, so a sink that was down is tried again within it.
async fn in_bucket_exactly(moto: &Moto, sent: &[String]) {
    let want: HashSet<&String> = sent.iter().collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = moto.record_ids("usage");
        let have: HashSet<&String> = got.iter().collect();
        if want.is_subset(&have) {
            assert_eq!(got.len(), have.len(), "a record is in the bucket twice");
            assert_eq!(have.len(), want.len(), "records that were never sent are in the bucket");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} records in the bucket",
            want.intersection(&have).count(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A gateway's config with its storage in `dir`, one backend, and an S3 sink `lake` writing to
/// moto's bucket `usage`, with `sink` added to the sink's settings.
fn s3_yaml(dir: &std::path::Path, moto: &Moto, backend: &MockServer, sink: &str) -> String {
    format!(
        "listen: 127.0.0.1:0\nshutdown_grace: 1s\n\
         storage: {{url: 'sqlite://{0}/switchyard.db', usage_journal_dir: '{0}/usage'}}\n\
         exports:\n  - {{name: lake, type: s3, bucket: usage, endpoint: '{1}', region: us-east-1, \
         access_key_id: test, secret_access_key: test, batch_delay: 20ms, {3}}}\n\
         backends:\n  - {{name: b0, url: '{2}'}}\n",
        dir.display(),
        moto.url(),
        backend.url(),
        sink
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_lands_in_an_s3_bucket_once_across_a_frozen_server_and_a_restart() {
    let client = TestClient::new();
    let moto = moto_with_bucket(&client).await;
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let yaml = s3_yaml(&dir, &moto, &backend, "batch_size: 20, timeout: 1s");
    let gw = gateway_yaml(&yaml).await;
    let mut sent = send(&client, &gw, 45).await;
    in_bucket_exactly(&moto, &sent).await;
    let keys: Vec<String> = moto.objects("usage").into_iter().map(|(key, _)| key).collect();
    assert!(keys.iter().all(|k| k.starts_with("switchyard/dt=20") && k.ends_with(".jsonl")), "{keys:?}");

    // The server freezes (every put times out), the gateway restarts meanwhile, then it thaws.
    moto.signal("-STOP");
    sent.extend(send(&client, &gw, 25).await);
    gw.shutdown().await;
    let gw = gateway_yaml(&yaml).await;
    sent.extend(send(&client, &gw, 15).await);
    moto.signal("-CONT");
    in_bucket_exactly(&moto, &sent).await;
    drop(gw);
}

/// `format: parquet`: each batch is one Parquet object that an independent reader (pyarrow) reads
/// back with the records' columns and types; every record once. (A build with `--features parquet`:
/// the test command's.)
#[cfg(feature = "parquet")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_sink_in_parquet_writes_objects_pyarrow_reads_every_record_of_once() {
    let client = TestClient::new();
    let moto = moto_with_bucket(&client).await;
    let backend = mock(&["m"]).await;
    let dir = scratch_dir();
    let yaml = s3_yaml(&dir, &moto, &backend, "format: parquet, batch_size: 16");
    let gw = gateway_yaml(&yaml).await;
    let sent = send(&client, &gw, 40).await;
    in_bucket_exactly(&moto, &sent).await;
    let keys: Vec<String> = moto.objects("usage").into_iter().map(|(key, _)| key).collect();
    assert!(keys.iter().all(|k| k.starts_with("switchyard/dt=20") && k.ends_with(".parquet")), "{keys:?}");
    let bad = "exports:\n  - {name: l, type: s3, bucket: b, format: csv}\n";
    let e = switchyard_gateway::Config::from_yaml(bad, &test_env(bad)).unwrap_err();
    assert_eq!(e.path, "exports[0].format");
}

/// Today's UTC date, `YYYY-MM-DD` (the S3 sink's `dt=` partition).
fn utc_day() -> String {
    let out = std::process::Command::new("date").args(["-u", "+%F"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// An earlier try of a batch reached the bucket (say, a PUT that timed out here and was applied by
/// the server later): its object is never replaced; the sink counts what it holds and writes only
/// the rest of the batch, under the next key. Standing in for that try, an object of three
/// records at the key the first batch will take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_an_earlier_try_left_is_kept_and_only_the_rest_of_its_batch_is_written() {
    let client = TestClient::new();
    let moto = moto_with_bucket(&client).await;
    let dir = scratch_dir();
    std::fs::create_dir_all(dir.join("usage")).unwrap();
    std::fs::write(dir.join("usage/journal.id"), "0123456789abcdef").unwrap();
    let first = format!("switchyard/dt={}/0123456789abcdef-{:020}.jsonl", utc_day(), 0);
    let earlier = "{\"id\":\"earlier-1\"}\n{\"id\":\"earlier-2\"}\n{\"id\":\"earlier-3\"}\n";
    let put = client
        .request(http::Method::PUT, &format!("{}/usage/{first}", moto.url()), bytes::Bytes::from(earlier), &[])
        .await
        .unwrap();
    assert_eq!(put.status, 200, "{}", put.text());
    let backend = mock(&["m"]).await;
    let gw = gateway_yaml(&s3_yaml(&dir, &moto, &backend, "batch_size: 20")).await;
    let sent = send(&client, &gw, 12).await;
    // The earlier object stands for the first three records; every later one arrives once.
    let mut expected: Vec<String> = ["earlier-1", "earlier-2", "earlier-3"].map(String::from).to_vec();
    expected.extend(sent[3..].iter().cloned());
    in_bucket_exactly(&moto, &expected).await;
    let objects = moto.objects("usage");
    let kept = objects.iter().find(|(key, _)| *key == first).expect("the earlier object is still there");
    assert_eq!(kept.1, ["earlier-1", "earlier-2", "earlier-3"], "{objects:?}");
    let rest = first.replace(".jsonl", ".3.jsonl");
    assert!(objects.iter().any(|(key, ids)| *key == rest && ids.first() == Some(&sent[3])), "{objects:?}");
}

/// The gateway binary on `config`, SIGKILLed when dropped; its base URL.
struct Process(std::process::Child);

impl Process {
    fn start(config: &std::path::Path) -> (Process, String) {
        let (child, base) = spawn_gateway(config);
        (Process(child), base)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill(); // SIGKILL
        let _ = self.0.wait();
    }
}

async fn send_to(client: &TestClient, base: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let r = client
            .post_json(&format!("{base}/v1/chat/completions"), chat_body("m", false).as_bytes(), &[])
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        ids.push(r.header("x-request-id").unwrap().to_owned());
    }
    ids
}

/// Wait (bounded) until `f` holds.
async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A receiver that keeps each `Idempotency-Key`'s batch once stores every record exactly once,
/// though the gateway sends batches again: after a delivery slower than the sink's `timeout`
/// (the same process retries) and after a SIGKILL while a delivery is in flight (the next
/// process resends). Records that arrive meanwhile never join the batch being retried: a batch
/// that grew would come under a new key, and a deduping receiver would store its first part twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_deduping_by_idempotency_key_stores_each_record_once_across_a_timeout_and_a_sigkill() {
    let backend = mock(&["m"]).await;
    let hook = mock(&[]).await;
    let dir = scratch_dir();
    let config = |timeout: &str| {
        let yaml = format!(
            "listen: 127.0.0.1:0\nstorage: {{url: 'sqlite://{0}/switchyard.db', usage_journal_dir: '{0}/usage'}}\n\
             exports:\n  - {{name: hook, type: webhook, url: '{1}/hooks/usage', batch_size: 50, batch_delay: 20ms, timeout: {timeout}}}\n\
             backends:\n  - {{name: b0, url: '{2}'}}\n",
            dir.display(),
            hook.url(),
            backend.url()
        );
        let path = dir.join(format!("gateway-{timeout}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        path
    };
    let client = TestClient::new();
    let stored = || hook.control().stored_ids().len();

    // A receiver slower than the sink's timeout: it has the batch, the gateway retries it.
    hook.control().set_hook_delay(Duration::from_millis(1500));
    let (gateway, base) = Process::start(&config("300ms"));
    let mut sent = send_to(&client, &base, 5).await;
    until("the first batch is stored", || stored() == 5).await;
    sent.extend(send_to(&client, &base, 5).await);
    until("the retry is seen", || hook.control().repeated_keys() >= 1).await;
    hook.control().set_hook_delay(Duration::ZERO);
    until("all ten are delivered", || hook.control().stored_ids().len() >= 10).await;
    drop(gateway);

    // SIGKILL while a delivery is in flight, with more records journalled behind it.
    hook.control().set_hook_delay(Duration::from_secs(30));
    let (gateway, base) = Process::start(&config("60s"));
    let before = stored();
    sent.extend(send_to(&client, &base, 5).await);
    until("the batch in flight is stored", || stored() > before).await;
    sent.extend(send_to(&client, &base, 5).await);
    drop(gateway);
    hook.control().set_hook_delay(Duration::ZERO);
    let (_gateway, base) = Process::start(&config("60s"));
    sent.extend(send_to(&client, &base, 5).await);
    until("every record is stored", || stored() >= sent.len()).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // a late duplicate would land by now

    let kept = hook.control().stored_ids();
    let unique: HashSet<&String> = kept.iter().collect();
    assert_eq!(unique.len(), kept.len(), "a record was stored twice (a resend came under a new key)");
    assert_eq!(unique, sent.iter().collect::<HashSet<_>>());
    assert!(hook.control().delivered_ids().len() > kept.len(), "no batch was sent twice: the test proved nothing");
}
