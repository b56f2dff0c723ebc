//! How a subcommand runs: its future on a multi-threaded runtime, its `Err(message)` printed as
//! `error: message` with a failing exit status. Shared by both binaries (src/bin includes it).

use std::future::Future;
use std::process::ExitCode;

pub fn run_to_exit(command: impl Future<Output = Result<(), String>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
