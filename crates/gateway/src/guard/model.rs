//! Model guards (`type: model`): a request's texts go to a classifier model served through the
//! gateway itself — routed, failed over and metered like any call, its usage record marked as
//! the guard's — and its verdict blocks or passes the request. The classifier is asked in Chat
//! Completions' shape with the texts as one user turn, which is how Llama Guard 3/4 take a
//! prompt to judge (their chat template wraps it in the policy); the answer is read as Llama
//! Guard writes it (`safe`, or `unsafe` and a line of categories such as `S1,S10`) or as a
//! Prompt Guard–style label (`BENIGN`, `INJECTION`, `JAILBREAK`).

use std::time::Instant;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde::Deserialize;

use crate::config::guardrails::Classifier;
use crate::endpoint::Endpoint;

/// How a guard reaches a model through the gateway (the server provides it: the guard layer
/// sits below the request pipeline and may not call it directly).
pub trait ModelCaller: Send + Sync {
    /// Send `body` to `endpoint` (Chat Completions or moderations) as guard `guard` (no key, no
    /// guards of its own), by `deadline`: the answer's body, or why there is none.
    fn call(
        &self,
        guard: &str,
        endpoint: Endpoint,
        body: Bytes,
        deadline: Instant,
    ) -> BoxFuture<'static, Result<Bytes, String>>;
}

/// What a classifier said about the texts.
#[derive(Debug, PartialEq, Eq)]
pub enum Judgement {
    Safe,
    /// Unsafe, with the categories it named (possibly none).
    Unsafe(Vec<String>),
}

impl Judgement {
    /// The categories that make this verdict block under `classifier` (any, when it lists none).
    pub fn blocking<'a>(&'a self, classifier: &Classifier) -> Option<Vec<&'a str>> {
        let Judgement::Unsafe(named) = self else { return None };
        if classifier.categories.is_empty() {
            return Some(named.iter().map(String::as_str).collect());
        }
        let hits: Vec<&str> = named
            .iter()
            .filter(|n| classifier.categories.iter().any(|c| c.eq_ignore_ascii_case(n)))
            .map(String::as_str)
            .collect();
        (!hits.is_empty()).then_some(hits)
    }
}

/// Ask the classifier about `texts`, within its timeout and the request's deadline.
pub async fn ask(
    caller: &dyn ModelCaller,
    classifier: &Classifier,
    guard: &str,
    texts: &[String],
    answer: bool,
    deadline: Instant,
) -> Result<Judgement, String> {
    let (endpoint, body) = if classifier.moderations {
        (Endpoint::Moderations, serde_json::json!({"model": classifier.model, "input": texts}))
    } else {
        let content = texts.join("\n\n");
        // An answer is the assistant's turn, which Llama Guard then judges (after a user's turn).
        let messages = if answer {
            serde_json::json!([{"role": "user", "content": ""}, {"role": "assistant", "content": content}])
        } else {
            serde_json::json!([{"role": "user", "content": content}])
        };
        let body = serde_json::json!({"model": classifier.model, "messages": messages, "max_tokens": 32, "temperature": 0, "stream": false});
        (Endpoint::ChatCompletions, body)
    };
    let wait = classifier.timeout.min(deadline.saturating_duration_since(Instant::now()));
    let asked = caller.call(guard, endpoint, Bytes::from(body.to_string()), Instant::now() + wait);
    match tokio::time::timeout(wait, asked).await {
        Ok(answer) if classifier.moderations => read_moderations(&answer?),
        Ok(answer) => read(&answer?),
        Err(_) => Err(super::remote::no_answer_within(wait)),
    }
}

/// A moderation answer's verdict: unsafe when any input is flagged, with the categories found.
fn read_moderations(answer: &[u8]) -> Result<Judgement, String> {
    #[derive(Deserialize)]
    struct Moderation {
        results: Vec<Checked>,
    }
    #[derive(Deserialize)]
    struct Checked {
        flagged: bool,
        #[serde(default)]
        categories: std::collections::BTreeMap<String, Option<bool>>,
    }
    let moderation: Moderation =
        serde_json::from_slice(answer).map_err(|e| format!("an answer that is not a moderation: {e}"))?;
    let flagged: Vec<&Checked> = moderation.results.iter().filter(|r| r.flagged).collect();
    if flagged.is_empty() {
        return Ok(Judgement::Safe);
    }
    let mut categories: Vec<String> = flagged
        .iter()
        .flat_map(|r| r.categories.iter().filter(|(_, on)| **on == Some(true)).map(|(name, _)| name.clone()))
        .collect();
    categories.dedup();
    Ok(Judgement::Unsafe(categories))
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
}

/// A chat completion's verdict.
fn read(answer: &[u8]) -> Result<Judgement, String> {
    let completion: Completion =
        serde_json::from_slice(answer).map_err(|e| format!("an answer that is not a chat completion: {e}"))?;
    let text = completion.choices.into_iter().next().and_then(|c| c.message.content).unwrap_or_default();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default();
    match first.to_ascii_lowercase().as_str() {
        "safe" | "benign" => Ok(Judgement::Safe),
        "unsafe" => Ok(Judgement::Unsafe(
            lines
                .next()
                .map(|l| l.split(',').map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect())
                .unwrap_or_default(),
        )),
        "injection" | "jailbreak" | "malicious" => Ok(Judgement::Unsafe(vec![first.to_ascii_uppercase()])),
        _ => Err("an answer that is not a verdict (safe / unsafe and its categories)".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(content: &str) -> Vec<u8> {
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
            .to_string()
            .into_bytes()
    }

    fn classifier(categories: &[&str]) -> Classifier {
        Classifier {
            model: "g".into(),
            categories: categories.iter().map(|c| c.to_string()).collect(),
            timeout: std::time::Duration::from_secs(1),
            fail_open: false,
            parallel: false,
            moderations: false,
        }
    }

    #[test]
    fn llama_guard_and_prompt_guard_answers_are_read() {
        assert_eq!(read(&completion("safe")).unwrap(), Judgement::Safe);
        assert_eq!(
            read(&completion("\n\nunsafe\nS2, S10")).unwrap(),
            Judgement::Unsafe(vec!["S2".into(), "S10".into()])
        );
        assert_eq!(read(&completion("unsafe")).unwrap(), Judgement::Unsafe(vec![]));
        assert_eq!(read(&completion("INJECTION")).unwrap(), Judgement::Unsafe(vec!["INJECTION".into()]));
        assert!(read(&completion("I cannot help with that")).is_err());
        assert!(read(b"{}").is_err());
    }

    #[test]
    fn a_moderation_answer_is_read() {
        let answer = |flagged: bool| {
            let categories = serde_json::json!({"violence": flagged, "hate": false, "self-harm": null});
            serde_json::json!({"results": [{"flagged": flagged, "categories": categories}]}).to_string()
        };
        assert_eq!(read_moderations(answer(false).as_bytes()).unwrap(), Judgement::Safe);
        assert_eq!(read_moderations(answer(true).as_bytes()).unwrap(), Judgement::Unsafe(vec!["violence".into()]));
        assert!(read_moderations(b"{}").is_err());
    }

    #[test]
    fn only_the_configured_categories_block() {
        let unsafe_s2 = Judgement::Unsafe(vec!["S2".into()]);
        assert_eq!(unsafe_s2.blocking(&classifier(&["S1", "s2"])), Some(vec!["S2"]));
        assert_eq!(unsafe_s2.blocking(&classifier(&["S1"])), None);
        assert_eq!(unsafe_s2.blocking(&classifier(&[])), Some(vec!["S2"]));
        assert_eq!(Judgement::Safe.blocking(&classifier(&[])), None);
    }
}
