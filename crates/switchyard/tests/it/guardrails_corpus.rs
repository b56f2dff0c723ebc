//! Seeded PII never leaves (issue 32): a corpus of 1,000 prompts, each carrying values of every
//! built-in kind in turn (the guardrails crate's seeded generator: valid card numbers, IBANs with
//! their checksum, tokens in each provider's format, PEM blocks, JWTs, `password=` pairs), sent
//! through every inbound API (OpenAI Chat and Responses, Anthropic, Gemini, Ollama), plain and
//! streamed. The mock backend keeps every body it was sent: not one raw value may be in them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use serde_json::{json, Value};
use switchyard_guardrails::Kind;
use switchyard_testkit::TestClient;

use crate::common::*;

#[allow(dead_code)] // the negative corpus's generators are the guardrails crate's own tests'
#[path = "../../../guardrails/tests/corpus/generate.rs"]
pub(crate) mod generate;

const PROMPTS: usize = 1000;

/// Prompt `i` and the raw values in it: three values, of kinds taken in turn.
fn prompt(random: &generate::Random, i: usize) -> (String, Vec<String>) {
    let kinds: Vec<Kind> = Kind::PII.iter().chain(Kind::SECRETS.iter()).copied().collect();
    let values: Vec<generate::Value> =
        (0..3).map(|j| generate::value(random, kinds[(3 * i + j) % kinds.len()])).collect();
    let text = format!(
        "Ticket {i}: the customer wrote {} and later {}. Config dump follows:\n{}\nPlease summarise.",
        values[0].text, values[1].text, values[2].text
    );
    (text, values.into_iter().map(|v| v.found).collect())
}

/// (path, body) of the prompt in every inbound API, plain and streamed.
fn every_api(text: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for stream in [false, true] {
        let messages = json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]);
        out.push(("/v1/chat/completions".into(), json!({"model": "m", "stream": stream, "messages": messages})));
        out.push(("/v1/responses".into(), json!({"model": "m", "stream": stream, "input": text})));
        out.push((
            "/v1/messages".into(),
            json!({"model": "m", "stream": stream, "max_tokens": 32, "system": "be brief",
                   "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}),
        ));
        out.push(("/api/chat".into(), json!({"model": "m", "stream": stream, "messages": messages})));
        out.push(("/api/generate".into(), json!({"model": "m", "stream": stream, "prompt": text})));
        let gemini = if stream { "m:streamGenerateContent?alt=sse" } else { "m:generateContent" };
        out.push((
            format!("/v1beta/models/{gemini}"),
            json!({"contents": [{"role": "user", "parts": [{"text": text}]}]}),
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_seeded_pii_or_secret_reaches_the_backend_through_any_api_plain_or_streamed() {
    let backend = mock(&["m"]).await;
    backend.control().keep_bodies();
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         guardrails:\n  default: [pii, secrets]\n\
         \x20 pii: {{type: pii, action: mask, on: [request]}}\n\
         \x20 secrets: {{type: secrets, action: mask, on: [request]}}\n\
         backends:\n{}",
        backends_yaml(&[&backend])
    );
    let gw = gateway_yaml(&yaml).await;
    let client = TestClient::new();
    let random = generate::Random::new(0x5eed_0032);
    let corpus: Vec<(String, Vec<String>)> = (0..PROMPTS).map(|i| prompt(&random, i)).collect();
    let requests: Vec<(String, Value)> = corpus.iter().flat_map(|(text, _)| every_api(text)).collect();
    let sent_count = requests.len();
    // Eight at a time: the corpus is the point, not the load.
    let mut workers = Vec::new();
    let queue = std::sync::Arc::new(std::sync::Mutex::new(requests));
    for _ in 0..8 {
        let (queue, client, base) = (queue.clone(), client.clone(), gw.url().to_owned());
        workers.push(tokio::spawn(async move {
            loop {
                let Some((path, body)) = queue.lock().unwrap().pop() else { return };
                let r = client.post_json(&format!("{base}{path}"), body.to_string().as_bytes(), &[]).await.unwrap();
                assert_eq!(r.status, 200, "{path}: {}", r.text());
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let bodies = backend.control().bodies();
    assert_eq!(bodies.len(), sent_count, "every request reached the backend once");
    // Every raw value, as it is and as it reads inside a JSON string, looked for in one pass.
    let raws: Vec<&String> = corpus.iter().flat_map(|(_, raws)| raws).collect();
    let needles: Vec<String> = raws.iter().flat_map(|r| [r.to_string(), json_escaped(r)]).collect();
    let finder = aho_corasick::AhoCorasick::new(&needles).unwrap();
    let sent = bodies.join("\n");
    let leaks: std::collections::BTreeSet<&str> =
        finder.find_overlapping_iter(&sent).map(|m| raws[m.pattern().as_usize() / 2].as_str()).collect();
    assert!(leaks.is_empty(), "{} raw values reached the backend:\n{leaks:#?}", leaks.len());
}

/// How a value reads inside a JSON string (a PEM block's newlines, a quote).
fn json_escaped(raw: &str) -> String {
    let quoted = serde_json::to_string(raw).unwrap();
    quoted[1..quoted.len() - 1].to_owned()
}
