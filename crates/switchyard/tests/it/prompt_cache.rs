//! Prompt caching through translation, black-box (issue 53): Anthropic's `cache_control`
//! breakpoints reach a Bedrock backend as Converse `cachePoint` blocks at the same positions and an
//! Anthropic backend unchanged; the backend's cache reads and writes come back in the client's
//! usage shape, are recorded apart and priced by `prices.MODEL.cache_read` and `cache_write`;
//! OpenAI's `prompt_cache_key` and `prompt_cache_retention` reach an OpenAI backend from the
//! Responses API too.

use serde_json::{json, Value};
use switchyard_testkit::{MockApi, MockConfig, TestClient};

use crate::common::*;

const MASTER: &str = "master-key-for-prompt-cache";
const BEDROCK_MODEL: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";

/// What a coding agent sends: breakpoints on the system prompt, the last tool, and a turn.
fn agent_request(model: &str, question: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 64,
        "system": [
            {"type": "text", "text": "You are a careful coding agent. ".repeat(40)},
            {"type": "text", "text": "The repository's conventions. ".repeat(40), "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ],
        "tools": [
            {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
            {"name": "grep", "description": "Search files", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Here is the whole file. ".repeat(50), "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": question}
            ]}
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_breakpoints_reach_bedrock_as_cache_points_and_cache_reads_and_writes_are_priced_apart() {
    let cfg = MockConfig { api: MockApi::Bedrock, api_key: Some("br-key".into()), ..MockConfig::default() };
    let bedrock = mock_with(&[BEDROCK_MODEL], cfg).await;
    bedrock.control().keep_bodies();
    let anthropic =
        mock_with(&["claude-direct"], MockConfig { api: MockApi::Anthropic, ..MockConfig::default() }).await;
    anthropic.control().keep_bodies();
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\nstorage: {{url: '{}', usage_journal_dir: '{}/usage'}}\nauth: {{master_key: {MASTER}}}\n\
         prices:\n  '{BEDROCK_MODEL}': {{input_per_million: 3, output_per_million: 15, cache_read: 0.3, cache_write: 3.75}}\n\
         backends:\n  - {{name: br, type: bedrock, url: '{}', api_key: br-key, models: ['{BEDROCK_MODEL}']}}\n\
         \x20 - {{name: an, type: anthropic, url: '{}', api_key: k, models: [claude-direct]}}\n",
        db_url(&dir),
        dir.display(),
        bedrock.url(),
        anthropic.url()
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let url = format!("{}/v1/messages", gw.url());
    let auth = format!("Bearer {MASTER}");
    let ask = |model: &str, question: &str, stream: bool| {
        let mut body = agent_request(model, question);
        body["stream"] = json!(stream);
        body.to_string()
    };

    // First turn writes the cache, the next reads it: Anthropic's usage shape says which.
    let mut usages = Vec::new();
    for (question, stream) in [("What does main do?", false), ("And the tests?", false), ("And the docs?", true)] {
        let r = client
            .post_json(&url, ask(BEDROCK_MODEL, question, stream).as_bytes(), &[("authorization", &auth)])
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let usage = match stream {
            false => r.json()["usage"].clone(),
            true => r
                .text()
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .find(|v| v["type"] == "message_delta")
                .map(|v| v["usage"].clone())
                .unwrap_or_default(),
        };
        usages.push(usage);
    }
    let written = usages[0]["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(written > 100 && usages[0]["cache_read_input_tokens"] == 0, "{usages:?}");
    for usage in &usages[1..] {
        assert_eq!(
            (usage["cache_read_input_tokens"].as_u64(), usage["cache_creation_input_tokens"].as_u64()),
            (Some(written), Some(0)),
            "{usages:?}"
        );
    }

    // At Bedrock: a cachePoint right after each block the client marked, its TTL kept.
    let sent: Value = serde_json::from_str(&bedrock.control().bodies()[0]).unwrap();
    let system = sent["system"].as_array().unwrap();
    assert_eq!(system.len(), 3, "{sent}");
    assert_eq!(system[2], json!({"cachePoint": {"type": "default", "ttl": "1h"}}));
    let tools = sent["toolConfig"]["tools"].as_array().unwrap();
    assert_eq!((tools.len(), &tools[2]), (3, &json!({"cachePoint": {"type": "default"}})), "{sent}");
    assert!(tools[1]["toolSpec"]["name"] == "grep", "{sent}");
    let turn = sent["messages"][0]["content"].as_array().unwrap();
    assert_eq!(turn.len(), 3, "{sent}");
    assert_eq!(
        (&turn[1], &turn[2]["text"]),
        (&json!({"cachePoint": {"type": "default"}}), &json!("What does main do?"))
    );

    // Recorded apart and priced apart: input at 3, reads at 0.3, writes at 3.75, output at 15 per million.
    let rows = request_log(&client, &gw, MASTER, 3).await;
    for row in &rows {
        let (prompt, read, write) = (
            row["prompt_tokens"].as_f64().unwrap(),
            row["cache_read_tokens"].as_f64().unwrap(),
            row["cache_write_tokens"].as_f64().unwrap(),
        );
        let completion = row["completion_tokens"].as_f64().unwrap();
        assert!(read + write == written as f64 && prompt > read + write, "{row}");
        let cost = ((prompt - read - write) * 3.0 + read * 0.3 + write * 3.75 + completion * 15.0) / 1e6;
        assert!((row["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12, "{row}: {cost}");
    }
    assert_eq!(rows.iter().filter(|r| r["cache_write_tokens"].as_u64() == Some(written)).count(), 1, "{rows:?}");

    // A malformed breakpoint is the client's 400 in Anthropic's shape, naming the field; nothing
    // reaches Bedrock.
    let sent_before = bedrock.control().bodies().len();
    for bad in [json!("yes"), json!({"type": "ephemeral", "ttl": 5})] {
        let mut body = agent_request(BEDROCK_MODEL, "Bad?");
        body["system"][1]["cache_control"] = bad.clone();
        let r = client.post_json(&url, body.to_string().as_bytes(), &[("authorization", &auth)]).await.unwrap();
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(r.json()["type"], "error", "{}", r.text());
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("system[1].cache_control"), "{}", r.text());
    }
    assert_eq!(bedrock.control().bodies().len(), sent_before);

    // To an Anthropic backend the request passes byte for byte, breakpoints and all.
    let body = ask("claude-direct", "What does main do?", false);
    let r = client.post_json(&url, body.as_bytes(), &[("authorization", &auth)]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(anthropic.control().bodies(), vec![body]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openais_prompt_cache_key_and_retention_reach_an_openai_backend_from_responses_too() {
    let backend = mock(&["m"]).await;
    backend.control().keep_bodies();
    let gw = gateway(&[&backend], "").await;
    let client = TestClient::new();
    let responses =
        json!({"model": "m", "input": "hi", "prompt_cache_key": "repo-42", "prompt_cache_retention": "24h"});
    let r =
        client.post_json(&format!("{}/v1/responses", gw.url()), responses.to_string().as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let sent: Value = serde_json::from_str(&backend.control().bodies()[0]).unwrap();
    assert_eq!(
        (&sent["prompt_cache_key"], &sent["prompt_cache_retention"]),
        (&json!("repo-42"), &json!("24h")),
        "{sent}"
    );
    assert!(sent.get("messages").is_some(), "translated to Chat Completions: {sent}");
    // Not a string: the client's 400 in the Responses shape, naming the field.
    let bad = json!({"model": "m", "input": "hi", "prompt_cache_key": 42});
    let r = client.post_json(&format!("{}/v1/responses", gw.url()), bad.to_string().as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("prompt_cache_key"), "{}", r.text());
    assert_eq!(backend.control().bodies().len(), 1, "nothing more reached the backend");
}
