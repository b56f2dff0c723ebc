//! One execution: a fresh store and instance of the runner, the host side of its imports (tool calls,
//! console, result, and stubs for the few WASI functions libc links to), and how a trap maps to a limit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use wasmtime::{Caller, Engine, Extern, InstancePre, Linker, Memory, ResourceLimiter, Store, Trap, TypedFunc};

use crate::engine::EPOCH_TICK;
use crate::{Failure, Limit, Limits, LogLine, Outcome, ToolAnswer, ToolHost};

/// QuickJS's own stack limit, inside the runner's 1 MiB shadow stack, so deep recursion is a JavaScript
/// `RangeError` before it is a trap.
const JS_STACK_BYTES: i32 = 256 << 10;
/// How often a program blocked on its tool calls looks at its deadline and at cancellation.
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// WASI's EBADF: the module has no file descriptors.
const WASI_EBADF: i32 = 8;
const WASI_EINVAL: i32 = 28;

/// Set when the caller stops waiting for the result.
#[derive(Default)]
pub(crate) struct CancelOnDrop(Arc<AtomicBool>);

impl CancelOnDrop {
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What one execution is given.
pub(crate) struct Job {
    pub(crate) code: String,
    pub(crate) catalog: String,
    pub(crate) tools: Arc<dyn ToolHost>,
    pub(crate) runtime: Handle,
    pub(crate) cancelled: Arc<AtomicBool>,
}

/// Linear memory growth up to the cap; remembers a refusal so an out-of-memory ending is reported as the
/// memory limit.
struct MemoryCap {
    max: usize,
    refused: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = desired <= self.max;
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 65_536)
    }
}

/// The store's data: the job, its limits and what the program produced so far.
pub(crate) struct State {
    memory: MemoryCap,
    tools: Arc<dyn ToolHost>,
    runtime: Handle,
    cancelled: Arc<AtomicBool>,
    deadline: Instant,
    limits: Limits,
    parallel: Arc<Semaphore>,
    answers_tx: mpsc::Sender<(i32, ToolAnswer)>,
    answers: mpsc::Receiver<(i32, ToolAnswer)>,
    in_flight: Vec<JoinHandle<()>>,
    /// Ids of calls started and not yet handed back (the runner indexes a table by them).
    busy_ids: Vec<bool>,
    /// The answer `call_wait` announced, for `call_read` to copy.
    ready: Option<ToolAnswer>,
    tool_calls: u32,
    logs: Vec<LogLine>,
    output_bytes: usize,
    result: Option<Result<String, Failure>>,
    limit_hit: Option<Limit>,
}

impl State {
    fn hit(&mut self, limit: Limit) -> wasmtime::Error {
        let msg = limit.to_string();
        self.limit_hit = Some(limit);
        wasmtime::Error::msg(msg)
    }

    fn add_output(&mut self, bytes: usize) -> wasmtime::Result<()> {
        self.output_bytes += bytes;
        if self.output_bytes > self.limits.max_output_bytes {
            return Err(self.hit(Limit::Output(self.limits.max_output_bytes)));
        }
        Ok(())
    }
}

fn memory<T>(caller: &mut Caller<'_, T>) -> wasmtime::Result<Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => Err(wasmtime::Error::msg("the runner exports no memory")),
    }
}

/// The bytes at `ptr..ptr+len` of the runner's memory, as a string.
fn read_str(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> wasmtime::Result<String> {
    let mem = memory(caller)?;
    let start = ptr as u32 as usize;
    let end = start.saturating_add(len as u32 as usize);
    let bytes = mem
        .data(&*caller)
        .get(start..end)
        .ok_or_else(|| wasmtime::Error::msg("out-of-bounds pointer from the runner"))?;
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn write_bytes<T>(caller: &mut Caller<'_, T>, ptr: i32, bytes: &[u8]) -> wasmtime::Result<()> {
    let mem = memory(caller)?;
    mem.write(&mut *caller, ptr as u32 as usize, bytes)
        .map_err(|_| wasmtime::Error::msg("out-of-bounds pointer from the runner"))
}

/// The runner's imports.
pub(crate) fn define(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "sy",
        "call_start",
        |mut caller: Caller<'_, State>,
         s_ptr: i32,
         s_len: i32,
         t_ptr: i32,
         t_len: i32,
         a_ptr: i32,
         a_len: i32|
         -> wasmtime::Result<i32> {
            let server = read_str(&mut caller, s_ptr, s_len)?;
            let tool = read_str(&mut caller, t_ptr, t_len)?;
            let args = read_str(&mut caller, a_ptr, a_len)?;
            let state = caller.data_mut();
            if state.tool_calls >= state.limits.max_tool_calls {
                let max = state.limits.max_tool_calls;
                return Err(state.hit(Limit::ToolCalls(max)));
            }
            state.tool_calls += 1;
            let id = match state.busy_ids.iter().position(|busy| !busy) {
                Some(free) => free,
                None => {
                    state.busy_ids.push(false);
                    state.busy_ids.len() - 1
                }
            };
            state.busy_ids[id] = true;
            let call = state.tools.call(server, tool, args);
            let tx = state.answers_tx.clone();
            let parallel = state.parallel.clone();
            let id = id as i32;
            let handle = state.runtime.spawn(async move {
                let answer = match parallel.acquire_owned().await {
                    Ok(_permit) => call.await,
                    Err(_) => Err("the sandbox is shutting down".to_string()),
                };
                let _ = tx.send((id, answer));
            });
            state.in_flight.push(handle);
            Ok(id)
        },
    )?;
    linker.func_wrap("sy", "call_wait", |mut caller: Caller<'_, State>, len_ok_ptr: i32| -> wasmtime::Result<i32> {
        let (id, answer) = loop {
            let state = caller.data_mut();
            let now = Instant::now();
            if now >= state.deadline {
                let timeout = state.limits.timeout;
                return Err(state.hit(Limit::Time(timeout)));
            }
            if state.cancelled.load(Ordering::Relaxed) {
                return Err(wasmtime::Error::msg("the caller went away"));
            }
            let slice = (state.deadline - now).min(WAIT_SLICE);
            match state.answers.recv_timeout(slice) {
                Ok(done) => break done,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(wasmtime::Error::msg("tool answers channel closed"))
                }
            }
        };
        let (len, ok) = match &answer {
            Ok(json) => (json.len(), 1u32),
            Err(msg) => (msg.len(), 0u32),
        };
        let state = caller.data_mut();
        if let Some(busy) = state.busy_ids.get_mut(id as usize) {
            *busy = false;
        }
        state.ready = Some(answer);
        let mut header = [0u8; 8];
        header[..4].copy_from_slice(&(len as u32).to_le_bytes());
        header[4..].copy_from_slice(&ok.to_le_bytes());
        write_bytes(&mut caller, len_ok_ptr, &header)?;
        Ok(id)
    })?;
    linker.func_wrap("sy", "call_read", |mut caller: Caller<'_, State>, buf: i32| -> wasmtime::Result<()> {
        let answer = caller.data_mut().ready.take();
        let bytes = match &answer {
            Some(Ok(s)) | Some(Err(s)) => s.as_bytes(),
            None => return Err(wasmtime::Error::msg("call_read without call_wait")),
        };
        write_bytes(&mut caller, buf, bytes)
    })?;
    linker.func_wrap(
        "sy",
        "log",
        |mut caller: Caller<'_, State>, level: i32, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let text = read_output(&mut caller, ptr, len)?;
            let level = match level {
                1 => "info",
                2 => "warn",
                3 => "error",
                _ => "log",
            };
            caller.data_mut().logs.push(LogLine { level, text });
            Ok(())
        },
    )?;
    linker.func_wrap(
        "sy",
        "result",
        |mut caller: Caller<'_, State>, ok: i32, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let text = read_output(&mut caller, ptr, len)?;
            caller.data_mut().result = Some(if ok == 1 { Ok(text) } else { Err(Failure::Program(text)) });
            Ok(())
        },
    )?;
    define_wasi_stubs(linker)
}

/// Console lines and the result: counted against the output limit before they are copied out.
fn read_output(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> wasmtime::Result<String> {
    caller.data_mut().add_output(len as u32 as usize)?;
    read_str(caller, ptr, len)
}

pub(crate) const WASI: &str = "wasi_snapshot_preview1";

/// WASI's `clock_time_get`: the wall clock, whatever clock was asked for (libc's only use is the time of
/// day and QuickJS's random seed). Also answered while the runner is initialised (`snapshot.rs`).
pub(crate) fn clock_time_get<T>(
    mut caller: Caller<'_, T>,
    _clock: i32,
    _precision: i64,
    out: i32,
) -> wasmtime::Result<i32> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    match write_bytes(&mut caller, out, &nanos.to_le_bytes()) {
        Ok(()) => Ok(0),
        Err(_) => Ok(WASI_EINVAL),
    }
}

/// libc's few WASI imports: a clock, and file descriptors that do not exist.
fn define_wasi_stubs(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap(WASI, "clock_time_get", clock_time_get::<State>)?;
    linker.func_wrap(WASI, "fd_close", |_fd: i32| -> i32 { WASI_EBADF })?;
    linker.func_wrap(WASI, "fd_fdstat_get", |_fd: i32, _out: i32| -> i32 { WASI_EBADF })?;
    linker.func_wrap(WASI, "fd_seek", |_fd: i32, _offset: i64, _whence: i32, _out: i32| -> i32 { WASI_EBADF })?;
    linker.func_wrap(WASI, "fd_write", |_fd: i32, _iovs: i32, _iovs_len: i32, _out: i32| -> i32 { WASI_EBADF })?;
    Ok(())
}

/// Runs one program in a fresh instance and says what came of it.
pub(crate) fn run(engine: &Engine, pre: &InstancePre<State>, limits: &Limits, job: Job) -> Outcome {
    let (answers_tx, answers) = mpsc::channel();
    let state = State {
        memory: MemoryCap { max: limits.memory_bytes, refused: false },
        tools: job.tools,
        runtime: job.runtime,
        cancelled: job.cancelled,
        deadline: Instant::now() + limits.timeout,
        limits: limits.clone(),
        parallel: Arc::new(Semaphore::new(limits.max_parallel_calls.max(1) as usize)),
        answers_tx,
        answers,
        in_flight: Vec::new(),
        busy_ids: Vec::new(),
        ready: None,
        tool_calls: 0,
        logs: Vec::new(),
        output_bytes: 0,
        result: None,
        limit_hit: None,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.memory);
    let ticks = limits.timeout.as_millis() / EPOCH_TICK.as_millis() + 1;
    store.set_epoch_deadline(ticks as u64);
    store.epoch_deadline_trap();

    let ran = start(&mut store, pre, &job.code, &job.catalog);
    let state = store.data_mut();
    for handle in state.in_flight.drain(..) {
        handle.abort();
    }
    let result = match ran {
        Ok(0) => match state.result.take() {
            Some(Err(Failure::Program(_))) if state.memory.refused => {
                Err(Failure::Limit(Limit::Memory(limits.memory_bytes)))
            }
            Some(result) => result,
            None => Err(Failure::Engine("the runner reported no result".into())),
        },
        Ok(_) if state.memory.refused => Err(Failure::Limit(Limit::Memory(limits.memory_bytes))),
        Ok(status) => Err(Failure::Engine(format!("the runner failed ({status})"))),
        Err(e) => Err(classify(state, limits, &e)),
    };
    Outcome { result, logs: std::mem::take(&mut state.logs), tool_calls: state.tool_calls, elapsed: Duration::ZERO }
}

/// Which limit (if any) a trap means.
fn classify(state: &mut State, limits: &Limits, e: &wasmtime::Error) -> Failure {
    if let Some(limit) = state.limit_hit.take() {
        return Failure::Limit(limit);
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Failure::Limit(Limit::Time(limits.timeout)),
        _ if state.memory.refused => Failure::Limit(Limit::Memory(limits.memory_bytes)),
        Some(Trap::StackOverflow) => Failure::Program("RangeError: Maximum call stack size exceeded".into()),
        _ => Failure::Engine(e.to_string()),
    }
}

/// Instantiates the runner, copies the inputs in and calls `sy_run`.
fn start(store: &mut Store<State>, pre: &InstancePre<State>, code: &str, catalog: &str) -> wasmtime::Result<i32> {
    let instance = pre.instantiate(&mut *store)?;
    let alloc: TypedFunc<i32, i32> = instance.get_typed_func(&mut *store, "sy_alloc")?;
    let run: TypedFunc<(i32, i32, i32, i32, i32, i32), i32> = instance.get_typed_func(&mut *store, "sy_run")?;
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or_else(|| wasmtime::Error::msg("the runner exports no memory"))?;
    let mut place = |bytes: &[u8]| -> wasmtime::Result<(i32, i32)> {
        let len = i32::try_from(bytes.len()).map_err(|_| wasmtime::Error::msg("input too large"))?;
        let ptr = alloc.call(&mut *store, len)?;
        if ptr == 0 {
            let max = store.data().limits.memory_bytes;
            return Err(store.data_mut().hit(Limit::Memory(max)));
        }
        memory.write(&mut *store, ptr as u32 as usize, bytes)?;
        Ok((ptr, len))
    };
    let (cat_ptr, cat_len) = place(catalog.as_bytes())?;
    let (code_ptr, code_len) = place(code.as_bytes())?;
    run.call(&mut *store, (cat_ptr, cat_len, code_ptr, code_len, 0, JS_STACK_BYTES))
}
