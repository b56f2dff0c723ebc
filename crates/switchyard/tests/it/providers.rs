//! Hosted-provider backends against mocks built from their published API references: Azure
//! OpenAI's v1 API and its deployment-style URLs (`api-version`, `api-key`), reached from every
//! inbound API, plain and streamed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common::*;
use serde_json::{json, Value};
use switchyard_testkit::{MockApi, MockConfig, TestClient};

/// (path, body) for `model` in each inbound API, plain and streamed.
fn requests(model: &str) -> Vec<(&'static str, Value)> {
    every_api(model, "hello")
}

async fn azure_mock() -> switchyard_testkit::MockServer {
    let cfg = MockConfig { api: MockApi::Azure, api_key: Some("az-key".into()), ..MockConfig::default() };
    mock_with(&["gpt-4o-prod"], cfg).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_v1_and_deployment_urls_serve_every_inbound_api() {
    for (api_version, expected_path) in [
        ("", "/openai/v1/chat/completions?"),
        (", api_version: 2024-10-21", "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"),
    ] {
        let azure = azure_mock().await;
        let yaml = format!(
            "listen: 127.0.0.1:0\nbackends:\n  - {{name: az, type: azure, url: '{}/openai/v1', api_key: az-key, models: [gpt-4o-prod]{api_version}}}\n",
            azure.url()
        );
        let gw = gateway_yaml(&yaml).await;
        let client = TestClient::new();
        for (path, body) in requests("gpt-4o-prod") {
            let what = format!("{path}, stream {}{api_version}", body["stream"]);
            let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
            assert_eq!(r.status, 200, "{what}: {}", r.text());
            let text = r.text();
            assert!(text.contains("tok0"), "{what}: {text}");
            let failed = ["stream_aborted", "\"error\":{", "event: error", "\"type\":\"error\""];
            assert!(!failed.iter().any(|f| text.contains(f)), "{what}: {text}");
        }
        let paths = azure.control().posted_paths();
        assert_eq!(paths.len(), 8, "{paths:?}");
        assert!(paths.iter().all(|p| p == expected_path), "{paths:?}");
        // The health probe found it up through Azure's own model list (with its key).
        let models = client.get(&format!("{}/v1/models", gw.url())).await.unwrap().json();
        assert_eq!(models["data"][0]["id"], "gpt-4o-prod");
    }
}

#[test]
fn azure_backends_need_their_deployments_and_only_they_take_an_api_version() {
    let load = |yaml: &str| switchyard_gateway::Config::from_yaml(yaml, &std::collections::HashMap::new());
    let e = load("backends: [{name: a, type: azure, url: 'https://r.openai.azure.com', api_key: k}]").unwrap_err();
    assert!(e.to_string().starts_with("backends[0].models"), "{e}");
    let e = load("backends: [{name: a, url: 'http://x:1', api_version: 2024-10-21}]").unwrap_err();
    assert!(e.to_string().starts_with("backends[0].api_version"), "{e}");
    let bad = "backends: [{name: a, type: azure, url: 'https://r.openai.azure.com', models: ['a/b'], api_version: v1}]";
    assert!(load(bad).unwrap_err().to_string().starts_with("backends[0].models[0]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_serves_every_inbound_api_with_tools_and_streams() {
    let cfg = MockConfig { api: MockApi::Gemini, api_key: Some("g-key".into()), ..MockConfig::default() };
    let gemini = mock_with(&["gemini-2.5-flash"], cfg).await;
    let yaml = format!(
        "listen: 127.0.0.1:0\nbackends:\n  - {{name: g, type: gemini, url: '{}', api_key: g-key}}\n",
        gemini.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    // Discovered through Gemini's own model list (`models/` prefix taken off).
    let models = client.get(&format!("{}/v1/models", gw.url())).await.unwrap().json();
    assert_eq!(models["data"][0]["id"], "gemini-2.5-flash", "{models}");
    for (path, body) in requests("gemini-2.5-flash") {
        let what = format!("{path}, stream {}", body["stream"]);
        let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        let text = r.text();
        assert!(text.contains("tok0") && text.contains("tok4"), "{what}: {text}");
        let failed = ["stream_aborted", "\"error\":{", "event: error", "\"type\":\"error\""];
        assert!(!failed.iter().any(|f| text.contains(f)), "{what}: {text}");
    }
    // A tool round trip through OpenAI Chat: the call, then its result.
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"location": {"type": "string"}}}}}]);
    for stream in [false, true] {
        let ask = json!({"model": "gemini-2.5-flash", "stream": stream, "tools": tools,
            "messages": [{"role": "user", "content": "Weather in Paris?"}]});
        let r = client.post_json(&format!("{}/v1/chat/completions", gw.url()), ask.to_string().as_bytes(), &[]).await;
        let text = r.unwrap().text();
        assert!(text.contains("get_weather") && text.contains("Paris"), "stream {stream}: {text}");
        assert!(text.contains("tool_calls"), "stream {stream}: {text}");
    }
    let answer = json!({"model": "gemini-2.5-flash", "tools": tools, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}]});
    let r = client.post_json(&format!("{}/v1/chat/completions", gw.url()), answer.to_string().as_bytes(), &[]).await;
    let r = r.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Tool result: 18C and sunny");
    // Gemini's own errors reach the client in its API's shape, with their status.
    gemini.control().set_fail_next(1);
    gemini.control().set_fail_status(400);
    let r = client
        .post_json(&format!("{}/v1/messages", gw.url()), requests("gemini-2.5-flash")[2].1.to_string().as_bytes(), &[])
        .await;
    let r = r.unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["type"], "error", "{}", r.text());
}

/// Gemini's own API inbound: the model in the path, answered by a Gemini backend as it is (its
/// usage read from `usageMetadata`) and by an OpenAI-compatible one through translation; errors
/// in Gemini's shape; and the cache keeps two models' answers apart though their bodies match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_clients_reach_every_backend_and_are_metered() {
    let cfg = MockConfig { api: MockApi::Gemini, api_key: Some("g-key".into()), ..MockConfig::default() };
    let gemini = mock_with(&["gemini-2.5-flash"], cfg).await;
    let openai = mock(&["llama"]).await;
    let dir = scratch_dir();
    let db = db_url(&dir);
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{db}', usage_journal_dir: '{}/usage'}}\ncache: {{}}\nbackends:\n  - {{name: g, type: gemini, url: '{}', api_key: g-key}}\n  - {{name: o, url: '{}'}}\n",
        dir.display(),
        gemini.url(),
        openai.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}).to_string();
    let mut answers = Vec::new();
    for model in ["gemini-2.5-flash", "llama"] {
        for method in [":generateContent", ":streamGenerateContent?alt=sse"] {
            let url = format!("{}/v1beta/models/{model}{method}", gw.url());
            let r = client.post_json(&url, body.as_bytes(), &[("x-goog-api-key", "client-key")]).await.unwrap();
            let what = format!("{model}{method}");
            assert_eq!(r.status, 200, "{what}: {}", r.text());
            assert_eq!(r.header("x-switchyard-cache"), Some("miss"), "{what}: two models, two answers");
            let text = r.text();
            assert!(text.contains("tok4") && text.contains("\"finishReason\":\"STOP\""), "{what}: {text}");
            assert!(text.contains("usageMetadata"), "{what}: {text}");
            answers.push(text);
        }
    }
    // Both models answered with metered usage: the Gemini backend's as it reported it.
    let rows = records(&db, 4).await;
    assert!(rows.iter().all(|r| r.1 == 200 && r.3 == 5 && !r.5), "{rows:?}");
    // An unknown model is a 404 in Gemini's shape.
    let url = format!("{}/v1beta/models/nope:generateContent", gw.url());
    let r = client.post_json(&url, body.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["status"], "NOT_FOUND", "{}", r.text());
    // A body without contents is the client's error.
    let url = format!("{}/v1beta/models/llama:generateContent", gw.url());
    let r = client.post_json(&url, b"{}", &[]).await.unwrap();
    assert_eq!((r.status.as_u16(), r.json()["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")));
}

/// Bedrock's Converse API, from every inbound API (Gemini's too), plain and streamed (the AWS
/// event stream translated), with a model id that must be percent-encoded in the path; a tool
/// round trip; a Bedrock API key as a bearer token, or SigV4 with access keys; Bedrock's errors in
/// the client's shape with their status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bedrock_serves_every_inbound_api_with_tools_streams_and_both_kinds_of_credentials() {
    const MODEL: &str = "anthropic.claude-3-5-haiku-20241022-v1:0";
    for credentials in
        ["api_key: br-key", "region: us-west-2, aws_access_key_id: AKIDEXAMPLE, aws_secret_access_key: secret"]
    {
        let cfg = MockConfig { api: MockApi::Bedrock, api_key: Some("br-key".into()), ..MockConfig::default() };
        let bedrock = mock_with(&[MODEL], cfg).await;
        let yaml = format!(
            "listen: 127.0.0.1:0\nbackends:\n  - {{name: br, type: bedrock, url: '{}', {credentials}, models: ['{MODEL}']}}\n",
            bedrock.url()
        );
        let gw = gateway_yaml(&yaml).await;
        let client = TestClient::new();
        let mut asks = requests(MODEL);
        let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]});
        asks.push(("/v1beta/models/{m}:generateContent", gemini.clone()));
        asks.push(("/v1beta/models/{m}:streamGenerateContent?alt=sse", gemini));
        for (path, body) in asks {
            let path = path.replace("{m}", MODEL);
            let what = format!("{credentials}: {path}, stream {}", body["stream"]);
            let r = client.post_json(&format!("{}{path}", gw.url()), body.to_string().as_bytes(), &[]).await.unwrap();
            assert_eq!(r.status, 200, "{what}: {}", r.text());
            let text = r.text();
            assert!(text.contains("tok0") && text.contains("tok4"), "{what}: {text}");
            let failed = ["stream_aborted", "\"error\":{", "event: error", "\"type\":\"error\""];
            assert!(!failed.iter().any(|f| text.contains(f)), "{what}: {text}");
        }
        let paths = bedrock.control().posted_paths();
        assert_eq!(paths.len(), 10, "{paths:?}");
        let encoded = "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse";
        assert!(paths.iter().all(|p| p == encoded || *p == format!("{encoded}-stream")), "{paths:?}");
        // A tool round trip through OpenAI Chat: the call (plain and streamed), then its result.
        let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"location": {"type": "string"}}}}}]);
        for stream in [false, true] {
            let ask = json!({"model": MODEL, "stream": stream, "tools": tools,
                "messages": [{"role": "user", "content": "Weather in Paris?"}]});
            let url = format!("{}/v1/chat/completions", gw.url());
            let text = client.post_json(&url, ask.to_string().as_bytes(), &[]).await.unwrap().text();
            assert!(text.contains("get_weather") && text.contains("Paris"), "stream {stream}: {text}");
            assert!(text.contains("tool_calls") && text.contains("tooluse_mock1"), "stream {stream}: {text}");
        }
        let answer = json!({"model": MODEL, "tools": tools, "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "tooluse_mock1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "tooluse_mock1", "content": "18C and sunny"}]});
        let url = format!("{}/v1/chat/completions", gw.url());
        let r = client.post_json(&url, answer.to_string().as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let reply = r.json();
        assert_eq!(reply["choices"][0]["message"]["content"], "Tool result: 18C and sunny");
        assert!(reply["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{reply}");
        // Answers name the model they were sent for (Converse's name none).
        assert_eq!(reply["model"], MODEL, "{reply}");
        // Bedrock's own errors reach an Anthropic client in Anthropic's shape, with their status.
        bedrock.control().set_fail_next(1);
        bedrock.control().set_fail_status(403);
        let ask = &requests(MODEL)[2].1;
        let r = client.post_json(&format!("{}/v1/messages", gw.url()), ask.to_string().as_bytes(), &[]).await.unwrap();
        assert_eq!(r.status, 403, "{}", r.text());
        let error = r.json();
        assert_eq!(error["type"], "error", "{error}");
        assert_eq!(error["error"]["type"], "permission_error", "{error}");
        assert_eq!(error["error"]["message"], "Too many requests, please wait before trying again.", "{error}");
        // What Converse cannot carry is a clear 400 before anything is sent.
        let ask = json!({"model": MODEL, "response_format": {"type": "json_object"}, "messages": [{"role": "user", "content": "x"}]});
        let r = client
            .post_json(&format!("{}/v1/chat/completions", gw.url()), ask.to_string().as_bytes(), &[])
            .await
            .unwrap();
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("Bedrock"), "{}", r.text());
    }
}

#[test]
fn bedrock_backends_need_models_a_region_to_sign_for_and_one_kind_of_credentials() {
    let load = |yaml: &str| switchyard_gateway::Config::from_yaml(yaml, &std::collections::HashMap::new());
    let config = load("backends: [{name: b, type: bedrock, region: eu-west-3, api_key: k, models: [m]}]").unwrap();
    assert_eq!(config.backends[0].url, "https://bedrock-runtime.eu-west-3.amazonaws.com");
    for (yaml, path) in [
        ("backends: [{name: b, type: bedrock, region: us-east-1, api_key: k}]", "backends[0].models"),
        ("backends: [{name: b, type: bedrock, api_key: k, models: [m]}]", "backends[0].region"),
        ("backends: [{name: b, type: bedrock, url: 'http://x:1', aws_access_key_id: a, aws_secret_access_key: s, models: [m]}]", "backends[0].region"),
        ("backends: [{name: b, type: bedrock, region: us-east-1, aws_access_key_id: a, models: [m]}]", "backends[0].aws_secret_access_key"),
        ("backends: [{name: b, type: bedrock, region: us-east-1, api_key: k, aws_access_key_id: a, aws_secret_access_key: s, models: [m]}]", "backends[0].api_key"),
        ("backends: [{name: b, url: 'http://x:1', region: us-east-1}]", "backends[0].region"),
        ("backends: [{name: b, url: 'http://x:1', aws_access_key_id: a, aws_secret_access_key: s}]", "backends[0].aws_access_key_id"),
    ] {
        let e = load(yaml).unwrap_err();
        assert!(e.to_string().starts_with(path), "{yaml}: {e}");
    }
}
