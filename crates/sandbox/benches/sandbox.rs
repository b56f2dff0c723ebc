//! What the sandbox itself costs, without HTTP or MCP: an empty program (a fresh instance, QuickJS's runtime
//! and context, the prelude, the program, its result), and programs making 10 calls of a tool that answers at
//! once, in sequence and with Promise.all. `cargo bench -p switchyard-sandbox`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use switchyard_sandbox::{Limits, Sandbox, ToolAnswer, ToolHost};

struct Instant;

impl ToolHost for Instant {
    fn call(&self, _: String, _: String, args: String) -> Pin<Box<dyn Future<Output = ToolAnswer> + Send>> {
        Box::pin(async move { Ok(args) })
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let catalog = r#"{"t":["echo"]}"#.to_string();
    let tools: Arc<dyn ToolHost> = Arc::new(Instant);
    let mut group = c.benchmark_group("sandbox");
    for (name, code) in [
        ("empty program", ""),
        ("10 calls in sequence", "for (let i = 0; i < 10; i++) await tools.t.echo({i}); return 1;"),
        (
            "10 calls with Promise.all",
            "await Promise.all(Array.from({length: 10}, (_, i) => tools.t.echo({i}))); return 1;",
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let out = rt.block_on(sandbox.execute(code.to_string(), catalog.clone(), tools.clone()));
                assert!(out.result.is_ok(), "{:?}", out.result);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
