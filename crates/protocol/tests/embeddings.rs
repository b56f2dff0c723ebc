//! Embeddings between OpenAI's `/v1/embeddings` (float or base64 vectors) and Ollama's
//! `/api/embed`, each direction against golden files.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

mod common;

use std::path::{Path, PathBuf};

use common::{check_golden, Format};
use switchyard_protocol::embed::EmbedRequest;
use switchyard_protocol::{ollama, openai_embeddings};

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap()
}

#[test]
fn embeddings_translate_both_ways() {
    let mut failures = Vec::new();
    let openai = dir("openai_embeddings");
    let request = openai_embeddings::decode_request(&read(&openai, "request.json")).unwrap();
    assert!(request.base64, "the client asked for base64");
    failures.extend(check_golden(&openai, "request.ollama", Format::Json, ollama::encode_embed_request(&request)));
    failures.extend(check_golden(&openai, "request.openai", Format::Json, openai_embeddings::encode_request(&request)));
    let response = openai_embeddings::decode_response(&read(&openai, "response.json")).unwrap();
    assert_eq!(response.embeddings[0], [1.0, -0.5, 0.25, 0.0], "sorted by index, base64 decoded");
    failures.extend(check_golden(&openai, "response.ollama", Format::Json, ollama::encode_embed_response(&response)));
    failures.extend(check_golden(
        &openai,
        "response.openai",
        Format::Json,
        openai_embeddings::encode_response(&response, false),
    ));
    failures.extend(check_golden(
        &openai,
        "response.openai_base64",
        Format::Json,
        openai_embeddings::encode_response(&response, true),
    ));

    let native = dir("ollama_embed");
    let request: EmbedRequest = ollama::decode_embed_request(&read(&native, "request.json")).unwrap();
    assert_eq!(request.input, ["Why is the sky blue?"]);
    failures.extend(check_golden(&native, "request.openai", Format::Json, openai_embeddings::encode_request(&request)));
    failures.extend(check_golden(&native, "request.ollama", Format::Json, ollama::encode_embed_request(&request)));
    let response = ollama::decode_embed_response(&read(&native, "response.json")).unwrap();
    failures.extend(check_golden(
        &native,
        "response.openai",
        Format::Json,
        openai_embeddings::encode_response(&response, false),
    ));
    failures.extend(check_golden(&native, "response.ollama", Format::Json, ollama::encode_embed_response(&response)));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn token_array_inputs_are_refused() {
    let error = openai_embeddings::decode_request(br#"{"model":"m","input":[[1,2,3]]}"#).unwrap_err();
    assert!(error.to_string().contains("token arrays"), "{error}");
}
