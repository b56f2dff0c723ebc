//! The Endpoint Picker as an `envoy.service.ext_proc.v3.ExternalProcessor`: one stream per HTTP
//! request. Request headers, then the body as Envoy streams it (`FULL_DUPLEX_STREAMED`) are read
//! whole (up to a bound), the `Picker` picks, and the answer to the headers carries the pick; the
//! body goes back unchanged after it. On the response path the served endpoint is read back and
//! the response is let through chunk by chunk. Whatever the picker holds for a request (a slot,
//! a permit) is dropped when its stream ends, however it ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::ExternalProcessor;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use futures_util::{Stream, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use crate::message;

/// What the picker is told about a request.
#[derive(Debug, Default)]
pub struct PickRequest {
    pub method: String,
    pub path: String,
    /// The request's headers (pseudo-headers apart, in `method`/`path`).
    pub headers: HeaderMap,
    /// The whole body (empty on the headers-only path).
    pub body: Bytes,
    /// The data plane's subset hint: only these endpoints (`ip:port`, or `ip` for any port) may
    /// be picked. `Some(empty)`: none may.
    pub subset: Option<Vec<String>>,
}

/// A pick: the endpoints (first choice first, then fallbacks), what the picker holds for the
/// request until its stream ends, and headers to add to the request upstream.
pub struct Picked<T> {
    pub endpoints: Vec<String>,
    pub ticket: T,
    pub headers: Vec<(String, String)>,
}

/// Why nothing was picked: answered to the client directly with this status, headers and body.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// For Envoy's logs (`ImmediateResponse.details`).
    pub details: String,
}

/// What chooses the endpoint for a request (the gateway's router).
pub trait Picker: Send + Sync + 'static {
    /// Held from the pick until the request's stream ends.
    type Ticket: Send + 'static;

    fn pick(&self, request: PickRequest) -> impl Future<Output = Result<Picked<Self::Ticket>, Refusal>> + Send;

    /// The response's head came back: the endpoint the data plane says served it (where it says
    /// so), and the status.
    fn responded(&self, ticket: &mut Self::Ticket, served: Option<&str>, status: Option<u16>);

    /// A stream ended badly (a protocol error from the data plane), for the metrics.
    fn malformed(&self, _why: &'static str) {}
}

/// Bounds on what one stream may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request body larger than this is answered 413 without a pick.
    pub max_body_bytes: usize,
}

/// The ext_proc service over a picker.
pub struct ExtProc<P> {
    picker: Arc<P>,
    limits: Limits,
}

impl<P: Picker> ExtProc<P> {
    pub fn new(picker: Arc<P>, limits: Limits) -> Self {
        ExtProc { picker, limits }
    }
}

type Outbound = Result<ProcessingResponse, Status>;

#[tonic::async_trait]
impl<P: Picker> ExternalProcessor for ExtProc<P> {
    type ProcessStream = Pin<Box<dyn Stream<Item = Outbound> + Send>>;

    async fn process(
        &self,
        request: tonic::Request<Streaming<ProcessingRequest>>,
    ) -> Result<tonic::Response<Self::ProcessStream>, Status> {
        let inbound = request.into_inner();
        // A few messages of slack: the body goes back in chunks while Envoy reads them.
        let (out, answers) = mpsc::channel::<Outbound>(16);
        let exchange = Exchange { picker: self.picker.clone(), limits: self.limits, out, phase: Phase::Start };
        tokio::spawn(exchange.run(inbound));
        let answers = futures_util::stream::unfold(answers, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        Ok(tonic::Response::new(Box::pin(answers)))
    }
}

/// Where one request's stream is.
enum Phase<T> {
    /// Nothing yet: the request headers come first.
    Start,
    /// Headers in, the body arriving.
    Body { request: Box<PickRequest>, body: BytesMut },
    /// Picked (or refused): the rest passes through.
    Picked(Option<T>),
}

/// One request's stream.
struct Exchange<P: Picker> {
    picker: Arc<P>,
    limits: Limits,
    out: mpsc::Sender<Outbound>,
    phase: Phase<P::Ticket>,
}

/// How a stream stops early.
enum Stop {
    /// The data plane is gone (or the stream is done).
    Closed,
    /// The data plane broke the protocol: the stream ends with this status.
    Malformed(&'static str),
}

impl<P: Picker> Exchange<P> {
    async fn run(mut self, mut inbound: Streaming<ProcessingRequest>) {
        loop {
            let message = match inbound.next().await {
                Some(Ok(message)) => message,
                // The data plane closed or reset the stream: whatever this request held goes.
                Some(Err(_)) | None => return,
            };
            match self.step(message).await {
                Ok(()) => {}
                Err(Stop::Closed) => return,
                Err(Stop::Malformed(why)) => {
                    self.picker.malformed(why);
                    tracing::debug!(why, "ext_proc stream refused");
                    let _ = self.out.send(Err(Status::invalid_argument(why))).await;
                    return;
                }
            }
        }
    }

    async fn step(&mut self, message: ProcessingRequest) -> Result<(), Stop> {
        let Some(request) = message.request else {
            return Err(Stop::Malformed("an ext_proc message without a request"));
        };
        match (request, &mut self.phase) {
            (Request::RequestHeaders(headers), Phase::Start) => {
                let subset = message::endpoints_at(
                    message.metadata_context.as_ref(),
                    message::SUBSET_NAMESPACE,
                    message::SUBSET,
                );
                let request = pick_request(&headers, subset);
                if headers.end_of_stream {
                    return self.pick(request, Bytes::new(), false).await;
                }
                self.phase = Phase::Body { request: Box::new(request), body: BytesMut::new() };
                Ok(())
            }
            (Request::RequestHeaders(_), _) => Err(Stop::Malformed("request headers sent twice")),
            (Request::RequestBody(_), Phase::Start) => Err(Stop::Malformed("a request body before its headers")),
            (Request::RequestBody(chunk), Phase::Body { body, .. }) => {
                if body.len() + chunk.body.len() > self.limits.max_body_bytes {
                    let limit = self.limits.max_body_bytes;
                    self.phase = Phase::Picked(None);
                    let text = format!("{{\"error\":{{\"message\":\"the request body is larger than {limit} bytes\",\"type\":\"invalid_request_error\",\"code\":\"request_too_large\"}}}}");
                    let json = [("content-type".to_owned(), "application/json".to_owned())];
                    return self
                        .send(message::immediate(413, &json, text.into_bytes(), "request body too large"))
                        .await;
                }
                body.extend_from_slice(&chunk.body);
                if !chunk.end_of_stream {
                    return Ok(());
                }
                self.finish_body(false).await
            }
            (Request::RequestBody(_), Phase::Picked(_)) => Ok(()),
            (Request::RequestTrailers(_), Phase::Body { .. }) => {
                self.finish_body(true).await?;
                self.send(message::trailers(true)).await
            }
            (Request::RequestTrailers(_), _) => self.send(message::trailers(true)).await,
            (Request::ResponseHeaders(headers), Phase::Picked(ticket)) => {
                let served =
                    message::endpoints_at(message.metadata_context.as_ref(), message::LB_NAMESPACE, message::SERVED);
                let status = message::headers_of(&headers)
                    .find(|(name, _)| *name == ":status")
                    .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok());
                if let Some(ticket) = ticket.as_mut() {
                    let served = served.as_ref().and_then(|s| s.first()).map(String::as_str);
                    self.picker.responded(ticket, served, status);
                }
                self.send(message::response_headers()).await
            }
            (Request::ResponseBody(chunk), Phase::Picked(_)) => {
                self.send(message::response_body(chunk.body, chunk.end_of_stream)).await
            }
            (Request::ResponseTrailers(_), Phase::Picked(_)) => self.send(message::trailers(false)).await,
            (Request::ResponseHeaders(_) | Request::ResponseBody(_) | Request::ResponseTrailers(_), _) => {
                Err(Stop::Malformed("a response before the request was complete"))
            }
        }
    }

    /// The request body is complete (its last chunk, or trailers after it): pick, then hand the
    /// body back.
    async fn finish_body(&mut self, trailers_follow: bool) -> Result<(), Stop> {
        let Phase::Body { request, body } = std::mem::replace(&mut self.phase, Phase::Start) else {
            return Err(Stop::Malformed("a request body before its headers"));
        };
        self.pick(*request, body.freeze(), trailers_follow).await
    }

    async fn pick(&mut self, mut request: PickRequest, body: Bytes, trailers_follow: bool) -> Result<(), Stop> {
        let has_body = !body.is_empty() || trailers_follow;
        request.body = body.clone();
        match self.picker.pick(request).await {
            Ok(picked) => {
                self.phase = Phase::Picked(Some(picked.ticket));
                let extra: Vec<HeaderValueOption> =
                    picked.headers.iter().map(|(k, v)| message::set_header(k, v.as_bytes())).collect();
                self.send(message::picked(&picked.endpoints.join(","), extra)).await?;
                if has_body {
                    self.send_body(body, !trailers_follow).await?;
                }
                Ok(())
            }
            Err(refusal) => {
                self.phase = Phase::Picked(None);
                let answer =
                    message::immediate(refusal.status, &refusal.headers, refusal.body.to_vec(), &refusal.details);
                self.send(answer).await
            }
        }
    }

    /// The body handed back unchanged, in chunks Envoy's gRPC messages take.
    async fn send_body(&mut self, body: Bytes, end_of_stream: bool) -> Result<(), Stop> {
        if body.is_empty() {
            return self.send(message::request_body(Vec::new(), end_of_stream)).await;
        }
        let chunks = body.len().div_ceil(message::BODY_CHUNK);
        for (i, chunk) in body.chunks(message::BODY_CHUNK).enumerate() {
            self.send(message::request_body(chunk.to_vec(), end_of_stream && i + 1 == chunks)).await?;
        }
        Ok(())
    }

    async fn send(&mut self, answer: ProcessingResponse) -> Result<(), Stop> {
        self.out.send(Ok(answer)).await.map_err(|_| Stop::Closed)
    }
}

/// The request's method, path and headers from Envoy's header message.
fn pick_request(headers: &HttpHeaders, subset: Option<Vec<String>>) -> PickRequest {
    let mut request = PickRequest { subset, ..PickRequest::default() };
    for (name, value) in message::headers_of(headers) {
        match name {
            ":method" => request.method = String::from_utf8_lossy(value).into_owned(),
            ":path" => request.path = String::from_utf8_lossy(value).into_owned(),
            _ if name.starts_with(':') => {}
            _ => {
                if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value))
                {
                    request.headers.append(name, value);
                }
            }
        }
    }
    request
}
