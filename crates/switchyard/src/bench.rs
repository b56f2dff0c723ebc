//! `switchyard bench ARGS`: runs the `switchyard-bench` binary beside this one with the same arguments
//! (the benchmark suite is a binary of its own, so the shipped gateway does not carry it).

use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Replaces this process with `switchyard-bench ARGS` (on Unix; elsewhere runs it and passes on its status).
pub fn run(args: Vec<std::ffi::OsString>) -> ExitCode {
    let exe = match bench_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = Command::new(&exe);
    command.args(args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let e = command.exec();
        eprintln!("error: cannot run {}: {e}", exe.display());
        ExitCode::FAILURE
    }
    #[cfg(not(unix))]
    match command.status() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: cannot run {}: {e}", exe.display());
            ExitCode::FAILURE
        }
    }
}

fn bench_exe() -> Result<PathBuf, String> {
    let own = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
    let exe = own.with_file_name(format!("switchyard-bench{}", std::env::consts::EXE_SUFFIX));
    if exe.is_file() {
        Ok(exe)
    } else {
        Err(format!(
            "the benchmark suite is the switchyard-bench binary, and there is none at {} \
             (cargo build --release builds it beside switchyard)",
            exe.display()
        ))
    }
}
