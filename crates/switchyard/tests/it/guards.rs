//! The guard hooks of the request path (`guard.rs`), in-process with guards an embedder brings:
//! a request guard refuses a request before it is routed, and an answer guard rewrites what the
//! client receives, whole or event by event, streamed or not, in the client's own API.

use std::sync::Arc;

use bytes::Bytes;
use switchyard_gateway::guard::{AnswerGuard, Guard, GuardedRequest, Guards, Verdict};
use switchyard_gateway::Config;
use switchyard_testkit::TestClient;

use crate::common::{backends_yaml, mock, storage_yaml, test_env};

/// Blocks requests naming `forbidden`; in answers writes `tok` as `[T]`.
struct Rewrite;
struct RewriteAnswer;

impl Guard for Rewrite {
    fn name(&self) -> &str {
        "rewrite"
    }
    fn request(&self, _: &GuardedRequest<'_>, body: &Bytes) -> Verdict {
        if body.windows(9).any(|w| w == b"forbidden") {
            return Verdict::Block("the request names what it may not".into());
        }
        Verdict::Pass
    }
    fn answer(&self, _: &GuardedRequest<'_>) -> Option<Box<dyn AnswerGuard>> {
        Some(Box::new(RewriteAnswer))
    }
}

impl AnswerGuard for RewriteAnswer {
    fn event(&mut self, event: &Bytes) -> Verdict {
        let text = String::from_utf8_lossy(event);
        if text.contains("tok") {
            return Verdict::Replace(Bytes::from(text.replace("tok", "[T]")));
        }
        Verdict::Pass
    }
}

async fn guarded_gateway() -> (switchyard_gateway::RunningGateway, switchyard_testkit::MockServer) {
    let backend = mock(&["m"]).await;
    let yaml = format!("{}listen: 127.0.0.1:0\nbackends:\n{}", storage_yaml(), backends_yaml(&[&backend]));
    let config = Config::from_yaml(&yaml, &test_env(&yaml)).unwrap();
    let guards = Guards::new(vec![Arc::new(Rewrite)]);
    let gw = switchyard_gateway::start_guarded(config, guards, std::future::pending()).await.unwrap();
    (gw, backend)
}

#[tokio::test]
async fn a_request_guard_refuses_before_routing_and_answer_guards_rewrite_whole_and_streamed_answers() {
    let (gw, backend) = guarded_gateway().await;
    let client = TestClient::new();
    let url = format!("{}/v1/chat/completions", gw.url());

    let refused = r#"{"model":"m","messages":[{"role":"user","content":"the forbidden word"}]}"#;
    let r = client.post_json(&url, refused.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("guardrail `rewrite`"), "{}", r.text());
    assert_eq!(backend.control().request_count(), 0, "a refused request never reaches a backend");

    let whole = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let r = client.post_json(&url, whole.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("[T]0") && !r.text().contains("tok"), "{}", r.text());

    let streamed = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = client.post_json(&url, streamed.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-length").is_none());
    let text = r.text();
    assert!(text.contains("[T]0") && text.contains("[T]1") && !text.contains("tok"), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "the stream still ends as it should: {text}");

    // Translated for another API on the way, the guard sees the client's shape.
    let anthropic = r#"{"model":"m","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = client.post_json(&format!("{}/v1/messages", gw.url()), anthropic.as_bytes(), &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("[T]0") && r.text().contains("message_stop"), "{}", r.text());
}
