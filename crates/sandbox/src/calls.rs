//! A program's tool calls in flight. They are polled by the execution's own task, inside the host functions
//! that start and await them, rather than spawned: no task to allocate and schedule, no wake-up across
//! threads, and nothing left running when the execution is dropped. Each call is polled once as it starts,
//! so its request goes out while the program runs on; `Promise.all` overlaps its calls because `next` polls
//! every call still in flight.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;

use crate::ToolAnswer;

/// A finished call: its id and answer.
pub(crate) type Done = (i32, ToolAnswer);

type Call = Pin<Box<dyn Future<Output = Done> + Send>>;

#[derive(Default)]
pub(crate) struct Calls {
    pending: Vec<Call>,
    /// Finished and not yet handed to the program, oldest first.
    done: VecDeque<Done>,
}

impl Calls {
    /// Adds `call`, polling it once so that it starts now.
    pub(crate) async fn start(&mut self, mut call: Call) {
        match poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await {
            Poll::Ready(done) => self.done.push_back(done),
            Poll::Pending => self.pending.push(call),
        }
    }

    /// The next call to finish; `None` when none is in flight.
    pub(crate) async fn next(&mut self) -> Option<Done> {
        if let Some(done) = self.done.pop_front() {
            return Some(done);
        }
        if self.pending.is_empty() {
            return None;
        }
        poll_fn(|cx| {
            for i in 0..self.pending.len() {
                if let Poll::Ready(done) = self.pending[i].as_mut().poll(cx) {
                    drop(self.pending.swap_remove(i));
                    return Poll::Ready(Some(done));
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn calls_start_at_once_and_finish_in_any_order() {
        let mut calls = Calls::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        calls.start(Box::pin(async { (0, Ok("ready".to_owned())) })).await;
        calls
            .start(Box::pin(async move {
                let _ = rx.await;
                (1, Ok("late".to_owned()))
            }))
            .await;
        calls.start(Box::pin(async { (2, Err("failed".to_owned())) })).await;
        assert_eq!(calls.next().await, Some((0, Ok("ready".to_owned()))));
        assert_eq!(calls.next().await, Some((2, Err("failed".to_owned()))));
        let _ = tx.send(());
        assert_eq!(calls.next().await, Some((1, Ok("late".to_owned()))));
        assert_eq!(calls.next().await, None);
    }
}
