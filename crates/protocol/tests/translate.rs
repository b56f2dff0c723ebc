//! Golden-fixture tests of every translation, each source API against each target API:
//! requests, responses, streams and error bodies under `tests/fixtures/<source>/<case>/`, the
//! expected output of each target beside the input as `<kind>.<target>.<ext>` (or
//! `<kind>.<target>.error.txt` where the target cannot carry the input). `BLESS=1` rewrites them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

mod common;

use std::path::PathBuf;

use common::{check_golden, decode_stream, encode_stream, Api, Format, ALL};
use switchyard_protocol::chat::StreamEvent;

const CASES: [(Api, &str); 9] = [
    (Api::OpenAiChat, "plain"),
    (Api::OpenAiChat, "tools"),
    (Api::Anthropic, "plain"),
    (Api::Anthropic, "tools"),
    (Api::Responses, "plain"),
    (Api::Responses, "tools"),
    (Api::Ollama, "plain"),
    (Api::Ollama, "tools"),
    (Api::OllamaGenerate, "plain"),
];

fn case_dir(source: Api, case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(source.dir()).join(case)
}

fn assert_no_failures(failures: Vec<String>) {
    assert!(failures.is_empty(), "{} golden mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn requests_translate_to_every_api() {
    let mut failures = Vec::new();
    for (source, case) in CASES {
        let dir = case_dir(source, case);
        let body = std::fs::read(dir.join("request.json")).unwrap();
        let request = source.decode_request(&body).unwrap_or_else(|e| panic!("{}/{case}: {e}", source.dir()));
        for target in ALL {
            let name = format!("request.{}", target.dir());
            failures.extend(check_golden(&dir, &name, Format::Json, target.encode_request(&request)));
        }
    }
    assert_no_failures(failures);
}

#[test]
fn responses_translate_to_every_api() {
    let mut failures = Vec::new();
    for (source, case) in CASES {
        let dir = case_dir(source, case);
        let body = std::fs::read(dir.join("response.json")).unwrap();
        let response = source.decode_response(&body).unwrap_or_else(|e| panic!("{}/{case}: {e}", source.dir()));
        for target in ALL {
            let name = format!("response.{}", target.dir());
            failures.extend(check_golden(&dir, &name, Format::Json, target.encode_response(&response)));
        }
    }
    assert_no_failures(failures);
}

#[test]
fn streams_translate_to_every_api() {
    let mut failures = Vec::new();
    for (source, case) in CASES {
        let dir = case_dir(source, case);
        let bytes = std::fs::read(dir.join(format!("stream.{}", source.stream_ext()))).unwrap();
        let events = decode_stream(source, &bytes, 0).unwrap_or_else(|e| panic!("{}/{case}: {e}", source.dir()));
        assert!(matches!(events.first(), Some(StreamEvent::Start { .. })), "{}/{case} starts", source.dir());
        assert_eq!(events.last(), Some(&StreamEvent::Done), "{}/{case} ends", source.dir());
        for target in ALL {
            let format = if target.stream_ext() == "sse" { Format::Sse } else { Format::Ndjson };
            let name = format!("stream.{}", target.dir());
            failures.extend(check_golden(&dir, &name, format, Ok(encode_stream(target, &events))));
        }
    }
    assert_no_failures(failures);
}

#[test]
fn streams_split_anywhere_decode_the_same() {
    for (source, case) in CASES {
        let dir = case_dir(source, case);
        let bytes = std::fs::read(dir.join(format!("stream.{}", source.stream_ext()))).unwrap();
        let whole = decode_stream(source, &bytes, 0).unwrap();
        for piece in [1, 2, 3, 7, 64] {
            assert_eq!(
                decode_stream(source, &bytes, piece).unwrap(),
                whole,
                "{}/{case} in {piece}-byte pieces",
                source.dir()
            );
        }
        for split in 0..bytes.len() {
            let mut decoder = source.decoder();
            let mut events = Vec::new();
            decoder.feed(&bytes[..split], &mut events).unwrap();
            decoder.feed(&bytes[split..], &mut events).unwrap();
            decoder.finish(&mut events).unwrap();
            assert_eq!(events, whole, "{}/{case} split at byte {split}", source.dir());
        }
    }
}

#[test]
fn errors_translate_to_every_api() {
    let mut failures = Vec::new();
    for (source, case) in CASES {
        let dir = case_dir(source, case);
        let Ok(body) = std::fs::read(dir.join("error.json")) else { continue };
        let error = source.decode_error(&body).unwrap_or_else(|| panic!("{}/{case}: error not decoded", source.dir()));
        for target in ALL.into_iter().filter(|t| *t != Api::OllamaGenerate) {
            let name = format!("error.{}", target.dir());
            failures.extend(check_golden(&dir, &name, Format::Json, Ok(target.encode_error(&error))));
        }
    }
    assert_no_failures(failures);
}
