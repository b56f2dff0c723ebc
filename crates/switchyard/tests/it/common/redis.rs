//! A real `redis-server` (Debian's package, installed by scripts/redis) on an ephemeral port,
//! owned by one test so it can be stopped, paused and restarted.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: std::path::PathBuf,
}

fn binary() -> String {
    std::env::var("SWITCHYARD_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let dir = super::scratch_dir();
        let mut server = RedisServer { child: None, port: free_port(), dir };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Start (again) on the same port; returns once it answers PING.
    pub fn restart(&mut self) {
        let child = Command::new(binary())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--port"])
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} ({e}): run scripts/redis to install it", binary()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.command(&["PING"]).as_deref() != Some("+PONG") {
            assert!(Instant::now() < deadline, "redis-server did not come up on port {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.child.as_ref().expect("running").id();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
    }

    /// Freeze it (connections stay open, nothing answers), as a stalled server does.
    pub fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    pub fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    /// One command in RESP; the first line of the answer (None when nothing answers).
    pub fn command(&self, args: &[&str]) -> Option<String> {
        self.answer(args).and_then(|a| a.lines().next().map(str::to_owned))
    }

    /// A hash field's value (None when absent).
    pub fn hget(&self, key: &str, field: &str) -> Option<String> {
        let answer = self.answer(&["HGET", key, field])?;
        let mut lines = answer.lines();
        match lines.next()? {
            "$-1" => None,
            _ => lines.next().map(str::to_owned),
        }
    }

    /// Clients subscribed to `channel`.
    pub fn subscribers(&self, channel: &str) -> usize {
        let answer = self.answer(&["PUBSUB", "NUMSUB", channel]).unwrap_or_default();
        answer.lines().last().and_then(|l| l.strip_prefix(':')).and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// One command in RESP; the raw answer.
    fn answer(&self, args: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(out.as_bytes()).ok()?;
        let mut buf = [0u8; 512];
        let n = stream.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.resume_quietly();
        }
        self.stop();
    }
}

impl RedisServer {
    fn resume_quietly(&self) {
        if let Some(child) = &self.child {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGCONT,
            );
        }
    }
}

/// A Redis that answers late: a proxy in front of a `RedisServer` that passes commands on at once
/// and releases each reply `delay` after it came back, in order — a Redis slower than
/// `redis.timeout`, as one on a loaded machine is. Stops with the test's runtime.
pub struct LateRedis {
    pub port: u16,
}

impl LateRedis {
    pub async fn start(target: &RedisServer, delay: Duration) -> LateRedis {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = target.port;
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay_late(client, target, delay));
            }
        });
        LateRedis { port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

async fn relay_late(client: tokio::net::TcpStream, target: u16, delay: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let commands = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let (replies, mut held) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 << 10];
        while let Ok(n @ 1..) = server_read.read(&mut buf).await {
            if replies.send((tokio::time::Instant::now() + delay, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    while let Some((due, bytes)) = held.recv().await {
        tokio::time::sleep_until(due).await;
        if client_write.write_all(&bytes).await.is_err() {
            break;
        }
    }
    commands.abort();
    reader.abort();
}
