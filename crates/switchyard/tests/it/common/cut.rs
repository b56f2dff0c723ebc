//! A TCP forwarder whose upstream can be cut: a database "down" for the gateways behind it
//! without stopping the server the other suites share. Cut, it drops every live connection and
//! closes each new one at once (what a client sees of a stopped server); restored, it forwards
//! again.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Forwarder {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Forwarder {
    pub async fn start(upstream: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, live) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let accept = {
            let (cut, live) = (cut.clone(), live.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if cut.load(SeqCst) {
                        drop(client);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    live.lock().unwrap().push(task);
                }
            })
        };
        Forwarder { addr, cut, live, accept }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drop every connection through it and refuse new ones until `restore`.
    pub fn cut(&self) {
        self.cut.store(true, SeqCst);
        for task in self.live.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, SeqCst);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
