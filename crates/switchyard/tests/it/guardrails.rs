//! Guardrails, black-box (issue 32, the request side and whole answers): personal data and
//! secrets in every inbound API's texts are masked before the backend sees them (checked in the
//! mock's own log of what it was sent), a deny-listed word is refused with a 400
//! `content_blocked` in the client API's shape naming the guard and the kind but never the text,
//! a model's own guards add to the defaults, whole answers are masked on the way back, and every
//! verdict is counted in `/metrics`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use serde_json::{json, Value};
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{MockApi, MockConfig, MockServer, TestClient};

use crate::common::*;

/// Values that must never reach the backend.
const EMAIL: &str = "jane.doe@example.com";
const CARD: &str = "4111 1111 1111 1111";
const AWS: &str = "AKIAIOSFODNN7EXAMPLE";

async fn guarded_gateway(backend: &MockServer) -> RunningGateway {
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         guardrails:\n  default: [pii, secrets, blocker]\n\
         \x20 pii: {{type: pii, action: mask}}\n\
         \x20 secrets: {{type: secrets, action: mask}}\n\
         \x20 blocker: {{type: keywords, keywords: [project-nightingale], action: block, on: [request, response]}}\n\
         \x20 tokens: {{type: patterns, patterns: {{tok: 'tok[0-9]+'}}, action: mask, on: [response]}}\n\
         models:\n  m-masked: {{guardrails: [tokens]}}\n\
         aliases: {{m-masked: m}}\n\
         backends:\n{}",
        backends_yaml(&[backend])
    );
    gateway_yaml(&yaml).await
}

fn secret_text() -> String {
    format!("Mail {EMAIL}, card {CARD}, key {AWS}.")
}

/// (path, body) of one request per inbound API, the secrets in a user message and a system prompt.
fn requests(model: &str) -> Vec<(String, Value)> {
    let text = secret_text();
    vec![
        (
            "/v1/chat/completions".into(),
            json!({"model": model, "messages": [{"role": "system", "content": text}, {"role": "user", "content": [{"type": "text", "text": text}]}]}),
        ),
        ("/v1/responses".into(), json!({"model": model, "instructions": text, "input": text})),
        (
            "/v1/messages".into(),
            json!({"model": model, "max_tokens": 16, "system": text, "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}),
        ),
        (
            format!("/v1beta/models/{model}:generateContent"),
            json!({"systemInstruction": {"parts": [{"text": text}]}, "contents": [{"role": "user", "parts": [{"text": text}]}]}),
        ),
        ("/api/chat".into(), json!({"model": model, "stream": false, "messages": [{"role": "user", "content": text}]})),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_every_inbound_api_are_masked_before_the_backend_and_blocks_name_no_text() {
    let backend = mock(&["m"]).await;
    backend.control().keep_bodies();
    let gw = guarded_gateway(&backend).await;
    let client = TestClient::new();
    for (path, body) in requests("m") {
        let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    let sent = backend.control().bodies();
    assert_eq!(sent.len(), 5);
    for body in &sent {
        for raw in [EMAIL, CARD, AWS, "jane.doe"] {
            assert!(!body.contains(raw), "{raw} reached the backend: {body}");
        }
        for placeholder in ["[EMAIL]", "[CARD]", "[AWS_ACCESS_KEY]"] {
            assert!(body.contains(placeholder), "{placeholder} missing: {body}");
        }
    }

    // A deny-listed word: a 400 `content_blocked` in each API's shape, naming the guard and the
    // kind, never the text; nothing reaches the backend.
    for (path, mut body) in requests("m") {
        let blocked = body.to_string().replace("Mail", "About project-nightingale: mail");
        body = serde_json::from_str(&blocked).unwrap();
        let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
        let text = r.text();
        assert_eq!(r.status, 400, "{path}: {text}");
        assert!(text.contains("blocked by guardrail `blocker` (found: keyword)"), "{path}: {text}");
        let api = match path.as_str() {
            "/v1/chat/completions" => "chat",
            "/v1/responses" => "responses",
            "/v1/messages" => "anthropic",
            "/api/chat" => "ollama",
            _ => "gemini",
        };
        assert_block_is_machine_readable(api, &r.json(), "blocker", "keyword");
        assert!(!text.contains("nightingale"), "{path}: the matched text is not repeated: {text}");
    }
    assert_eq!(backend.control().bodies().len(), 5, "blocked requests never left");

    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    for line in [
        r#"switchyard_guardrail_verdicts_total{guard="pii",kind="email",action="mask"} "#,
        r#"switchyard_guardrail_verdicts_total{guard="secrets",kind="aws_access_key",action="mask"} "#,
        r#"switchyard_guardrail_verdicts_total{guard="blocker",kind="keyword",action="block"} 5"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_guards_add_to_the_defaults_and_whole_answers_are_masked() {
    let backend = mock(&["m"]).await;
    let gw = guarded_gateway(&backend).await;
    let client = TestClient::new();
    // The mock answers `tok0 tok1 …`: under `m-masked` (the `tokens` guard, answers only) every
    // token is masked; under `m` the answer is as the backend gave it.
    let ask = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hello"}]}).to_string();
    let url = format!("{}/v1/chat/completions", gw.url());
    let plain = client.post_json(&url, ask("m").as_bytes(), &[]).await.unwrap().json();
    let content = plain["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    assert!(content.contains("tok0"), "{content}");
    let masked = client.post_json(&url, ask("m-masked").as_bytes(), &[]).await.unwrap();
    assert_eq!(masked.status, 200, "{}", masked.text());
    let content = masked.json()["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    assert!(content.contains("[TOK]") && !content.contains("tok0"), "{content}");
    // The answer is still whole JSON with its usage.
    assert!(masked.json()["usage"]["total_tokens"].as_u64().is_some());
}

/// A request per streamed API whose answer echoes `result` (the mock quotes a tool result,
/// cut into stream pieces at each `REPLY_SPLIT`), for `model`.
pub(crate) fn tool_result_request(api: &str, model: &str, result: &str) -> (String, Value) {
    let call = json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
    match api {
        "chat" => (
            "/v1/chat/completions".into(),
            json!({"model": model, "stream": true, "messages": [
                {"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": call},
                {"role": "tool", "tool_call_id": "c1", "content": result}]}),
        ),
        "responses" => (
            "/v1/responses".into(),
            json!({"model": model, "stream": true, "input": [
                {"role": "user", "content": "go"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": result}]}),
        ),
        "gemini" => (
            format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            json!({"contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"result": result}}}]}]}),
        ),
        "ollama" => (
            "/api/chat".into(),
            json!({"model": model, "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
                {"role": "tool", "content": result}]}),
        ),
        _ => (
            "/v1/messages".into(),
            json!({"model": model, "max_tokens": 64, "stream": true, "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": result}]}]}),
        ),
    }
}

/// Backends of each API the mock speaks: OpenAI serving `m`, Anthropic `a`, Ollama `o` — so every
/// client API's answer comes translated (over `m`) and passed through (Anthropic, Ollama).
pub(crate) struct ThreeApis {
    pub(crate) mocks: [MockServer; 3],
    /// The config's `backends:` section for them.
    pub(crate) backends: String,
}

pub(crate) async fn three_apis() -> ThreeApis {
    let openai = mock(&["m"]).await;
    let anthropic = mock_with(&["a"], MockConfig { api: MockApi::Anthropic, ..MockConfig::default() }).await;
    let ollama = mock_with(&["o"], MockConfig { api: MockApi::Ollama, ..MockConfig::default() }).await;
    let backends = format!(
        "backends:\n  - {{name: oa, url: '{}'}}\n  - {{name: an, type: anthropic, url: '{}', api_key: k}}\n\
         \x20 - {{name: ol, type: ollama, url: '{}'}}\n",
        openai.url(),
        anthropic.url(),
        ollama.url()
    );
    ThreeApis { mocks: [openai, anthropic, ollama], backends }
}

/// Answer guards: personal data masked, `nightingale` blocked.
const MASK_AND_BLOCK_ANSWERS: &str = "guardrails:\n  default: [pii, blocker]\n\
    \x20 pii: {type: pii, action: mask, on: [response]}\n\
    \x20 blocker: {type: keywords, keywords: [nightingale], action: block, on: [response]}\n";

/// The answer text a client reads from a stream of this API.
pub(crate) fn streamed_text(api: &str, stream: &str) -> String {
    let pointer = match api {
        "chat" => "/choices/0/delta/content",
        "responses" => "/delta",
        "gemini" => "/candidates/0/content/parts/0/text",
        "ollama" => "/message/content",
        _ => "/delta/text",
    };
    stream
        .lines()
        .filter_map(|l| if api == "ollama" { Some(l) } else { l.strip_prefix("data: ") })
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| api != "responses" || v["type"] == "response.output_text.delta")
        .filter_map(|v| v.pointer(pointer).and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// A block in the client API's own error shape (an answer's body, or a stream's error event),
/// machine-readable without parsing English: OpenAI's `code`; Anthropic's `code` beside a type
/// Anthropic defines; Gemini's `google.rpc.ErrorInfo` naming the guard and the kind; Ollama's
/// error string led by the code.
pub fn assert_block_is_machine_readable(api: &str, v: &Value, guard: &str, kind: &str) {
    match api {
        // A Responses stream's error event is flat: `{"type":"error","code",…}`.
        "responses" if v["type"] == "error" => assert_eq!(v["code"], "content_blocked", "{v}"),
        "chat" | "responses" => assert_eq!(v["error"]["code"], "content_blocked", "{v}"),
        "anthropic" => {
            assert_eq!((&v["type"], &v["error"]["type"]), (&json!("error"), &json!("invalid_request_error")), "{v}");
            assert_eq!(v["error"]["code"], "content_blocked", "{v}");
        }
        "gemini" => {
            assert_eq!((&v["error"]["code"], &v["error"]["status"]), (&json!(400), &json!("INVALID_ARGUMENT")), "{v}");
            let info = &v["error"]["details"][0];
            assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo", "{v}");
            assert_eq!(info["reason"], "CONTENT_BLOCKED", "{v}");
            assert!(info["domain"].as_str().is_some_and(|d| !d.is_empty()), "{v}");
            assert_eq!(info["metadata"], json!({"guard": guard, "kind": kind}), "{v}");
        }
        _ => {
            let error = v["error"].as_str().unwrap_or_default();
            assert!(error.starts_with("content_blocked: "), "{v}");
        }
    }
}

/// The stream ends with the client API's own error event for a block, naming the guard.
fn assert_blocked_in_shape(api: &str, stream: &str) {
    let last = stream.trim_end().rsplit("\n\n").next().unwrap_or_default().trim();
    let last_line = stream.trim_end().lines().last().unwrap_or_default();
    let data = |s: &str| -> Value {
        let json = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or(s);
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{api}: {e} in {s:?}\n{stream}"))
    };
    let v = match api {
        "ollama" => data(last_line),
        _ => data(last),
    };
    if matches!(api, "responses" | "anthropic") {
        assert!(last.starts_with("event: error"), "{stream}");
    }
    assert_block_is_machine_readable(api, &v, "blocker", "keyword");
    let message = match api {
        "responses" => &v["message"],
        "ollama" => &v["error"],
        _ => &v["error"]["message"],
    };
    let message = message.as_str().unwrap_or_default();
    assert!(message.contains("blocker") && message.contains("keyword"), "{api}: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_answers_are_masked_however_the_stream_splits_them_and_a_block_ends_them_with_an_error() {
    // Translated streams (every client API over an OpenAI backend) and passed-through ones (an
    // Anthropic client to an Anthropic backend, an Ollama client to Ollama).
    let apis = three_apis().await;
    let yaml = format!("listen: 127.0.0.1:0\n{MASK_AND_BLOCK_ANSWERS}{}", apis.backends);
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let cases = [
        ("chat", "m"),
        ("responses", "m"),
        ("anthropic", "m"),
        ("anthropic", "a"),
        ("gemini", "m"),
        ("ollama", "m"),
        ("ollama", "o"),
    ];
    let text = "Reach jane.doe@example.com or 4111 1111 1111 1111 now";
    let wanted = "Tool result: Reach [EMAIL] or [CARD] now";
    for (api, model) in cases {
        for cut in 1..text.len() {
            let result = format!("{}{}{}", &text[..cut], switchyard_testkit::REPLY_SPLIT, &text[cut..]);
            let (path, body) = tool_result_request(api, model, &result);
            let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
            assert_eq!(r.status, 200, "{api}/{model} cut {cut}: {}", r.text());
            let stream = r.text();
            assert_eq!(streamed_text(api, &stream), wanted, "{api}/{model} cut {cut}:\n{stream}");
            assert!(
                !stream.contains("jane.doe") && !stream.contains("1111 1111"),
                "{api}/{model} cut {cut}:\n{stream}"
            );
        }
        // A deny-listed word in an answer ends its stream with the API's own error event, the
        // word never sent.
        let result = format!("all about night{}ingale here", switchyard_testkit::REPLY_SPLIT);
        let (path, body) = tool_result_request(api, model, &result);
        let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
        let stream = r.text();
        assert!(!stream.contains("nightingale"), "{api}/{model}:\n{stream}");
        assert_blocked_in_shape(api, &stream);
    }
}

/// A whole (not streamed) answer a built-in guard blocks is held until judged and refused with a
/// 400 `content_blocked` in the client API's own shape — never a cut connection — its text never
/// sent, and its usage record says 400. A masked whole answer goes out with its new length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_a_guard_blocks_is_a_400_in_the_apis_shape_and_a_masked_one_keeps_its_length() {
    let apis = three_apis().await;
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\n{MASK_AND_BLOCK_ANSWERS}{}",
        dir.display(),
        apis.backends
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let whole = |api: &str, model: &str, result: &str| {
        let (path, mut body) = tool_result_request(api, model, result);
        body.as_object_mut().unwrap().remove("stream");
        if api == "ollama" {
            body["stream"] = json!(false);
        }
        (path.replace(":streamGenerateContent?alt=sse", ":generateContent"), body)
    };
    let cases =
        [("chat", "m"), ("responses", "m"), ("anthropic", "m"), ("anthropic", "a"), ("gemini", "m"), ("ollama", "o")];
    for (api, model) in cases {
        let (path, body) = whole(api, model, "mail jane.doe@example.com now");
        let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, 200, "{api}/{model}: {}", r.text());
        assert!(r.text().contains("[EMAIL]") && !r.text().contains("jane.doe"), "{api}/{model}: {}", r.text());
        let length = r.header("content-length").and_then(|l| l.parse::<usize>().ok());
        assert_eq!(length, Some(r.body.len()), "{api}/{model}: the masked answer's own length");

        let (path, body) = whole(api, model, "all about nightingale here");
        let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, 400, "{api}/{model}: {}", r.text());
        assert!(!r.text().contains("nightingale"), "{api}/{model}: {}", r.text());
        let error = &r.json()["error"];
        let message = error.get("message").unwrap_or(error).as_str().unwrap_or_default().to_owned();
        assert!(message.contains("blocker") && message.contains("keyword"), "{api}/{model}: {}", r.text());
        assert_block_is_machine_readable(api, &r.json(), "blocker", "keyword");
    }
    let rows = records(&db, 2 * cases.len()).await;
    let statuses: Vec<i64> = rows.iter().map(|row| row.1).collect();
    assert_eq!(statuses.iter().filter(|&&s| s == 400).count(), cases.len(), "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), cases.len(), "{statuses:?}");
    // The answers judged whole are metered as relayed ones are: the backend's own usage, read
    // from the answer (not estimated).
    for row in rows.iter().filter(|row| row.1 == 200) {
        assert!(row.4 > 0 && !row.5, "the usage the backend reported: {rows:?}");
    }
}

/// The webhook guard service (`common::json_service::webhook_service`), masking on any call.
async fn webhook_service(delay: std::time::Duration) -> (String, crate::common::json_service::Seen) {
    crate::common::json_service::webhook_service(delay, |_| true).await
}

fn webhook_gateway_yaml(backend: &MockServer, url: &str, timeout: &str, on_error: &str, top: &str) -> String {
    format!(
        "listen: 127.0.0.1:0\n{top}\
         guardrails:\n  default: [hook]\n\
         \x20 hook: {{type: webhook, url: '{url}', timeout: {timeout}, on_error: {on_error}, action: block, \
         headers: {{authorization: 'Bearer hook-secret'}}}}\n\
         backends:\n{}",
        backends_yaml(&[backend])
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_guard_allows_masks_and_blocks_and_its_failures_follow_on_error() {
    let backend = mock(&["m"]).await;
    backend.control().keep_bodies();
    let (url, seen) = webhook_service(std::time::Duration::ZERO).await;
    let gw = gateway_yaml(&webhook_gateway_yaml(&backend, &url, "300ms", "closed", "")).await;
    let client = TestClient::new();
    let ask = |text: &str| json!({"model": "m", "messages": [{"role": "user", "content": text}]}).to_string();
    let post = |body: String| {
        let (client, url) = (client.clone(), format!("{}/v1/chat/completions", gw.url()));
        async move { client.post_json(&url, body.as_bytes(), &[]).await.unwrap() }
    };

    let r = post(ask("hello there")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(ask("my code-123 is here")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(ask("something forbidden")).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "content_blocked");
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("hook") && message.contains("policy 7") && !message.contains("forbidden"), "{message}");

    // The backend got the masked text, never the raw one, and nothing of the blocked request.
    let sent = backend.control().bodies();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent[1].contains("my [CODE] is here") && !sent.iter().any(|b| b.contains("code-123")), "{sent:?}");
    // The webhook was told the texts, the model and the direction.
    let asked = seen.lock().unwrap().clone();
    assert_eq!(asked.len(), 3);
    assert_eq!((&asked[0]["direction"], &asked[0]["model"]), (&json!("request"), &json!("m")));
    assert_eq!(asked[1]["texts"], json!(["my code-123 is here"]));
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert!(
        metrics.contains(r#"switchyard_guardrail_verdicts_total{guard="hook",kind="webhook",action="block"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"switchyard_guardrail_verdicts_total{guard="hook",kind="webhook",action="mask"} 1"#),
        "{metrics}"
    );
    // Each call to the webhook is timed under its name; the built-in detectors' scans as `builtin`.
    let timed =
        |guard: &str| metric(&metrics, &format!("switchyard_guardrail_duration_seconds_count{{guard=\"{guard}\"}} "));
    assert_eq!(timed("hook"), Some(3), "{metrics}");
    assert!(timed("builtin") >= Some(3), "{metrics}");

    // Down: `closed` refuses with a 503 at once, `open` lets the request through.
    let down = format!("http://{}/check", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap());
    for (on_error, status) in [("closed", 503), ("open", 200)] {
        let gw = gateway_yaml(&webhook_gateway_yaml(&backend, &down, "300ms", on_error, "")).await;
        let r =
            client.post_json(&format!("{}/v1/chat/completions", gw.url()), ask("hi").as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, status, "{on_error}: {}", r.text());
        if status == 503 {
            assert_eq!(r.json()["error"]["code"], "guardrail_unavailable");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_webhook_is_given_up_at_its_timeout_or_the_requests_deadline() {
    use std::time::{Duration, Instant};
    let backend = mock(&["m"]).await;
    let (slow, _) = webhook_service(Duration::from_secs(3)).await;
    let client = TestClient::new();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    // (webhook timeout, request deadline, on_error, status, when the answer is due)
    let cases = [
        ("300ms", "", "closed", 503, Duration::from_millis(300)),
        ("300ms", "", "open", 200, Duration::from_millis(300)),
        ("2s", "timeouts: {request: 500ms}\n", "closed", 503, Duration::from_millis(500)),
    ];
    for (timeout, top, on_error, status, due) in cases {
        let gw = gateway_yaml(&webhook_gateway_yaml(&backend, &slow, timeout, on_error, top)).await;
        let started = Instant::now();
        let r = client.post_json(&format!("{}/v1/chat/completions", gw.url()), body.as_bytes(), &[]).await.unwrap();
        let took = started.elapsed();
        assert_eq!(r.status, status, "{timeout} {on_error}: {}", r.text());
        // It waited for the webhook until then, and not much longer (a loaded debug build's
        // margin; release figures are in RELIABILITY.md).
        assert!(took >= due && took < due + Duration::from_millis(250), "{timeout} {top} {on_error}: {took:?}");
    }
}

/// A webhook guard on answers (`on: [response]`): the whole answer is held until it has judged —
/// a plain answer and a stream of every API, translated or passed through. Allowed answers go
/// out as they were; `code-123` comes back masked (a stream's text as one text, in pieces as the
/// backend split it); `forbidden` is refused with a 400 in the client API's own shape, before any
/// of it was sent. The webhook is told `direction: response`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_on_answers_holds_them_and_masks_or_blocks_them_before_they_go_out() {
    let apis = three_apis().await;
    let (url, seen) = webhook_service(std::time::Duration::ZERO).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         guardrails:\n  default: [hook]\n\
         \x20 hook: {{type: webhook, url: '{url}', timeout: 2s, on_error: closed, action: block, on: [response]}}\n{}",
        apis.backends
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let post = |path: String, body: Value| {
        let (client, url) = (client.clone(), format!("{}{path}", gw.url()));
        async move { client.post_json(&url, body.to_string().as_bytes(), &[]).await.unwrap() }
    };

    // A plain answer.
    let (path, mut body) = tool_result_request("chat", "m", "my code-123 is here");
    body.as_object_mut().unwrap().remove("stream");
    let r = post(path.clone(), body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Tool result: my [CODE] is here", "{}", r.text());
    assert_eq!(r.json()["usage"]["total_tokens"].as_u64().map(|t| t > 0), Some(true));
    let (_, mut body) = tool_result_request("chat", "m", "something forbidden");
    body.as_object_mut().unwrap().remove("stream");
    let r = post(path, body).await;
    assert_eq!((r.status.as_u16(), &r.json()["error"]["code"]), (400, &json!("content_blocked")), "{}", r.text());
    assert!(!r.text().contains("forbidden"), "{}", r.text());
    {
        let asked = seen.lock().unwrap();
        assert_eq!(asked.len(), 2, "asked about each answer, never the request: {asked:?}");
        assert_eq!(asked[0]["direction"], "response");
        assert!(asked[0]["texts"].as_array().unwrap().iter().any(|t| t == "Tool result: my code-123 is here"));
    }
    // Answers without text for it (embeddings) are neither held nor sent to it.
    let r = post("/v1/embeddings".into(), json!({"model": "m", "input": "forbidden words"})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(seen.lock().unwrap().len(), 2);

    let cases =
        [("chat", "m"), ("responses", "m"), ("anthropic", "m"), ("anthropic", "a"), ("gemini", "m"), ("ollama", "o")];
    for (api, model) in cases {
        let result = format!("my code{}-123 is here", switchyard_testkit::REPLY_SPLIT);
        let (path, body) = tool_result_request(api, model, &result);
        let r = post(path.clone(), body).await;
        assert_eq!(r.status, 200, "{api}/{model}: {}", r.text());
        let stream = r.text();
        assert_eq!(streamed_text(api, &stream), "Tool result: my [CODE] is here", "{api}/{model}:\n{stream}");
        assert!(!stream.contains("code-123") && !stream.contains("-123"), "{api}/{model}:\n{stream}");
        let (_, body) =
            tool_result_request(api, model, &format!("all forbid{}den here", switchyard_testkit::REPLY_SPLIT));
        let r = post(path, body).await;
        assert_eq!(r.status, 400, "{api}/{model}: {}", r.text());
        // In the API's own error shape (Anthropic's has no code; the message names the guard).
        assert!(r.text().contains("guardrail `hook`") && !r.text().contains("forbid"), "{api}/{model}: {}", r.text());
        let last = seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!(last["texts"], json!(["Tool result: all forbidden here"]), "{api}/{model}: one text");
    }
}

/// The held answer's cap: an answer a guard must judge whole — a remote guard, or built-in ones
/// on an answer that is not a stream — is held whole, so one over 64 MiB is refused (502) rather
/// than held, and a remote guard is never asked about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_too_large_to_hold_for_judging_is_refused_not_held() {
    let (backend, _) = crate::common::json_service::json_service(std::time::Duration::ZERO, |asked| {
        if asked.is_null() {
            return json!({"object": "list", "data": [{"id": "big", "object": "model"}]});
        }
        let content = "x".repeat((64 << 20) + 1024);
        json!({"id": "c", "object": "chat.completion", "model": "big",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
    })
    .await;
    let (url, seen) = webhook_service(std::time::Duration::ZERO).await;
    let webhook = format!("hook: {{type: webhook, url: '{url}', timeout: 2s, action: block, on: [response]}}");
    let builtin = "hook: {type: pii, action: mask, on: [response]}".to_owned();
    for guard in [webhook, builtin] {
        let yaml = format!(
            "listen: 127.0.0.1:0\nguardrails:\n  default: [hook]\n  {guard}\n\
             backends:\n  - {{name: b, url: 'http://{backend}', models: [big]}}\n"
        );
        let gw = gateway_yaml(&yaml).await;
        let body = json!({"model": "big", "messages": [{"role": "user", "content": "say a lot"}]});
        let r = TestClient::new()
            .post_json(&format!("{}/v1/chat/completions", gw.url()), body.to_string().as_bytes(), &[])
            .await
            .unwrap();
        assert_eq!(r.status, 502, "{guard}: {}", &r.text()[..r.text().len().min(300)]);
        assert!(r.body.len() < 4096, "{guard}: the answer itself never went out");
    }
    assert!(seen.lock().unwrap().is_empty(), "the guard was not asked about an answer it could not be shown");
}
