//! Tests of the KV-cache mock: prefix hits across turns in every API, misses, LRU eviction, time
//! to first token from uncached tokens, slots queueing excess requests, and the llama.cpp-shaped
//! `/slots` and `/metrics` plus `/mock/stats`. Timings are asserted on the reported numbers.

use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

use super::reply::TOOL_ARGUMENTS;
use super::tests::start;
use super::tokens::{conversation_tokens, prompt_tokens};
use crate::{KvCacheConfig, MockApi, MockConfig, MockServer, TestClient, TestResponse};

fn untimed() -> KvCacheConfig {
    KvCacheConfig {
        capacity_tokens: 10_000,
        prefill_us_per_token: 0,
        decode_ms_per_token: 0,
        fixed_ttft_us: 0,
        slots: 1,
    }
}

async fn kv_mock(kv: KvCacheConfig) -> MockServer {
    start(MockConfig { kv_cache: Some(kv), ..MockConfig::default() }).await
}

fn num(headers: &HeaderMap, name: &str) -> u64 {
    let value = headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    value.unwrap_or_else(|| panic!("no numeric {name} in {headers:?}"))
}

/// `(prompt, cached, prefill)` tokens a response reports.
fn counts(r: &TestResponse) -> (u64, u64, u64) {
    let h = &r.headers;
    (num(h, "x-mock-prompt-tokens"), num(h, "x-mock-cached-tokens"), num(h, "x-mock-prefill-tokens"))
}

async fn chat(c: &TestClient, mock: &MockServer, body: &Value) -> Result<TestResponse, crate::Error> {
    let r = c.post_json(&format!("{}/v1/chat/completions", mock.url()), &serde_json::to_vec(body)?, &[]).await?;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    Ok(r)
}

fn conversation(system: &str, turns: &[(&str, &str)]) -> Value {
    let mut messages = vec![json!({"role": "system", "content": system})];
    for (role, content) in turns {
        messages.push(json!({"role": role, "content": content}));
    }
    json!({"model": "mock-model", "messages": messages})
}

#[tokio::test]
async fn a_continued_conversation_hits_its_prompt_and_reply() -> Result<(), crate::Error> {
    let mock = kv_mock(untimed()).await;
    let c = TestClient::new();
    let turn1 = conversation("You are a careful assistant.", &[("user", "What is a KV cache?")]);
    let r1 = chat(&c, &mock, &turn1).await?;
    let p1 = prompt_tokens(&turn1).len() as u64;
    assert_eq!(counts(&r1), (p1, 0, p1));
    assert_eq!(r1.json()["usage"]["prompt_tokens"], p1);
    assert_eq!(r1.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let reply = r1.json()["choices"][0]["message"]["content"].as_str().unwrap_or("").to_owned();
    assert_eq!(reply, "tok0 tok1 tok2 tok3 tok4 ");

    let turn2 = conversation(
        "You are a careful assistant.",
        &[("user", "What is a KV cache?"), ("assistant", &reply), ("user", "And prefix caching?")],
    );
    let r2 = chat(&c, &mock, &turn2).await?;
    let held = conversation_tokens(&turn1, Some(&reply)).len() as u64;
    let p2 = prompt_tokens(&turn2).len() as u64;
    assert_eq!(counts(&r2), (p2, held, p2 - held), "cached = previous prompt + reply");
    assert_eq!(held, p1 + 1 + 7, "a separator and 25 bytes of reply");
    assert_eq!(r2.json()["usage"]["prompt_tokens_details"]["cached_tokens"], held);

    let stats = mock.control().kv_stats();
    assert_eq!((stats.requests, stats.prompt_tokens, stats.cached_tokens), (2, p1 + p2, held));
    assert_eq!((stats.prefill_tokens, stats.completion_tokens), (p1 + p2 - held, 10));
    assert_eq!(stats.cache_tokens, p2 + 1 + 7);
    Ok(())
}

#[tokio::test]
async fn another_system_prompt_misses_and_an_identical_prompt_recomputes_one_token() -> Result<(), crate::Error> {
    let mock = kv_mock(untimed()).await;
    let c = TestClient::new();
    let a = conversation("You answer in French.", &[("user", "hello")]);
    let b = conversation("You answer in German.", &[("user", "hello")]);
    chat(&c, &mock, &a).await?;
    let (prompt, cached, _) = counts(&chat(&c, &mock, &b).await?);
    // Only the system separator (and "You answer in " up to the 4-byte chunk that differs) is shared.
    assert_eq!(cached, 1 + 3, "of {prompt}");
    let (prompt, cached, prefill) = counts(&chat(&c, &mock, &a).await?);
    assert_eq!((cached, prefill), (prompt - 1, 1));
    Ok(())
}

#[tokio::test]
async fn least_recently_used_conversations_are_evicted_at_capacity() -> Result<(), crate::Error> {
    // Each conversation holds 29 tokens: a user separator shared by all, then 28 of its own.
    let mock = kv_mock(KvCacheConfig { capacity_tokens: 60, ..untimed() }).await;
    let c = TestClient::new();
    let user = |fill: &str| json!({"model": "mock-model", "messages": [{"role": "user", "content": fill.repeat(80)}]});
    let (a, b, d) = (user("a"), user("b"), user("d"));
    assert_eq!(conversation_tokens(&a, Some("tok0 tok1 tok2 tok3 tok4 ")).len(), 29);
    chat(&c, &mock, &a).await?;
    chat(&c, &mock, &b).await?;
    assert_eq!(mock.control().kv_stats().cache_tokens, 57);
    assert_eq!(counts(&chat(&c, &mock, &a).await?).1, 20, "a is cached, and now the most recently used");
    chat(&c, &mock, &d).await?;
    let stats = mock.control().kv_stats();
    assert_eq!((stats.cache_tokens, stats.evicted_tokens), (60, 25));
    // b was the least recently used: trimmed to the shared separator and 3 tokens; d is whole.
    assert_eq!(counts(&chat(&c, &mock, &b).await?).1, 4);
    assert_eq!(counts(&chat(&c, &mock, &d).await?).1, 20);
    Ok(())
}

#[tokio::test]
async fn time_to_first_token_grows_with_uncached_tokens() -> Result<(), crate::Error> {
    let kv = KvCacheConfig { prefill_us_per_token: 10, fixed_ttft_us: 200, ..untimed() };
    let mock = kv_mock(kv).await;
    let c = TestClient::new();
    let short = conversation("s", &[("user", "hi")]);
    let long = conversation("s", &[("user", &"long context ".repeat(100))]);
    let ttft = |r: &TestResponse| num(&r.headers, "x-mock-ttft-us");
    let r = chat(&c, &mock, &short).await?;
    assert_eq!(ttft(&r), 200 + 10 * counts(&r).2);
    let cold = chat(&c, &mock, &long).await?;
    assert_eq!(ttft(&cold), 200 + 10 * counts(&cold).2);
    assert!(counts(&cold).2 > 300 && ttft(&cold) > ttft(&r) + 3000);
    let warm = chat(&c, &mock, &long).await?;
    assert_eq!(ttft(&warm), 200 + 10, "only the last token is computed again");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slot_queues_the_second_request_and_signals_show_it() -> Result<(), crate::Error> {
    let kv = KvCacheConfig { fixed_ttft_us: 300_000, slots: 1, capacity_tokens: 4096, ..untimed() };
    let mock = kv_mock(kv).await;
    let c = TestClient::new();
    let body = conversation("s", &[("user", "hi")]);
    let (first, second) = (chat(&c, &mock, &body), chat(&c, &mock, &body));
    let signals = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let metrics = c.get(&format!("{}/metrics", mock.url())).await?;
        let slots = c.get(&format!("{}/slots", mock.url())).await?;
        let no_slot = c.get(&format!("{}/slots?fail_on_no_slot=1", mock.url())).await?;
        Ok::<_, crate::Error>((metrics, slots, no_slot))
    };
    let (first, second, signals) = tokio::join!(first, second, signals);
    let (metrics, slots, no_slot) = signals?;
    let mut queued: Vec<u64> = [first?, second?].iter().map(|r| num(&r.headers, "x-mock-queue-us")).collect();
    queued.sort_unstable();
    assert!(queued[0] < 100_000 && queued[1] >= 250_000, "queue waits {queued:?}");

    assert_eq!(metrics.header("content-type"), Some("text/plain; version=0.0.4"));
    let text = metrics.text();
    assert!(text.contains("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"), "{text}");
    assert!(text.contains("\nllamacpp:requests_deferred 1\n"), "{text}");
    let slots = slots.json();
    assert_eq!(slots.as_array().map(Vec::len), Some(1));
    assert_eq!((slots[0]["id"].clone(), slots[0]["is_processing"].clone()), (json!(0), json!(true)));
    assert_eq!(slots[0]["n_ctx"], 4096);
    assert!(slots[0]["id_task"].as_i64().is_some_and(|t| t >= 0));
    assert_eq!(no_slot.status, StatusCode::SERVICE_UNAVAILABLE);

    let stats = c.get(&format!("{}/mock/stats", mock.url())).await?.json();
    assert_eq!(
        (stats["kv_cache"].clone(), stats["requests"].clone(), stats["processing"].clone()),
        (json!(true), json!(2), json!(0))
    );
    assert!(stats["queue_us"].as_u64().is_some_and(|q| q >= 250_000));
    let text = c.get(&format!("{}/metrics", mock.url())).await?.text();
    assert!(text.contains("\nllamacpp:requests_processing 0\n") && text.contains("\nllamacpp:requests_deferred 0\n"));
    assert!(text.contains("\nllamacpp:tokens_predicted_total 10\n"), "{text}");
    let idle = c.get(&format!("{}/slots?fail_on_no_slot=1", mock.url())).await?;
    assert_eq!((idle.status, idle.json()[0]["is_processing"].clone()), (StatusCode::OK, json!(false)));
    Ok(())
}

#[tokio::test]
async fn streams_are_paced_by_decode_time_and_hold_the_slot() -> Result<(), crate::Error> {
    let mock = kv_mock(KvCacheConfig { decode_ms_per_token: 20, ..untimed() }).await;
    let c = TestClient::new();
    let mut body = conversation("s", &[("user", "hi")]);
    body["stream"] = json!(true);
    let url = format!("{}/v1/chat/completions", mock.url());
    let t = std::time::Instant::now();
    let (status, headers, _) = c.post_stream(&url, &serde_json::to_vec(&body)?, &[]).await?;
    assert_eq!(status, StatusCode::OK);
    assert!(t.elapsed() >= Duration::from_millis(100), "5 tokens of 20 ms");
    assert_eq!(num(&headers, "x-mock-cached-tokens"), 0);
    assert_eq!(num(&headers, "x-mock-slot"), 0);
    // Once the stream is done its slot is free again.
    let slots = c.get(&format!("{}/slots", mock.url())).await?.json();
    assert_eq!(slots[0]["is_processing"], false);
    assert_eq!(slots[0]["n_prompt_tokens_processed"], num(&headers, "x-mock-prefill-tokens"));
    Ok(())
}

#[tokio::test]
async fn tool_calls_and_results_continue_the_cached_sequence() -> Result<(), crate::Error> {
    let mock = kv_mock(untimed()).await;
    let c = TestClient::new();
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]);
    let turn1 = json!({"model": "mock-model", "tools": tools, "messages": [{"role": "user", "content": "Paris?"}]});
    let r1 = chat(&c, &mock, &turn1).await?;
    let call = r1.json()["choices"][0]["message"].clone();
    assert_eq!(call["tool_calls"][0]["function"]["arguments"], TOOL_ARGUMENTS);
    let turn2 = json!({"model": "mock-model", "tools": tools, "messages": [
        {"role": "user", "content": "Paris?"}, call, {"role": "tool", "tool_call_id": "x", "content": "18C"}]});
    let held = conversation_tokens(&turn1, Some(&format!("get_weather({TOOL_ARGUMENTS})"))).len() as u64;
    assert_eq!(counts(&chat(&c, &mock, &turn2).await?).1, held);
    Ok(())
}

#[tokio::test]
async fn anthropic_and_ollama_report_hits_in_their_own_usage() -> Result<(), crate::Error> {
    let headers = [("x-api-key", "k"), ("anthropic-version", "2023-06-01")];
    let cfg = MockConfig { api: MockApi::Anthropic, kv_cache: Some(untimed()), ..MockConfig::default() };
    let anthropic = start(cfg).await;
    let c = TestClient::new();
    let url = format!("{}/v1/messages", anthropic.url());
    let turn1 = json!({"model": "mock-model", "max_tokens": 8, "system": "Be brief.",
        "messages": [{"role": "user", "content": "hello"}]});
    let r1 = c.post_json(&url, &serde_json::to_vec(&turn1)?, &headers).await?;
    let reply = r1.json()["content"].clone();
    let turn2 = json!({"model": "mock-model", "max_tokens": 8, "system": "Be brief.", "messages": [
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]});
    let r2 = c.post_json(&url, &serde_json::to_vec(&turn2)?, &headers).await?;
    let (prompt, cached, prefill) = counts(&r2);
    assert_eq!(cached, counts(&r1).0 + 1 + 7);
    let usage = &r2.json()["usage"];
    assert_eq!(
        (usage["cache_read_input_tokens"].clone(), usage["input_tokens"].clone()),
        (json!(cached), json!(prefill))
    );
    assert_eq!(prompt, prompt_tokens(&turn2).len() as u64);

    let cfg = MockConfig { api: MockApi::Ollama, kv_cache: Some(untimed()), ..MockConfig::default() };
    let ollama = start(cfg).await;
    let url = format!("{}/api/generate", ollama.url());
    let first = json!({"model": "mock-model", "stream": false, "prompt": "Once upon a time"});
    let r1 = c.post_json(&url, &serde_json::to_vec(&first)?, &[]).await?;
    let text = r1.json()["response"].as_str().unwrap_or("").to_owned();
    let next = json!({"model": "mock-model", "stream": false, "prompt": format!("Once upon a time{text}, and then")});
    let r2 = c.post_json(&url, &serde_json::to_vec(&next)?, &[]).await?;
    let (prompt, cached, prefill) = counts(&r2);
    // "Once upon a time" and the reply's 25 bytes make 41: the last, partial, chunk differs.
    assert_eq!((cached, prompt_tokens(&next).len() as u64), (1 + 10, prompt));
    assert_eq!(r2.json()["prompt_eval_count"], prefill, "Ollama counts the tokens it evaluated");
    Ok(())
}

#[tokio::test]
async fn reset_and_restart_empty_the_cache() -> Result<(), crate::Error> {
    let mut mock = kv_mock(untimed()).await;
    let c = TestClient::new();
    let body = conversation("s", &[("user", "hello there")]);
    chat(&c, &mock, &body).await?;
    assert!(counts(&chat(&c, &mock, &body).await?).1 > 0);
    let r = c.request(http::Method::POST, &format!("{}/mock/reset", mock.url()), bytes::Bytes::new(), &[]).await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(mock.control().kv_stats().requests, 0);
    assert_eq!(mock.control().request_count(), 0, "the reset is not a request");
    assert_eq!(counts(&chat(&c, &mock, &body).await?).1, 0);
    mock.restart().await?;
    let fresh = TestClient::new();
    assert_eq!(counts(&chat(&fresh, &mock, &body).await?).1, 0);
    // Without a KV cache there are no llama.cpp signals, and stats are zero.
    let plain = start(MockConfig::default()).await;
    assert_eq!(c.get(&format!("{}/slots", plain.url())).await?.status, StatusCode::NOT_FOUND);
    assert_eq!(c.get(&format!("{}/metrics", plain.url())).await?.status, StatusCode::NOT_FOUND);
    assert_eq!(c.get(&format!("{}/mock/stats", plain.url())).await?.json()["kv_cache"], false);
    Ok(())
}
