//! Admission control: when every backend serving a model is at its concurrency cap (configured
//! `max_concurrency`, or the slots a llama.cpp server reports), requests wait in a bounded
//! queue per model, served round-robin across keys — one busy key's backlog cannot starve the
//! others — until a slot frees or their wait (`routing.queue_timeout`) runs out. Past the bound
//! or the deadline the caller answers 503 with `Retry-After` at once. Nothing here runs while
//! no backend is full: releasing a slot costs one atomic load when nobody waits.
//!
//! Affinity holds under saturation: a request whose prompt a backend holds (cache-aware routing)
//! or that is pinned to one waits in that backend's lane, and a slot that frees goes to the older
//! of the next in its own lane and the next in the model's common line. A lane's waiters go
//! elsewhere only by the balance rule: a backend with nobody of its own to serve takes a waiter
//! from a lane more than `routing.balance_slack` deep, and a backend that goes down sends its
//! lane's waiters back to choose again. Without such hints everything waits in the common line,
//! as before: affinity-blind queueing would turn cache-aware routing into round-robin whenever
//! every backend is at its cap (issue 34).

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

/// One line of waiters: a FIFO per key, and the keys in turn.
#[derive(Default)]
struct FairQueue {
    by_key: HashMap<String, VecDeque<(u64, oneshot::Sender<()>)>>,
    /// Keys with waiters, in the order they get their next turn.
    turns: VecDeque<String>,
    len: usize,
}

impl FairQueue {
    fn push(&mut self, key: &str, id: u64, tx: oneshot::Sender<()>) {
        let queue = self.by_key.entry(key.to_owned()).or_default();
        if queue.is_empty() {
            self.turns.push_back(key.to_owned());
        }
        queue.push_back((id, tx));
        self.len += 1;
    }

    /// The arrival number of the waiter `pop` would give up next.
    fn next_id(&self) -> Option<u64> {
        let key = self.turns.front()?;
        self.by_key.get(key)?.front().map(|(id, _)| *id)
    }

    /// The next waiter in key order: the key whose turn it is gives up its oldest waiter and
    /// goes to the back of the line.
    fn pop(&mut self) -> Option<oneshot::Sender<()>> {
        let key = self.turns.pop_front()?;
        let queue = self.by_key.get_mut(&key)?;
        let (_, tx) = queue.pop_front()?;
        self.len -= 1;
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
        self.len -= 1;
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

/// One model's waiters: the common line, and a lane per backend for those waiting for it.
#[derive(Default)]
struct ModelQueue {
    common: FairQueue,
    lanes: HashMap<usize, FairQueue>,
}

impl ModelQueue {
    fn line(&mut self, lane: Option<usize>) -> &mut FairQueue {
        match lane {
            Some(backend) => self.lanes.entry(backend).or_default(),
            None => &mut self.common,
        }
    }

    fn is_empty(&self) -> bool {
        self.common.is_empty() && self.lanes.values().all(FairQueue::is_empty)
    }

    /// The waiter a slot freed on `backend` goes to: the older of the next in its lane and the
    /// next in the common line; with neither, the next of the deepest lane past `slack` (its
    /// waiters would wait behind more than the balance allows). `None` for the backend: a slot
    /// whose backend is not known (handed back by a waiter that left), for the oldest anywhere.
    fn pop_for(&mut self, backend: Option<usize>, slack: usize) -> Option<oneshot::Sender<()>> {
        let own = backend.and_then(|b| self.lanes.get(&b)).and_then(FairQueue::next_id);
        let common = self.common.next_id();
        match (own, common) {
            (Some(o), Some(c)) if c < o => return self.common.pop(),
            (Some(_), _) => return self.lanes.get_mut(&backend?)?.pop(),
            (None, Some(_)) => return self.common.pop(),
            (None, None) => {}
        }
        let floor = if backend.is_some() { slack } else { 0 };
        let deepest = self.lanes.iter().filter(|(_, q)| q.len > floor).max_by_key(|(_, q)| q.len).map(|(b, _)| *b)?;
        self.lanes.get_mut(&deepest)?.pop()
    }
}

pub struct Admission {
    /// Requests waiting now, all models together (read on every slot release).
    waiting: AtomicUsize,
    max_waiting: usize,
    timeout: Duration,
    next_id: AtomicU64,
    queues: Mutex<HashMap<String, ModelQueue>>,
    /// How deep a backend's lane may be before an idle backend takes from it (`routing.balance_slack`).
    slack: usize,
    /// Requests refused for a full queue, and for waiting too long.
    pub refused_full: AtomicU64,
    pub refused_timeout: AtomicU64,
    /// Requests that joined a line (every backend they could take was at its cap).
    pub joined: AtomicU64,
}

impl Admission {
    pub fn new(max_waiting: usize, timeout: Duration, slack: usize) -> Admission {
        Admission {
            slack,
            waiting: AtomicUsize::new(0),
            max_waiting,
            timeout,
            next_id: AtomicU64::new(0),
            queues: Mutex::new(HashMap::new()),
            refused_full: AtomicU64::new(0),
            refused_timeout: AtomicU64::new(0),
            joined: AtomicU64::new(0),
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
        let _ = writeln!(
            out,
            "# HELP switchyard_queue_joined_total Requests that waited for a backend slot (every backend they could take was at its cap).\n# TYPE switchyard_queue_joined_total counter\nswitchyard_queue_joined_total {}",
            self.joined.load(Relaxed)
        );
    }

    pub fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ModelQueue>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether requests for `model` are already waiting (a new one then queues behind them
    /// instead of taking the next free slot first).
    pub fn has_waiters(&self, model: &str) -> bool {
        self.waiting() > 0 && self.lock().get(model).is_some_and(|q| !q.is_empty())
    }

    /// Requests waiting in `backend`'s lane for `model`.
    pub fn lane_len(&self, model: &str, backend: usize) -> usize {
        if self.waiting() == 0 {
            return 0;
        }
        self.lock().get(model).and_then(|q| q.lanes.get(&backend)).map_or(0, |l| l.len)
    }

    /// Wait for a slot of `model` as `key`'s request, in `lane`'s line (a backend that holds its
    /// prompt) or the model's common one, at most until `limit` from now (the request's own
    /// deadline) or `routing.queue_timeout`, whichever comes first.
    ///
    /// `room` says whether a slot it may take is free now. It is asked once the request is in
    /// line: a slot freed between the caller's last try and its joining the line woke nobody, and
    /// without the check the request would wait for the next release, which may never come.
    pub async fn wait(
        &self,
        model: &str,
        lane: Option<usize>,
        key: &str,
        limit: Duration,
        room: impl Fn() -> bool,
    ) -> Result<(), Refused> {
        if self.waiting.fetch_add(1, Relaxed) >= self.max_waiting {
            self.waiting.fetch_sub(1, Relaxed);
            self.refused_full.fetch_add(1, Relaxed);
            return Err(Refused::QueueFull);
        }
        self.joined.fetch_add(1, Relaxed);
        let id = self.next_id.fetch_add(1, Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().entry(model.to_owned()).or_default().line(lane).push(key, id, tx);
        let ticket = Ticket { admission: self, model, lane, key, id, woken: false };
        if room() {
            // Leaving the line (the ticket's drop) hands on a wake-up it may have been sent.
            return Ok(());
        }
        ticket.wait(rx, limit.min(self.timeout)).await
    }

    /// A slot of `backend` (serving `models`) came free: wake the waiter it goes to.
    pub fn release(&self, backend: usize, models: &[String]) {
        self.release_from(Some(backend), models);
    }

    fn release_from(&self, backend: Option<usize>, models: &[String]) {
        if self.waiting() == 0 {
            return;
        }
        let mut queues = self.lock();
        for model in models {
            let Some(queue) = queues.get_mut(model) else { continue };
            while let Some(tx) = queue.pop_for(backend, self.slack) {
                self.waiting.fetch_sub(1, Relaxed);
                if tx.send(()).is_ok() {
                    return;
                }
            }
            if queue.is_empty() {
                queues.remove(model);
            }
        }
    }

    /// `backend` went down: its lanes' waiters choose again (another backend, or the common line).
    pub fn scatter(&self, backend: usize) {
        if self.waiting() == 0 {
            return;
        }
        let mut queues = self.lock();
        for queue in queues.values_mut() {
            let Some(lane) = queue.lanes.get_mut(&backend) else { continue };
            while let Some(tx) = lane.pop() {
                self.waiting.fetch_sub(1, Relaxed);
                let _ = tx.send(());
            }
        }
    }
}

/// One queued request; leaving the queue any way (woken, timed out, cancelled) is accounted.
struct Ticket<'a> {
    admission: &'a Admission,
    model: &'a str,
    lane: Option<usize>,
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
        let removed = queues.get_mut(self.model).is_some_and(|q| q.line(self.lane).remove(self.key, self.id));
        if removed {
            self.admission.waiting.fetch_sub(1, Relaxed);
        } else {
            // Woken just as it gave up: the slot it was handed goes to the next in line.
            drop(queues);
            self.admission.release_from(None, &[self.model.to_owned()]);
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

    fn waiter(q: &mut FairQueue, key: &str, id: u64) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        q.push(key, id, tx);
        rx
    }

    #[test]
    fn a_freed_slot_goes_to_the_older_of_its_own_lane_and_the_common_line() {
        let mut m = ModelQueue::default();
        let mut common = waiter(m.line(None), "k", 1);
        let mut lane0 = waiter(m.line(Some(0)), "k", 2);
        let mut lane1 = waiter(m.line(Some(1)), "k", 0);
        // Backend 0 frees: its lane's waiter came after the common one.
        m.pop_for(Some(0), 2).unwrap().send(()).unwrap();
        assert!(common.try_recv().is_ok() && lane0.try_recv().is_err());
        // Backend 0 again: its own lane; never backend 1's, which is not deeper than the slack.
        m.pop_for(Some(0), 2).unwrap().send(()).unwrap();
        assert!(lane0.try_recv().is_ok());
        assert!(m.pop_for(Some(0), 2).is_none(), "a lane within the slack waits for its backend");
        assert!(lane1.try_recv().is_err());
        // A slot of no known backend goes to whoever waits.
        m.pop_for(None, 2).unwrap().send(()).unwrap();
        assert!(lane1.try_recv().is_ok());
        assert!(m.is_empty());
    }

    #[test]
    fn an_idle_backend_takes_from_a_lane_deeper_than_the_slack() {
        let mut m = ModelQueue::default();
        let mut rxs: Vec<_> = (0..4).map(|i| waiter(m.line(Some(1)), "k", i)).collect();
        m.pop_for(Some(0), 2).unwrap().send(()).unwrap();
        assert!(rxs[0].try_recv().is_ok(), "the deepest lane's next waiter");
        m.pop_for(Some(0), 2).unwrap().send(()).unwrap();
        assert!(m.pop_for(Some(0), 2).is_none(), "two left: within the slack");
        assert!(rxs[3].try_recv().is_err());
    }

    #[tokio::test]
    async fn a_backend_that_goes_down_sends_its_waiters_to_choose_again() {
        let admission = Admission::new(10, Duration::from_secs(5), 2);
        let waiting = admission.wait("m", Some(3), "k", Duration::from_secs(5), || false);
        let scatter = async {
            while admission.lane_len("m", 3) == 0 {
                tokio::task::yield_now().await;
            }
            admission.scatter(3);
        };
        let (waited, ()) = tokio::join!(waiting, scatter);
        assert_eq!(waited, Ok(()));
        assert_eq!(admission.waiting(), 0);
    }
}
