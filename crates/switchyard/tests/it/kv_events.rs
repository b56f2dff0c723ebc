//! Routing on an engine's KV-cache events, black-box: a publisher speaking vLLM's wire protocol
//! (a ZeroMQ PUB of `[topic, seq, msgpack batch]` and a ROUTER answering replay requests from
//! its buffer, written here with the `zeromq` crate), a mock backend beside one without events,
//! and a word-level tokenizer with a chat template. What vLLM's and SGLang's own publisher code
//! does against the gateway is tests/kv_events (Python, their modules from their wheels).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rmpv::Value;
use switchyard_testkit::TestClient;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::common::*;

const BLOCK: usize = 16;

/// What an engine has published: (seq, payload), what a replay answers from.
type Buffer = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// A publisher on fixed ports (an engine restarted on the same ports is a new one).
struct Publisher {
    socket: PubSocket,
    buffer: Buffer,
    next_seq: u64,
    pub_port: u16,
    replay_port: u16,
    replays: tokio::task::JoinHandle<()>,
}

fn port_of(endpoint: &zeromq::Endpoint) -> u16 {
    match endpoint {
        zeromq::Endpoint::Tcp(_, port) => *port,
        other => panic!("{other:?}"),
    }
}

impl Publisher {
    async fn start(ports: Option<(u16, u16)>) -> Publisher {
        let (p, r) = ports.unwrap_or((0, 0));
        let mut socket = PubSocket::new();
        let pub_port = port_of(&bind(&mut socket, p).await);
        let mut router = RouterSocket::new();
        let replay_port = port_of(&bind(&mut router, r).await);
        let buffer: Buffer = Arc::default();
        let replays = tokio::spawn(serve_replays(router, buffer.clone()));
        Publisher { socket, buffer, next_seq: 0, pub_port, replay_port, replays }
    }

    /// Publishes one batch; `dropped`: numbered and kept for replay, but not sent (lost on the
    /// way, as a slow subscriber loses messages).
    async fn publish(&mut self, events: Vec<Value>, dropped: bool) {
        let batch = Value::Array(vec![Value::from(now_secs()), Value::Array(events), Value::Nil]);
        let mut payload = Vec::new();
        rmpv::encode::write_value(&mut payload, &batch).unwrap();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.buffer.lock().unwrap().push((seq, payload.clone()));
        if !dropped {
            let frames = vec![Bytes::new(), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::from(payload)];
            self.socket.send(ZmqMessage::try_from(frames).unwrap()).await.unwrap();
        }
    }

    async fn stop(self) {
        self.replays.abort();
        let _ = self.replays.await;
        drop(self.socket);
    }
}

/// Binds `socket` on `port` (0: any). A restarted engine takes its old ports again: the old
/// sockets' listeners close asynchronously, so the port may still be taken for a moment (for
/// at most 10 s here).
async fn bind<S: Socket>(socket: &mut S, port: u16) -> zeromq::Endpoint {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match socket.bind(&format!("tcp://127.0.0.1:{port}")).await {
            Ok(endpoint) => return endpoint,
            Err(e) if Instant::now() < deadline && e.to_string().contains("in use") => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("bind 127.0.0.1:{port}: {e}"),
        }
    }
}

fn now_secs() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The ROUTER side of replay: `[identity, "", start_seq]` answered with every buffered batch
/// from `start_seq` on, `[identity, "", seq, payload]`, then the `-1` end mark.
async fn serve_replays(mut router: RouterSocket, buffer: Buffer) {
    while let Ok(request) = router.recv().await {
        let frames = request.into_vec();
        let (id, start) = (frames[0].clone(), u64::from_be_bytes(frames[2][..].try_into().unwrap()));
        let batches: Vec<(u64, Vec<u8>)> =
            buffer.lock().unwrap().iter().filter(|(s, _)| *s >= start).cloned().collect();
        for (seq, payload) in batches {
            let reply =
                vec![id.clone(), Bytes::new(), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::from(payload)];
            router.send(ZmqMessage::try_from(reply).unwrap()).await.unwrap();
        }
        let end = vec![id, Bytes::new(), Bytes::copy_from_slice(&[0xFF; 8]), Bytes::new()];
        router.send(ZmqMessage::try_from(end).unwrap()).await.unwrap();
    }
}

fn s(text: &str) -> Value {
    Value::from(text)
}

/// `BlockStored` as vLLM ≥ 0.10 writes it: a map with a `type` key.
fn stored(hashes: &[u64], parent: Option<u64>, tokens: &[u32]) -> Value {
    Value::Map(vec![
        (s("type"), s("BlockStored")),
        (s("block_hashes"), Value::Array(hashes.iter().map(|&h| Value::from(h)).collect())),
        (s("parent_block_hash"), parent.map_or(Value::Nil, Value::from)),
        (s("token_ids"), Value::Array(tokens.iter().map(|&t| Value::from(t)).collect())),
        (s("block_size"), Value::from(BLOCK)),
        (s("lora_id"), Value::Nil),
        (s("medium"), s("GPU")),
    ])
}

fn cleared() -> Value {
    Value::Map(vec![(s("type"), s("AllBlocksCleared"))])
}

/// A word-level tokenizer (`w0` … `w299`, roles, `:` and `;`) with a chat template writing
/// `role : content ;` per message.
fn tokenizer_dir() -> std::path::PathBuf {
    let dir = scratch_dir();
    let mut vocab = serde_json::Map::new();
    for (i, word) in ["[UNK]", "user", "assistant", "system", ":", ";"].iter().enumerate() {
        vocab.insert((*word).into(), i.into());
    }
    for i in 0..300 {
        vocab.insert(format!("w{i}"), (6 + i).into());
    }
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let template = "{% for m in messages %}{{ m.role }} : {{ m.content }} ; {% endfor %}";
    std::fs::write(dir.join("tokenizer_config.json"), serde_json::json!({"chat_template": template}).to_string())
        .unwrap();
    dir
}

fn document(from: usize, words: usize) -> String {
    (from..from + words).map(|i| format!("w{}", i % 300)).collect::<Vec<_>>().join(" ")
}

fn body(messages: &[(&str, &str)]) -> String {
    let messages: Vec<serde_json::Value> =
        messages.iter().map(|(role, content)| serde_json::json!({"role": role, "content": content})).collect();
    serde_json::json!({"model": "m", "messages": messages}).to_string()
}

async fn metrics_until(client: &TestClient, url: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = client.get(&format!("{url}/metrics")).await.unwrap().text();
        if done(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "never {what}:\n{text}");
        tokio::task::yield_now().await;
        let _ = client.get(&format!("{url}/health")).await;
    }
}

async fn route(client: &TestClient, url: &str, body: &str) -> (String, String) {
    let r = client.post_json(&format!("{url}/v1/chat/completions"), body.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    (r.header("x-switchyard-backend").unwrap().to_owned(), r.header("x-switchyard-route").unwrap_or("").to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_that_holds_a_prompt_gets_it_what_it_held_before_the_gateway_started_included() {
    let dir = tokenizer_dir();
    let tokenizer = switchyard_tokenize::PromptTokenizer::load(&dir).unwrap();
    let (plain, publishing) = (mock(&["m"]).await, mock(&["m"]).await);
    // The engine served this document before the gateway started: blocks 1-4, seq 0.
    let doc = document(0, 80);
    let ids = tokenizer.chat_ids(&body(&[("user", &doc)])).unwrap();
    let held = ids.len() / BLOCK;
    assert!(held >= 4, "{ids:?}");
    let mut engine = Publisher::start(None).await;
    let hashes: Vec<u64> = (1..=held as u64).collect();
    engine.publish(vec![stored(&hashes, None, &ids[..held * BLOCK])], false).await;

    let yaml = format!(
        "listen: 127.0.0.1:0\nrouting: {{strategy: cache-aware}}\nhealth: {{interval: 100ms}}\n\
         models: {{m: {{tokenizer: '{}'}}}}\nbackends:\n  - {{name: b0, url: '{}'}}\n  - {{name: b1, url: '{}', \
         kv_events: {{endpoint: 'tcp://127.0.0.1:{}', replay_endpoint: 'tcp://127.0.0.1:{}', block_size: {BLOCK}}}}}\n",
        dir.display(),
        plain.url(),
        publishing.url(),
        engine.pub_port,
        engine.replay_port
    );
    let gw = gateway_yaml(&yaml).await;
    let (client, url) = (TestClient::new(), gw.url());
    let blocks = format!("switchyard_kv_blocks{{backend=\"b1\",tier=\"gpu\"}} {held}");
    let text = metrics_until(&client, &url, "learned the engine's blocks through replay", |t| {
        t.contains("switchyard_kv_events_live{backend=\"b1\"} 1") && t.contains(&blocks)
    })
    .await;
    assert_eq!(metric(&text, "switchyard_kv_event_gaps_total{backend=\"b1\"} "), Some(0), "{text}");

    // A continuation of the document goes where the engine holds it, and says so.
    let next = body(&[("user", &doc), ("assistant", "w5 w6"), ("user", "w7")]);
    for _ in 0..4 {
        let (backend, why) = route(&client, &url, &next).await;
        assert_eq!(backend, "b1", "{why}");
        assert!(why.contains(&format!("why=events: {held} blocks on b1")), "{why}");
    }

    // An Anthropic client's continuation is keyed as translated for the engine: the same blocks.
    let messages = serde_json::json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": doc}, {"role": "assistant", "content": "w5 w6"},
        {"role": "user", "content": [{"type": "text", "text": "w7"}]},
    ]});
    let r = client.post_json(&format!("{url}/v1/messages"), messages.to_string().as_bytes(), &[]).await.unwrap();
    let why = r.header("x-switchyard-route").unwrap_or("").to_owned();
    assert_eq!(r.status.as_u16(), 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-backend"), Some("b1"), "{why}");
    assert!(why.contains(&format!("why=events: {held} blocks on b1")), "{why}");

    // Three batches lost on the way, then one that arrives: the gap is asked of the replay socket.
    let other = document(100, 48);
    let other_ids = tokenizer.chat_ids(&body(&[("user", &other)])).unwrap();
    let n = other_ids.len() / BLOCK;
    for (k, dropped) in [true, true, true, false].into_iter().enumerate() {
        let first = 100 + 10 * k as u64;
        let hashes: Vec<u64> = (first..first + n as u64).collect();
        let tokens = if k == 0 { &other_ids[..n * BLOCK] } else { &ids[..BLOCK] };
        let parent = (k > 0).then_some(1);
        let event =
            if k == 0 { stored(&hashes, None, tokens) } else { stored(&hashes[..1], parent, &ids[BLOCK..2 * BLOCK]) };
        engine.publish(vec![event], dropped).await;
    }
    let text = metrics_until(&client, &url, "recovered the dropped batches", |t| {
        metric(t, "switchyard_kv_event_gaps_total{backend=\"b1\"} ") == Some(1)
    })
    .await;
    assert_eq!(metric(&text, "switchyard_kv_event_unrecovered_total{backend=\"b1\"} "), Some(0), "{text}");
    let (backend, why) = route(&client, &url, &body(&[("user", &other), ("assistant", "w1"), ("user", "w2")])).await;
    assert_eq!((backend.as_str(), why.contains(&format!("events: {n} blocks on b1"))), ("b1", true), "{why}");

    // Everything cleared: the continuation no longer finds its blocks on b1.
    engine.publish(vec![cleared()], false).await;
    metrics_until(&client, &url, "followed AllBlocksCleared", |t| {
        t.contains("switchyard_kv_blocks{backend=\"b1\",tier=\"gpu\"} 0")
    })
    .await;
    let (_, why) = route(&client, &url, &next).await;
    assert!(!why.contains("blocks on b1"), "{why}");

    // The engine restarts on the same ports, numbering from 0 again with a fresh cache, and
    // serves a document the gateway never saw.
    let ports = (engine.pub_port, engine.replay_port);
    engine.stop().await;
    let fresh = document(200, 48);
    let fresh_ids = tokenizer.chat_ids(&body(&[("user", &fresh)])).unwrap();
    let mut restarted = Publisher::start(Some(ports)).await;
    restarted.publish(vec![stored(&[7, 8], None, &fresh_ids[..2 * BLOCK])], false).await;
    metrics_until(&client, &url, "saw the restarted engine's blocks", |t| {
        t.contains("switchyard_kv_blocks{backend=\"b1\",tier=\"gpu\"} 2")
            && t.contains("switchyard_kv_events_live{backend=\"b1\"} 1")
            && metric(t, "switchyard_kv_event_restarts_total{backend=\"b1\"} ") == Some(1)
    })
    .await;
    let (backend, why) = route(&client, &url, &body(&[("user", &fresh), ("assistant", "w1"), ("user", "w2")])).await;
    assert_eq!((backend.as_str(), why.contains("events: 2 blocks on b1")), ("b1", true), "{why}");
    restarted.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
