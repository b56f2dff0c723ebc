//! Admission control: when every backend serving a model is at its concurrency cap (configured
//! `max_concurrency`, or the slots a llama.cpp server reports), requests wait in a bounded
//! queue per model, served round-robin across keys — one busy key's backlog cannot starve the
//! others — until a slot frees or their wait (`routing.queue_timeout`) runs out. Past the bound
//! or the deadline the caller answers 503 with `Retry-After` at once. Nothing here runs while
//! no backend is full: releasing a slot costs one atomic load when nobody waits.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `routing.max_queue` requests are already waiting.
    QueueFull,
    /// It waited `routing.queue_timeout` (or until the request's deadline) without a slot.
    Timeout,
}

/// One model's waiters: a FIFO per key, and the keys in turn.
#[derive(Default)]
struct FairQueue {
    by_key: HashMap<String, VecDeque<(u64, oneshot::Sender<()>)>>,
    /// Keys with waiters, in the order they get their next turn.
    turns: VecDeque<String>,
}

impl FairQueue {
    fn push(&mut self, key: &str, id: u64, tx: oneshot::Sender<()>) {
        let queue = self.by_key.entry(key.to_owned()).or_default();
        if queue.is_empty() {
            self.turns.push_back(key.to_owned());
        }
        queue.push_back((id, tx));
    }

    /// The next waiter in key order: the key whose turn it is gives up its oldest waiter and
    /// goes to the back of the line.
    fn pop(&mut self) -> Option<oneshot::Sender<()>> {
        let key = self.turns.pop_front()?;
        let queue = self.by_key.get_mut(&key)?;
        let (_, tx) = queue.pop_front()?;
        if queue.is_empty() {
            self.by_key.remove(&key);
        } else {
            self.turns.push_back(key);
        }
        Some(tx)
    }

    /// Take out a waiter that gave up; true if it was still queued.
    fn remove(&mut self, key: &str, id: u64) -> bool {
        let Some(queue) = self.by_key.get_mut(key) else { return false };
        let Some(at) = queue.iter().position(|(i, _)| *i == id) else { return false };
        queue.remove(at);
        if queue.is_empty() {
            self.by_key.remove(key);
            self.turns.retain(|k| k != key);
        }
        true
    }

    fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}

pub struct Admission {
    /// Requests waiting now, all models together (read on every slot release).
    waiting: AtomicUsize,
    max_waiting: usize,
    timeout: Duration,
    next_id: AtomicU64,
    queues: Mutex<HashMap<String, FairQueue>>,
    /// Requests refused for a full queue, and for waiting too long.
    pub refused_full: AtomicU64,
    pub refused_timeout: AtomicU64,
}

impl Admission {
    pub fn new(max_waiting: usize, timeout: Duration) -> Admission {
        Admission {
            waiting: AtomicUsize::new(0),
            max_waiting,
            timeout,
            next_id: AtomicU64::new(0),
            queues: Mutex::new(HashMap::new()),
            refused_full: AtomicU64::new(0),
            refused_timeout: AtomicU64::new(0),
        }
    }

    /// Prometheus lines: requests waiting, and refused by reason.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "# HELP switchyard_queue_waiting Requests waiting for a backend slot.\n# TYPE switchyard_queue_waiting gauge\nswitchyard_queue_waiting {}",
            self.waiting()
        );
        let _ = writeln!(
            out,
            "# HELP switchyard_queue_refused_total Requests answered 503 by admission control.\n# TYPE switchyard_queue_refused_total counter\nswitchyard_queue_refused_total{{reason=\"queue_full\"}} {}\nswitchyard_queue_refused_total{{reason=\"queue_timeout\"}} {}",
            self.refused_full.load(Relaxed),
            self.refused_timeout.load(Relaxed)
        );
    }

    pub fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, FairQueue>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether requests for `model` are already waiting (a new one then queues behind them
    /// instead of taking the next free slot first).
    pub fn has_waiters(&self, model: &str) -> bool {
        self.waiting() > 0 && self.lock().get(model).is_some_and(|q| !q.is_empty())
    }

    /// Wait for a slot of `model` as `key`'s request, at most until `limit` from now (the
    /// request's own deadline) or `routing.queue_timeout`, whichever comes first.
    pub async fn wait(&self, model: &str, key: &str, limit: Duration) -> Result<(), Refused> {
        if self.waiting.fetch_add(1, Relaxed) >= self.max_waiting {
            self.waiting.fetch_sub(1, Relaxed);
            self.refused_full.fetch_add(1, Relaxed);
            return Err(Refused::QueueFull);
        }
        let id = self.next_id.fetch_add(1, Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().entry(model.to_owned()).or_default().push(key, id, tx);
        let ticket = Ticket { admission: self, model, key, id, woken: false };
        ticket.wait(rx, limit.min(self.timeout)).await
    }

    /// A slot of a backend serving `models` came free: wake the next waiter of one of them.
    pub fn release(&self, models: &[String]) {
        if self.waiting() == 0 {
            return;
        }
        let mut queues = self.lock();
        for model in models {
            let Some(queue) = queues.get_mut(model) else { continue };
            while let Some(tx) = queue.pop() {
                self.waiting.fetch_sub(1, Relaxed);
                if tx.send(()).is_ok() {
                    return;
                }
            }
            queues.remove(model);
        }
    }
}

/// One queued request; leaving the queue any way (woken, timed out, cancelled) is accounted.
struct Ticket<'a> {
    admission: &'a Admission,
    model: &'a str,
    key: &'a str,
    id: u64,
    woken: bool,
}

impl Ticket<'_> {
    async fn wait(mut self, rx: oneshot::Receiver<()>, limit: Duration) -> Result<(), Refused> {
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(())) => {
                self.woken = true;
                Ok(())
            }
            _ => {
                self.admission.refused_timeout.fetch_add(1, Relaxed);
                Err(Refused::Timeout)
            }
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.woken {
            return;
        }
        let mut queues = self.admission.lock();
        let removed = queues.get_mut(self.model).is_some_and(|q| q.remove(self.key, self.id));
        if removed {
            self.admission.waiting.fetch_sub(1, Relaxed);
        } else {
            // Woken just as it gave up: the slot it was handed goes to the next in line.
            drop(queues);
            self.admission.release(&[self.model.to_owned()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_take_turns() {
        let mut q = FairQueue::default();
        let mut rxs = Vec::new();
        for (i, key) in ["busy", "busy", "busy", "quiet", "busy", "other"].iter().enumerate() {
            let (tx, rx) = oneshot::channel();
            q.push(key, i as u64, tx);
            rxs.push((key.to_string(), rx));
        }
        let mut order = Vec::new();
        while let Some(tx) = q.pop() {
            tx.send(()).unwrap();
            let at = rxs.iter_mut().position(|(_, rx)| rx.try_recv().is_ok()).unwrap();
            order.push(rxs.remove(at).0);
        }
        assert_eq!(order, ["busy", "quiet", "other", "busy", "busy", "busy"]);
    }

    #[test]
    fn a_waiter_that_leaves_is_removed() {
        let mut q = FairQueue::default();
        let (tx, _rx) = oneshot::channel();
        q.push("k", 7, tx);
        assert!(q.remove("k", 7));
        assert!(q.is_empty());
        assert!(!q.remove("k", 7));
    }
}
