//! Fleet: the shared limiter (a `redis-server` on loopback, started here) against the in-memory
//! one, in the same run, on the same mock: added latency (p50 against the direct path) and the
//! gateway's CPU time per request, for a key with requests/min and tokens/min limits (which the
//! shared limiter leases) and one with a parallel limit as well (whose slots it pools); beside it, one bare Redis round trip (PING) from this process, the floor the
//! shared limiter's added latency is judged against. Then the fleet's exactness under load:
//! three gateways on one Redis, a key with `rpm: 2000`, 24 connections spraying them for twice
//! that many requests: exactly 2000 must be admitted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http::HeaderValue;

use super::{chat_body, measure, own_setup, start_gateway, start_mock, Mode};
use crate::load::closed_loop;
use crate::procs;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

const MASTER: &str = "bench-master-key-not-secret";
/// Limits a benchmark never reaches, so every check runs and none refuses: rate limits alone
/// (which the shared limiter leases), and with a parallel limit (whose slots it pools).
const RATE: &str = r#"{"rpm":1000000000,"tpm":1000000000000}"#;
const RATE_AND_PARALLEL: &str = r#"{"rpm":1000000000,"tpm":1000000000000,"max_parallel":1000000}"#;
const EXACT_RPM: u64 = 2000;

/// A `redis-server` child on a free port, stopped when dropped.
pub(super) struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    pub(super) fn start(cpus: Option<&str>) -> Result<Redis, String> {
        let port = procs::free_port()?;
        let bin = std::env::var("SWITCHYARD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let mut cmd = match cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus, &bin]);
                c
            }
            None => Command::new(&bin),
        };
        let child = cmd
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {bin} ({e}): install redis-server (scripts/redis)"))?;
        let redis = Redis { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis.connect().is_err() {
            if Instant::now() > deadline {
                return Err("redis-server did not start".to_owned());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }

    pub(super) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn connect(&self) -> std::io::Result<TcpStream> {
        let stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Redis's own time per script call (`INFO commandstats`: evalsha's usec_per_call).
    fn script_us(&self) -> Option<f64> {
        let mut stream = self.connect().ok()?;
        stream.write_all(b"INFO commandstats\r\n").ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut text = String::new();
        let mut buf = [0u8; 8192];
        while !text.contains("cmdstat_evalsha") || !text.ends_with("\r\n") {
            let n = stream.read(&mut buf).ok()?;
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let line = text.lines().find(|l| l.starts_with("cmdstat_evalsha:"))?;
        let field = line.split(',').find_map(|f| f.strip_prefix("usec_per_call="))?;
        field.parse().ok()
    }

    /// Sequential PINGs on one connection for `duration`: the round trip's p50 in µs.
    fn ping_p50(&self, duration: Duration) -> Result<f64, String> {
        let mut stream = self.connect().map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        let mut samples = Vec::new();
        let mut line = String::new();
        let end = Instant::now() + duration;
        while Instant::now() < end {
            let t = Instant::now();
            stream.write_all(b"PING\r\n").map_err(|e| e.to_string())?;
            line.clear();
            reader.read_line(&mut line).map_err(|e| e.to_string())?;
            samples.push(t.elapsed().as_nanos() as u64);
        }
        samples.sort_unstable();
        Ok(samples.get(samples.len() / 2).copied().unwrap_or(0) as f64 / 1000.0)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User plus system CPU time of a process, in µs (from /proc; clock ticks of 10 ms).
pub(super) fn cpu_us(pid: u32) -> Option<u64> {
    let mut stat = String::new();
    std::fs::File::open(format!("/proc/{pid}/stat")).ok()?.read_to_string(&mut stat).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000)
}

fn gateway_config(mock_url: &str, redis: Option<&str>) -> String {
    let mut config = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: mock, url: '{mock_url}'}}\n");
    if let Some(url) = redis {
        // A loopback Redis answers in well under a millisecond; the breaker must never trip here.
        config.push_str(&format!("redis: {{url: '{url}', timeout: 1s}}\n"));
    }
    config
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    let redis = Redis::start(pin.mock.as_deref())?;
    let mock = start_mock(&args.model, args.stream_chunks, None, pin)?;
    let auth = format!("auth: {{master_key: '{MASTER}'}}\n");
    let memory = start_gateway(&(gateway_config(&mock.url, None) + &auth), pin)?;
    let shared = start_gateway(&(gateway_config(&mock.url, Some(&redis.url())) + &auth), pin)?;
    let (d, w) = (args.phase(5.0), args.warmup());

    let rtt = redis.ping_p50(Duration::from_secs(2))?;
    report.finding("fleet", "Redis round trip (PING) p50, loopback", rtt, "µs");

    let mut rows = Vec::new();
    let runs = [
        ("in-memory limiter, rpm+tpm", &memory, RATE),
        ("shared limiter (Redis), rpm+tpm, leased", &shared, RATE),
        ("in-memory limiter, rpm+tpm+parallel", &memory, RATE_AND_PARALLEL),
        ("shared limiter (Redis), rpm+tpm+parallel, pooled", &shared, RATE_AND_PARALLEL),
    ];
    for (label, gateway, limits) in runs {
        let key = procs::create_key_with(&gateway.url, MASTER, limits).await?;
        let mut setup = own_setup(gateway, &mock, &args.model);
        let auth = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|e| e.to_string())?;
        setup.headers.push((http::header::AUTHORIZATION, auth));
        let (direct, through) = setup.pair(&chat_body(&args.model, false, "hello"), false)?;
        let sd = measure(&format!("fleet direct ({label})"), &direct, Mode::Closed(1), w, d).await;
        let sg = measure(&format!("fleet {label}"), &through, Mode::Closed(1), w, d).await;
        report.row("fleet", format!("closed c=1, {label}"), "direct", &sd);
        report.row("fleet", format!("closed c=1, {label}"), "gateway", &sg);
        let added = sg.latency.value_at_quantile(0.5) as f64 - sd.latency.value_at_quantile(0.5) as f64;
        report.finding("fleet", format!("added latency p50, {label}"), added, "µs");
        // CPU per request under load (16 connections): at one connection the runtime's idle
        // wake-ups, not the work, dominate the figure. Warm-up runs before the first reading.
        let _ =
            measure(&format!("fleet warm-up ({label})"), &through, Mode::Closed(16), w, Duration::from_millis(1)).await;
        let cpu_before = cpu_us(gateway.pid());
        let loaded =
            measure(&format!("fleet {label}, 16 connections"), &through, Mode::Closed(16), Duration::ZERO, d).await;
        let cpu_after = cpu_us(gateway.pid());
        report.row("fleet", format!("closed c=16, {label}"), "gateway", &loaded);
        let cpu = match (cpu_before, cpu_after) {
            (Some(a), Some(b)) if loaded.ok > 0 => (b.saturating_sub(a)) as f64 / loaded.ok as f64,
            _ => f64::NAN,
        };
        report.finding("fleet", format!("gateway CPU per request at 16 connections, {label}"), cpu, "µs");
        for stats in [&sg, &loaded] {
            stats.all_ok(label)?;
        }
        rows.push((added, cpu));
    }
    if let Some(us) = redis.script_us() {
        report.finding("fleet", "Redis's own time per limiter script call", us, "µs");
    }
    for (pair, what) in rows.chunks(2).zip(["rpm+tpm, leased", "rpm+tpm+parallel, leased and pooled"]) {
        if let [(mem_added, mem_cpu), (shared_added, shared_cpu)] = pair[..] {
            report.finding(
                "fleet",
                format!("shared limiter's added p50 beyond the in-memory one ({what})"),
                shared_added - mem_added,
                "µs",
            );
            report.finding(
                "fleet",
                format!("shared limiter's CPU per request ÷ in-memory's ({what})"),
                shared_cpu / mem_cpu,
                "×",
            );
        }
    }

    exactness(args, pin, &mock, &redis, report).await
}

/// Three gateways on one Redis; a key with `rpm: EXACT_RPM` sprayed with twice that.
async fn exactness(
    args: &BenchArgs,
    pin: &Pinning,
    mock: &procs::Proc,
    redis: &Redis,
    report: &mut Report,
) -> Result<(), String> {
    let config = gateway_config(&mock.url, Some(&redis.url()));
    // One database for the three (keys are shared), each its own journal.
    let dir = std::env::temp_dir().join(format!("switchyard-bench-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut gateways = Vec::new();
    for i in 0..3 {
        let config = format!(
            "{config}auth: {{master_key: '{MASTER}', secret: 'bench-fleet-secret-0123456789abcdef'}}\n\
             storage: {{url: 'sqlite://{0}/usage.db', usage_journal_dir: '{0}/journal{i}'}}\n",
            dir.display()
        );
        gateways.push(super::start_gateway_as_is(&config, pin)?);
    }
    let body = format!(r#"{{"rpm":{EXACT_RPM}}}"#);
    let key = procs::create_key_with(&gateways[0].url, MASTER, &body).await?;
    let auth = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut runs = tokio::task::JoinSet::new();
    for gateway in &gateways {
        let mut setup = own_setup(gateway, mock, &args.model);
        setup.headers.push((http::header::AUTHORIZATION, auth.clone()));
        let (_, spec) = setup.pair(&chat_body(&args.model, false, "hello"), false)?;
        runs.spawn(closed_loop(spec, 8, Duration::from_secs(3)));
    }
    let (mut admitted, mut refused, mut other) = (0u64, 0u64, 0u64);
    while let Some(stats) = runs.join_next().await {
        let stats = stats.map_err(|e| e.to_string())?;
        admitted += stats.ok;
        for (kind, n) in &stats.errors {
            if kind.contains("429") {
                refused += n;
            } else {
                other += n;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    report.finding("fleet", "3 instances, rpm 2000: requests sent", (admitted + refused + other) as f64, "");
    report.finding("fleet", "3 instances, rpm 2000: admitted (must be 2000)", admitted as f64, "");
    report.finding("fleet", "3 instances, rpm 2000: other errors", other as f64, "");
    report.finding("fleet", "3 instances: spraying took", started.elapsed().as_secs_f64(), "s");
    if admitted + refused <= EXACT_RPM {
        return Err(format!("only {} requests were sent: the limit was never reached", admitted + refused));
    }
    if admitted != EXACT_RPM || other != 0 {
        return Err(format!("the fleet admitted {admitted} of rpm {EXACT_RPM} ({other} other errors)"));
    }
    Ok(())
}
