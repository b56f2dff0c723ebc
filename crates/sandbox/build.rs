//! Compiles Code Mode's QuickJS runner ahead of time, so the gateway carries no compiler: runs the runner's
//! `sy_init` (QuickJS's runtime, context and prelude), turns the initialised memory into the module's data
//! (src/snapshot.rs), and compiles that module with Cranelift into wasmtime's precompiled form, which the
//! crate embeds and loads with `Module::deserialize` (src/engine.rs). The engine configuration is
//! src/config.rs on both sides. Writes to OUT_DIR:
//! - `quickjs-runner.cwasm`: the precompiled module;
//! - `runner_layout.rs`: where in the image QuickJS keeps `Math.random`'s state, so each execution reseeds it.
//!
//! Only with the `wasm` feature (wasmtime with `cranelift` is then a build-dependency); without it, nothing.
//! About a second (release and test builds alike: the compiler's crates build optimised, see the root
//! Cargo.toml); `SWITCHYARD_SANDBOX_BUILD_TIMING=1` prints the sizes and the time as a cargo warning.

fn main() -> Result<(), String> {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/config.rs");
    println!("cargo:rerun-if-changed=src/snapshot.rs");
    println!("cargo:rerun-if-changed=wasm/quickjs-runner.wasm");
    println!("cargo:rerun-if-env-changed=SWITCHYARD_SANDBOX_BUILD_TIMING");
    #[cfg(feature = "wasm")]
    ahead::build()?;
    Ok(())
}

#[cfg(feature = "wasm")]
#[allow(dead_code)] // the crate's side uses the rest
#[path = "src/config.rs"]
mod config;

#[cfg(feature = "wasm")]
#[allow(dead_code)] // the crate's tests use the rest
#[path = "src/snapshot.rs"]
mod snapshot;

#[cfg(feature = "wasm")]
mod ahead {
    use std::path::PathBuf;
    use std::time::Instant;

    use wasmtime::{Caller, Config, Engine, Linker, Module, OptLevel, Store};

    use crate::{config, snapshot};

    const WASI: &str = "wasi_snapshot_preview1";
    const WASI_CLOCK_REALTIME: i32 = 0;

    pub(crate) fn build() -> Result<(), String> {
        let started = Instant::now();
        let dir = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
        let out = PathBuf::from(env("OUT_DIR")?);
        let runner = std::fs::read(dir.join("wasm/quickjs-runner.wasm")).map_err(|e| format!("the runner: {e}"))?;
        let image = initialised_memory(&runner).map_err(|e| format!("initialising QuickJS: {e}"))?;
        let (seed_at, seed_state) =
            snapshot::find_seed(&image).map_err(|e| format!("Math.random's state in the initialised image: {e}"))?;
        let module = snapshot::rewrite(&runner, &image)?;
        let engine = Engine::new(&target_config()?).map_err(|e| format!("the compiling engine: {e}"))?;
        let compiled = engine.precompile_module(&module).map_err(|e| format!("compiling the runner: {e}"))?;
        write(&out.join("quickjs-runner.cwasm"), &compiled)?;
        let layout = format!(
            "/// Where the initialised image keeps QuickJS's `Math.random` state (`ctx->random_state`).\n\
             pub(crate) const RANDOM_STATE_AT: usize = {seed_at:#x};\n\
             /// What is there until an execution writes its own seed.\n\
             pub(crate) const RANDOM_STATE_AT_INIT: u64 = {seed_state:#x};\n"
        );
        write(&out.join("runner_layout.rs"), layout.as_bytes())?;
        if std::env::var_os("SWITCHYARD_SANDBOX_BUILD_TIMING").is_some() {
            println!(
                "cargo:warning=sandbox runner: {} KiB image, {} KiB compiled, {} ms",
                image.len() >> 10,
                compiled.len() >> 10,
                started.elapsed().as_millis()
            );
        }
        Ok(())
    }

    fn env(name: &str) -> Result<String, String> {
        std::env::var(name).map_err(|_| format!("{name} is not set"))
    }

    fn write(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
        std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// The crate's configuration for the machine the crate is built for. The target is named explicitly,
    /// so Cranelift assumes only the architecture's baseline features, not this machine's CPU: the binary
    /// runs wherever the architecture does. Code for another architecture would need Cranelift's backend
    /// for it and is refused.
    fn target_config() -> Result<Config, String> {
        let (target, host) = (env("TARGET")?, env("HOST")?);
        let arch = |triple: &str| triple.split('-').next().unwrap_or_default().to_owned();
        if arch(&target) != arch(&host) {
            return Err(format!(
                "Code Mode's sandbox is compiled ahead of time for the building machine's architecture ({host}), \
                 not {target}: build switchyard-sandbox without its `wasm` feature (no Code Mode) when cross-compiling"
            ));
        }
        let mut config = config::config();
        config.target(&target).map_err(|e| format!("target {target}: {e}"))?;
        config.cranelift_opt_level(OptLevel::Speed);
        Ok(config)
    }

    /// The runner's linear memory after `sy_init`. Any engine will do for this run (only the memory is kept),
    /// so this one does not optimise.
    fn initialised_memory(runner: &[u8]) -> wasmtime::Result<Vec<u8>> {
        let mut config = Config::new();
        config.cranelift_opt_level(OptLevel::None);
        let engine = Engine::new(&config)?;
        let base = Module::new(&engine, runner)?;
        let mut linker: Linker<()> = Linker::new(&engine);
        // Initialisation reads the clocks (QuickJS seeds Math.random from the time of day and takes a time
        // origin for `performance`); nothing else may be called.
        linker.func_wrap(WASI, "clock_time_get", init_clock)?;
        linker.define_unknown_imports_as_traps(&base)?;
        let mut store = Store::new(&engine, ());
        let instance = linker.instantiate(&mut store, &base)?;
        let init = instance.get_typed_func::<(), i32>(&mut store, "sy_init")?;
        if init.call(&mut store, ())? != 0 {
            return Err(wasmtime::Error::msg("the runner could not initialise QuickJS"));
        }
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| wasmtime::Error::msg("the runner exports no memory"))?;
        Ok(memory.data(&store).to_vec())
    }

    /// The clocks during initialisation: the wall clock answers [`snapshot::CLOCK_AT_INIT_NS`] (so the seed
    /// can be found, and the image is the same on every build), every other clock zero (the time origin of
    /// `performance.now()`, which an execution's monotonic clock counts from its own start).
    fn init_clock(mut caller: Caller<'_, ()>, clock: i32, _precision: i64, out: i32) -> wasmtime::Result<i32> {
        let nanos = if clock == WASI_CLOCK_REALTIME { snapshot::CLOCK_AT_INIT_NS } else { 0 };
        let memory = match caller.get_export("memory") {
            Some(wasmtime::Extern::Memory(m)) => m,
            _ => return Err(wasmtime::Error::msg("the runner exports no memory")),
        };
        memory.write(&mut caller, out as u32 as usize, &nanos.to_le_bytes())?;
        Ok(0)
    }
}
