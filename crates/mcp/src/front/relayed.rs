//! Answering a request whose upstream exchange may send things before its answer: JSON when the
//! answer comes first, else an SSE stream of what the server sent with the answer last (session
//! era), or an `input_required` result when the server asks the client something (the stateless
//! revision, `input_required.rs`).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Answer, Body, Caller, Front, Request};
use crate::jsonrpc::Id;
use crate::relay::{Out, ToClient};
use crate::upstream::{Relay, NOTIFICATION_BACKLOG};

impl Front {
    /// Run `work` with a relay to the client: the answer as JSON when it comes before anything
    /// else, else a stream of what the server sent with the answer last (always a stream when
    /// `stream`). A session-era client that takes no stream gets no relay: the server's requests
    /// are refused at once and its notifications dropped.
    pub(super) async fn answer_relaying<F, Fut>(
        self: &Arc<Self>,
        req: &Request<'_>,
        caller: &Caller<'_>,
        id: &Id,
        server: (&str, bool),
        stream: bool,
        work: F,
    ) -> Answer
    where
        F: FnOnce(Option<Relay>) -> Fut,
        Fut: std::future::Future<Output = Option<Vec<u8>>> + Send + 'static,
    {
        if !req.accepts_sse && !caller.modern {
            return Answer::json(200, work(None).await.unwrap_or_default());
        }
        let (relay, relayed) = mpsc::channel(NOTIFICATION_BACKLOG);
        let relay = Relay::new(relay, caller.caps).for_client(caller.client());
        let (server, aggregated) = server;
        let mut to_client = ToClient::new(self.outbound.clone(), caller.session, server, caller.caps);
        to_client.aggregated = aggregated;
        to_client.stateless = caller.modern;
        let (out, mut answers) = mpsc::channel(NOTIFICATION_BACKLOG);
        tokio::spawn(crate::relay::pump(work(Some(relay)), relayed, to_client, out));
        if caller.modern {
            let parked =
                super::input_required::Waiting { flight: caller.session.to_owned(), key: req.key.map(str::to_owned) };
            return self.stateless_answer(answers, id.clone(), parked, stream && req.accepts_sse, false).await;
        }
        let first = match answers.recv().await {
            Some(Out::Answer(answer)) if !stream => return Answer::json(200, answer.unwrap_or_default()),
            Some(first) => first,
            None => return Answer::json(200, Vec::new()),
        };
        let (events, rx) = mpsc::channel(NOTIFICATION_BACKLOG);
        tokio::spawn(async move {
            let mut next = Some(first);
            while let Some(out) = next {
                let bytes = match out {
                    Out::Event(bytes) | Out::Answer(Some(bytes)) => bytes,
                    Out::Ask(request) => serde_json::to_vec(&request).unwrap_or_default(),
                    Out::Answer(None) => return,
                };
                if events.send(bytes).await.is_err() {
                    return;
                }
                next = answers.recv().await;
            }
        });
        Answer { status: 200, session: None, body: Body::Events(rx) }
    }
}
