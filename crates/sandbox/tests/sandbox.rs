//! The sandbox against its promises: tool calls, real concurrency, captured console, every limit ending
//! a program cleanly, escape attempts failing, and the committed module matching its checksum.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use switchyard_sandbox::{Failure, Limit, Limits, Sandbox, ToolAnswer, ToolHost};

/// `t.echo` answers its arguments; `t.slow` answers after `ms` milliseconds; anything else fails. Counts
/// calls, and the most that were running at once.
struct TestTools {
    calls: AtomicU32,
    running: Arc<AtomicU32>,
    peak: Arc<AtomicU32>,
}

impl TestTools {
    fn new() -> Arc<Self> {
        Arc::new(Self { calls: AtomicU32::new(0), running: Arc::default(), peak: Arc::default() })
    }

    fn peak(&self) -> u32 {
        self.peak.load(Ordering::SeqCst)
    }
}

impl ToolHost for TestTools {
    fn call(&self, server: String, tool: String, args: String) -> Pin<Box<dyn Future<Output = ToolAnswer> + Send>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let (running, peak) = (self.running.clone(), self.peak.clone());
        Box::pin(async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let answer = match (server.as_str(), tool.as_str()) {
                ("t", "echo") => Ok(format!("{{\"server\":\"{server}\",\"args\":{args}}}")),
                ("t", "slow") => {
                    let args: serde_json::Value = serde_json::from_str(&args).unwrap();
                    let ms = args["ms"].as_u64().unwrap();
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(format!("{{\"slept\":{ms}}}"))
                }
                _ => Err(format!("no such tool {server}.{tool}")),
            };
            running.fetch_sub(1, Ordering::SeqCst);
            answer
        })
    }
}

const CATALOG: &str = r#"{"t":["echo","slow","fail"]}"#;

fn sandbox(limits: Limits) -> Sandbox {
    Sandbox::new(limits).unwrap()
}

async fn run(sb: &Sandbox, code: &str) -> switchyard_sandbox::Outcome {
    sb.execute(code.to_string(), CATALOG.to_string(), TestTools::new()).await
}

#[test]
fn committed_module_matches_its_checksum() {
    let expected = include_str!("../wasm/quickjs-runner.wasm.sha256");
    let expected = expected.split_whitespace().next().unwrap();
    // build.rs compiles this file; the crate embeds only the result.
    let actual = Sha256::digest(include_bytes!("../wasm/quickjs-runner.wasm"));
    let actual: String = actual.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(actual, expected, "rebuild with scripts/build-quickjs-wasm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_json_and_captures_console() {
    let sb = sandbox(Limits::default());
    let out = run(&sb, "console.log('hi', {a: 1}); console.error('oops'); return {sum: 1 + 2, s: 'x'};").await;
    assert_eq!(out.result.unwrap(), r#"{"sum":3,"s":"x"}"#);
    assert_eq!(out.logs.len(), 2);
    assert_eq!(out.logs[0].text, r#"hi {"a":1}"#);
    assert_eq!(out.logs[1].level, "error");
    let empty = run(&sb, "").await;
    assert_eq!(empty.result.unwrap(), "null");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_three_tools_in_sequence() {
    let sb = sandbox(Limits::default());
    let tools = TestTools::new();
    let out = sb
        .execute(
            "const a = await tools.t.echo({n: 1}); const b = await tools.t.echo({n: a.args.n + 1});\n\
             const c = await tools.t.echo({n: b.args.n + 1}); return c.args.n;"
                .into(),
            CATALOG.into(),
            tools.clone(),
        )
        .await;
    assert_eq!(out.result.unwrap(), "3");
    assert_eq!(out.tool_calls, 3);
    assert_eq!(tools.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise_all_runs_calls_concurrently() {
    let sb = sandbox(Limits::default());
    let tools = TestTools::new();
    let code = "const r = await Promise.all(Array.from({length: 10}, () => tools.t.slow({ms: 100}))); return r.length;";
    let out = sb.execute(code.into(), CATALOG.into(), tools.clone()).await;
    assert_eq!(out.result.unwrap(), "10");
    // All running at once, up to the default cap of 8.
    assert_eq!(tools.peak(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parallel_calls_holds_back_the_rest() {
    let sb = sandbox(Limits { max_parallel_calls: 2, ..Limits::default() });
    let tools = TestTools::new();
    let code = "await Promise.all(Array.from({length: 4}, () => tools.t.slow({ms: 50}))); return 1;";
    let out = sb.execute(code.into(), CATALOG.into(), tools.clone()).await;
    assert_eq!(out.result.unwrap(), "1");
    assert_eq!(tools.calls.load(Ordering::SeqCst), 4);
    assert_eq!(tools.peak(), 2, "never more than two at a time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_reject_and_can_be_caught() {
    let sb = sandbox(Limits::default());
    let out = run(&sb, "try { await tools.t.fail({}); } catch (e) { return 'caught: ' + e.message; }").await;
    assert_eq!(out.result.unwrap(), r#""caught: no such tool t.fail""#);
    let unknown = run(&sb, "return await tools.t.nope({});").await;
    match unknown.result {
        Err(Failure::Program(msg)) => assert!(msg.contains("no tool \"nope\""), "{msg}"),
        other => panic!("{other:?}"),
    }
    let thrown = run(&sb, "throw new Error('boom');").await;
    match thrown.result {
        Err(Failure::Program(msg)) => assert!(msg.starts_with("Error: boom"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_loop_hits_the_time_limit() {
    let sb = sandbox(Limits { timeout: Duration::from_millis(300), ..Limits::default() });
    let out = run(&sb, "for (;;) {}").await;
    assert_eq!(out.result, Err(Failure::Limit(Limit::Time(Duration::from_millis(300)))));
    let waiting = run(&sb, "await tools.t.slow({ms: 5000}); return 1;").await;
    assert_eq!(waiting.result, Err(Failure::Limit(Limit::Time(Duration::from_millis(300)))));
    // The sandbox is unharmed.
    assert_eq!(run(&sb, "return 2;").await.result.unwrap(), "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bomb_hits_the_memory_limit() {
    let sb = sandbox(Limits { memory_bytes: 16 << 20, ..Limits::default() });
    let out = run(&sb, "const a = []; for (;;) a.push('x'.repeat(1 << 16) + a.length);").await;
    assert_eq!(out.result, Err(Failure::Limit(Limit::Memory(16 << 20))));
    let big = run(&sb, "const b = new ArrayBuffer(64 << 20); return b.byteLength;").await;
    assert!(big.result.is_err(), "{:?}", big.result);
    assert_eq!(run(&sb, "return 3;").await.result.unwrap(), "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_calls_hit_the_call_limit() {
    let sb = sandbox(Limits::default());
    let tools = TestTools::new();
    let out = sb
        .execute("for (let i = 0; i < 1000; i++) await tools.t.echo({i});".into(), CATALOG.into(), tools.clone())
        .await;
    assert_eq!(out.result, Err(Failure::Limit(Limit::ToolCalls(50))));
    assert_eq!(tools.calls.load(Ordering::SeqCst), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_hits_the_output_limit() {
    let sb = sandbox(Limits { max_output_bytes: 1 << 16, ..Limits::default() });
    let out = run(&sb, "for (;;) console.log('y'.repeat(1000));").await;
    assert_eq!(out.result, Err(Failure::Limit(Limit::Output(1 << 16))));
    let result = run(&sb, "return 'z'.repeat(100000);").await;
    assert_eq!(result.result, Err(Failure::Limit(Limit::Output(1 << 16))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_is_an_error_not_a_crash() {
    let sb = sandbox(Limits::default());
    let out = run(&sb, "function f(n) { return f(n + 1) + 1; } return f(0);").await;
    assert!(matches!(out.result, Err(Failure::Program(_))), "{:?}", out.result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_attempts_fail() {
    let sb = sandbox(Limits::default());
    // Each fails because the thing does not exist, not merely because using it went wrong.
    for (code, reason) in [
        ("return await fetch('http://127.0.0.1/');", "ReferenceError: fetch is not defined"),
        ("return require('fs');", "ReferenceError: require is not defined"),
        ("return await import('os');", "ReferenceError: could not load module 'os'"),
        ("return await import('std');", "ReferenceError: could not load module 'std'"),
        ("return process.env;", "ReferenceError: process is not defined"),
        ("return std.getenv('HOME');", "ReferenceError: std is not defined"),
        ("return os.exec(['/bin/sh']);", "ReferenceError: os is not defined"),
        ("return eval('__sy_call')('t', 'echo', '{}');", "ReferenceError: __sy_call is not defined"),
        ("return globalThis.__sy_log(0, 'x');", "TypeError: not a function"),
        ("return new Function('return this.__sy_call')()('t','echo','{}');", "TypeError: not a function"),
        ("if (typeof WebAssembly === 'undefined') throw new Error('no wasm'); return 1;", "Error: no wasm"),
    ] {
        match run(&sb, code).await.result {
            Err(Failure::Program(msg)) => assert!(msg.starts_with(reason), "{code} -> {msg}"),
            other => panic!("{code} -> {other:?}"),
        }
    }
    // The tools object cannot be replaced or extended by a program.
    let frozen =
        run(&sb, "'use strict'; try { tools.t.echo = null; } catch (e) { return 'frozen'; } return 'open';").await;
    assert_eq!(frozen.result.unwrap(), r#""frozen""#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_state_survives_between_executions() {
    let sb = sandbox(Limits::default());
    let first = run(&sb, "globalThis.secret = 'key-a'; return 1;").await;
    assert_eq!(first.result.unwrap(), "1");
    let second = run(&sb, "return typeof globalThis.secret;").await;
    assert_eq!(second.result.unwrap(), r#""undefined""#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smallest_configurable_memory_still_runs_a_program() {
    // mcp.code_mode.memory_mb accepts 4 and up: the initialised image must fit in that.
    let sb = sandbox(Limits { memory_bytes: 4 << 20, ..Limits::default() });
    assert_eq!(run(&sb, "return [1, 2, 3].map(x => x * 2);").await.result.unwrap(), "[2,4,6]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_program_gets_its_own_random_sequence() {
    let sb = sandbox(Limits::default());
    let code = "return Array.from({length: 4}, () => Math.random());";
    let first = run(&sb, code).await.result.unwrap();
    let second = run(&sb, code).await.result.unwrap();
    assert_ne!(first, second, "the same Math.random sequence twice");
    let values: Vec<f64> = serde_json::from_str(&first).unwrap();
    assert!(values.iter().all(|v| (0.0..1.0).contains(v)), "{values:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_tell_the_time_of_day_and_the_time_since_the_start() {
    let sb = sandbox(Limits::default());
    let out = run(&sb, "const t = performance.now(); return [Date.now(), t];").await.result.unwrap();
    let [date, since_start]: [f64; 2] = serde_json::from_str(&out).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as f64;
    assert!((now - date).abs() < 60_000.0, "Date.now() = {date}, now {now}");
    assert!((0.0..5_000.0).contains(&since_start), "performance.now() = {since_start}");
}

/// One worker thread: the other task gets to run only if the spinning program yields, which it does at every
/// epoch tick, and it still ends at its deadline.
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_program_yields_to_the_runtime_and_still_ends() {
    let sb = sandbox(Limits { timeout: Duration::from_millis(300), ..Limits::default() });
    let ticks = Arc::new(AtomicU32::new(0));
    let counter = ticks.clone();
    let beside = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let started = std::time::Instant::now();
    let out = run(&sb, "let i = 0; for (;;) { i++; }").await;
    assert_eq!(out.result, Err(Failure::Limit(Limit::Time(Duration::from_millis(300)))));
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(ticks.load(Ordering::SeqCst) >= 10, "the runtime ran {} ticks beside it", ticks.load(Ordering::SeqCst));
    beside.abort();
}

/// A tool that never answers, and counts the calls dropped unfinished.
struct Hanging {
    dropped: Arc<AtomicU32>,
}

struct CountDrop(Arc<AtomicU32>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl ToolHost for Hanging {
    fn call(&self, _: String, _: String, _: String) -> Pin<Box<dyn Future<Output = ToolAnswer> + Send>> {
        let guard = CountDrop(self.dropped.clone());
        Box::pin(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok("null".into())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_execution_cancels_its_calls() {
    let sb = sandbox(Limits::default());
    let dropped = Arc::new(AtomicU32::new(0));
    let tools = Arc::new(Hanging { dropped: dropped.clone() });
    let code = "await Promise.all([tools.t.slow({}), tools.t.slow({})]); return 1;";
    let gave_up =
        tokio::time::timeout(Duration::from_millis(100), sb.execute(code.into(), CATALOG.into(), tools)).await;
    assert!(gave_up.is_err());
    for _ in 0..100 {
        if dropped.load(Ordering::SeqCst) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 2, "both calls cancelled");
    assert_eq!(run(&sb, "return 4;").await.result.unwrap(), "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_runs_while_the_program_computes() {
    let sb = sandbox(Limits::default());
    // The call is started before the loop and awaited after it: it takes its 300 ms during the loop's.
    let code = "const p = tools.t.slow({ms: 300}); const t0 = Date.now(); while (Date.now() - t0 < 300) {}\n\
                return (await p).slept;";
    let out = run(&sb, code).await;
    assert_eq!(out.result.unwrap(), "300");
    assert!(out.elapsed < Duration::from_millis(550), "the call waited for the loop: {:?}", out.elapsed);
}
