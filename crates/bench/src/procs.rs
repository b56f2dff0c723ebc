//! Processes under test: mock backends and the gateway started as child processes of the `switchyard`
//! binary beside this one, and the bare proxy of this one (optionally pinned to CPUs with `taskset`),
//! their announced URLs, RSS from /proc, and SIGKILL for failover runs.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The argument that makes the bench binary a bare hyper proxy (`bench floor`'s baseline).
pub const BARE_PROXY_COMMAND: &str = "bench-bare-proxy";

/// The `switchyard` binary beside the running one (the gateway and the mocks are its subcommands).
pub fn gateway_exe() -> Result<PathBuf, String> {
    let own = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
    let exe = own.with_file_name(format!("switchyard{}", std::env::consts::EXE_SUFFIX));
    if exe.is_file() {
        Ok(exe)
    } else {
        Err(format!("no gateway binary at {} (cargo build --release builds it beside this one)", exe.display()))
    }
}

/// A child that printed `listening on URL`.
pub struct Proc {
    pub name: String,
    pub url: String,
    exe: PathBuf,
    child: Child,
    args: Vec<String>,
    cpus: Option<String>,
    /// A directory the process worked in, removed after it exits.
    scratch: Option<PathBuf>,
}

impl Proc {
    /// Start `switchyard ARGS...`, pinned to `cpus` (a taskset list such as "0" or "0,1") if given,
    /// and wait for its `listening on` line.
    pub fn start(name: &str, args: &[String], cpus: Option<&str>) -> Result<Proc, String> {
        Proc::start_exe(gateway_exe()?, name, args, cpus)
    }

    /// Start the bare hyper proxy in front of `upstream` (this binary, as `bench-bare-proxy`).
    pub fn start_bare_proxy(upstream: &str, cpus: Option<&str>) -> Result<Proc, String> {
        let own = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
        let args = [BARE_PROXY_COMMAND, "--listen", "127.0.0.1:0", "--upstream", upstream].map(String::from);
        Proc::start_exe(own, "bare-proxy", &args, cpus)
    }

    fn start_exe(exe: PathBuf, name: &str, args: &[String], cpus: Option<&str>) -> Result<Proc, String> {
        let (child, url) = spawn(&exe, args, cpus)?;
        Ok(Proc {
            name: name.to_owned(),
            url,
            exe,
            child,
            args: args.to_vec(),
            cpus: cpus.map(str::to_owned),
            scratch: None,
        })
    }

    pub fn with_scratch(mut self, dir: PathBuf) -> Proc {
        self.scratch = Some(dir);
        self
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size in bytes, from /proc (Linux).
    pub fn rss_bytes(&self) -> Option<u64> {
        rss_of(self.pid())
    }

    /// SIGKILL: no goodbye, sockets reset by the kernel.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start again with the same arguments; a `--listen` with a fixed port keeps its address.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let (child, url) = spawn(&self.exe, &self.args, self.cpus.as_deref())?;
        self.child = child;
        self.url = url;
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGTERM first so a gateway drains; then make sure.
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let exited = (0..50).any(|_| {
            let done = matches!(self.child.try_wait(), Ok(Some(_)));
            if !done {
                std::thread::sleep(Duration::from_millis(20));
            }
            done
        });
        if !exited {
            self.kill();
        }
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Create a virtual key on a running gateway through its admin API, with limits and a budget
/// that a benchmark never reaches (so every check runs, none refuses); returns the `sy-…` secret.
pub async fn create_key(gateway: &str, master_key: &str) -> Result<String, String> {
    let body = r#"{"models":["*"],"rpm":1000000000,"tpm":1000000000000,"max_parallel":1000000,"budget_usd":1000000000,"metadata":{"user":"bench","team":"bench"}}"#;
    create_key_with(gateway, master_key, body).await
}

/// Create a virtual key with `body` (the admin API's JSON); returns the `sy-…` secret.
pub async fn create_key_with(gateway: &str, master_key: &str, body: &str) -> Result<String, String> {
    admin_post(gateway, master_key, "/admin/keys", body, "key").await
}

/// Create a team with limits and a budget a benchmark never reaches; returns its id.
pub async fn create_team(gateway: &str, master_key: &str) -> Result<String, String> {
    let body =
        r#"{"name":"bench","rpm":1000000000,"tpm":1000000000000,"max_parallel":1000000,"budget_usd":1000000000}"#;
    admin_post(gateway, master_key, "/admin/teams", body, "id").await
}

/// POST `body` to the admin API's `path`; the answer's string `field`.
async fn admin_post(gateway: &str, master_key: &str, path: &str, body: &str, field: &str) -> Result<String, String> {
    use http_body_util::{BodyExt, Full};
    let uri: http::Uri = format!("{}{path}", gateway.trim_end_matches('/')).parse().map_err(|e| format!("{e}"))?;
    let host = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    let stream = tokio::net::TcpStream::connect(&host).await.map_err(|e| format!("cannot reach {host}: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::post(uri)
        .header(http::header::HOST, host)
        .header(http::header::AUTHORIZATION, format!("Bearer {master_key}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_owned())))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| format!("POST {path}: {e}"))?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| format!("POST {path}: {e}"))?;
    match json.get(field).and_then(|k| k.as_str()) {
        Some(value) if status.is_success() => Ok(value.to_owned()),
        _ => Err(format!("POST {path} answered {status}: {}", String::from_utf8_lossy(&bytes))),
    }
}

fn spawn(exe: &PathBuf, args: &[String], cpus: Option<&str>) -> Result<(Child, String), String> {
    let mut cmd = match cpus {
        Some(list) => {
            let mut c = Command::new("taskset");
            c.args(["-c", list]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let mut child = cmd
        .args(args)
        .env("SWITCHYARD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).map_err(|e| e.to_string())?;
    match line.trim().strip_prefix("listening on ") {
        Some(url) => Ok((child, url.to_owned())),
        None => {
            let _ = child.kill();
            Err(format!("{} {} did not start (said {:?})", exe.display(), args.join(" "), line.trim()))
        }
    }
}

pub fn rss_of(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS:")
}

/// Resident anonymous memory (the heap and stacks, not mapped files such as the usage journal,
/// whose pages are the kernel's cache): what a leak grows.
pub fn anon_rss_of(pid: u32) -> Option<u64> {
    status_bytes(pid, "RssAnon:")
}

fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Pin the current process (and the threads it starts afterwards) to `cpus`.
pub fn pin_self(cpus: &str) -> Result<(), String> {
    let status = Command::new("taskset")
        .args(["-p", "-c", cpus, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("taskset not available: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("taskset could not pin to CPUs {cpus}"))
    }
}

/// CPUs the machine has (not only those this process may run on).
pub fn cpu_count() -> usize {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// "model name" from /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A free loopback port (bound then released), for processes that must keep their address across restarts.
pub fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}
