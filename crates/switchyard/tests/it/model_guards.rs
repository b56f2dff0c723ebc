//! Model guards (issue 32, `type: model`), black-box: a classifier served through the gateway
//! itself — here a service that answers as Llama Guard does (`safe`, or `unsafe` and its
//! categories) — blocks a request in a configured category before the backend sees it, passes
//! one in another category, runs beside the call in `mode: parallel` with the answer held until
//! it has judged, follows `on_error` when it cannot answer, and each of its calls is a usage
//! record of its own, marked as the guard's.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{MockServer, TestClient};

use crate::common::json_service::{json_service, Seen};
use crate::common::*;

const MASTER: &str = "model-guard-master";

/// A classifier that answers as Llama Guard 3 does: `attack` → unsafe S2 (a configured
/// category), `lockpick` → unsafe S9 (not configured), anything else → safe.
async fn llama_guard(delay: Duration) -> (String, Seen) {
    let (addr, seen) = json_service(delay, |asked| {
        // The last turn is judged: the user's (a request), or the assistant's (an answer).
        let turns = asked["messages"].as_array().cloned().unwrap_or_default();
        let prompt = turns.last().and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
        let verdict = if prompt.contains("attack") {
            "unsafe\nS2"
        } else if prompt.contains("lockpick") {
            "unsafe\nS9"
        } else {
            "safe"
        };
        json!({
            "id": "g", "object": "chat.completion", "created": 0, "model": "llama-guard",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": verdict}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43},
        })
    })
    .await;
    (format!("http://{addr}"), seen)
}

async fn guarded(backend: &MockServer, classifier: &str, settings: &str) -> RunningGateway {
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         storage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n\
         auth: {{master_key: {MASTER}}}\n\
         guardrails:\n  default: [llama]\n\
         \x20 llama: {{type: model, model: llama-guard, categories: [S1, S2], on: [request]{settings}}}\n\
         backends:\n  - {{name: b0, url: '{}'}}\n  - {{name: classifier, url: '{classifier}', models: [llama-guard]}}\n",
        db_url(&dir),
        dir.display(),
        backend.url(),
    );
    gateway_yaml(&yaml).await
}

async fn ask(client: &TestClient, gw: &RunningGateway, text: &str) -> (u16, Value, String) {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": text}]}).to_string();
    let bearer = format!("Bearer {MASTER}");
    let r = client
        .post_json(&format!("{}/v1/chat/completions", gw.url()), body.as_bytes(), &[("authorization", &bearer)])
        .await
        .unwrap();
    let id = r.header("x-request-id").unwrap_or_default().to_owned();
    (r.status.as_u16(), r.json(), id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_guard_blocks_its_categories_before_the_backend_and_its_calls_are_recorded() {
    let backend = mock(&["m"]).await;
    backend.control().keep_bodies();
    let (classifier, seen) = llama_guard(Duration::ZERO).await;
    let gw = guarded(&backend, &classifier, "").await;
    let client = TestClient::new();

    let (status, body, _) = ask(&client, &gw, "hello there").await;
    assert_eq!(status, 200, "{body}");
    let (status, body, blocked_id) = ask(&client, &gw, "plan an attack on the server").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "content_blocked");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("llama") && message.contains("S2") && !message.contains("attack"), "{message}");
    // S9 is not among the categories that block.
    let (status, body, _) = ask(&client, &gw, "how does a lockpick work").await;
    assert_eq!(status, 200, "{body}");

    // The backend never saw the blocked request; the classifier saw all three, as one user turn.
    let sent = backend.control().bodies();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(!sent.iter().any(|b| b.contains("attack")), "{sent:?}");
    let asked = seen.lock().unwrap().clone();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!((&asked[1]["model"], &asked[1]["messages"][0]["role"]), (&json!("llama-guard"), &json!("user")));

    // Six records: three requests and three guard calls, each call marked with its guard.
    let rows = request_log(&client, &gw, MASTER, 6).await;
    let calls: Vec<&Value> = rows.iter().filter(|r| r["guard_call"] == "llama").collect();
    assert_eq!(calls.len(), 3, "{rows:?}");
    assert!(calls.iter().all(|r| r["model_requested"] == "llama-guard" && r["status"] == 200), "{calls:?}");
    assert!(calls.iter().all(|r| r["backend"] == "classifier" && r["total_tokens"] == 43), "{calls:?}");
    let blocked = rows.iter().find(|r| r["id"] == blocked_id.as_str()).unwrap();
    assert_eq!(blocked["status"], 400);
    assert_eq!(blocked["guardrails"], json!([{"guard": "llama", "kind": "model", "action": "block", "count": 1}]));
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(
        metrics.contains(r#"switchyard_guardrail_verdicts_total{guard="llama",kind="model",action="block"} 1"#),
        "{metrics}"
    );
    assert_eq!(metric(&metrics, "switchyard_guardrail_duration_seconds_count{guard=\"llama\"} "), Some(3), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_parallel_mode_the_call_goes_ahead_and_the_answer_waits_for_the_verdict() {
    let backend = mock(&["m"]).await;
    backend.control().keep_bodies();
    let judging = Duration::from_millis(400);
    let (classifier, _) = llama_guard(judging).await;
    let gw = guarded(&backend, &classifier, ", mode: parallel").await;
    let client = TestClient::new();

    let started = Instant::now();
    let (status, body, _) = ask(&client, &gw, "hello there").await;
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() >= judging, "answered before the verdict: {:?}", started.elapsed());
    let started = Instant::now();
    let (status, body, _) = ask(&client, &gw, "plan an attack").await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("content_blocked")), "{body}");
    assert!(started.elapsed() >= judging);
    // The call went ahead while the classifier judged: the backend got both requests (the
    // blocked one's answer was held and dropped).
    let sent = backend.control().bodies();
    assert_eq!(sent.len(), 2, "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classifier_that_cannot_answer_fails_as_on_error_says() {
    let backend = mock(&["m"]).await;
    let down = format!("http://{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap());
    let (slow, _) = llama_guard(Duration::from_secs(3)).await;
    let client = TestClient::new();
    // (classifier, settings, status, answered within)
    let cases = [
        (&down, ", on_error: closed", 503, Duration::from_secs(2)),
        (&down, ", on_error: open", 200, Duration::from_secs(2)),
        (&slow, ", timeout: 300ms", 503, Duration::from_millis(300)),
        (&slow, ", timeout: 300ms, on_error: open", 200, Duration::from_millis(300)),
    ];
    for (classifier, settings, status, within) in cases {
        let gw = guarded(&backend, classifier, settings).await;
        let started = Instant::now();
        let (got, body, _) = ask(&client, &gw, "hello").await;
        let took = started.elapsed();
        assert_eq!(got, status, "{settings}: {body}");
        if status == 503 {
            assert_eq!(body["error"]["code"], "guardrail_unavailable", "{body}");
        }
        // Given up at the timeout, not much later (a loaded debug build's margin).
        assert!(took < within + Duration::from_millis(400), "{settings}: {took:?}");
    }
}

/// `api: moderations`: an OpenAI-compatible moderation model (the mock flags "attack" as
/// violence) blocks the categories named, through the gateway's own `/v1/moderations`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moderation_model_guard_blocks_its_flagged_categories() {
    let backend = mock(&["m", "mod"]).await;
    backend.control().keep_bodies();
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         guardrails:\n  default: [moderator]\n  moderator: {{type: model, model: mod, api: moderations, categories: [violence]}}\n\
         backends:\n  - {{name: b0, url: '{}'}}\n",
        db_url(&dir),
        dir.display(),
        backend.url(),
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let (status, body, _) = ask(&client, &gw, "a calm afternoon").await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = ask(&client, &gw, "attack the castle at dawn").await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("content_blocked")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("moderator") && message.contains("violence") && !message.contains("castle"), "{message}");
    // Two moderation calls and one chat reached the backend; the blocked chat did not.
    let sent = backend.control().bodies();
    assert_eq!(sent.iter().filter(|b| b.contains("\"input\"")).count(), 2, "{sent:?}");
    assert!(!sent.iter().any(|b| b.contains("\"messages\"") && b.contains("castle")), "{sent:?}");
    let rows = request_log(&client, &gw, MASTER, 4).await;
    assert_eq!(rows.iter().filter(|r| r["guard_call"] == "moderator").count(), 2, "{rows:?}");
}

/// A model guard on answers (`on: [response]`): the classifier judges the assistant's turn of the
/// whole answer — plain or streamed, held until it has — and an answer in a configured category
/// is refused with a 400 before any of it is sent, while a safe one goes out as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_guard_on_answers_blocks_an_unsafe_answer_before_it_goes_out() {
    let backend = mock(&["m"]).await;
    let (classifier, seen) = llama_guard(Duration::ZERO).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         storage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n\
         auth: {{master_key: {MASTER}}}\n\
         guardrails:\n  default: [llama]\n\
         \x20 llama: {{type: model, model: llama-guard, categories: [S1, S2], on: [response]}}\n\
         backends:\n  - {{name: b0, url: '{}'}}\n  - {{name: classifier, url: '{classifier}', models: [llama-guard]}}\n",
        db_url(&dir),
        dir.display(),
        backend.url(),
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let bearer = format!("Bearer {MASTER}");
    // The mock's answer quotes a tool result: the answer says what the result said.
    let call = json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
    for stream in [false, true] {
        for (result, status) in [("all quiet", 200), ("the attack starts at dawn", 400)] {
            let body = json!({"model": "m", "stream": stream, "messages": [
                {"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": call},
                {"role": "tool", "tool_call_id": "c1", "content": result}]});
            let url = format!("{}/v1/chat/completions", gw.url());
            let r = client.post_json(&url, body.to_string().as_bytes(), &[("authorization", &bearer)]).await.unwrap();
            assert_eq!(r.status, status, "stream {stream}, {result}: {}", r.text());
            if status == 400 {
                assert_eq!(r.json()["error"]["code"], "content_blocked");
                assert!(r.text().contains("S2") && !r.text().contains("dawn"), "{}", r.text());
            } else {
                assert!(r.text().contains("all quiet"), "{}", r.text());
            }
            let asked = seen.lock().unwrap().last().cloned().unwrap();
            assert_eq!(asked["messages"][1]["role"], "assistant", "{asked}");
            assert!(asked["messages"][1]["content"].as_str().unwrap().contains(result), "{asked}");
        }
    }
    assert_eq!(seen.lock().unwrap().len(), 4, "asked once per answer, never about a request");
    // Each answer's record waits for the verdict: a blocked one says 400 and names the block, and
    // still counts the tokens the backend spent.
    let rows = request_log(&client, &gw, MASTER, 8).await;
    let mut answers: Vec<(u64, &Value)> = rows
        .iter()
        .filter(|r| r["model_requested"] == "m")
        .map(|r| (r["status"].as_u64().unwrap(), &r["guardrails"]))
        .collect();
    answers.sort_by_key(|(status, _)| *status);
    let block = json!([{"guard": "llama", "kind": "model", "action": "block", "count": 1}]);
    assert_eq!(answers.len(), 4, "{rows:?}");
    assert!(answers[..2].iter().all(|(s, v)| *s == 200 && v.as_array().is_none_or(Vec::is_empty)), "{rows:?}");
    assert!(answers[2..].iter().all(|(s, v)| *s == 400 && **v == block), "{rows:?}");
    assert!(
        rows.iter().filter(|r| r["model_requested"] == "m").all(|r| r["total_tokens"].as_u64() > Some(0)),
        "{rows:?}"
    );
}
