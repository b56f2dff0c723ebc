//! The Endpoint Picker, black-box: ext_proc streams as Envoy sends them (`FULL_DUPLEX_STREAMED`
//! bodies, the subset hint, the served endpoint on the response path) against the gateway's
//! picker, streams that break the protocol, keys and limits at the picker, and the gateway
//! following a picker (here its own, in another gateway) with either failure mode. Real Envoy
//! in front of the picker, and the inference extension's reference picker followed, are
//! tests/epp (Python).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, processing_request, processing_response, HttpBody, HttpHeaders, ProcessingRequest,
    ProcessingResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use switchyard_testkit::{MockServer, TestClient};
use tokio::sync::mpsc;

use crate::common::*;

/// One request's ext_proc stream, as the data plane drives it.
struct Stream {
    requests: mpsc::Sender<ProcessingRequest>,
    responses: tonic::Streaming<ProcessingResponse>,
}

impl Stream {
    async fn open(epp: SocketAddr) -> Stream {
        let mut client = ExternalProcessorClient::connect(format!("http://{epp}")).await.unwrap();
        let (requests, rx) = mpsc::channel(64);
        let outgoing = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        let responses = tokio::spawn(async move { client.process(outgoing).await });
        // The call resolves once the server answers with its headers, which it does at once.
        let stream = Stream {
            requests,
            responses: tokio::time::timeout(Duration::from_secs(5), async {
                responses.await.unwrap().unwrap().into_inner()
            })
            .await
            .unwrap(),
        };
        stream
    }

    async fn send(&self, request: processing_request::Request, metadata: Option<Metadata>) {
        let message = ProcessingRequest { request: Some(request), metadata_context: metadata, ..Default::default() };
        self.requests.send(message).await.unwrap();
    }

    async fn headers(&self, path: &str, extra: &[(&str, &str)], end_of_stream: bool, metadata: Option<Metadata>) {
        let mut all = vec![h(":method", if end_of_stream { "GET" } else { "POST" }), h(":path", path)];
        all.push(h(":authority", "gateway.test"));
        all.push(h("content-type", "application/json"));
        all.extend(extra.iter().map(|(k, v)| h(k, v)));
        let headers = HttpHeaders { headers: Some(HeaderMap { headers: all }), end_of_stream, ..Default::default() };
        self.send(processing_request::Request::RequestHeaders(headers), metadata).await;
    }

    async fn body(&self, chunk: &[u8], end_of_stream: bool) {
        let body = HttpBody { body: chunk.to_vec(), end_of_stream, ..Default::default() };
        self.send(processing_request::Request::RequestBody(body), None).await;
    }

    async fn next(&mut self) -> Result<ProcessingResponse, tonic::Status> {
        tokio::time::timeout(Duration::from_secs(10), self.responses.message())
            .await
            .expect("an answer from the picker")
            .map(|m| m.expect("a message before the stream ended"))
    }

    /// The served endpoint reported on the response path, and the answer to it.
    async fn served(&mut self, endpoint: &str) {
        self.responded(Some(endpoint), "200").await;
    }

    /// The response's head on the response path (with the served endpoint where given).
    async fn responded(&mut self, endpoint: Option<&str>, status: &str) {
        let mut metadata = Metadata::default();
        if let Some(endpoint) = endpoint {
            let served = fields(&[("x-gateway-destination-endpoint-served", s(endpoint))]);
            metadata.filter_metadata.insert("envoy.lb".into(), served);
        }
        let headers =
            HttpHeaders { headers: Some(HeaderMap { headers: vec![h(":status", status)] }), ..Default::default() };
        self.send(processing_request::Request::ResponseHeaders(headers), Some(metadata)).await;
        let answer = self.next().await.unwrap();
        assert!(matches!(answer.response, Some(processing_response::Response::ResponseHeaders(_))), "{answer:?}");
    }
}

fn h(key: &str, value: &str) -> HeaderValue {
    HeaderValue { key: key.into(), value: String::new(), raw_value: value.as_bytes().to_vec() }
}

fn s(text: &str) -> Value {
    Value { kind: Some(Kind::StringValue(text.into())) }
}

fn fields(pairs: &[(&str, Value)]) -> Struct {
    Struct { fields: pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect() }
}

fn subset(value: Value) -> Metadata {
    let mut metadata = Metadata::default();
    metadata
        .filter_metadata
        .insert("envoy.lb.subset_hint".into(), fields(&[("x-gateway-destination-endpoint-subset", value)]));
    metadata
}

/// The pick in an answer to the request headers: the header's value and the metadata's.
fn pick_of(answer: &ProcessingResponse) -> (String, String) {
    let Some(processing_response::Response::RequestHeaders(h)) = &answer.response else { panic!("{answer:?}") };
    let set = &h.response.as_ref().unwrap().header_mutation.as_ref().unwrap().set_headers;
    let header = set.iter().find(|o| o.header.as_ref().unwrap().key == "x-gateway-destination-endpoint").unwrap();
    let header = String::from_utf8(header.header.as_ref().unwrap().raw_value.clone()).unwrap();
    let lb = &answer.dynamic_metadata.as_ref().unwrap().fields["envoy.lb"];
    let Some(Kind::StructValue(lb)) = &lb.kind else { panic!() };
    let Some(Kind::StringValue(metadata)) = &lb.fields["x-gateway-destination-endpoint"].kind else { panic!() };
    (header, metadata.clone())
}

fn immediate_status(answer: &ProcessingResponse) -> i32 {
    let Some(processing_response::Response::ImmediateResponse(i)) = &answer.response else { panic!("{answer:?}") };
    i.status.as_ref().unwrap().code
}

/// The body handed back: every streamed chunk until the one that ends it.
async fn body_back(stream: &mut Stream) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let answer = stream.next().await.unwrap();
        let Some(processing_response::Response::RequestBody(b)) = answer.response else { panic!("{answer:?}") };
        let mutation = b.response.unwrap().body_mutation.unwrap().mutation.unwrap();
        let body_mutation::Mutation::StreamedResponse(chunk) = mutation else { panic!("{mutation:?}") };
        body.extend_from_slice(&chunk.body);
        if chunk.end_of_stream {
            return body;
        }
    }
}

/// Mock model servers, and a gateway serving the picker over them as pool `pool` (model `m`).
async fn picker(mocks: usize, extra: &str) -> (Vec<MockServer>, switchyard_gateway::RunningGateway, Vec<String>) {
    let mut servers = Vec::new();
    for _ in 0..mocks {
        servers.push(mock(&["m"]).await);
    }
    let endpoints: Vec<String> = servers.iter().map(|m| m.url().trim_start_matches("http://").to_owned()).collect();
    let list = endpoints.iter().map(|e| format!("'{e}'")).collect::<Vec<_>>().join(", ");
    let yaml = format!(
        "listen: 127.0.0.1:0\n{extra}\nepp:\n  listen: 127.0.0.1:0\n  health_listen: 127.0.0.1:0\n  fallbacks: 2\n  pools:\n    - {{name: pool, models: [m], endpoints: [{list}]}}\n"
    );
    let gw = gateway_yaml(&yaml).await;
    (servers, gw, endpoints)
}

fn chat_json(text: &str) -> String {
    format!(
        r#"{{"model":"m","messages":[{{"role":"system","content":"You are terse."}},{{"role":"user","content":"{text}"}}]}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_gets_the_pick_in_header_and_metadata_and_comes_back_whole() {
    let (_mocks, gw, endpoints) = picker(3, "routing: {strategy: cache-aware}").await;
    let epp = gw.epp_addr.unwrap();
    // A body of ~200 KB, in chunks as Envoy streams it.
    let big = chat_json(&"lorem ipsum dolor sit amet ".repeat(8000));
    let mut stream = Stream::open(epp).await;
    stream.headers("/v1/chat/completions", &[], false, None).await;
    let chunks: Vec<&[u8]> = big.as_bytes().chunks(16 * 1024).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        stream.body(chunk, i + 1 == chunks.len()).await;
    }
    let (header, metadata) = pick_of(&stream.next().await.unwrap());
    assert_eq!(header, metadata);
    let picked: Vec<&str> = header.split(',').collect();
    assert!(endpoints.contains(&picked[0].to_owned()), "{header} not among {endpoints:?}");
    assert_eq!(picked.len(), 3, "the pick, then two fallbacks: {header}");
    assert_eq!(body_back(&mut stream).await, big.as_bytes());
    stream.served(picked[0]).await;
    // The response body is let through chunk by chunk.
    let answer = "data: {\"x\":1}\n\n";
    stream
        .send(
            processing_request::Request::ResponseBody(HttpBody {
                body: answer.into(),
                end_of_stream: true,
                ..Default::default()
            }),
            None,
        )
        .await;
    let Some(processing_response::Response::ResponseBody(b)) = stream.next().await.unwrap().response else { panic!() };
    let Some(body_mutation::Mutation::StreamedResponse(back)) = b.response.unwrap().body_mutation.unwrap().mutation
    else {
        panic!()
    };
    assert_eq!(back.body, answer.as_bytes());
    let client = TestClient::new();
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    let served = format!("switchyard_epp_served_total{{pool=\"pool\",endpoint=\"{}\"}} 1", picked[0]);
    assert!(metrics.contains(&served), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_stays_on_the_member_holding_its_prefix() {
    let (_mocks, gw, _) = picker(3, "routing: {strategy: cache-aware}").await;
    let epp = gw.epp_addr.unwrap();
    let mut first_pick = None;
    let mut history = String::new();
    for turn in 0..5 {
        history.push_str(&format!("turn {turn}: {} ", "the same long conversation goes on ".repeat(40)));
        let body = chat_json(&history);
        let mut stream = Stream::open(epp).await;
        stream.headers("/v1/chat/completions", &[], false, None).await;
        stream.body(body.as_bytes(), true).await;
        let (header, _) = pick_of(&stream.next().await.unwrap());
        let pick = header.split(',').next().unwrap().to_owned();
        assert_eq!(body_back(&mut stream).await, body.as_bytes());
        stream.served(&pick).await;
        assert_eq!(first_pick.get_or_insert(pick.clone()), &pick, "turn {turn} moved");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_headers_only_path_is_picked_too() {
    let (_mocks, gw, endpoints) = picker(2, "").await;
    let mut stream = Stream::open(gw.epp_addr.unwrap()).await;
    stream.headers("/v1/models", &[], true, None).await;
    let (header, metadata) = pick_of(&stream.next().await.unwrap());
    assert_eq!(header, metadata);
    assert!(endpoints.contains(&header.split(',').next().unwrap().to_owned()), "{header}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subset_hint_restricts_the_pick_and_an_empty_one_is_a_503() {
    let (_mocks, gw, endpoints) = picker(3, "").await;
    let epp = gw.epp_addr.unwrap();
    let body = chat_json("hello");
    for (shape, hint) in [
        ("list", Value { kind: Some(Kind::ListValue(ListValue { values: vec![s(&endpoints[1])] })) }),
        ("string", s(&format!(" {} ,", endpoints[2]))),
    ] {
        for _ in 0..4 {
            let mut stream = Stream::open(epp).await;
            stream.headers("/v1/chat/completions", &[], false, Some(subset(hint.clone()))).await;
            stream.body(body.as_bytes(), true).await;
            let (header, _) = pick_of(&stream.next().await.unwrap());
            let only = if shape == "list" { &endpoints[1] } else { &endpoints[2] };
            assert_eq!(&header, only, "{shape}: only the subset, fallbacks too");
        }
    }
    for hint in [s("10.9.9.9:80"), s("")] {
        let mut stream = Stream::open(epp).await;
        stream.headers("/v1/chat/completions", &[], false, Some(subset(hint))).await;
        stream.body(body.as_bytes(), true).await;
        assert_eq!(immediate_status(&stream.next().await.unwrap()), 503);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_break_the_protocol_are_refused_and_leave_nothing_held() {
    let (_mocks, gw, _) = picker(1, "limits: {max_body_bytes: 4096}").await;
    let epp = gw.epp_addr.unwrap();
    // A body before its headers.
    let mut stream = Stream::open(epp).await;
    stream.body(b"{}", true).await;
    let refused = stream.next().await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    // A body past the limit: a 413 without a pick.
    let mut stream = Stream::open(epp).await;
    stream.headers("/v1/chat/completions", &[], false, None).await;
    stream.body(&vec![b' '; 3000], false).await;
    stream.body(&vec![b' '; 3000], true).await;
    assert_eq!(immediate_status(&stream.next().await.unwrap()), 413);
    // Not JSON: the gateway's own 400.
    let mut stream = Stream::open(epp).await;
    stream.headers("/v1/chat/completions", &[], false, None).await;
    stream.body(b"{not json", true).await;
    assert_eq!(immediate_status(&stream.next().await.unwrap()), 400);
    // Picked, then the stream dropped before the response: its slot goes back.
    let mut stream = Stream::open(epp).await;
    stream.headers("/v1/chat/completions", &[], false, None).await;
    stream.body(chat_json("hi").as_bytes(), true).await;
    pick_of(&stream.next().await.unwrap());
    let client = TestClient::new();
    let in_flight = |text: &str| -> u64 {
        let line = text.lines().find(|l| l.starts_with("switchyard_backend_in_flight{")).unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
    assert_eq!(in_flight(&metrics), 1, "held while the request is under way");
    // A body that never ends, then the data plane goes away.
    let half = Stream::open(epp).await;
    half.headers("/v1/chat/completions", &[], false, None).await;
    half.body(b"{\"model\":", false).await;
    drop(stream);
    drop(half);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = client.get(&format!("{}/metrics", gw.url())).await.unwrap().text();
        if in_flight(&metrics) == 0 {
            assert!(
                metrics.contains("switchyard_epp_malformed_total{why=\"a request body before its headers\"} 1"),
                "{metrics}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "a dropped stream kept its slot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_keys_and_limits_apply_at_the_picker() {
    let (_mocks, gw, _) = picker(1, "auth: {master_key: sk-master-epp}").await;
    let epp = gw.epp_addr.unwrap();
    let body = chat_json("hi");
    let ask = |auth: Option<String>| {
        let body = body.clone();
        async move {
            let mut stream = Stream::open(epp).await;
            let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
            stream.headers("/v1/chat/completions", &headers, false, None).await;
            stream.body(body.as_bytes(), true).await;
            stream.next().await.unwrap()
        }
    };
    assert_eq!(immediate_status(&ask(None).await), 401);
    let client = TestClient::new();
    let r = admin_as(&client, &gw, "sk-master-epp", http::Method::POST, "/admin/keys", r#"{"rpm": 1}"#).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let key = format!("Bearer {}", r.json()["key"].as_str().unwrap());
    pick_of(&ask(Some(key.clone())).await);
    let refused = ask(Some(key)).await;
    assert_eq!(immediate_status(&refused), 429, "past the key's rpm");
    let Some(processing_response::Response::ImmediateResponse(i)) = &refused.response else { panic!() };
    let headers = &i.headers.as_ref().unwrap().set_headers;
    assert!(headers.iter().any(|o| o.header.as_ref().unwrap().key == "retry-after"), "{headers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_follows_its_picker_and_fails_closed_or_open_without_it() {
    // The picker: another gateway's, over the same members.
    let (mocks, picker_gw, endpoints) = picker(3, "").await;
    let epp = picker_gw.epp_addr.unwrap();
    let list = endpoints.iter().map(|e| format!("'{e}'")).collect::<Vec<_>>().join(", ");
    let follower = |mode: &str, at: SocketAddr| {
        format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: pool, models: [m], endpoints: [{list}], epp: {{endpoint: '{at}', failure_mode: {mode}, timeout: 2s}}}}\n")
    };
    let gw = gateway_yaml(&follower("closed", epp)).await;
    let client = TestClient::new();
    let mut went = std::collections::HashMap::<String, u64>::new();
    for _ in 0..6 {
        let r = chat(&client, &gw, "m").await;
        assert_eq!(r.status, 200, "{}", r.text());
        *went.entry(backend_of(&r)).or_default() += 1;
    }
    // Every request went where the picker picked: its served counts are the members' requests.
    // The follower reports what it served after each answer, so the last report may still be on
    // its way: wait (bounded) until all six are in.
    let served_line = |e: &str| format!("switchyard_epp_served_total{{pool=\"pool\",endpoint=\"{e}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let metrics = client.get(&format!("{}/metrics", picker_gw.url())).await.unwrap().text();
        let reported: u64 = endpoints.iter().map(|e| metric(&metrics, &served_line(e)).unwrap_or(0)).sum();
        if reported >= 6 || Instant::now() > deadline {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut total = 0;
    for endpoint in &endpoints {
        let line = format!("switchyard_epp_served_total{{pool=\"pool\",endpoint=\"{endpoint}\"}}");
        let served = metric(&metrics, &line).unwrap_or(0);
        let member = format!("pool.{}", endpoint.replace(':', "_"));
        assert_eq!(served, went.get(&member).copied().unwrap_or(0), "{endpoint}: {went:?} {metrics}");
        total += served;
    }
    assert_eq!(total, 6);
    // The picker gone: closed answers 503, open serves by the gateway's own routing.
    let gone = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let closed = gateway_yaml(&follower("closed", gone)).await;
    assert_eq!(chat(&client, &closed, "m").await.status, 503);
    let open = gateway_yaml(&follower("open", gone)).await;
    let r = chat(&client, &open, "m").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let metrics = client.get(&format!("{}/metrics", open.url())).await.unwrap().text();
    assert!(metrics.contains("switchyard_epp_followed_total{pool=\"pool\",outcome=\"failed_open\"} 1"), "{metrics}");
    drop(mocks);
}

/// A port nothing listens on (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_serves_liveness_readiness_and_the_service() {
    let (_mocks, gw, _) = picker(1, "").await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", gw.epp_health_addr.unwrap()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for service in ["liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"] {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let status = health
                .check(tonic_health::pb::HealthCheckRequest { service: service.into() })
                .await
                .map(|r| r.into_inner().status);
            if status.as_ref().ok() == Some(&(tonic_health::pb::health_check_response::ServingStatus::Serving as i32)) {
                break;
            }
            assert!(Instant::now() < deadline, "{service}: {status:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_past_its_queue_bound_sheds_with_a_429() {
    let pod = mock(&["m"]).await;
    let endpoint = pod.url().trim_start_matches("http://").to_owned();
    let yaml = format!(
        "listen: 127.0.0.1:0\nrouting: {{max_queue: 0}}\nepp:\n  listen: 127.0.0.1:0\n  pools:\n    - {{name: pool, models: [m], max_concurrency: 1, endpoints: ['{endpoint}']}}\n"
    );
    let gw = gateway_yaml(&yaml).await;
    let epp = gw.epp_addr.unwrap();
    let body = chat_json("hi");
    // The one slot, held while this request's stream is open.
    let mut held = Stream::open(epp).await;
    held.headers("/v1/chat/completions", &[], false, None).await;
    held.body(body.as_bytes(), true).await;
    pick_of(&held.next().await.unwrap());
    let mut shed = Stream::open(epp).await;
    shed.headers("/v1/chat/completions", &[], false, None).await;
    shed.body(body.as_bytes(), true).await;
    let answer = shed.next().await.unwrap();
    assert_eq!(immediate_status(&answer), 429);
    let Some(processing_response::Response::ImmediateResponse(i)) = &answer.response else { panic!() };
    assert!(i.headers.as_ref().unwrap().set_headers.iter().any(|o| o.header.as_ref().unwrap().key == "retry-after"));
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_the_data_plane_reports_judge_the_member_as_attempts_do() {
    // Two members; 5xx answers from one open its breaker, and picks go to the other.
    let (_mocks, gw, endpoints) = picker(2, "health: {failure_threshold: 2, breaker_cooldown: 60s}").await;
    let epp = gw.epp_addr.unwrap();
    let body = chat_json("hi");
    let mut failing = None;
    for _ in 0..12 {
        let mut stream = Stream::open(epp).await;
        stream.headers("/v1/chat/completions", &[], false, None).await;
        stream.body(body.as_bytes(), true).await;
        let (header, _) = pick_of(&stream.next().await.unwrap());
        let pick = header.split(',').next().unwrap().to_owned();
        body_back(&mut stream).await;
        let bad = failing.get_or_insert_with(|| pick.clone());
        let status = if &pick == bad { "503" } else { "200" };
        stream.responded(None, status).await;
    }
    let bad = failing.unwrap();
    let good = endpoints.iter().find(|e| **e != bad).unwrap();
    for _ in 0..6 {
        let mut stream = Stream::open(epp).await;
        stream.headers("/v1/chat/completions", &[], false, None).await;
        stream.body(body.as_bytes(), true).await;
        let (header, _) = pick_of(&stream.next().await.unwrap());
        assert_eq!(header.split(',').next().unwrap(), good, "the failing member's breaker is open");
    }
}
