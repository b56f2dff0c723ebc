//! One execution: a fresh store and instance of the runner, the host side of its imports (tool calls,
//! console, result, and stubs for the few WASI functions libc links to), and how a trap maps to a limit.
//!
//! The program runs as a future (`call_async`: its stack is a fiber that wasmtime suspends whenever a host
//! function awaits). Tool calls are split in two so `Promise.all` overlaps them: `call_start` starts the call
//! (calls.rs) and returns its id at once; when the program's job queue is empty and it still waits,
//! `call_wait` awaits whichever call finishes first. A program that computes yields at every epoch tick and
//! ends at its deadline there; one that waits on its calls ends at its deadline in `call_wait`.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::Semaphore;
use wasmtime::{
    Caller, Extern, Instance, InstancePre, Linker, Memory, ResourceLimiter, Store, StoreContextMut, Trap, TypedFunc,
    UpdateDeadline,
};

use crate::calls::Calls;
use crate::{Failure, Limit, Limits, LogLine, Outcome, ToolAnswer, ToolHost};

mod layout {
    include!(concat!(env!("OUT_DIR"), "/runner_layout.rs"));
}

/// QuickJS's own stack limit, inside the runner's 1 MiB shadow stack, so deep recursion is a JavaScript
/// `RangeError` before it is a trap.
const JS_STACK_BYTES: i32 = 256 << 10;
/// WASI's EBADF: the module has no file descriptors.
const WASI_EBADF: i32 = 8;
const WASI_EINVAL: i32 = 28;
const WASI: &str = "wasi_snapshot_preview1";
const WASI_CLOCK_REALTIME: i32 = 0;

/// What one execution is given.
pub(crate) struct Job {
    pub(crate) code: String,
    pub(crate) catalog: String,
    pub(crate) tools: Arc<dyn ToolHost>,
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
    started: Instant,
    deadline: Instant,
    limits: Limits,
    parallel: Arc<Semaphore>,
    /// Calls in flight, each answering with its id. Dropping them (with the store, when the program ends or
    /// its future is dropped) cancels them.
    calls: Calls,
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
    fn new(limits: &Limits, tools: Arc<dyn ToolHost>) -> State {
        let started = Instant::now();
        State {
            memory: MemoryCap { max: limits.memory_bytes, refused: false },
            tools,
            started,
            deadline: started + limits.timeout,
            limits: limits.clone(),
            parallel: Arc::new(Semaphore::new(limits.max_parallel_calls.max(1) as usize)),
            calls: Calls::default(),
            busy_ids: Vec::new(),
            ready: None,
            tool_calls: 0,
            logs: Vec::new(),
            output_bytes: 0,
            result: None,
            limit_hit: None,
        }
    }

    fn hit(&mut self, limit: Limit) -> wasmtime::Error {
        let msg = limit.to_string();
        self.limit_hit = Some(limit);
        wasmtime::Error::msg(msg)
    }

    fn out_of_time(&mut self) -> wasmtime::Error {
        let timeout = self.limits.timeout;
        self.hit(Limit::Time(timeout))
    }

    fn add_output(&mut self, bytes: usize) -> wasmtime::Result<()> {
        self.output_bytes += bytes;
        if self.output_bytes > self.limits.max_output_bytes {
            return Err(self.hit(Limit::Output(self.limits.max_output_bytes)));
        }
        Ok(())
    }

    /// The lowest id not in use.
    fn take_id(&mut self) -> i32 {
        let id = match self.busy_ids.iter().position(|busy| !busy) {
            Some(free) => free,
            None => {
                self.busy_ids.push(false);
                self.busy_ids.len() - 1
            }
        };
        self.busy_ids[id] = true;
        id as i32
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
    define_calls(linker)?;
    define_output(linker)?;
    define_wasi_stubs(linker)
}

/// `call_start`, `call_wait` and `call_read`: a program's tool calls.
fn define_calls(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap_async("sy", "call_start", |caller: Caller<'_, State>, args: (i32, i32, i32, i32, i32, i32)| {
        Box::new(call_start(caller, args))
    })?;
    linker.func_wrap_async("sy", "call_wait", |caller: Caller<'_, State>, (len_ok_ptr,): (i32,)| {
        Box::new(call_wait(caller, len_ok_ptr))
    })?;
    linker.func_wrap("sy", "call_read", |mut caller: Caller<'_, State>, buf: i32| -> wasmtime::Result<()> {
        let answer = caller.data_mut().ready.take();
        let bytes = match &answer {
            Some(Ok(s)) | Some(Err(s)) => s.as_bytes(),
            None => return Err(wasmtime::Error::msg("call_read without call_wait")),
        };
        write_bytes(&mut caller, buf, bytes)
    })?;
    Ok(())
}

/// Starts a tool call (it waits for a parallel slot first) and answers its id.
async fn call_start(
    mut caller: Caller<'_, State>,
    (s_ptr, s_len, t_ptr, t_len, a_ptr, a_len): (i32, i32, i32, i32, i32, i32),
) -> wasmtime::Result<i32> {
    let server = read_str(&mut caller, s_ptr, s_len)?;
    let tool = read_str(&mut caller, t_ptr, t_len)?;
    let args = read_str(&mut caller, a_ptr, a_len)?;
    let state = caller.data_mut();
    if state.tool_calls >= state.limits.max_tool_calls {
        let max = state.limits.max_tool_calls;
        return Err(state.hit(Limit::ToolCalls(max)));
    }
    state.tool_calls += 1;
    let id = state.take_id();
    let call = state.tools.call(server, tool, args);
    let parallel = state.parallel.clone();
    let call = async move {
        let answer = match parallel.acquire_owned().await {
            Ok(_permit) => call.await,
            Err(_) => Err("the sandbox is shutting down".to_string()),
        };
        (id, answer)
    };
    state.calls.start(Box::pin(call)).await;
    Ok(id)
}

/// Waits for whichever started call finishes first (or the deadline); answers its id and writes
/// `[len, ok]` of its answer at `len_ok_ptr`.
async fn call_wait(mut caller: Caller<'_, State>, len_ok_ptr: i32) -> wasmtime::Result<i32> {
    let state = caller.data_mut();
    if Instant::now() >= state.deadline {
        return Err(state.out_of_time());
    }
    let deadline = tokio::time::Instant::from_std(state.deadline);
    let (id, answer) = match tokio::time::timeout_at(deadline, state.calls.next()).await {
        Err(_) => return Err(state.out_of_time()),
        Ok(None) => return Err(wasmtime::Error::msg("call_wait with no call in flight")),
        Ok(Some(done)) => done,
    };
    let (len, ok) = match &answer {
        Ok(json) => (json.len(), 1u32),
        Err(msg) => (msg.len(), 0u32),
    };
    if let Some(busy) = state.busy_ids.get_mut(id as usize) {
        *busy = false;
    }
    state.ready = Some(answer);
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&(len as u32).to_le_bytes());
    header[4..].copy_from_slice(&ok.to_le_bytes());
    write_bytes(&mut caller, len_ok_ptr, &header)?;
    Ok(id)
}

/// `log` and `result`: console lines and the program's outcome.
fn define_output(linker: &mut Linker<State>) -> wasmtime::Result<()> {
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
    Ok(())
}

/// Console lines and the result: counted against the output limit before they are copied out.
fn read_output(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> wasmtime::Result<String> {
    caller.data_mut().add_output(len as u32 as usize)?;
    read_str(caller, ptr, len)
}

/// WASI's `clock_time_get`. The wall clock for the time of day (`Date`); every other clock counts from the
/// program's start, which the initialised image took as `performance`'s time origin (build.rs).
fn clock_time_get(mut caller: Caller<'_, State>, clock: i32, _precision: i64, out: i32) -> wasmtime::Result<i32> {
    let nanos = if clock == WASI_CLOCK_REALTIME {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    } else {
        caller.data().started.elapsed().as_nanos() as u64
    };
    match write_bytes(&mut caller, out, &nanos.to_le_bytes()) {
        Ok(()) => Ok(0),
        Err(_) => Ok(WASI_EINVAL),
    }
}

/// libc's few WASI imports: the clocks, and file descriptors that do not exist.
fn define_wasi_stubs(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap(WASI, "clock_time_get", clock_time_get)?;
    linker.func_wrap(WASI, "fd_close", |_fd: i32| -> i32 { WASI_EBADF })?;
    linker.func_wrap(WASI, "fd_fdstat_get", |_fd: i32, _out: i32| -> i32 { WASI_EBADF })?;
    linker.func_wrap(WASI, "fd_seek", |_fd: i32, _offset: i64, _whence: i32, _out: i32| -> i32 { WASI_EBADF })?;
    linker.func_wrap(WASI, "fd_write", |_fd: i32, _iovs: i32, _iovs_len: i32, _out: i32| -> i32 { WASI_EBADF })?;
    Ok(())
}

/// At every epoch tick while the program computes: past its deadline it ends, otherwise it yields to the
/// runtime and runs on until the next tick.
fn on_tick(mut store: StoreContextMut<'_, State>) -> wasmtime::Result<UpdateDeadline> {
    let state = store.data_mut();
    if Instant::now() >= state.deadline {
        return Err(state.out_of_time());
    }
    Ok(UpdateDeadline::Yield(1))
}

/// Runs one program in a fresh instance and says what came of it.
pub(crate) async fn run(pre: &InstancePre<State>, limits: &Limits, job: Job) -> Outcome {
    let mut store = Store::new(pre.module().engine(), State::new(limits, job.tools));
    store.limiter(|s| &mut s.memory);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(on_tick);

    let ran = start(&mut store, pre, &job.code, &job.catalog).await;
    let state = store.data_mut();
    state.calls = Calls::default(); // cancels any still in flight
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
    Outcome {
        result,
        logs: std::mem::take(&mut state.logs),
        tool_calls: state.tool_calls,
        elapsed: std::time::Duration::ZERO,
    }
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

/// Instantiates the runner, gives QuickJS a fresh seed, copies the inputs in and calls `sy_run`.
async fn start(store: &mut Store<State>, pre: &InstancePre<State>, code: &str, catalog: &str) -> wasmtime::Result<i32> {
    let instance = pre.instantiate_async(&mut *store).await?;
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or_else(|| wasmtime::Error::msg("the runner exports no memory"))?;
    reseed(store, &memory)?;
    let (cat_ptr, cat_len) = place(store, &instance, &memory, catalog.as_bytes()).await?;
    let (code_ptr, code_len) = place(store, &instance, &memory, code.as_bytes()).await?;
    let run: TypedFunc<(i32, i32, i32, i32, i32, i32), i32> = instance.get_typed_func(&mut *store, "sy_run")?;
    run.call_async(&mut *store, (cat_ptr, cat_len, code_ptr, code_len, 0, JS_STACK_BYTES)).await
}

/// Copies `bytes` into a buffer the runner allocates; answers (pointer, length).
async fn place(
    store: &mut Store<State>,
    instance: &Instance,
    memory: &Memory,
    bytes: &[u8],
) -> wasmtime::Result<(i32, i32)> {
    let alloc: TypedFunc<i32, i32> = instance.get_typed_func(&mut *store, "sy_alloc")?;
    let len = i32::try_from(bytes.len()).map_err(|_| wasmtime::Error::msg("input too large"))?;
    let ptr = alloc.call_async(&mut *store, len).await?;
    if ptr == 0 {
        let max = store.data().limits.memory_bytes;
        return Err(store.data_mut().hit(Limit::Memory(max)));
    }
    memory.write(&mut *store, ptr as u32 as usize, bytes)?;
    Ok((ptr, len))
}

/// Writes a fresh random seed over the one `Math.random` had in the initialised image, which every
/// execution would otherwise share.
fn reseed(store: &mut Store<State>, memory: &Memory) -> wasmtime::Result<()> {
    let mut seed = [0u8; 8];
    getrandom::getrandom(&mut seed).map_err(|e| wasmtime::Error::msg(format!("no random seed: {e}")))?;
    if seed == [0; 8] {
        seed[0] = 1; // xorshift's state must not be zero
    }
    let at = layout::RANDOM_STATE_AT;
    let slot = memory
        .data_mut(&mut *store)
        .get_mut(at..at + 8)
        .filter(|slot| **slot == layout::RANDOM_STATE_AT_INIT.to_le_bytes())
        .ok_or_else(|| wasmtime::Error::msg("Math.random's state is not where build.rs found it"))?;
    slot.copy_from_slice(&seed);
    Ok(())
}
