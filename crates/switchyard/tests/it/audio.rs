//! Audio (issue 33), black-box: transcriptions and translations are multipart uploads streamed
//! through to the backend (the form's `model` read as it arrives, an alias spliced in, the file
//! never buffered), in every `response_format` and as a stream; their usage is seconds of audio
//! (the answer's, else the upload's WAV header), priced per second; an upload over
//! `limits.max_upload_bytes` is refused, at once when its length says so and mid-stream when it
//! does not; speech streams back and is priced per character.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::json;
use switchyard_gateway::RunningGateway;
use switchyard_testkit::{MockServer, TestClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

const MASTER: &str = "audio-master";
const BOUNDARY: &str = "----switchyard-test-boundary";

/// A WAV file of `seconds` of silence, 16 kHz 16-bit mono.
fn wav(seconds: u32) -> Vec<u8> {
    let data = seconds * 32_000;
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    for v in [1u16, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [16_000u32, 32_000] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [2u16, 16] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    out.resize(out.len() + data as usize, 0);
    out
}

/// A multipart form: `fields` in order, the file where `file_first` says.
fn form(fields: &[(&str, &str)], file: &[u8], file_first: bool) -> Vec<u8> {
    let field = |name: &str, value: &str| {
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").into_bytes()
    };
    let mut file_part =
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n")
            .into_bytes();
    file_part.extend_from_slice(file);
    file_part.extend_from_slice(b"\r\n");
    let mut out = Vec::new();
    if file_first {
        out.extend_from_slice(&file_part);
    }
    for (name, value) in fields {
        out.extend_from_slice(&field(name, value));
    }
    if !file_first {
        out.extend_from_slice(&file_part);
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    out
}

async fn audio_gateway(extra: &str) -> (RunningGateway, MockServer) {
    let backend = mock(&["whisper", "tts"]).await;
    let dir = scratch_dir();
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         storage: {{url: '{}', usage_journal_dir: '{}/usage'}}\n\
         auth: {{master_key: {MASTER}}}\n\
         aliases: {{stt: whisper}}\n\
         prices:\n  whisper: {{per_second_audio: 0.001}}\n  tts: {{per_character: 0.01}}\n\
         {extra}backends:\n  - {{name: b0, url: '{}'}}\n",
        db_url(&dir),
        dir.display(),
        backend.url(),
    );
    (gateway_yaml(&yaml).await, backend)
}

async fn upload(
    client: &TestClient,
    gw: &RunningGateway,
    path: &str,
    body: Vec<u8>,
) -> switchyard_testkit::TestResponse {
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let bearer = format!("Bearer {MASTER}");
    let headers = [("content-type", content_type.as_str()), ("authorization", bearer.as_str())];
    client.request(Method::POST, &format!("{}{path}", gw.url()), Bytes::from(body), &headers).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcriptions_stream_through_in_every_format_and_are_priced_by_the_second() {
    let (gw, backend) = audio_gateway("").await;
    let client = TestClient::new();
    let audio = wav(3);
    let r = upload(&client, &gw, "/v1/audio/transcriptions", form(&[("model", "whisper")], &audio, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["text"], format!("mock transcript of {} bytes", audio.len()));
    let r = upload(
        &client,
        &gw,
        "/v1/audio/translations",
        form(&[("model", "stt"), ("response_format", "verbose_json")], &audio, false),
    )
    .await;
    assert_eq!((r.status.as_u16(), &r.json()["task"]), (200, &json!("translate")), "{}", r.text());
    assert_eq!(r.json()["duration"], 3.0);
    let r = upload(
        &client,
        &gw,
        "/v1/audio/transcriptions",
        form(&[("model", "whisper"), ("response_format", "srt")], &audio, false),
    )
    .await;
    assert!(r.status == 200 && r.text().starts_with("1\n00:00:00,000 -->"), "{}", r.text());
    // curl's order: the file before the model.
    let r = upload(&client, &gw, "/v1/audio/transcriptions", form(&[("model", "whisper")], &audio, true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A stream: the backend's events, as they come.
    let r = upload(
        &client,
        &gw,
        "/v1/audio/transcriptions",
        form(&[("model", "whisper"), ("stream", "true")], &audio, false),
    )
    .await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"), "{}", r.text());
    assert!(r.text().contains("transcript.text.done"), "{}", r.text());
    assert_eq!(backend.control().request_count(), 5);

    // Five records, each three seconds of audio (the answer's count, or the stream's WAV header).
    let rows = request_log(&client, &gw, MASTER, 5).await;
    for row in &rows {
        assert_eq!(row["units"]["audio_seconds"], 3.0, "{row}");
        assert!((row["cost_usd"].as_f64().unwrap() - 0.003).abs() < 1e-9, "{row}");
    }
    assert!(rows.iter().any(|r| r["model_requested"] == "stt" && r["model_served"] == "whisper"), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_uploads_get_a_clear_4xx() {
    let (gw, backend) = audio_gateway("limits: {max_upload_bytes: 1048576}\n").await;
    backend.control().keep_bodies();
    let client = TestClient::new();
    let r = upload(&client, &gw, "/v1/audio/transcriptions", form(&[("language", "en")], &wav(1), false)).await;
    assert_eq!((r.status.as_u16(), &r.json()["error"]["param"]), (400, &json!("model")), "{}", r.text());
    let bearer = format!("Bearer {MASTER}");
    let url = format!("{}/v1/audio/transcriptions", gw.url());
    let r = client.post_json(&url, br#"{"model": "whisper"}"#, &[("authorization", &bearer)]).await.unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    // Over the limit, said up front: refused before anything is read.
    let r = upload(&client, &gw, "/v1/audio/transcriptions", form(&[("model", "whisper")], &wav(40), false)).await;
    assert_eq!((r.status.as_u16(), &r.json()["error"]["code"]), (413, &json!("request_too_large")), "{}", r.text());
    // Over the limit, found mid-stream (chunked, no length): 413, and the backend answered nothing.
    let (status, rest) = chunked_upload(&gw, &form(&[("model", "whisper")], &wav(40), false)).await;
    assert_eq!(status, 413, "{rest}");
    assert!(rest.contains("request_too_large"), "{rest}");
    assert!(backend.control().bodies().is_empty(), "the backend never got a whole upload");
    // Within the limit, the same way, it goes through whole.
    let (status, rest) = chunked_upload(&gw, &form(&[("model", "whisper")], &wav(2), false)).await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(backend.control().bodies().len(), 1);
}

/// POST `body` chunked (no content-length) over a raw connection: the status and what followed.
async fn chunked_upload(gw: &RunningGateway, body: &[u8]) -> (u16, String) {
    let addr = gw.url().trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {MASTER}\r\n\
         content-type: multipart/form-data; boundary={BOUNDARY}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(64 * 1024) {
        let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
        // The gateway may stop reading once it refuses: the rest is not needed.
        if socket.write_all(&framed).await.is_err() {
            break;
        }
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_streams_back_and_is_priced_by_the_character() {
    let (gw, _backend) = audio_gateway("").await;
    let client = TestClient::new();
    let bearer = format!("Bearer {MASTER}");
    let body = json!({"model": "tts", "input": "hello world", "voice": "alloy", "response_format": "wav"}).to_string();
    let url = format!("{}/v1/audio/speech", gw.url());
    let (status, headers, frames) =
        client.post_stream(&url, body.as_bytes(), &[("authorization", &bearer)]).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(headers.get("content-type").unwrap(), "audio/wav");
    let bytes: usize = frames.iter().map(Bytes::len).sum();
    assert_eq!(bytes, 44 + 2400 * "hello world".len(), "the whole WAV");
    assert!(frames.len() > 1, "it came in pieces, as the backend sent them");
    let rows = request_log(&client, &gw, MASTER, 1).await;
    assert_eq!(rows[0]["units"], json!({"characters": 11}), "{}", rows[0]);
    assert!((rows[0]["cost_usd"].as_f64().unwrap() - 0.11).abs() < 1e-9, "{}", rows[0]);
}
