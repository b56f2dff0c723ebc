//! The load generator: closed-loop (fixed concurrency, one keep-alive connection per worker) and
//! open-loop (fixed rate; latency charged from each request's *intended* send time, so a stalled
//! target cannot hide its stall — no coordinated omission). Each worker records into its own
//! `Stats`; they are merged when the phase ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// What to send. Cloned into every worker.
#[derive(Clone)]
pub struct RequestSpec {
    pub uri: Uri,
    pub body: Bytes,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub stream: bool,
    /// Bytes the last 4 KB of a complete stream contain (`data: [DONE]` for OpenAI).
    pub stream_end: &'static [u8],
    /// Header naming the backend that served a response (counted per backend).
    pub backend_header: HeaderName,
    pub timeout: Duration,
}

/// Width of a timeline bucket.
pub const TICK: Duration = Duration::from_millis(100);

/// Everything one phase measured.
pub struct Stats {
    /// Request latency in µs (from intended send time in open loop).
    pub latency: Histogram<u64>,
    /// Open loop only: from actual send time, µs.
    pub service: Histogram<u64>,
    /// Streams: time to the first body chunk, µs.
    pub first_chunk: Histogram<u64>,
    /// The gateway's own overhead from `server-timing: gateway;dur=`, µs.
    pub reported_overhead: Histogram<u64>,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub backends: BTreeMap<String, u64>,
    /// Per `TICK` since the phase start: (ok, errors).
    pub timeline: Vec<(u64, u64)>,
    /// Per `TICK`: backend → responses.
    pub backend_timeline: Vec<BTreeMap<String, u64>>,
    /// Per `TICK`: latencies (µs) of the successful requests that completed in it.
    pub tick_latencies: Vec<Vec<u32>>,
    pub elapsed: Duration,
}

#[allow(clippy::expect_used)] // constant bounds that hdrhistogram accepts: 1 µs .. 100 s, 3 digits
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            latency: histogram(),
            service: histogram(),
            first_chunk: histogram(),
            reported_overhead: histogram(),
            ok: 0,
            errors: BTreeMap::new(),
            backends: BTreeMap::new(),
            timeline: Vec::new(),
            backend_timeline: Vec::new(),
            tick_latencies: Vec::new(),
            elapsed: Duration::ZERO,
        }
    }
}

impl Stats {
    pub fn total(&self) -> u64 {
        self.ok + self.errors.values().sum::<u64>()
    }

    /// A phase where every request must succeed: how many did not, under `label`, if any.
    pub fn all_ok(&self, label: &str) -> Result<(), String> {
        match self.total() - self.ok {
            0 => Ok(()),
            failed => Err(format!("{label}: {failed} of {} requests failed", self.total())),
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn throughput(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        }
    }

    /// Median latency (µs) per timeline tick; 0 for a tick without successes.
    pub fn tick_p50(&self) -> Vec<u64> {
        self.tick_latencies
            .iter()
            .map(|l| {
                let mut l = l.clone();
                l.sort_unstable();
                l.get(l.len() / 2).map_or(0, |v| u64::from(*v))
            })
            .collect()
    }

    pub fn merge(&mut self, other: Stats) {
        let _ = self.latency.add(&other.latency);
        let _ = self.service.add(&other.service);
        let _ = self.first_chunk.add(&other.first_chunk);
        let _ = self.reported_overhead.add(&other.reported_overhead);
        self.ok += other.ok;
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        for (k, v) in other.backends {
            *self.backends.entry(k).or_default() += v;
        }
        if self.timeline.len() < other.timeline.len() {
            self.timeline.resize(other.timeline.len(), (0, 0));
        }
        for (i, (ok, err)) in other.timeline.into_iter().enumerate() {
            self.timeline[i].0 += ok;
            self.timeline[i].1 += err;
        }
        if self.backend_timeline.len() < other.backend_timeline.len() {
            self.backend_timeline.resize(other.backend_timeline.len(), BTreeMap::new());
        }
        for (i, m) in other.backend_timeline.into_iter().enumerate() {
            for (k, v) in m {
                *self.backend_timeline[i].entry(k).or_default() += v;
            }
        }
        if self.tick_latencies.len() < other.tick_latencies.len() {
            self.tick_latencies.resize(other.tick_latencies.len(), Vec::new());
        }
        for (i, l) in other.tick_latencies.into_iter().enumerate() {
            self.tick_latencies[i].extend(l);
        }
        self.elapsed = self.elapsed.max(other.elapsed);
    }

    fn record(&mut self, phase_start: Instant, outcome: &Outcome, latency: Duration, service: Option<Duration>) {
        let tick = (phase_start.elapsed().as_nanos() / TICK.as_nanos()) as usize;
        if self.timeline.len() <= tick {
            self.timeline.resize(tick + 1, (0, 0));
            self.backend_timeline.resize(tick + 1, BTreeMap::new());
            self.tick_latencies.resize(tick + 1, Vec::new());
        }
        match &outcome.error {
            None => {
                self.ok += 1;
                self.timeline[tick].0 += 1;
                let us = latency.as_micros().max(1) as u64;
                let _ = self.latency.record(us);
                self.tick_latencies[tick].push(us.min(u64::from(u32::MAX)) as u32);
                if let Some(s) = service {
                    let _ = self.service.record(s.as_micros().max(1) as u64);
                }
                if let Some(f) = outcome.first_chunk {
                    let _ = self.first_chunk.record(f.as_micros().max(1) as u64);
                }
                if let Some(o) = outcome.reported_overhead_us {
                    let _ = self.reported_overhead.record(o.max(1));
                }
            }
            Some(kind) => {
                self.timeline[tick].1 += 1;
                *self.errors.entry(kind.clone()).or_default() += 1;
            }
        }
        if let Some(b) = &outcome.backend {
            *self.backends.entry(b.clone()).or_default() += 1;
            *self.backend_timeline[tick].entry(b.clone()).or_default() += 1;
        }
    }
}

struct Outcome {
    error: Option<String>,
    backend: Option<String>,
    first_chunk: Option<Duration>,
    reported_overhead_us: Option<u64>,
}

impl Outcome {
    fn failed(kind: &str) -> Outcome {
        Outcome { error: Some(kind.to_owned()), backend: None, first_chunk: None, reported_overhead_us: None }
    }
}

fn build_request(spec: &RequestSpec) -> Option<Request<Full<Bytes>>> {
    let mut req = Request::post(spec.uri.clone()).body(Full::new(spec.body.clone())).ok()?;
    let h = req.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(authority) = spec.uri.authority() {
        if let Ok(v) = HeaderValue::from_str(authority.as_str()) {
            h.insert(http::header::HOST, v);
        }
    }
    for (k, v) in &spec.headers {
        h.insert(k.clone(), v.clone());
    }
    Some(req)
}

/// Read a response to the end and classify it.
async fn finish(resp: http::Response<hyper::body::Incoming>, spec: &RequestSpec, sent: Instant) -> Outcome {
    let status = resp.status();
    let backend = resp.headers().get(&spec.backend_header).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let reported_overhead_us = overhead_us(resp.headers());
    let mut body = resp.into_body();
    let mut first_chunk = None;
    let mut tail = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data() {
                    if first_chunk.is_none() {
                        first_chunk = Some(sent.elapsed());
                    }
                    if spec.stream {
                        // Keep only the end: an error event, if any, is the last one.
                        tail.extend_from_slice(&data);
                        if tail.len() > 4096 {
                            tail.drain(..tail.len() - 4096);
                        }
                    }
                }
            }
            Err(_) => return Outcome { backend, ..Outcome::failed("body_error") },
        }
    }
    let error = if !status.is_success() {
        Some(format!("status_{}", status.as_u16()))
    } else if spec.stream && memchr::memmem::find(&tail, spec.stream_end).is_none() {
        Some("stream_error".to_owned())
    } else {
        None
    };
    Outcome { error, backend, first_chunk: spec.stream.then_some(first_chunk).flatten(), reported_overhead_us }
}

/// Closed loop: `concurrency` workers, each on its own keep-alive connection, until `duration`.
pub async fn closed_loop(spec: Arc<RequestSpec>, concurrency: usize, duration: Duration) -> Stats {
    let start = Instant::now();
    let deadline = start + duration;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let spec = spec.clone();
        workers.spawn(async move {
            let mut stats = Stats::default();
            let mut conn: Option<http1::SendRequest<Full<Bytes>>> = None;
            while Instant::now() < deadline {
                let sent = Instant::now();
                let outcome = one_on_connection(&spec, &mut conn).await;
                stats.record(start, &outcome, sent.elapsed(), None);
                if outcome.error.as_deref() == Some("connect") {
                    // The target is down; do not spin on refused connections.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            stats.elapsed = start.elapsed();
            stats
        });
    }
    let mut total = Stats::default();
    while let Some(Ok(s)) = workers.join_next().await {
        total.merge(s);
    }
    total
}

/// One request at a time to two targets in turn, `block` requests to one, then `block` to the
/// other (A B B A…, so neither always goes first), one connection each, for `duration`: both are
/// measured in the same seconds, so the machine's drift weighs on them alike, and never at once,
/// so neither waits on the other. Blocks, not single requests: a process that waited while the
/// other ran finds its caches cold, which would charge a lone gateway a cost it does not have.
pub async fn alternating_loop(specs: [Arc<RequestSpec>; 2], block: usize, duration: Duration) -> [Stats; 2] {
    let start = Instant::now();
    let deadline = start + duration;
    let mut stats = [Stats::default(), Stats::default()];
    let mut conns: [Option<http1::SendRequest<Full<Bytes>>>; 2] = [None, None];
    let mut turn = 0usize;
    while Instant::now() < deadline {
        // Blocks 0 1 1 0 0 1 1 0…
        let i = (turn / block.max(1)).div_ceil(2) % 2;
        turn += 1;
        let sent = Instant::now();
        let outcome = one_on_connection(&specs[i], &mut conns[i]).await;
        stats[i].record(start, &outcome, sent.elapsed(), None);
        if outcome.error.as_deref() == Some("connect") {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    for s in &mut stats {
        s.elapsed = start.elapsed();
    }
    stats
}

async fn one_on_connection(spec: &RequestSpec, conn: &mut Option<http1::SendRequest<Full<Bytes>>>) -> Outcome {
    let sent = Instant::now();
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = connect(&spec.uri).await;
    }
    let Some(sender) = conn.as_mut() else { return Outcome::failed("connect") };
    if sender.ready().await.is_err() {
        *conn = None;
        return Outcome::failed("connection_closed");
    }
    let Some(mut req) = build_request(spec) else { return Outcome::failed("bad_request") };
    // A raw connection sends the URI as given: servers expect origin-form (`/path`), not absolute-form.
    if let Some(path) = spec.uri.path_and_query() {
        if let Ok(origin) = Uri::builder().path_and_query(path.clone()).build() {
            *req.uri_mut() = origin;
        }
    }
    let exchange = async {
        match sender.send_request(req).await {
            Ok(resp) => finish(resp, spec, sent).await,
            Err(_) => Outcome::failed("connection_reset"),
        }
    };
    match tokio::time::timeout(spec.timeout, exchange).await {
        Ok(outcome) => {
            if outcome.error.as_deref().is_some_and(|e| e.starts_with("connection") || e == "body_error") {
                *conn = None;
            }
            outcome
        }
        Err(_) => {
            *conn = None;
            Outcome::failed("timeout")
        }
    }
}

async fn connect(uri: &Uri) -> Option<http1::SendRequest<Full<Bytes>>> {
    let host = uri.host()?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Some(sender)
}

/// Open loop: requests at fixed rates — `schedule` is a list of (requests/s, duration) segments
/// run back to back — each sent at its scheduled instant on a pooled client (connections grow as
/// needed), latency charged from the scheduled instant. Scheduling runs on its own OS thread
/// (sleep, then spin the last stretch) for sub-millisecond precision that tokio's millisecond
/// timer cannot give.
pub async fn open_loop(spec: Arc<RequestSpec>, schedule: &[(f64, Duration)]) -> Stats {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(4096).build(http);
    let start = Instant::now() + Duration::from_millis(5);
    let mut instants = Vec::new();
    let mut segment_start = Duration::ZERO;
    for &(rate, duration) in schedule {
        let count = (rate * duration.as_secs_f64()).round() as u64;
        let interval = Duration::from_secs_f64(1.0 / rate.max(1e-3));
        instants.extend((0..count).map(|i| start + segment_start + interval.mul_f64(i as f64)));
        segment_start += duration;
    }
    let count = instants.len() as u64;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    std::thread::spawn(move || {
        for intended in instants {
            wait_until(intended);
            if tx.send(intended).is_err() {
                return;
            }
        }
    });
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Instant, Outcome)>();
    let dispatcher = {
        let spec = spec.clone();
        tokio::spawn(async move {
            while let Some(intended) = rx.recv().await {
                let (client, spec, done) = (client.clone(), spec.clone(), done_tx.clone());
                tokio::spawn(async move {
                    let sent = Instant::now();
                    let outcome = match build_request(&spec) {
                        None => Outcome::failed("bad_request"),
                        Some(req) => {
                            let exchange = async {
                                match client.request(req).await {
                                    Ok(resp) => finish(resp, &spec, sent).await,
                                    Err(e) if e.is_connect() => Outcome::failed("connect"),
                                    Err(_) => Outcome::failed("connection_reset"),
                                }
                            };
                            tokio::time::timeout(spec.timeout, exchange)
                                .await
                                .unwrap_or_else(|_| Outcome::failed("timeout"))
                        }
                    };
                    let _ = done.send((intended, sent, outcome));
                });
            }
        })
    };
    let mut stats = Stats::default();
    let mut seen = 0;
    while seen < count {
        let Some((intended, sent, outcome)) = done_rx.recv().await else { break };
        stats.record(start, &outcome, intended.elapsed(), Some(sent.elapsed()));
        seen += 1;
    }
    let _ = dispatcher.await;
    stats.elapsed = start.elapsed();
    stats
}

/// Sleep most of the way, then spin: std sleep overshoots by tens of µs. On a single CPU the
/// spin would steal time from the processes being measured, so there it only sleeps.
fn wait_until(t: Instant) {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    let spin = *SPIN.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus > 1 {
            Duration::from_micros(150)
        } else {
            Duration::ZERO
        }
    });
    let now = Instant::now();
    if t > now + spin {
        std::thread::sleep(t - now - spin);
    }
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

/// The gateway's own time from `server-timing: gateway;dur=MS, ...`, in microseconds.
pub fn overhead_us(headers: &http::HeaderMap) -> Option<u64> {
    let v = headers.get("server-timing")?.to_str().ok()?;
    let ms: f64 = v.split(',').find_map(|part| part.trim().strip_prefix("gateway;dur="))?.parse().ok()?;
    Some((ms * 1000.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_percentiles() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        let t0 = Instant::now();
        let ok = Outcome { error: None, backend: Some("x".into()), first_chunk: None, reported_overhead_us: Some(10) };
        for us in 1..=50u64 {
            a.record(t0, &ok, Duration::from_micros(us), None);
        }
        for us in 51..=100u64 {
            b.record(t0, &ok, Duration::from_micros(us), None);
        }
        b.record(t0, &Outcome::failed("timeout"), Duration::ZERO, None);
        a.merge(b);
        assert_eq!(a.ok, 100);
        assert_eq!(a.errors["timeout"], 1);
        assert_eq!(a.total(), 101);
        assert_eq!(a.latency.value_at_quantile(0.5), 50);
        assert_eq!(a.latency.value_at_quantile(0.99), 99);
        assert_eq!(a.latency.max(), 100);
        assert_eq!(a.backends["x"], 100);
        assert_eq!(a.timeline[0], (100, 1));
    }

    /// A plain chat request to a mock, which names its port in `x-mock-port`.
    fn chat_to(mock: &switchyard_testkit::MockServer) -> Arc<RequestSpec> {
        Arc::new(RequestSpec {
            uri: format!("{}/v1/chat/completions", mock.url()).parse().unwrap(),
            body: Bytes::from_static(br#"{"model":"mock-model","messages":[]}"#),
            headers: vec![],
            stream: false,
            stream_end: b"data: [DONE]",
            backend_header: HeaderName::from_static("x-mock-port"),
            timeout: Duration::from_secs(5),
        })
    }

    /// A load generator that is itself stalled must charge the stall to the requests it delayed.
    #[test]
    fn open_loop_charges_latency_from_the_intended_send_time() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mock = switchyard_testkit::MockServer::start(
                "127.0.0.1:0".parse().unwrap(),
                switchyard_testkit::MockConfig::default(),
            )
            .await
            .unwrap();
            let spec = chat_to(&mock);
            // Block the only runtime thread for 100 ms, 50 ms into a 200 ms run at 500 req/s.
            tokio::spawn(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                std::thread::sleep(Duration::from_millis(100));
            });
            let stats = open_loop(spec, &[(500.0, Duration::from_millis(200))]).await;
            assert_eq!(stats.ok, 100, "{:?}", stats.errors);
            assert!(stats.latency.max() >= 80_000, "stall charged: max {} µs", stats.latency.max());
            // Half the requests fall due during the stall and go out late, in one burst: their
            // latency carries ~50 ms of it on average, their service time none. Compared as means,
            // a slow or busy machine adds the same to both, so only the stall separates them (the
            // quantile this compared before failed when CI's other tests slowed every request).
            let charged_us = stats.latency.mean() - stats.service.mean();
            assert!(charged_us >= 10_000.0, "service time excludes the generator's own stall: {charged_us} µs");
        });
    }

    /// Two targets in turn, four requests at a time: each gets half the requests (within a
    /// block), on its own connection, and none of the other's.
    #[test]
    fn alternating_loop_sends_to_each_target_in_turn() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut specs = Vec::new();
            let mut ports = Vec::new();
            let mut mocks = Vec::new();
            for _ in 0..2 {
                let config = switchyard_testkit::MockConfig::default();
                let mock = switchyard_testkit::MockServer::start("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
                ports.push(mock.url().rsplit(':').next().unwrap().to_owned());
                specs.push(chat_to(&mock));
                mocks.push(mock);
            }
            let [a, b] = alternating_loop([specs[0].clone(), specs[1].clone()], 4, Duration::from_millis(200)).await;
            assert!(a.ok >= 5 && a.total() == a.ok && b.total() == b.ok, "{:?} {:?}", a.errors, b.errors);
            assert!(a.ok.abs_diff(b.ok) <= 4, "{} against {}", a.ok, b.ok);
            assert_eq!(a.backends.keys().collect::<Vec<_>>(), [&ports[0]]);
            assert_eq!(b.backends.keys().collect::<Vec<_>>(), [&ports[1]]);
        });
    }
}
