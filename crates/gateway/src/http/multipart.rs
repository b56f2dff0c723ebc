//! Multipart form uploads (`multipart/form-data`, audio transcriptions and translations): the
//! small fields are read as they arrive — `model` and `stream` are what routing needs — and the
//! file part is never read whole. What was read before the file goes upstream first and the rest
//! of the body streams after it (`proxy/upload.rs`). A form that names its file before its model
//! (curl's `-F file=@… -F model=…` order) is read up to the model: that much is held, within the
//! upload limit.

use std::ops::Range;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use memchr::memmem;

use crate::error::GatewayError;

/// The most a form field other than a file may hold, and a part's headers.
const MAX_FIELD_BYTES: usize = 64 * 1024;

/// A form's head: its fields before the file, what routing needs of them, and the rest.
pub struct FormHead {
    /// Every byte read so far: sent upstream first.
    pub prefix: Bytes,
    /// The rest of the client's body, still to stream (None: it has all arrived).
    pub rest: Option<Incoming>,
    pub model: String,
    /// Where `model`'s value lies in `prefix` (an alias is spliced there).
    pub model_at: Range<usize>,
    pub stream: bool,
    /// An image form's `n`, `size` and `quality` (what its images are priced by).
    pub images: crate::records::UsageUnits,
}

impl FormHead {
    /// The form with its `model` field saying `model` instead (an alias resolved): the prefix
    /// with the value's bytes replaced, and how much longer it got (negative: shorter).
    pub fn with_model(mut self, model: &str) -> (FormHead, i64) {
        if model == self.model {
            return (self, 0);
        }
        let at = self.model_at.clone();
        let mut prefix = BytesMut::with_capacity(self.prefix.len() + model.len());
        prefix.extend_from_slice(&self.prefix[..at.start]);
        prefix.extend_from_slice(model.as_bytes());
        prefix.extend_from_slice(&self.prefix[at.end..]);
        let grew = model.len() as i64 - at.len() as i64;
        self.prefix = prefix.freeze();
        self.model_at = at.start..at.start + model.len();
        self.model = model.to_owned();
        (self, grew)
    }
}

fn bad(message: &str, param: Option<&'static str>) -> GatewayError {
    GatewayError::bad_request(message, param)
}

/// The form's boundary, from its content type; a 400 for a body that is not a multipart form.
pub fn boundary(headers: &HeaderMap) -> Result<String, GatewayError> {
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let (mime, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return Err(bad("the request body must be multipart/form-data", None));
    }
    params
        .split(';')
        .find_map(|p| {
            let (key, value) = p.split_once('=')?;
            key.trim().eq_ignore_ascii_case("boundary").then(|| value.trim().trim_matches('"').to_owned())
        })
        .filter(|b| (1..=70).contains(&b.len()))
        .ok_or_else(|| bad("the multipart content type names no boundary", None))
}

/// Read `body` until the form's `model` (and the fields before its file) are known, within
/// `limit` bytes and `wait` for the whole head.
pub async fn read_head(
    mut body: Incoming,
    boundary: &str,
    limit: usize,
    wait: Duration,
) -> Result<FormHead, GatewayError> {
    let mut scanner = Scanner::new(boundary);
    let mut buf = BytesMut::new();
    let read = async {
        loop {
            if scanner.scan(&buf)? == Scan::Done {
                return Ok(false);
            }
            let Some(frame) = body.frame().await else { return Ok(true) };
            let frame = frame.map_err(|_| bad("the request body could not be read", None))?;
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
                if buf.len() > limit {
                    return Err(GatewayError::PayloadTooLarge { limit });
                }
            }
        }
    };
    let ended = tokio::time::timeout(wait, read).await.map_err(|_| GatewayError::BodyTimeout)??;
    if ended && scanner.scan(&buf)? != Scan::Done {
        return Err(bad("the multipart form ended early", None));
    }
    let Some((model, model_at)) = scanner.model else {
        return Err(bad("you must provide a model parameter", Some("model")));
    };
    let rest = (!ended).then_some(body);
    let images = scanner.images;
    Ok(FormHead { prefix: buf.freeze(), rest, model, model_at, stream: scanner.stream, images })
}

#[derive(Debug, PartialEq, Eq)]
enum Scan {
    NeedMore,
    Done,
}

/// Walks a form's parts as its bytes arrive.
struct Scanner {
    /// `--boundary`.
    delimiter: Vec<u8>,
    /// `\r\n--boundary`: where a part's data ends.
    closing: Vec<u8>,
    /// Where the next delimiter starts (None: not found yet, a preamble may come first).
    at: Option<usize>,
    /// How far the current part's data was searched for its end already.
    searched: usize,
    model: Option<(String, Range<usize>)>,
    stream: bool,
    images: crate::records::UsageUnits,
}

impl Scanner {
    fn new(boundary: &str) -> Scanner {
        let delimiter = format!("--{boundary}").into_bytes();
        let closing = [&b"\r\n"[..], &delimiter].concat();
        let images = crate::records::UsageUnits { images: 1, ..Default::default() };
        Scanner { delimiter, closing, at: None, searched: 0, model: None, stream: false, images }
    }

    /// Parts from where the last call stopped: done once the model is known and the next part is
    /// a file or the form's end.
    fn scan(&mut self, buf: &[u8]) -> Result<Scan, GatewayError> {
        loop {
            let at = match self.at {
                Some(at) => at,
                None => match memmem::find(buf, &self.delimiter) {
                    Some(at) => *self.at.insert(at),
                    None if buf.len() > MAX_FIELD_BYTES => return Err(bad("not a multipart form", None)),
                    None => return Ok(Scan::NeedMore),
                },
            };
            let after = at + self.delimiter.len();
            if buf.len() < after + 2 {
                return Ok(Scan::NeedMore);
            }
            if &buf[after..after + 2] == b"--" {
                // The form's end.
                return match self.model {
                    Some(_) => Ok(Scan::Done),
                    None => Err(bad("you must provide a model parameter", Some("model"))),
                };
            }
            if &buf[after..after + 2] != b"\r\n" {
                return Err(bad("a malformed multipart form", None));
            }
            let head_start = after + 2;
            let Some(head_len) = memmem::find(&buf[head_start..], b"\r\n\r\n") else {
                return match buf.len() - head_start > MAX_FIELD_BYTES {
                    true => Err(bad("a multipart part's headers are too long", None)),
                    false => Ok(Scan::NeedMore),
                };
            };
            let (name, is_file) = disposition(&buf[head_start..head_start + head_len])?;
            let data = head_start + head_len + 4;
            if is_file && self.model.is_some() {
                return Ok(Scan::Done);
            }
            let from = self.searched.max(data);
            let Some(len) = memmem::find(&buf[from..], &self.closing).map(|i| from + i - data) else {
                if !is_file && buf.len() - data > MAX_FIELD_BYTES {
                    return Err(bad(&format!("the form field `{name}` is too long"), None));
                }
                // Resume where this search ended (less what could be the start of a delimiter).
                self.searched = buf.len().saturating_sub(self.closing.len()).max(data);
                return Ok(Scan::NeedMore);
            };
            if !is_file && len > MAX_FIELD_BYTES {
                return Err(bad(&format!("the form field `{name}` is too long"), None));
            }
            let value = &buf[data..data + len];
            match name.as_str() {
                "model" => {
                    let model = std::str::from_utf8(value).map_err(|_| bad("`model` must be text", Some("model")))?;
                    if model.trim().is_empty() {
                        return Err(bad("`model` must not be empty", Some("model")));
                    }
                    self.model = Some((model.to_owned(), data..data + len));
                }
                "stream" => self.stream = value.eq_ignore_ascii_case(b"true"),
                "n" => {
                    let n = std::str::from_utf8(value).ok().and_then(|n| n.trim().parse::<u64>().ok());
                    self.images.images = n.unwrap_or(1).clamp(1, 128);
                }
                "size" | "quality" if value.len() <= 32 => {
                    let text = String::from_utf8_lossy(value).into_owned();
                    match name.as_str() {
                        "size" => self.images.image_size = Some(text),
                        _ => self.images.image_quality = Some(text),
                    }
                }
                _ => {}
            }
            self.at = Some(data + len + 2);
            self.searched = 0;
        }
    }
}

/// A part's field name, and whether it is a file (its `Content-Disposition` has a filename).
fn disposition(head: &[u8]) -> Result<(String, bool), GatewayError> {
    let head = std::str::from_utf8(head).map_err(|_| bad("a multipart part's headers are not text", None))?;
    let line = head
        .split("\r\n")
        .find(|l| l.len() > 20 && l[..20].eq_ignore_ascii_case("content-disposition:"))
        .ok_or_else(|| bad("a multipart part has no Content-Disposition", None))?;
    let mut name = None;
    let mut is_file = false;
    for param in line[20..].split(';').skip(1) {
        let Some((key, value)) = param.split_once('=') else { continue };
        match key.trim().to_ascii_lowercase().as_str() {
            "name" => name = Some(value.trim().trim_matches('"').to_owned()),
            "filename" | "filename*" => is_file = true,
            _ => {}
        }
    }
    Ok((name.ok_or_else(|| bad("a multipart part has no name", None))?, is_file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(parts: &[(&str, Option<&str>, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, file, value) in parts {
            let file = file.map(|f| format!("; filename=\"{f}\"")).unwrap_or_default();
            out.extend_from_slice(
                format!("--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"{file}\r\n\r\n").as_bytes(),
            );
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"--XyZ--\r\n");
        out
    }

    /// Scan `bytes` fed `step` bytes at a time: (done, model, stream, bytes it needed).
    fn scan_in_steps(bytes: &[u8], step: usize) -> (bool, Option<String>, bool, usize) {
        let mut s = Scanner::new("XyZ");
        for end in (step..bytes.len() + step).step_by(step) {
            let end = end.min(bytes.len());
            if s.scan(&bytes[..end]).unwrap() == Scan::Done {
                return (true, s.model.map(|m| m.0), s.stream, end);
            }
        }
        (false, s.model.map(|m| m.0), s.stream, bytes.len())
    }

    #[test]
    fn the_fields_before_the_file_are_read_and_the_file_is_not() {
        let file = "RIFF".to_owned() + &"x".repeat(100_000);
        let bytes = form(&[("model", None, "whisper-1"), ("stream", None, "true"), ("file", Some("a.wav"), &file)]);
        for step in [1, 7, 4096] {
            let (done, model, stream, needed) = scan_in_steps(&bytes, step);
            assert!(done && stream, "step {step}");
            assert_eq!(model.as_deref(), Some("whisper-1"));
            assert!(needed < 200 + step, "it read into the file: {needed}");
        }
        // File first (curl's order): read through the file to the model.
        let bytes = form(&[("file", Some("a.wav"), &file), ("model", None, "whisper-1")]);
        let (done, model, _, _) = scan_in_steps(&bytes, 4096);
        assert!(done && model.as_deref() == Some("whisper-1"));
    }

    #[test]
    fn mistakes_are_refused() {
        let no_model = form(&[("file", Some("a.wav"), "abc")]);
        assert!(Scanner::new("XyZ").scan(&no_model).is_err());
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, "application/json".parse().unwrap());
        assert!(boundary(&headers).is_err());
        headers.insert(CONTENT_TYPE, "multipart/form-data; boundary=\"XyZ\"".parse().unwrap());
        assert_eq!(boundary(&headers).unwrap(), "XyZ");
        let long = form(&[("prompt", None, &"p".repeat(MAX_FIELD_BYTES + 10)), ("model", None, "m")]);
        assert!(Scanner::new("XyZ").scan(&long).is_err());
    }

    #[test]
    fn an_alias_is_spliced_into_the_model_field() {
        let bytes = form(&[("model", None, "fast"), ("file", Some("a.wav"), "abc")]);
        let mut s = Scanner::new("XyZ");
        assert_eq!(s.scan(&bytes).unwrap(), Scan::Done);
        let (model, model_at) = s.model.unwrap();
        let images = crate::records::UsageUnits::default();
        let head = FormHead { prefix: Bytes::from(bytes.clone()), rest: None, model, model_at, stream: false, images };
        let (head, grew) = head.with_model("whisper-large-v3");
        assert_eq!(grew, "whisper-large-v3".len() as i64 - 4);
        let text = String::from_utf8(head.prefix.to_vec()).unwrap();
        assert!(text.contains("name=\"model\"\r\n\r\nwhisper-large-v3\r\n--XyZ"), "{text}");
    }
}
