//! The `switchyard` binary itself: `check`, `serve` start-up and SIGTERM, config errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn repo_file(path: &str) -> String {
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_example_config_checks_out() {
    let out = Command::new(BIN)
        .args(["check", "--offline", "--config", &repo_file("config/switchyard.example.yaml")])
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("config OK"));
    assert!(stdout.contains("gpt-4o-mini"), "static models are listed: {stdout}");
    assert!(stdout.contains("fast -> llama3.2:1b"), "{stdout}");
}

#[test]
fn unknown_keys_fail_with_their_path() {
    let dir = std::env::temp_dir().join(format!("sy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(&file, "backends:\n  - name: a\n    url: http://127.0.0.1:1\n    wieght: 3\n").unwrap();
    let out = Command::new(BIN).args(["check", "--offline", "--config"]).arg(&file).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("backends[0]") && stderr.contains("wieght"), "{stderr}");
    let out = Command::new(BIN).args(["serve", "--config"]).arg(&file).output().unwrap();
    assert!(!out.status.success(), "serve refuses a bad config too");
}

#[test]
fn serve_without_config_starts_empty_and_stops_on_sigterm() {
    // Defaults put the database in the working directory: use a scratch one.
    let cwd = std::env::temp_dir().join(format!("sy-cli-serve-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(&cwd)
        .env_remove("SWITCHYARD_CONFIG")
        .env_remove("SWITCHYARD_MASTER_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("listening on http://127.0.0.1:"), "{line}");
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "graceful exit on SIGTERM");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no backends configured"), "{stderr}");
    assert!(stderr.contains("OPEN"), "running without a master key is said loudly: {stderr}");
    assert!(cwd.join("switchyard.db").is_file(), "the default database is ./switchyard.db");
    let _ = std::fs::remove_dir_all(&cwd);
}
