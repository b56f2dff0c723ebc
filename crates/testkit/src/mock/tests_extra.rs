//! Tests of the mock's extra OpenAI-compatible endpoints: rerank, score, moderations, images,
//! tokenize and detokenize, audio transcriptions, translations and speech.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::Value;

use super::audio::{boundary, duration, multipart, wav_duration, wav_header};
use super::extra_api::{detokenized, relevance};
use super::tests::{parse, sse_events, start};
use crate::{MockConfig, TestClient, TestResponse};

const BOUNDARY: &str = "----mockBoundary7MA4YWxk";

fn multipart_body(fields: &[(&str, &[u8])]) -> Bytes {
    let mut out = Vec::new();
    for (name, data) in fields {
        out.extend(format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"").bytes());
        if *name == "file" {
            out.extend(b"; filename=\"a.wav\"\r\nContent-Type: audio/wav");
        }
        out.extend(b"\r\n\r\n");
        out.extend(*data);
        out.extend(b"\r\n");
    }
    out.extend(format!("--{BOUNDARY}--\r\n").bytes());
    Bytes::from(out)
}

async fn post_form(c: &TestClient, url: &str, fields: &[(&str, &[u8])]) -> Result<TestResponse, crate::Error> {
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    c.request(Method::POST, url, multipart_body(fields), &[("content-type", &content_type)]).await
}

/// A WAV of `secs` seconds of 16 kHz 16-bit mono silence (32000 bytes a second).
fn wav(secs: f64) -> Vec<u8> {
    let len = (secs * 32_000.0) as u32;
    let mut file = wav_header(16_000, len);
    file.resize(file.len() + len as usize, 0);
    file
}

#[tokio::test]
async fn rerank_sorts_cuts_and_omits_documents() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/rerank", mock.url());
    let body = br#"{"model":"mock-model","query":"Paris capital","top_n":2,
        "documents":["Berlin is big",{"text":"Paris is the capital of France."},"paris"]}"#;
    let r = c.post_json(&url, body, &[]).await?;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    assert!(j["id"].as_str().is_some_and(|id| id.starts_with("rerank-")), "{j}");
    assert_eq!(j["model"], "mock-model");
    assert!(j["usage"]["total_tokens"].as_u64().is_some_and(|n| n > 0));
    let results = j["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 2);
    assert_eq!((results[0]["index"].clone(), results[0]["relevance_score"].clone()), (1.into(), 1.0.into()));
    assert_eq!(results[0]["document"]["text"], "Paris is the capital of France.");
    assert_eq!((results[1]["index"].clone(), results[1]["relevance_score"].clone()), (2.into(), 0.5.into()));

    let body = br#"{"model":"mock-model","query":"x","documents":["a","x"],"return_documents":false}"#;
    for path in ["/v2/rerank", "/rerank"] {
        let j = c.post_json(&format!("{}{path}", mock.url()), body, &[]).await?.json();
        assert_eq!(j["results"].as_array().map(Vec::len), Some(2), "{path}");
        assert_eq!(j["results"][0]["index"], 1);
        assert!(j["results"][0].get("document").is_none());
    }

    let r = c.post_json(&url, br#"{"model":"mock-model","documents":["a"]}"#, &[]).await?;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (StatusCode::BAD_REQUEST, "query".into()));
    let r = c.post_json(&url, br#"{"model":"mock-model","query":"q","documents":[1]}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = c.post_json(&url, br#"{"model":"other","query":"q","documents":["a"]}"#, &[]).await?;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (StatusCode::NOT_FOUND, "model_not_found".into()));
    let r = c.post_json(&url, b"{not json", &[]).await?;
    assert_eq!(
        (r.status, r.json()["error"]["type"].clone()),
        (StatusCode::BAD_REQUEST, "invalid_request_error".into())
    );
    Ok(())
}

#[tokio::test]
async fn score_broadcasts_one_text_and_pairs_lists() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/score", mock.url());
    let r = c.post_json(&url, br#"{"model":"mock-model","text_1":"a b","text_2":["a","b c","d"]}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    assert!(j["id"].as_str().is_some_and(|id| id.starts_with("score-")));
    assert_eq!((j["object"].clone(), j["model"].clone()), ("list".into(), "mock-model".into()));
    assert!(j["created"].is_u64());
    let scores: Vec<f64> = j["data"].as_array().into_iter().flatten().filter_map(|d| d["score"].as_f64()).collect();
    assert_eq!(scores, [0.5, 0.5, 0.0]);
    assert_eq!((j["data"][2]["index"].clone(), j["data"][2]["object"].clone()), (2.into(), "score".into()));
    assert_eq!(j["usage"]["prompt_tokens"], j["usage"]["total_tokens"]);

    let pairs = br#"{"model":"mock-model","queries":["x","y"],"documents":["x","z"]}"#;
    let j = c.post_json(&format!("{}/score", mock.url()), pairs, &[]).await?.json();
    assert_eq!((j["data"][0]["score"].clone(), j["data"][1]["score"].clone()), (1.0.into(), 0.0.into()));

    let uneven = br#"{"model":"mock-model","text_1":["a","b"],"text_2":["a","b","c"]}"#;
    assert_eq!(c.post_json(&url, uneven, &[]).await?.status, StatusCode::BAD_REQUEST);
    let missing = br#"{"model":"mock-model","text_1":"a"}"#;
    assert_eq!(c.post_json(&url, missing, &[]).await?.status, StatusCode::BAD_REQUEST);
    Ok(())
}

#[tokio::test]
async fn moderations_flag_violence_with_every_category() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/moderations", mock.url());
    let r = c.post_json(&url, br#"{"input":["I will KILL it","hello"]}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    assert!(j["id"].as_str().is_some_and(|id| id.starts_with("modr-")));
    assert_eq!(j["model"], "omni-moderation-latest");
    let (flagged, clean) = (&j["results"][0], &j["results"][1]);
    assert_eq!((flagged["flagged"].clone(), clean["flagged"].clone()), (true.into(), false.into()));
    assert_eq!(flagged["categories"]["violence"], true);
    assert_eq!(flagged["categories"]["hate"], false);
    assert_eq!(flagged["category_scores"]["violence"], 0.9);
    assert_eq!(clean["category_scores"]["violence"], 0.01);
    for key in ["categories", "category_scores", "category_applied_input_types"] {
        assert_eq!(flagged[key].as_object().map(|m| m.len()), Some(13), "{key}");
    }
    assert_eq!(clean["category_applied_input_types"]["self-harm/instructions"], serde_json::json!(["text"]));

    let j = c.post_json(&url, br#"{"model":"mock-model","input":"an attack"}"#, &[]).await?.json();
    assert_eq!((j["model"].clone(), j["results"][0]["flagged"].clone()), ("mock-model".into(), true.into()));
    let r = c.post_json(&url, br#"{"model":"nope","input":"x"}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = c.post_json(&url, br#"{"model":"mock-model"}"#, &[]).await?;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (StatusCode::BAD_REQUEST, "input".into()));
    Ok(())
}

#[tokio::test]
async fn images_in_b64_or_url_with_usage_for_gpt_image() -> Result<(), crate::Error> {
    let cfg = MockConfig { models: vec!["dall-e-3".into(), "gpt-image-1".into()], ..MockConfig::default() };
    let mock = start(cfg).await;
    let c = TestClient::new();
    let url = format!("{}/v1/images/generations", mock.url());
    let r = c.post_json(&url, br#"{"model":"dall-e-3","prompt":"a cat","n":2,"size":"1024x1024"}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    assert!(j["created"].is_u64());
    assert_eq!(j["data"].as_array().map(Vec::len), Some(2));
    // "iVBORw0KGgo" is the PNG signature in base64.
    assert!(j["data"][1]["b64_json"].as_str().is_some_and(|b| b.starts_with("iVBORw0KGgo")));
    assert_eq!(j["data"][0]["revised_prompt"], "a cat");
    assert!(j.get("usage").is_none());

    let body = br#"{"model":"dall-e-3","prompt":"a cat","response_format":"url"}"#;
    let j = c.post_json(&url, body, &[]).await?.json();
    assert_eq!(j["data"][0]["url"], "https://mock.invalid/image/0.png");
    assert!(j["data"][0].get("b64_json").is_none());

    let j = c.post_json(&url, br#"{"model":"gpt-image-1","prompt":"a cat on a mat"}"#, &[]).await?.json();
    assert_eq!(j["usage"]["output_tokens"], 0);
    assert!(j["usage"]["input_tokens"].as_u64().is_some_and(|n| n > 0));
    assert_eq!(j["usage"]["total_tokens"], j["usage"]["input_tokens"]);

    let r = c.post_json(&url, br#"{"model":"dall-e-3"}"#, &[]).await?;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (StatusCode::BAD_REQUEST, "prompt".into()));
    let r = c.post_json(&url, br#"{"model":"dall-e-3","prompt":"x","n":0}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    Ok(())
}

#[tokio::test]
async fn tokenize_and_detokenize_round_trip() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let tokenize = format!("{}/tokenize", mock.url());
    let r = c.post_json(&tokenize, br#"{"model":"mock-model","prompt":"hello world"}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    // A separator, then "hell", "o wo", "rld".
    assert_eq!((j["count"].clone(), j["max_model_len"].clone()), (4.into(), 8192.into()));
    let tokens = j["tokens"].clone();
    assert_eq!(tokens.as_array().map(Vec::len), Some(4));

    let detokenize = format!("{}/detokenize", mock.url());
    let body = serde_json::to_vec(&serde_json::json!({"model": "mock-model", "tokens": tokens}))?;
    let j = c.post_json(&detokenize, &body, &[]).await?.json();
    assert_eq!(j["prompt"], "hello world");

    let messages = br#"{"model":"mock-model","messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(c.post_json(&tokenize, messages, &[]).await?.json()["count"], 2);
    assert_eq!(c.post_json(&tokenize, br#"{"model":"mock-model"}"#, &[]).await?.status, StatusCode::BAD_REQUEST);
    assert_eq!(c.post_json(&tokenize, br#"{"model":"x","prompt":"a"}"#, &[]).await?.status, StatusCode::NOT_FOUND);
    let r = c.post_json(&detokenize, br#"{"model":"mock-model","tokens":[-1]}"#, &[]).await?;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (StatusCode::BAD_REQUEST, "tokens".into()));
    // Only the bare paths, as vLLM serves them.
    let r = c.post_json(&format!("{}/v1/tokenize", mock.url()), br#"{"prompt":"a"}"#, &[]).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    Ok(())
}

#[tokio::test]
async fn transcriptions_in_every_format() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/audio/transcriptions", mock.url());
    let file = wav(1.5);
    let text = format!("mock transcript of {} bytes", file.len());
    let r = post_form(&c, &url, &[("file", &file), ("model", b"mock-model")]).await?;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    assert_eq!(j["text"], text.as_str());
    assert_eq!(j["usage"], serde_json::json!({"type": "duration", "seconds": 2}));

    let r = post_form(&c, &url, &[("model", b"mock-model"), ("file", &file), ("response_format", b"text")]).await?;
    assert_eq!((r.text(), r.header("content-type")), (text.clone(), Some("text/plain; charset=utf-8")));
    let r = post_form(&c, &url, &[("file", &file), ("model", b"mock-model"), ("response_format", b"srt")]).await?;
    assert_eq!(r.text(), format!("1\n00:00:00,000 --> 00:00:01,500\n{text}\n\n"));
    let r = post_form(&c, &url, &[("file", &file), ("model", b"mock-model"), ("response_format", b"vtt")]).await?;
    assert_eq!(r.text(), format!("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n{text}\n\n"));
    let fields: &[(&str, &[u8])] = &[("file", &file), ("model", b"mock-model"), ("response_format", b"verbose_json")];
    let j = post_form(&c, &url, fields).await?.json();
    assert_eq!((j["task"].clone(), j["language"].clone()), ("transcribe".into(), "english".into()));
    assert_eq!((j["duration"].clone(), j["segments"][0]["end"].clone()), (1.5.into(), 1.5.into()));
    assert_eq!(j["segments"][0]["text"], text.as_str());

    let translate = format!("{}/v1/audio/translations", mock.url());
    let j = post_form(&c, &translate, fields).await?.json();
    assert_eq!(j["task"], "translate");
    // Not a WAV: 64000 bytes at 32000 a second.
    let j = post_form(&c, &translate, &[("file", &[7u8; 64_000]), ("model", b"mock-model")]).await?.json();
    assert_eq!(j["usage"]["seconds"], 2);

    let r = post_form(&c, &url, &[("model", b"mock-model")]).await?;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (StatusCode::BAD_REQUEST, "file".into()));
    let r = post_form(&c, &url, &[("file", &file)]).await?;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (StatusCode::BAD_REQUEST, "model".into()));
    let r = post_form(&c, &url, &[("file", &file), ("model", b"nope")]).await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = post_form(&c, &url, &[("file", &file), ("model", b"mock-model"), ("response_format", b"xml")]).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(c.post_json(&url, br#"{"model":"mock-model"}"#, &[]).await?.status, StatusCode::BAD_REQUEST);
    Ok(())
}

#[tokio::test]
async fn transcription_streams_word_deltas_then_done() -> Result<(), crate::Error> {
    let mock = start(MockConfig::default()).await;
    let c = TestClient::new();
    let url = format!("{}/v1/audio/transcriptions", mock.url());
    let body = multipart_body(&[("file", &[0u8; 10]), ("model", b"mock-model"), ("stream", b"true")]);
    let content_type = format!("multipart/form-data; boundary=\"{BOUNDARY}\"");
    let resp = c.send(Method::POST, &url, body, &[("content-type", &content_type)]).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers().get("content-type").map(|v| v.as_bytes()), Some(&b"text/event-stream"[..]));
    let frames = vec![http_body_util::BodyExt::collect(resp.into_body()).await?.to_bytes()];
    let events: Vec<Value> = sse_events(&frames).iter().map(|e| parse(e)).collect();
    let deltas: Vec<&str> = events.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert_eq!(deltas, ["mock ", "transcript ", "of ", "10 ", "bytes"]);
    assert!(events[..5].iter().all(|e| e["type"] == "transcript.text.delta"));
    let done = &events[5];
    assert_eq!((done["type"].clone(), done["text"].clone()), ("transcript.text.done".into(), deltas.concat().into()));
    assert_eq!(done["usage"]["type"], "duration");
    assert_eq!(events.len(), 6, "no [DONE]");
    Ok(())
}

#[tokio::test]
async fn speech_streams_a_wav_of_silence() -> Result<(), crate::Error> {
    let mock = start(MockConfig { chunk_delay: Duration::from_millis(1), ..MockConfig::default() }).await;
    let c = TestClient::new();
    let url = format!("{}/v1/audio/speech", mock.url());
    let body = br#"{"model":"mock-model","input":"0123456789","voice":"alloy","response_format":"wav"}"#;
    let (status, headers, frames) = c.post_stream(&url, body, &[]).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers.get("content-type").map(|v| v.as_bytes()), Some(&b"audio/wav"[..]));
    // 10 characters: 0.5 s, 24000 bytes of samples after the 44-byte header, in 8 KiB frames.
    assert!(frames.len() >= 3, "got {} frames", frames.len());
    let wav: Vec<u8> = frames.concat();
    assert_eq!(wav.len(), 44 + 24_000);
    assert_eq!(&wav[..4], b"RIFF");
    assert_eq!(wav_duration(&wav), Some(0.5));

    let r = c.post_json(&url, br#"{"model":"mock-model","input":"hi","voice":"alloy"}"#, &[]).await?;
    assert_eq!((r.status, r.header("content-type")), (StatusCode::OK, Some("audio/mpeg")));
    assert_eq!(r.body.len(), 44 + 4_800);
    let r = c.post_json(&url, br#"{"model":"mock-model","input":"hi"}"#, &[]).await?;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (StatusCode::BAD_REQUEST, "voice".into()));
    let long = serde_json::json!({"model": "mock-model", "input": "a".repeat(4097), "voice": "alloy"});
    let r = c.post_json(&url, &serde_json::to_vec(&long)?, &[]).await?;
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (StatusCode::BAD_REQUEST, "input".into()));
    let odd = br#"{"model":"mock-model","input":"hi","voice":"alloy","response_format":"midi"}"#;
    assert_eq!(c.post_json(&url, odd, &[]).await?.status, StatusCode::BAD_REQUEST);
    Ok(())
}

#[test]
fn wav_duration_reads_fmt_and_data_chunks() {
    // 2 s at 8 kHz 16-bit mono (16000 bytes a second).
    let mut file = wav_header(8_000, 32_000);
    file.resize(file.len() + 32_000, 0);
    assert_eq!(wav_duration(&file), Some(2.0));
    // An odd-sized chunk (padded) between fmt and data.
    let mut with_list = file[..36].to_vec();
    with_list.extend(b"LIST");
    with_list.extend(3u32.to_le_bytes());
    with_list.extend(b"abc\0");
    with_list.extend(&file[36..]);
    assert_eq!(wav_duration(&with_list), Some(2.0));
    // A data chunk longer than the file (a stream's header): as much as the file holds.
    let cut = &file[..44 + 8_000];
    assert_eq!(wav_duration(cut), Some(0.5));
    // Not a WAV, or one without a fmt chunk: None, and the size fallback.
    assert_eq!(wav_duration(b"ID3 not a wav at all"), None);
    assert_eq!(wav_duration(&file[..12]), None);
    assert_eq!(duration(&[0u8; 16_000]), 0.5);
    assert_eq!(duration(&file), 2.0);
}

#[test]
fn multipart_parts_and_boundaries() {
    assert_eq!(boundary("multipart/form-data; boundary=abc"), Some("abc"));
    assert_eq!(boundary("Multipart/Form-Data; charset=utf-8; boundary=\"a b\""), Some("a b"));
    assert_eq!(boundary("application/json"), None);
    assert_eq!(boundary("multipart/form-data"), None);
    let data: &[u8] = b"line\r\n--not-the-boundary\r\n";
    let body = multipart_body(&[("file", data), ("model", b"m")]);
    let parts = multipart(&body, BOUNDARY).unwrap_or_default();
    let named: Vec<(&str, &[u8])> = parts.iter().map(|p| (p.name.as_str(), p.data)).collect();
    assert_eq!(named, [("file", data), ("model", &b"m"[..])]);
    assert!(multipart(b"no boundary here", BOUNDARY).is_none());
}

#[test]
fn relevance_and_detokenize() {
    assert_eq!(relevance("Paris, capital!", "the CAPITAL of paris"), 1.0);
    assert_eq!(relevance("a b c d", "b"), 0.25);
    assert_eq!(relevance("", "anything"), 0.0);
    let ids = super::tokens::prompt_tokens(&serde_json::json!({"prompt": "héllo wörld"}));
    assert_eq!(detokenized(&ids), "héllo wörld");
}
