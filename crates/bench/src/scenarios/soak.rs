//! Soak: the gateway (usage recording on, SQLite) at 60% of its measured capacity for a long
//! time, half the requests streamed, 5% aborted by their clients (mid-stream, or before the
//! answer), while its memory, file descriptors, runtime tasks and database connections are
//! sampled. After the warm-up each one's floor must stay flat: the lowest reading of the last
//! third may exceed the lowest of the middle third by less than its bar per 10 minutes (a leak
//! raises the floor; a burst of requests in flight, or a neighbour taking the CPU, raises only
//! the peaks). Memory is judged by malloc's bytes in use (`switchyard_heap_in_use_bytes`), which
//! a leak raises and arena fragmentation does not; resident memory only has to stay clear of a
//! runaway. Once the load stops they must come back. The run fails when one does not.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use switchyard_testkit::TestClient;

use super::{chat_body, mb, measure, own_setup, start_gateway, start_mock, Mode};
use crate::procs;
use crate::report::Report;
use crate::{BenchArgs, Pinning};

/// The share of warm-up excluded from the slopes.
const WARMUP_SHARE: f64 = 0.2;
/// Bars, per 10 minutes after the warm-up. A leak is memory handed out and never given back:
/// malloc's bytes in use may grow less than `HEAP_BAR_MIB` (issue 13's 2 MiB per 10 minutes).
/// Resident memory also holds what malloc keeps free in its arenas, which grows in steps of a
/// few MB as they fragment (steps of 0.4–2.2 MB at 11 and 16 minutes seen in one 20-minute run,
/// none in the next, malloc's bytes in use flat at 4.0–4.2 MB in both): it must stay under the
/// looser `RSS_BAR_MIB`, which only a runaway crosses.
const HEAP_BAR_MIB: f64 = 2.0;
const RSS_BAR_MIB: f64 = 8.0;
const COUNT_BAR: f64 = 4.0;
/// Counts move in whole units, so a short run turns a one-off step of one or two (a pooled
/// connection's task that happens to be alive in every sample of the last third) into a rate
/// over the bar (a rise of 1 in a 5-minute run reads 7 per 10 minutes). A count fails only when
/// its floor also rose by more than this; a leak at this load rises by far more.
const COUNT_STEP_SLACK: f64 = 2.0;
/// The same for resident memory: one arena step (2.6 MB at three minutes of a 5-minute run,
/// malloc's bytes in use flat at 4.6–4.8 MB) reads 14 MiB per 10 minutes. Its floor fails only
/// when it also rose by more than this, which a runaway at the bar does in a 20-minute run; a
/// leak through malloc is the heap bar's to catch, at any length.
const RSS_STEP_SLACK_MIB: f64 = 4.0;
/// Requests in flight the generator allows itself (an open loop must not queue without bound).
const MAX_IN_FLIGHT: u64 = 512;

/// One window's sample: the minimum of each count over the window's once-a-second readings, so
/// the momentary requests in flight do not hide (or fake) a trend; a leak raises the minimum.
#[derive(Clone, Copy, Default)]
struct Sample {
    secs: f64,
    /// Anonymous resident memory (the journal's mapped file pages are not the gateway's heap).
    anon: u64,
    /// What SQLite's allocator holds (`switchyard_sqlite_heap_bytes`): page caches bounded by
    /// their `cache_size`, which fill as the usage journal grows.
    sqlite: u64,
    /// `anon` less `sqlite`, at the same instant: the gateway's own heap, where a leak shows.
    own: u64,
    /// malloc's bytes in use (`switchyard_heap_in_use_bytes`) and held free.
    heap: u64,
    free: u64,
    rss: u64,
    fds: u64,
    tasks: u64,
    db: u64,
}

impl Sample {
    fn min(self, other: Sample) -> Sample {
        Sample {
            secs: other.secs,
            anon: self.anon.min(other.anon),
            sqlite: self.sqlite.min(other.sqlite),
            own: self.own.min(other.own),
            heap: self.heap.min(other.heap),
            free: self.free.min(other.free),
            rss: self.rss.min(other.rss),
            fds: self.fds.min(other.fds),
            tasks: self.tasks.min(other.tasks),
            db: self.db.min(other.db),
        }
    }
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    aborted: AtomicU64,
    skipped: AtomicU64,
    in_flight: AtomicU64,
}

fn fds_of(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0)
}

async fn metrics_text(client: &TestClient, base: &str) -> String {
    client.get(&format!("{base}/metrics")).await.map(|r| r.text()).unwrap_or_default()
}

fn gauge_in(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

async fn gauge(client: &TestClient, base: &str, name: &str) -> u64 {
    gauge_in(&metrics_text(client, base).await, name)
}

async fn sample(client: &TestClient, base: &str, pid: u32, started: Instant) -> Sample {
    // One scrape, read beside /proc, so the heap and the resident figures are of one instant.
    let text = metrics_text(client, base).await;
    let sqlite = gauge_in(&text, "switchyard_sqlite_heap_bytes");
    let anon = procs::anon_rss_of(pid).unwrap_or(0);
    Sample {
        secs: started.elapsed().as_secs_f64(),
        anon,
        sqlite,
        own: anon.saturating_sub(sqlite),
        heap: gauge_in(&text, "switchyard_heap_in_use_bytes"),
        free: gauge_in(&text, "switchyard_heap_free_bytes"),
        rss: procs::rss_of(pid).unwrap_or(0),
        fds: fds_of(pid),
        tasks: gauge_in(&text, "switchyard_runtime_tasks_alive"),
        db: gauge_in(&text, "switchyard_db_connections_open"),
    }
}

/// How much the floor of `value` rose from the middle third of `samples` to the last, per 10
/// minutes (0 with fewer than three samples). Not from the first third: caches and the
/// allocator's arenas fill once, in steps, during the first minutes under load (a 3–4 MB step
/// seen 7.5 minutes into a 10-minute run, flat afterwards); a leak keeps raising the floor
/// through the middle and last thirds alike.
fn floor_growth_per_10min(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> f64 {
    floor_rise(samples, value).map_or(0.0, |(rise, span)| rise / span * 600.0)
}

/// The floor's rise from the middle third to the last, and the seconds between their centres.
fn floor_rise(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> Option<(f64, f64)> {
    let third = samples.len() / 3;
    if third == 0 {
        return None;
    }
    let (middle, last) = (&samples[third..2 * third], &samples[samples.len() - third..]);
    let floor = |part: &[Sample]| part.iter().map(&value).fold(f64::INFINITY, f64::min);
    let centre = |part: &[Sample]| part.iter().map(|s| s.secs).sum::<f64>() / part.len() as f64;
    let span = (centre(last) - centre(middle)).max(1.0);
    Some((floor(last) - floor(middle), span))
}

/// Least-squares slope of `value` over time, per 10 minutes.
fn slope_per_10min(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mean_t = samples.iter().map(|s| s.secs).sum::<f64>() / n;
    let mean_v = samples.iter().map(&value).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for s in samples {
        num += (s.secs - mean_t) * (value(s) - mean_v);
        den += (s.secs - mean_t) * (s.secs - mean_t);
    }
    if den == 0.0 {
        0.0
    } else {
        num / den * 600.0
    }
}

/// One request of the mix: `n` decides streamed or not, and whether its client aborts.
async fn one(client: &TestClient, url: &str, model: &str, n: u64, tally: &Tally) {
    let stream = n.is_multiple_of(2);
    let abort = n % 20 == 1 || n % 20 == 10;
    let body = Bytes::from(chat_body(model, stream, "soak"));
    if abort && !stream {
        // Gone before the answer (or just as it arrives).
        let sent = client.send(http::Method::POST, url, body, &[]);
        let _ = tokio::time::timeout(Duration::from_micros(300), sent).await;
        tally.aborted.fetch_add(1, Relaxed);
        return;
    }
    let Ok(resp) = client.send(http::Method::POST, url, body, &[]).await else {
        tally.failed.fetch_add(1, Relaxed);
        return;
    };
    if resp.status() != 200 {
        tally.failed.fetch_add(1, Relaxed);
        return;
    }
    let mut body = resp.into_body();
    if abort {
        // Gone mid-stream, after the first chunk.
        let _ = body.frame().await;
        tally.aborted.fetch_add(1, Relaxed);
        return;
    }
    let mut last = Bytes::new();
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    last = data;
                }
            }
            Some(Err(_)) => {
                tally.failed.fetch_add(1, Relaxed);
                return;
            }
            None => break,
        }
    }
    let whole = !stream || last.ends_with(b"[DONE]\n\n");
    let counter = if whole { &tally.ok } else { &tally.failed };
    counter.fetch_add(1, Relaxed);
}

pub async fn run(args: &BenchArgs, pin: &Pinning, report: &mut Report) -> Result<(), String> {
    if args.target.is_some() {
        eprintln!("  (soak starts its own gateway: skipped for --target)");
        return Ok(());
    }
    let duration = args.phase(1200.0);
    let mock = start_mock(&args.model, 8, None, pin)?;
    let config = format!("listen: 127.0.0.1:0\nbackends:\n  - {{name: a, url: '{}'}}\n", mock.url);
    let gateway = start_gateway(&config, pin)?;
    let pid = gateway.pid();
    let base = gateway.url.clone();
    let setup = own_setup(&gateway, &mock, &args.model);
    let capacity = mix_capacity(args, &setup).await?;
    let rate = (capacity * 0.6).max(1.0);
    report.finding("soak", "capacity of the mix (32 connections)", capacity, "req/s");
    report.finding("soak", "offered rate (60%)", rate, "req/s");

    let probe = TestClient::new();
    let started = Instant::now();
    let before = sample(&probe, &base, pid, started).await;
    let tally = Arc::new(Tally::default());
    let url = format!("{base}/v1/chat/completions");
    let load = spawn_load(url, args.model.clone(), rate, started, duration, tally.clone());
    let samples = sample_windows(&probe, &base, pid, started, duration, &tally).await;
    load.await.map_err(|e| e.to_string())?;
    wait_until_idle(&probe, &base, &tally).await;
    let after = sample(&probe, &base, pid, started).await;

    let steady: Vec<Sample> =
        samples.iter().copied().filter(|s| s.secs >= duration.as_secs_f64() * WARMUP_SHARE).collect();
    let trends = Trends::of(&steady);
    let counts = Counts::of(&tally);
    report_findings(report, duration, &samples, &counts, &trends, before, after);
    let broken = broken_bars(&steady, &trends, before, after, rate, counts.failed);
    if broken.is_empty() {
        Ok(())
    } else {
        crate::report::print(report);
        Err(format!("soak: {}", broken.join("; ")))
    }
}

/// Capacity of the half-streamed mix: each kind's closed-loop throughput, combined harmonically.
async fn mix_capacity(args: &BenchArgs, setup: &super::Setup) -> Result<f64, String> {
    let (_, plain) = setup.pair(&chat_body(&args.model, false, "soak"), false)?;
    let (_, streamed) = setup.pair(&chat_body(&args.model, true, "soak"), true)?;
    let phase = Duration::from_secs(5);
    let plain = measure("capacity, non-streamed", &plain, Mode::Closed(32), args.warmup(), phase).await.throughput();
    let streamed = measure("capacity, streamed", &streamed, Mode::Closed(32), args.warmup(), phase).await.throughput();
    Ok(2.0 / (1.0 / plain.max(1.0) + 1.0 / streamed.max(1.0)))
}

/// The open-loop generator: one request of the mix every `1 / rate` seconds until `duration` has
/// passed since `started`, skipping a tick while `MAX_IN_FLIGHT` requests are outstanding.
fn spawn_load(
    url: String,
    model: String,
    rate: f64,
    started: Instant,
    duration: Duration,
    tally: Arc<Tally>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = TestClient::new();
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut n = 0u64;
        while started.elapsed() < duration {
            tick.tick().await;
            n += 1;
            if tally.in_flight.load(Relaxed) >= MAX_IN_FLIGHT {
                tally.skipped.fetch_add(1, Relaxed);
                continue;
            }
            tally.in_flight.fetch_add(1, Relaxed);
            let (client, url, model, tally) = (client.clone(), url.clone(), model.clone(), tally.clone());
            tokio::spawn(async move {
                one(&client, &url, &model, n, &tally).await;
                tally.in_flight.fetch_sub(1, Relaxed);
            });
        }
    })
}

/// Samples the gateway once a second until `duration` has passed, keeping each window's minimum
/// (windows of 1 to 10 seconds, by the run's length) and printing it as it goes.
async fn sample_windows(
    probe: &TestClient,
    base: &str,
    pid: u32,
    started: Instant,
    duration: Duration,
    tally: &Tally,
) -> Vec<Sample> {
    let window = ((duration.as_secs_f64() / 60.0).clamp(1.0, 10.0)) as usize;
    let mut samples = Vec::new();
    while started.elapsed() < duration {
        let mut s: Option<Sample> = None;
        for _ in 0..window {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = sample(probe, base, pid, started).await;
            s = Some(s.map_or(now, |s| s.min(now)));
        }
        let Some(s) = s else { break };
        eprintln!(
            "  soak {:>6.0}s  anon {:>6.1} MB  (sqlite {:>4.1}, own {:>6.1}; malloc in use {:>6.1}, free {:>5.1})  rss {:>6.1} MB  fds {:>4}  tasks {:>4}  db {}  ok {}  failed {}  aborted {}",
            s.secs,
            mb(s.anon),
            mb(s.sqlite),
            mb(s.own),
            mb(s.heap),
            mb(s.free),
            mb(s.rss),
            s.fds,
            s.tasks,
            s.db,
            tally.ok.load(Relaxed),
            tally.failed.load(Relaxed),
            tally.aborted.load(Relaxed)
        );
        samples.push(s);
    }
    samples
}

/// Lets the last requests finish and the clients' connections close (30 s at most for each).
async fn wait_until_idle(probe: &TestClient, base: &str, tally: &Tally) {
    let drained = Instant::now();
    while tally.in_flight.load(Relaxed) > 0 && drained.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settled = Instant::now();
    while gauge(probe, base, "switchyard_connections_open").await > 1 && settled.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// How the floors moved after the warm-up, per 10 minutes.
struct Trends {
    /// Whether malloc gave its own count (glibc); else the heap is resident memory less SQLite's caches.
    counted: bool,
    heap_slope: f64,
    heap_growth: f64,
    anon_growth: f64,
    fd_growth: f64,
    task_growth: f64,
    db_growth: f64,
}

impl Trends {
    fn of(steady: &[Sample]) -> Trends {
        // malloc's own count where it gives one (glibc); else resident memory less SQLite's caches.
        let counted = steady.iter().any(|s| s.heap > 0);
        let leak_of = |s: &Sample| if counted { mib(s.heap) } else { mib(s.own) };
        Trends {
            counted,
            heap_slope: slope_per_10min(steady, leak_of),
            heap_growth: floor_growth_per_10min(steady, leak_of),
            anon_growth: floor_growth_per_10min(steady, |s| mib(s.anon)),
            fd_growth: floor_growth_per_10min(steady, |s| s.fds as f64),
            task_growth: floor_growth_per_10min(steady, |s| s.tasks as f64),
            db_growth: floor_growth_per_10min(steady, |s| s.db as f64),
        }
    }

    fn heap_what(&self) -> &'static str {
        if self.counted {
            "malloc's bytes in use"
        } else {
            "anonymous RSS less SQLite's caches"
        }
    }
}

/// The tally's counts, read once the load is over.
struct Counts {
    ok: u64,
    failed: u64,
    aborted: u64,
    skipped: u64,
}

impl Counts {
    fn of(tally: &Tally) -> Counts {
        Counts {
            ok: tally.ok.load(Relaxed),
            failed: tally.failed.load(Relaxed),
            aborted: tally.aborted.load(Relaxed),
            skipped: tally.skipped.load(Relaxed),
        }
    }
}

fn report_findings(
    report: &mut Report,
    duration: Duration,
    samples: &[Sample],
    counts: &Counts,
    trends: &Trends,
    before: Sample,
    after: Sample,
) {
    report.finding("soak", "duration", duration.as_secs_f64() / 60.0, "min");
    report.finding("soak", "requests completed", counts.ok as f64, "");
    report.finding("soak", "requests aborted by their clients", counts.aborted as f64, "");
    report.finding("soak", "requests failed", counts.failed as f64, "");
    report.finding("soak", "requests not sent (generator at its in-flight cap)", counts.skipped as f64, "");
    let heap_what = trends.heap_what();
    report.finding("soak", format!("heap ({heap_what}) floor growth after warm-up"), trends.heap_growth, "MiB/10 min");
    report.finding("soak", "heap slope after warm-up (least squares)", trends.heap_slope, "MiB/10 min");
    report.finding(
        "soak",
        "anonymous RSS floor growth after warm-up (SQLite's caches included)",
        trends.anon_growth,
        "MiB/10 min",
    );
    let sqlite_peak = samples.iter().map(|s| s.sqlite).max().unwrap_or(0);
    let heap_peak = samples.iter().map(|s| s.heap).max().unwrap_or(0);
    report.finding("soak", "malloc's bytes in use, most seen (floor of a window)", mb(heap_peak), "MB");
    report.finding("soak", "SQLite heap, most seen", mb(sqlite_peak), "MB");
    report.finding("soak", "anonymous RSS before the load", mb(before.anon), "MB");
    report.finding("soak", "anonymous RSS after the load", mb(after.anon), "MB");
    report.finding("soak", "file descriptor floor growth after warm-up", trends.fd_growth, "/10 min");
    report.finding("soak", "runtime task floor growth after warm-up", trends.task_growth, "/10 min");
    report.finding("soak", "database connection floor growth after warm-up", trends.db_growth, "/10 min");
    let peak = samples.iter().map(|s| s.rss).max().unwrap_or(0);
    report.finding("soak", "RSS before the load", mb(before.rss), "MB");
    report.finding("soak", "RSS peak", mb(peak), "MB");
    report.finding("soak", "RSS after the load", mb(after.rss), "MB");
    report.finding("soak", "file descriptors before the load", before.fds as f64, "");
    report.finding("soak", "file descriptors after the load", after.fds as f64, "");
    report.finding("soak", "runtime tasks before the load", before.tasks as f64, "");
    report.finding("soak", "runtime tasks after the load", after.tasks as f64, "");
}

/// The bars the run broke, each as a sentence; empty when it passed.
fn broken_bars(
    steady: &[Sample],
    trends: &Trends,
    before: Sample,
    after: Sample,
    rate: f64,
    failed: u64,
) -> Vec<String> {
    let mut broken = Vec::new();
    let (heap_growth, anon_growth) = (trends.heap_growth, trends.anon_growth);
    if heap_growth >= HEAP_BAR_MIB {
        let heap_what = trends.heap_what();
        broken
            .push(format!("the heap's floor ({heap_what}) rose {heap_growth:.2} MiB per 10 min (bar {HEAP_BAR_MIB})"));
    }
    let anon_rise = floor_rise(steady, |s| mib(s.anon)).map_or(0.0, |(rise, _)| rise);
    if anon_growth >= RSS_BAR_MIB && anon_rise > RSS_STEP_SLACK_MIB {
        broken.push(format!(
            "the anonymous RSS floor rose {anon_rise:.2} MiB, {anon_growth:.2} MiB per 10 min (bar {RSS_BAR_MIB})"
        ));
    }
    for (what, growth, count) in [
        ("file descriptors", trends.fd_growth, (|s: &Sample| s.fds as f64) as fn(&Sample) -> f64),
        ("runtime tasks", trends.task_growth, |s: &Sample| s.tasks as f64),
        ("db connections", trends.db_growth, |s: &Sample| s.db as f64),
    ] {
        let rise = floor_rise(steady, count).map_or(0.0, |(rise, _)| rise);
        if growth >= COUNT_BAR && rise > COUNT_STEP_SLACK {
            broken.push(format!("the floor of {what} rose by {rise}, {growth:.1} per 10 min (bar {COUNT_BAR})"));
        }
    }
    // Once idle again, what the load held must be back: only pooled upstream connections (and
    // their tasks) may remain, at most one per request that was in flight at once.
    let pooled_slack = MAX_IN_FLIGHT.min((rate * 0.5) as u64 + 16);
    if after.fds > before.fds + pooled_slack {
        broken.push(format!("file descriptors {} → {} once idle", before.fds, after.fds));
    }
    if after.tasks > before.tasks + pooled_slack {
        broken.push(format!("runtime tasks {} → {} once idle", before.tasks, after.tasks));
    }
    if failed > 0 {
        broken.push(format!("{failed} requests failed"));
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(values: &[u64]) -> Vec<Sample> {
        values
            .iter()
            .enumerate()
            .map(|(i, &t)| Sample { secs: 60.0 + 5.0 * i as f64, tasks: t, ..Sample::default() })
            .collect()
    }

    #[test]
    fn a_one_off_step_of_a_count_is_not_a_leak_but_a_climb_is() {
        let count = |s: &Sample| s.tasks as f64;
        // A short run whose last third sits one task higher: over the rate, under the step slack.
        let step = tasks(&[12, 13, 12, 14, 12, 13, 13, 14, 13, 13, 14, 13]);
        let (rise, _) = floor_rise(&step, count).unwrap();
        assert!(floor_growth_per_10min(&step, count) >= COUNT_BAR && rise <= COUNT_STEP_SLACK, "{rise}");
        // One more task every sample: both.
        let climb = tasks(&(0..12).map(|i| 12 + i).collect::<Vec<_>>());
        let (rise, _) = floor_rise(&climb, count).unwrap();
        assert!(floor_growth_per_10min(&climb, count) >= COUNT_BAR && rise > COUNT_STEP_SLACK, "{rise}");
    }

    #[test]
    fn one_arena_step_of_resident_memory_is_not_a_runaway_but_a_climb_is() {
        let anon = |s: &Sample| s.anon as f64 / 1048576.0;
        let samples = |mb: &[f64]| -> Vec<Sample> {
            mb.iter()
                .enumerate()
                .map(|(i, &m)| Sample {
                    secs: 60.0 + 20.0 * i as f64,
                    anon: (m * 1048576.0) as u64,
                    ..Sample::default()
                })
                .collect()
        };
        // The 5-minute run that stepped 14.6 → 16.6 → 17.1 MB: over the rate, under the slack.
        let step = samples(&[14.5, 14.5, 14.6, 14.6, 14.6, 14.6, 16.6, 16.6, 16.6, 16.6, 16.6, 17.1]);
        let (rise, _) = floor_rise(&step, anon).unwrap();
        assert!(floor_growth_per_10min(&step, anon) >= RSS_BAR_MIB && rise <= RSS_STEP_SLACK_MIB, "{rise}");
        // 20 minutes climbing at 10 MiB per 10 minutes: both.
        let climb: Vec<f64> = (0..60).map(|i| 14.0 + i as f64 * 20.0 / 60.0).collect();
        let climb = samples(&climb);
        let (rise, _) = floor_rise(&climb, anon).unwrap();
        assert!(floor_growth_per_10min(&climb, anon) >= RSS_BAR_MIB && rise > RSS_STEP_SLACK_MIB, "{rise}");
    }
}
