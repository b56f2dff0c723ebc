//! Uploads in flight (audio transcriptions and translations): the multipart form goes to the
//! backend as it arrives from the client — the head read to route it (`http/multipart.rs`) first,
//! then every frame as it comes — counted against `limits.max_upload_bytes` on the way, so memory
//! stays flat however large the file. An attempt whose connection failed before it read anything
//! leaves the upload for the next backend (failover before the first byte); once a backend has
//! read part of it, it cannot be sent again. The upload's WAV header, if it has one, tells its
//! duration for usage when the answer does not.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::attempt::{request_head, AttemptError, Headers};
use crate::app::App;
use crate::http::multipart::FormHead;
use crate::route::backend::Backend;
use crate::translate::Wire;
use crate::upstream::pool::UpstreamBody;

/// The first bytes of an upload read for a WAV header.
const SNIFF_BYTES: usize = 4096;

/// One request's upload, shared by its attempts.
pub struct Upload {
    slot: Arc<Mutex<Option<Source>>>,
    state: Arc<UploadState>,
    content_type: HeaderValue,
    /// The body's length as it goes upstream, when the client said it.
    length: Option<u64>,
    /// An image form's `n`, `size` and `quality`.
    images: crate::records::UsageUnits,
}

/// What every attempt and the meter learn of an upload.
struct UploadState {
    limit: usize,
    exceeded: AtomicBool,
    /// The audio's duration from its WAV header (f64 bits; 0: unknown), for the meter.
    seconds: Arc<AtomicU64>,
}

/// What has not gone upstream yet.
struct Source {
    prefix: Option<Bytes>,
    rest: Option<Incoming>,
    sent: usize,
    sniffed: Vec<u8>,
}

impl Upload {
    /// The form as read so far (its model spliced in already: `grew` bytes longer) and the
    /// client's headers.
    pub fn new(head: FormHead, grew: i64, client: &HeaderMap, limit: usize) -> Upload {
        let length = client
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .and_then(|n| n.checked_add_signed(grew));
        let content_type =
            client.get(CONTENT_TYPE).cloned().unwrap_or_else(|| HeaderValue::from_static("multipart/form-data"));
        let images = head.images;
        let source = Source { prefix: Some(head.prefix), rest: head.rest, sent: 0, sniffed: Vec::new() };
        let seconds = Arc::new(AtomicU64::new(0));
        let state = Arc::new(UploadState { limit, exceeded: AtomicBool::new(false), seconds });
        Upload { slot: Arc::new(Mutex::new(Some(source))), state, content_type, length, images }
    }

    /// Its duration as its WAV header tells it (f64 bits; 0 until known), for the meter.
    pub fn seconds(&self) -> Arc<AtomicU64> {
        self.state.seconds.clone()
    }

    /// What an image form asks for (`n`, `size`, `quality`).
    pub fn images(&self) -> crate::records::UsageUnits {
        self.images.clone()
    }

    /// No attempt has read any of it yet.
    fn available(&self) -> bool {
        self.slot.lock().map(|s| s.is_some()).unwrap_or(false)
    }

    fn body(&self) -> UploadBody {
        UploadBody { slot: self.slot.clone(), source: None, state: self.state.clone(), length: self.length }
    }
}

/// The client uploading directly to the backend: hyper-util's pooled client over the same
/// connector as every upstream call, for this body type.
fn client(connect_timeout: Duration) -> Result<&'static Client<HttpsConnector<HttpConnector>, UploadBody>, String> {
    static CLIENT: OnceLock<Client<HttpsConnector<HttpConnector>, UploadBody>> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client);
    }
    let connector = crate::upstream::connector(connect_timeout)?;
    let built = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector);
    Ok(CLIENT.get_or_init(|| built))
}

/// One attempt at `backend`: the upload streamed to it, its answer up to the first body frame,
/// within `limit` (the request's own deadline: an upload takes as long as the client sends).
pub async fn attempt(
    app: &App,
    backend: &Arc<Backend>,
    wire: Wire,
    upload: &Upload,
    headers: Headers<'_>,
    limit: Duration,
) -> Result<(http::response::Parts, UpstreamBody, Option<Frame<Bytes>>), AttemptError> {
    if !upload.available() {
        return Err(AttemptError::Spent);
    }
    let client = client(app.config.timeouts.connect).map_err(|_| AttemptError::Transport)?;
    let uri = backend.target_for(wire, headers.model, headers.stream).ok_or(AttemptError::Transport)?;
    let mut req = request_head(backend, uri, upload.content_type.clone(), &headers);
    if let Some(length) = upload.length {
        req = req.header(CONTENT_LENGTH, length);
    }
    let req = req.body(upload.body()).map_err(|_| AttemptError::Transport)?;
    let failed = |e: &dyn std::fmt::Display| {
        if upload.state.exceeded.load(Relaxed) {
            return AttemptError::TooLarge;
        }
        tracing::debug!(backend = backend.name(), error = %e, "upload to the backend failed");
        AttemptError::Transport
    };
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| failed(&e))?;
        let (parts, body) = resp.into_parts();
        let mut body = UpstreamBody::unpooled(body);
        let first = match body.frame().await {
            None => None,
            Some(Ok(frame)) => Some(frame),
            Some(Err(e)) => return Err(failed(&e)),
        };
        Ok((parts, body, first))
    };
    tokio::time::timeout(limit, exchange).await.map_err(|_| AttemptError::Timeout)?
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The upload as an attempt's request body: taken from the shared slot at its first poll.
pub struct UploadBody {
    slot: Arc<Mutex<Option<Source>>>,
    source: Option<Source>,
    state: Arc<UploadState>,
    length: Option<u64>,
}

impl Body for UploadBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.source.is_none() {
            this.source = this.slot.lock().ok().and_then(|mut s| s.take());
        }
        let Some(source) = this.source.as_mut() else {
            return Poll::Ready(Some(Err("the upload already went to another attempt".into())));
        };
        if let Some(prefix) = source.prefix.take() {
            return Poll::Ready(Some(source.count(prefix, &this.state).map(Frame::data)));
        }
        let Some(rest) = source.rest.as_mut() else { return Poll::Ready(None) };
        let frame = match ready!(Pin::new(rest).poll_frame(cx)) {
            None => return Poll::Ready(None),
            Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            Some(Ok(frame)) => frame,
        };
        Poll::Ready(Some(match frame.into_data() {
            Ok(data) => source.count(data, &this.state).map(Frame::data),
            Err(frame) => Ok(frame),
        }))
    }

    fn size_hint(&self) -> SizeHint {
        self.length.map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

impl Source {
    /// Count `data` against the limit (an error past it aborts the upstream request) and look
    /// for a WAV header in the first bytes.
    fn count(&mut self, data: Bytes, state: &UploadState) -> Result<Bytes, BoxError> {
        self.sent += data.len();
        if self.sent > state.limit {
            state.exceeded.store(true, Relaxed);
            return Err(format!("the upload is larger than the {}-byte limit", state.limit).into());
        }
        if self.sniffed.len() < SNIFF_BYTES && state.seconds.load(Relaxed) == 0 {
            let take = (SNIFF_BYTES - self.sniffed.len()).min(data.len());
            self.sniffed.extend_from_slice(&data[..take]);
            if let Some(seconds) = wav_seconds(&self.sniffed) {
                state.seconds.store(seconds.to_bits(), Relaxed);
            }
        }
        Ok(data)
    }
}

/// The duration of the WAV file whose header is in `bytes` (anywhere: a form's fields come
/// first): its `data` chunk's size over the `fmt ` chunk's byte rate.
fn wav_seconds(bytes: &[u8]) -> Option<f64> {
    let riff = memchr::memmem::find(bytes, b"RIFF")?;
    let wav = bytes.get(riff..)?;
    if wav.get(8..12)? != b"WAVE" {
        return None;
    }
    let u32_at = |b: &[u8], at: usize| b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
    let (mut at, mut byte_rate) = (12, None);
    while let (Some(id), Some(size)) = (wav.get(at..at + 4), u32_at(wav, at + 4)) {
        match id {
            b"fmt " => byte_rate = u32_at(wav, at + 16).filter(|r| *r > 0),
            b"data" => {
                return byte_rate.map(|rate| f64::from(size) / f64::from(rate)).filter(|s| s.is_finite() && *s > 0.0)
            }
            _ => {}
        }
        at += 8 + size as usize + (size as usize & 1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav(seconds: u32) -> Vec<u8> {
        let (rate, bytes_per_second) = (16_000u32, 32_000u32);
        let data = seconds * bytes_per_second;
        let mut out = b"RIFF".to_vec();
        out.extend_from_slice(&(36 + data).to_le_bytes());
        out.extend_from_slice(b"WAVEfmt ");
        out.extend_from_slice(&16u32.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&rate.to_le_bytes());
        out.extend_from_slice(&bytes_per_second.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(b"data");
        out.extend_from_slice(&data.to_le_bytes());
        out
    }

    #[test]
    fn a_wav_header_tells_the_duration_wherever_it_starts() {
        assert_eq!(wav_seconds(&wav(7)), Some(7.0));
        let mut form = b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n".to_vec();
        form.extend_from_slice(&wav(3));
        assert_eq!(wav_seconds(&form), Some(3.0));
        assert_eq!(wav_seconds(b"ID3 not a wav"), None);
        assert_eq!(wav_seconds(&wav(3)[..30]), None, "a cut header tells nothing");
    }
}
