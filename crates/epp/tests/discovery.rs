//! A pool's endpoints found, black-box: DNS against a local name server (UDP, answering A
//! records from a list the test changes), and an `InferencePool` with its Pods through a fake
//! Kubernetes API service (list and watch over HTTP, as the API server speaks them; no API
//! server can run here).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use switchyard_epp::discover::{dns, kube};
use tokio::sync::{broadcast, watch};

/// Wait until the watched endpoints are `want`.
async fn until(rx: &mut watch::Receiver<Vec<String>>, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if *rx.borrow_and_update() == want {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(tokio::time::timeout(left, rx.changed()).await.is_ok(), "still {:?}, not {want:?}", *rx.borrow());
    }
}

/// A name server answering every A query with `records` (SERVFAIL while it is None).
async fn name_server(records: Arc<Mutex<Option<Vec<Ipv4Addr>>>>) -> SocketAddr {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 1500];
        loop {
            let (n, peer) = socket.recv_from(&mut buf).await.unwrap();
            let Ok(query) = Message::from_vec(&buf[..n]) else { continue };
            let mut answer = Message::new(query.metadata.id, MessageType::Response, query.metadata.op_code);
            answer.metadata.recursion_desired = query.metadata.recursion_desired;
            answer.metadata.recursion_available = true;
            answer.queries = query.queries.clone();
            match records.lock().unwrap().as_ref() {
                None => answer.metadata.response_code = ResponseCode::ServFail,
                Some(ips) => {
                    for q in query.queries.iter().filter(|q| q.query_type() == RecordType::A) {
                        for ip in ips {
                            answer.answers.push(Record::from_rdata(q.name().clone(), 1, RData::A(A(*ip))));
                        }
                    }
                }
            }
            let _ = socket.send_to(&answer.to_vec().unwrap(), peer).await;
        }
    });
    addr
}

#[tokio::test]
async fn a_names_records_are_the_endpoints_re_resolved_and_kept_through_a_failure() {
    let records = Arc::new(Mutex::new(Some(vec![Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1)])));
    let server = name_server(records.clone()).await;
    let target = dns::DnsTarget {
        name: "vllm.default.svc.cluster.local.".into(),
        port: 8000,
        interval: Duration::from_millis(50),
        nameserver: Some(server),
    };
    let mut rx = dns::watch(target).unwrap();
    until(&mut rx, &["10.0.0.1:8000", "10.0.0.2:8000"]).await;
    // A Pod came, another went.
    *records.lock().unwrap() = Some(vec![Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 3)]);
    until(&mut rx, &["10.0.0.2:8000", "10.0.0.3:8000"]).await;
    // The name server fails for a while: the endpoints known stay.
    *records.lock().unwrap() = None;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*rx.borrow(), ["10.0.0.2:8000", "10.0.0.3:8000"]);
    *records.lock().unwrap() = Some(vec![Ipv4Addr::new(10, 0, 0, 4)]);
    until(&mut rx, &["10.0.0.4:8000"]).await;
}

/// The fake API service's objects and their watch streams.
struct FakeApi {
    pool: Mutex<serde_json::Value>,
    pods: Mutex<Vec<serde_json::Value>>,
    pool_events: broadcast::Sender<String>,
    pod_events: broadcast::Sender<String>,
    /// Every event sent so far: a watch from resourceVersion 1 gets them first, as the API
    /// server replays what happened since the version listed.
    log: Mutex<Vec<(bool, String)>>,
}

fn pool(ports: &[u16]) -> serde_json::Value {
    let ports: Vec<_> = ports.iter().map(|p| serde_json::json!({"number": p})).collect();
    serde_json::json!({
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": "vllm", "namespace": "llm", "resourceVersion": "1"},
        "spec": {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": ports,
                 "endpointPickerRef": {"name": "switchyard-epp", "port": {"number": 9002}}}
    })
}

fn pod(name: &str, app: &str, ip: &str, ready: bool) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "llm", "labels": {"app": app}, "resourceVersion": "1"},
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    })
}

impl FakeApi {
    /// One request: a list (the objects matching the selector) or a watch (events from now on).
    async fn answer(
        self: Arc<Self>,
        req: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>, Infallible> {
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or("").to_owned();
        let pools = path == "/apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools";
        let pods = path == "/api/v1/namespaces/llm/pods";
        if !pools && !pods {
            let body = Full::new(Bytes::from_static(b"{}")).boxed();
            return Ok(hyper::Response::builder().status(404).body(body).unwrap());
        }
        if query.contains("watch=true") {
            let events = if pools { self.pool_events.subscribe() } else { self.pod_events.subscribe() };
            let past: Vec<String> =
                self.log.lock().unwrap().iter().filter(|(p, _)| *p == pods).map(|(_, l)| l.clone()).collect();
            let past = futures_util::stream::iter(
                past.into_iter().map(|l| Ok::<_, Infallible>(Frame::data(Bytes::from(l + "\n")))),
            );
            let live = futures_util::stream::unfold(events, |mut events| async move {
                let line = events.recv().await.ok()?;
                Some((Ok::<_, Infallible>(Frame::data(Bytes::from(line + "\n"))), events))
            });
            let lines = futures_util::StreamExt::chain(past, live);
            return Ok(hyper::Response::new(StreamBody::new(lines).boxed()));
        }
        let (kind, items) = if pools {
            assert!(query.contains("fieldSelector=metadata.name%3Dvllm"), "{query}");
            ("InferencePoolList", vec![self.pool.lock().unwrap().clone()])
        } else {
            assert!(query.contains("labelSelector=app%3Dvllm"), "{query}");
            let all = self.pods.lock().unwrap().clone();
            ("PodList", all.into_iter().filter(|p| p["metadata"]["labels"]["app"] == "vllm").collect())
        };
        let list =
            serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items});
        Ok(hyper::Response::new(Full::new(Bytes::from(list.to_string())).boxed()))
    }

    fn event(&self, pods: bool, kind: &str, object: serde_json::Value) {
        let line = serde_json::json!({"type": kind, "object": object}).to_string();
        self.log.lock().unwrap().push((pods, line.clone()));
        let _ = if pods { self.pod_events.send(line) } else { self.pool_events.send(line) };
    }
}

async fn serve(api: Arc<FakeApi>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let api = api.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| api.clone().answer(req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_inference_pools_ready_pods_are_the_endpoints_as_they_change() {
    let api = Arc::new(FakeApi {
        pool: Mutex::new(pool(&[8000])),
        pods: Mutex::new(vec![
            pod("a", "vllm", "10.1.0.1", true),
            pod("b", "vllm", "10.1.0.2", false),
            pod("c", "other", "10.1.0.3", true),
        ]),
        pool_events: broadcast::channel(16).0,
        pod_events: broadcast::channel(16).0,
        log: Mutex::default(),
    });
    let addr = serve(api.clone()).await;
    let config = ::kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = ::kube::Client::try_from(config).unwrap();
    let mut rx = kube::watch_with(client, "vllm".into(), Some("llm".into()));
    // Only the ready Pod the pool selects.
    until(&mut rx, &["10.1.0.1:8000"]).await;
    // b becomes ready; a goes away.
    api.event(true, "MODIFIED", pod("b", "vllm", "10.1.0.2", true));
    until(&mut rx, &["10.1.0.1:8000", "10.1.0.2:8000"]).await;
    api.event(true, "DELETED", pod("a", "vllm", "10.1.0.1", true));
    until(&mut rx, &["10.1.0.2:8000"]).await;
    // The pool's target ports change: the Pods' watch starts again (a new list) with them.
    *api.pods.lock().unwrap() = vec![pod("b", "vllm", "10.1.0.2", true), pod("c", "other", "10.1.0.3", true)];
    *api.pool.lock().unwrap() = pool(&[9000, 9001]);
    api.event(false, "MODIFIED", pool(&[9000, 9001]));
    until(&mut rx, &["10.1.0.2:9000", "10.1.0.2:9001"]).await;
}
