//! Following another Endpoint Picker (llm-d's, Dynamo's, the inference extension's own): the
//! request is put to it as Envoy would put it (headers, then the body, over one ext_proc stream),
//! its pick read off the answer to the headers (the header mutation, or `envoy.lb` metadata), and
//! once an endpoint has answered, the served endpoint reported on the same stream.

use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request, processing_response, HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::message;

/// A picker to follow, over one HTTP/2 connection (multiplexed; reconnected as needed).
#[derive(Clone)]
pub struct Follower {
    client: ExternalProcessorClient<Channel>,
    timeout: Duration,
}

/// What the picker answered.
pub enum Answer {
    /// Endpoints, first choice first; the session reports which one served.
    Picked { endpoints: Vec<String>, session: Box<Session> },
    /// It answered the client itself (503: nothing eligible, 429: shed, ...).
    Refused { status: u16, body: Bytes, headers: Vec<(String, String)> },
}

/// The picker could not be asked, or did not answer in time or in the protocol.
#[derive(Debug)]
pub struct Unanswered(pub String);

/// The open stream of one request, kept until the served endpoint is reported.
pub struct Session {
    requests: mpsc::Sender<ProcessingRequest>,
    responses: Streaming<ProcessingResponse>,
}

/// Headers the picker is not sent: the client's credentials are the gateway's business.
const WITHHELD: [&str; 5] = ["authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization"];

impl Follower {
    /// `endpoint` is `host:port` (plaintext HTTP/2, as Envoy's `envoy_grpc` cluster speaks it).
    pub fn new(endpoint: &str, timeout: Duration) -> Result<Follower, String> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{endpoint}"))
            .map_err(|e| format!("`{endpoint}`: {e}"))?
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(Follower { client: ExternalProcessorClient::new(channel), timeout })
    }

    /// Put the request to the picker and wait (up to the timeout) for its pick.
    pub async fn ask(
        &self,
        method: &str,
        path: &str,
        authority: &str,
        headers: &http::HeaderMap,
        body: Bytes,
    ) -> Result<Answer, Unanswered> {
        let (requests, outgoing) = mpsc::channel::<ProcessingRequest>(4 + body.len() / message::BODY_CHUNK);
        let head = request_headers(method, path, authority, headers, body.is_empty());
        let _ = requests.try_send(head);
        if !body.is_empty() {
            let chunks = body.len().div_ceil(message::BODY_CHUNK);
            for (i, chunk) in body.chunks(message::BODY_CHUNK).enumerate() {
                let part = HttpBody { body: chunk.to_vec(), end_of_stream: i + 1 == chunks, ..Default::default() };
                let _ = requests.try_send(ProcessingRequest {
                    request: Some(processing_request::Request::RequestBody(part)),
                    ..Default::default()
                });
            }
        }
        let outgoing = futures_util::stream::unfold(outgoing, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        let mut client = self.client.clone();
        let asked = async move {
            let mut responses =
                client.process(outgoing).await.map_err(|s| Unanswered(s.message().to_owned()))?.into_inner();
            loop {
                let answer = responses
                    .message()
                    .await
                    .map_err(|s| Unanswered(format!("{:?}: {}", s.code(), s.message())))?
                    .ok_or_else(|| Unanswered("the picker closed the stream without a pick".to_owned()))?;
                match read_answer(answer) {
                    Read::Pick(endpoints) if endpoints.is_empty() => {
                        return Err(Unanswered("the picker's answer names no endpoint".to_owned()))
                    }
                    Read::Pick(endpoints) => {
                        return Ok(Answer::Picked { endpoints, session: Box::new(Session { requests, responses }) })
                    }
                    Read::Refused(status, body, headers) => return Ok(Answer::Refused { status, body, headers }),
                    Read::Other => continue,
                }
            }
        };
        tokio::time::timeout(self.timeout, asked)
            .await
            .unwrap_or_else(|_| Err(Unanswered(format!("no pick within {:?}", self.timeout))))
    }
}

impl Session {
    /// Tell the picker `endpoint` served the request (the response path's headers, with
    /// `envoy.lb` metadata), then end the stream. Runs on its own task: the answer does not wait.
    pub fn served(self, endpoint: &str, status: u16) {
        let Session { requests, mut responses } = self;
        let mut metadata = Metadata::default();
        let served = Value { kind: Some(Kind::StringValue(endpoint.to_owned())) };
        metadata.filter_metadata.insert(
            message::LB_NAMESPACE.to_owned(),
            Struct { fields: [(message::SERVED.to_owned(), served)].into_iter().collect() },
        );
        let headers = HttpHeaders {
            headers: Some(HeaderMap { headers: vec![raw(":status", status.to_string().as_bytes())] }),
            end_of_stream: true,
            ..Default::default()
        };
        let message = ProcessingRequest {
            request: Some(processing_request::Request::ResponseHeaders(headers)),
            metadata_context: Some(metadata),
            ..Default::default()
        };
        tokio::spawn(async move {
            if requests.send(message).await.is_err() {
                return;
            }
            // Its answer to the response headers, then the stream is closed from this side.
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                while let Ok(Some(answer)) = responses.message().await {
                    if matches!(answer.response, Some(processing_response::Response::ResponseHeaders(_))) {
                        break;
                    }
                }
            })
            .await;
            drop(requests);
        });
    }
}

enum Read {
    Pick(Vec<String>),
    Refused(u16, Bytes, Vec<(String, String)>),
    Other,
}

/// The pick in an answer to the request headers: the header first, else the metadata.
fn read_answer(answer: ProcessingResponse) -> Read {
    match answer.response {
        Some(processing_response::Response::RequestHeaders(h)) => {
            let from_header = h
                .response
                .and_then(|c| c.header_mutation)
                .into_iter()
                .flat_map(|m| m.set_headers)
                .filter_map(|o| o.header)
                .find(|h| h.key.eq_ignore_ascii_case(message::DESTINATION))
                .map(|h| String::from_utf8_lossy(message::header_value(&h)).into_owned());
            let from_metadata = || {
                let lb = answer.dynamic_metadata.as_ref()?.fields.get(message::LB_NAMESPACE)?;
                let Some(Kind::StructValue(lb)) = &lb.kind else { return None };
                match &lb.fields.get(message::DESTINATION)?.kind {
                    Some(Kind::StringValue(s)) => Some(s.clone()),
                    _ => None,
                }
            };
            let joined = from_header.or_else(from_metadata).unwrap_or_default();
            Read::Pick(joined.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        }
        Some(processing_response::Response::ImmediateResponse(i)) => {
            let status = i.status.map_or(500, |s| u16::try_from(s.code).unwrap_or(500));
            let headers = i
                .headers
                .into_iter()
                .flat_map(|m| m.set_headers)
                .filter_map(|o| o.header)
                .map(|h| (h.key.clone(), String::from_utf8_lossy(message::header_value(&h)).into_owned()))
                .collect();
            Read::Refused(status, Bytes::from(i.body), headers)
        }
        _ => Read::Other,
    }
}

fn raw(key: &str, value: &[u8]) -> HeaderValue {
    HeaderValue { key: key.to_owned(), value: String::new(), raw_value: value.to_vec() }
}

/// The request headers as Envoy sends them: pseudo-headers first, names in lower case.
fn request_headers(
    method: &str,
    path: &str,
    authority: &str,
    headers: &http::HeaderMap,
    end: bool,
) -> ProcessingRequest {
    let mut all = vec![raw(":method", method.as_bytes()), raw(":path", path.as_bytes()), raw(":scheme", b"http")];
    all.push(raw(":authority", authority.as_bytes()));
    for (name, value) in headers {
        if !WITHHELD.contains(&name.as_str()) {
            all.push(raw(name.as_str(), value.as_bytes()));
        }
    }
    let headers = HttpHeaders { headers: Some(HeaderMap { headers: all }), end_of_stream: end, ..Default::default() };
    ProcessingRequest { request: Some(processing_request::Request::RequestHeaders(headers)), ..Default::default() }
}
