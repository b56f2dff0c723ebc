//! Reversible masking, black-box (issue 53): with `{type: pii, action: pseudonymize}` (and the
//! secrets alike), the guardrails corpus's 1,000 prompts go through every client API, plain and
//! streamed, to backends of each API that echo what they are sent (a tool result's echo): not one
//! raw value reaches a backend, and every client's answer is what the same backend answers an
//! unguarded gateway for the unmasked prompt — values back in place of their placeholders, in
//! streams whose events cut the placeholders every few characters too.

use serde_json::{json, Value};
use switchyard_testkit::{TestClient, REPLY_IN_FINE_PIECES};

use crate::common::*;
use crate::guardrails::{streamed_text, three_apis, tool_result_request};
use crate::guardrails_corpus::generate;

const PROMPTS: usize = 1000;
const APIS: [&str; 5] = ["chat", "responses", "anthropic", "gemini", "ollama"];

/// Prompt `i`: three values of the built-in kinds in turn, and the raw values.
fn prompt(random: &generate::Random, i: usize) -> (String, Vec<String>) {
    let kinds: Vec<switchyard_guardrails::Kind> =
        switchyard_guardrails::Kind::PII.iter().chain(switchyard_guardrails::Kind::SECRETS.iter()).copied().collect();
    let values: Vec<generate::Value> =
        (0..3).map(|j| generate::value(random, kinds[(3 * i + j) % kinds.len()])).collect();
    let text = format!(
        "Ticket {i}: the customer wrote {} and later {} (again: {}). Config dump follows:\n{}\nPlease repeat.",
        values[0].text, values[1].text, values[0].text, values[2].text
    );
    (text, values.into_iter().map(|v| v.found).collect())
}

/// The request for prompt `i` in `api`, streamed or not, to model `model`; odd prompts ask the
/// backend to echo them in pieces of a few characters.
fn request(api: &str, model: &str, text: &str, stream: bool, fine: bool) -> (String, Value) {
    let result = if fine { format!("{REPLY_IN_FINE_PIECES}{text}") } else { text.to_owned() };
    let (path, mut body) = tool_result_request(api, model, &result);
    body["stream"] = json!(stream);
    if api == "gemini" {
        body.as_object_mut().unwrap().remove("stream");
        if !stream {
            return (path.replace(":streamGenerateContent?alt=sse", ":generateContent"), body);
        }
    }
    (path, body)
}

/// The answer's text as the client reads it.
fn answer_text(api: &str, stream: bool, body: &str) -> String {
    if stream {
        return streamed_text(api, body);
    }
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{api}: {e}: {body}"));
    let pointer = match api {
        "chat" => "/choices/0/message/content",
        "responses" => "/output/0/content/0/text",
        "anthropic" => "/content/0/text",
        "gemini" => "/candidates/0/content/parts/0/text",
        _ => "/message/content",
    };
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{api}: no text at {pointer}: {body}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pseudonymized_values_never_reach_a_backend_and_come_back_to_the_client_whole_and_streamed() {
    // A mock of each API, serving `m` (OpenAI), `a` (Anthropic) and `o` (Ollama), twice over.
    let (guarded_apis, plain_apis) = (three_apis().await, three_apis().await);
    for m in &guarded_apis.mocks {
        m.control().keep_bodies();
    }
    let (guarded_backends, plain_backends) = (&guarded_apis.backends, &plain_apis.backends);
    let guards = "guardrails:\n  default: [pii, secrets]\n\
                  \x20 pii: {type: pii, action: pseudonymize}\n\
                  \x20 secrets: {type: secrets, action: pseudonymize}\n";
    let guarded = gateway_yaml(&format!("listen: 127.0.0.1:0\n{guards}{guarded_backends}")).await;
    let plain = gateway_yaml(&format!("listen: 127.0.0.1:0\n{plain_backends}")).await;
    let client = TestClient::new();
    let random = generate::Random::new(0x5eed_0053);
    let corpus: Vec<(String, Vec<String>)> = (0..PROMPTS).map(|i| prompt(&random, i)).collect();
    let mut requests = Vec::new();
    for (i, (text, raws)) in corpus.iter().enumerate() {
        let model = ["m", "a", "o"][i % 3];
        // A Gemini tool result reaches the other APIs as JSON text: a value that JSON escapes
        // (a PEM block's newlines) comes back as the client wrote it, not escaped as the plain
        // gateway's echo has it. Those prompts go through the other APIs.
        let escapes = raws.iter().any(|r| json_escaped(r) != **r);
        for api in APIS.into_iter().filter(|api| *api != "gemini" || !escapes) {
            for stream in [false, true] {
                let (path, body) = request(api, model, text, stream, i % 2 == 1);
                requests.push((api, stream, path, body.to_string()));
            }
        }
    }
    let total = requests.len();
    assert!(total > 9 * PROMPTS, "{total}");
    let queue = std::sync::Arc::new(std::sync::Mutex::new(requests));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (queue, client, guarded, plain) = (queue.clone(), client.clone(), guarded.url(), plain.url());
        workers.push(tokio::spawn(async move {
            loop {
                let Some((api, stream, path, body)) = queue.lock().unwrap().pop() else { return };
                let ask = |base: String| {
                    let (client, path, body) = (client.clone(), path.clone(), body.clone());
                    async move { client.post_json(&format!("{base}{path}"), body.as_bytes(), &[]).await.unwrap() }
                };
                let (got, want) = (ask(guarded.clone()).await, ask(plain.clone()).await);
                assert_eq!((got.status.as_u16(), want.status.as_u16()), (200, 200), "{api} {path}: {}", got.text());
                let (got, want) = (answer_text(api, stream, &got.text()), answer_text(api, stream, &want.text()));
                assert!(want.starts_with("Tool result: Ticket "), "{api}: {want}");
                assert_eq!(got, want, "{api}, stream {stream}: the client's own values back");
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let bodies: Vec<String> = guarded_apis.mocks.iter().flat_map(|m| m.control().bodies()).collect();
    assert_eq!(bodies.len(), total, "every request reached a backend once");
    let sent = bodies.join("\n");
    let raws: Vec<&String> = corpus.iter().flat_map(|(_, raws)| raws).collect();
    let needles: Vec<String> = raws.iter().flat_map(|r| [r.to_string(), json_escaped(r)]).collect();
    let finder = aho_corasick::AhoCorasick::new(&needles).unwrap();
    let leaks: std::collections::BTreeSet<&str> =
        finder.find_overlapping_iter(&sent).map(|m| raws[m.pattern().as_usize() / 2].as_str()).collect();
    assert!(leaks.is_empty(), "{} raw values reached a backend:\n{leaks:#?}", leaks.len());
    // What the backends were sent: placeholders, a value's own the same each time it appears.
    assert!(sent.contains("<EMAIL_1>") || sent.contains("_1>"), "placeholders were sent");
}

/// A placeholder the model makes up (never issued for this request) is left as it is, and a
/// guard `on: [request]` only pseudonymizes: its answers keep the placeholders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_issued_placeholders_are_restored_and_only_for_guards_that_watch_answers() {
    let backend = mock(&["m", "n"]).await;
    backend.control().keep_bodies();
    let yaml = "guardrails:\n  default: []\n\
                \x20 pii: {type: pii, action: pseudonymize}\n\
                \x20 one_way: {type: pii, action: pseudonymize, on: [request]}\n\
                models: {m: {guardrails: [pii]}, n: {guardrails: [one_way]}}\n";
    let gw = gateway(&[&backend], yaml).await;
    let client = TestClient::new();
    let ask = |model: &str| {
        let (path, mut body) =
            tool_result_request("chat", model, "mail jane.doe@example.com, not <EMAIL_7> or <EMAIL_1x>");
        body["stream"] = json!(false);
        (format!("{}{path}", gw.url()), body.to_string())
    };
    let (url, body) = ask("m");
    let r = client.post_json(&url, body.as_bytes(), &[]).await.unwrap();
    let text = answer_text("chat", false, &r.text());
    assert_eq!(text, "Tool result: mail jane.doe@example.com, not <EMAIL_7> or <EMAIL_1x>");
    let sent = backend.control().bodies().pop().unwrap();
    assert!(sent.contains("mail <EMAIL_1>, not <EMAIL_7>") && !sent.contains("jane.doe"), "{sent}");
    let (url, body) = ask("n");
    let r = client.post_json(&url, body.as_bytes(), &[]).await.unwrap();
    assert_eq!(answer_text("chat", false, &r.text()), "Tool result: mail <EMAIL_1>, not <EMAIL_7> or <EMAIL_1x>");
}

/// How a value reads inside a JSON string (a PEM block's newlines, a quote).
fn json_escaped(raw: &str) -> String {
    let quoted = serde_json::to_string(raw).unwrap();
    quoted[1..quoted.len() - 1].to_owned()
}
