//! A batch's lines: the input file's JSONL (each line `{custom_id, method, url, body}`) read and
//! checked, and OpenAI's output and error lines written from the finished lines.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::store::LineRow;

/// The endpoints a batch may run, as its `endpoint` names them.
pub const ENDPOINTS: [&str; 5] =
    ["/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/rerank", "/v1/completions"];

/// One line to run.
pub struct Line {
    /// Its place in the input file (0-based).
    pub n: i64,
    pub custom_id: String,
    pub body: Bytes,
}

/// What an input line is: a request to run, or why it cannot be.
pub enum Parsed {
    Line(Line),
    /// A line that goes to the error file as it is: its `custom_id` (or `line-N`) and the error.
    Bad(LineRow),
}

#[derive(Deserialize)]
struct RawLine<'a> {
    custom_id: Option<Value>,
    method: Option<String>,
    url: Option<String>,
    #[serde(borrow)]
    body: Option<&'a RawValue>,
}

/// Read line `n` of a batch for `endpoint`.
pub fn parse(batch: &str, n: i64, text: &str, endpoint: &str) -> Parsed {
    let bad = |custom_id: String, code: &str, message: String| {
        let body = json!({"code": code, "message": message}).to_string();
        let request_id = request_id(batch, &custom_id);
        Parsed::Bad(LineRow { custom_id, line: n, status: 0, failed: true, body, request_id })
    };
    let raw: RawLine<'_> = match serde_json::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            return bad(format!("line-{}", n + 1), "invalid_json_line", format!("line {} is not JSON: {e}", n + 1))
        }
    };
    let custom_id = match raw.custom_id {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= 512 => id,
        _ => {
            return bad(format!("line-{}", n + 1), "missing_custom_id", "`custom_id` must be a non-empty string".into())
        }
    };
    if raw.method.as_deref().is_some_and(|m| !m.eq_ignore_ascii_case("POST")) {
        return bad(custom_id, "invalid_method", "`method` must be POST".into());
    }
    if raw.url.as_deref() != Some(endpoint) {
        return bad(custom_id, "invalid_url", format!("`url` must be the batch's endpoint, {endpoint}"));
    }
    match raw.body.filter(|b| b.get().trim_start().starts_with('{')) {
        Some(body) => Parsed::Line(Line { n, custom_id, body: Bytes::copy_from_slice(body.get().as_bytes()) }),
        None => bad(custom_id, "invalid_body", "`body` must be a JSON object".into()),
    }
}

/// The request id a line is sent with: the same for the same batch and `custom_id`, so a line
/// sent again after a crash is the same usage record, not a second one.
pub fn request_id(batch: &str, custom_id: &str) -> String {
    let digest =
        Sha256::new().chain_update(batch.as_bytes()).chain_update([0]).chain_update(custom_id.as_bytes()).finalize();
    digest[..16].iter().fold("batch_req_".to_owned(), |mut id, b| {
        id.push_str(&format!("{b:02x}"));
        id
    })
}

/// Whether a finished line goes to the output file (a 2xx answer) or the error file.
pub fn succeeded(line: &LineRow) -> bool {
    !line.failed && (200..300).contains(&line.status)
}

/// OpenAI's line for a finished line: `response` with the backend's status and body, or `error`
/// for a line that could not run.
pub fn output(line: &LineRow) -> String {
    let body = serde_json::from_str::<Value>(&line.body).unwrap_or_else(|_| Value::String(line.body.clone()));
    let value = if line.status == 0 {
        json!({"id": line.request_id, "custom_id": line.custom_id, "response": null, "error": body})
    } else {
        let response = json!({"status_code": line.status, "request_id": line.request_id, "body": body});
        json!({"id": line.request_id, "custom_id": line.custom_id, "response": response, "error": null})
    };
    let mut text = value.to_string();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_and_mistakes_go_to_the_error_file() {
        let ok = r#"{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m"}}"#;
        assert!(matches!(parse("b", 0, ok, "/v1/chat/completions"), Parsed::Line(l) if l.custom_id == "a"));
        for (text, code) in [
            ("{nope", "invalid_json_line"),
            (r#"{"url": "/v1/chat/completions", "body": {}}"#, "missing_custom_id"),
            (r#"{"custom_id": "a", "url": "/v1/embeddings", "body": {}}"#, "invalid_url"),
            (r#"{"custom_id": "a", "url": "/v1/chat/completions", "body": []}"#, "invalid_body"),
        ] {
            let Parsed::Bad(row) = parse("b", 3, text, "/v1/chat/completions") else { panic!("{text}") };
            assert!(row.body.contains(code) && row.failed && row.status == 0, "{text}: {}", row.body);
            assert!(output(&row).contains("\"response\":null"));
        }
        assert_eq!(request_id("b", "a"), request_id("b", "a"));
        assert_ne!(request_id("b", "a"), request_id("b", "c"));
    }
}
