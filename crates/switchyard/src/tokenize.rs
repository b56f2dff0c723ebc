//! `switchyard tokenize`: a model's tokenizer and chat template as the gateway applies them to
//! key prompts for event-publishing engines — OpenAI chat requests (JSON lines on stdin) to
//! token ids (JSON lines on stdout), or the rendered prompt text, or timings per prompt size.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Instant;

use switchyard_tokenize::PromptTokenizer;

/// Each stdin line's ids (`{"ids": [...]}`) or rendered text (`{"text": "..."}`), or the error.
pub fn run(dir: &Path, render: bool) -> Result<(), String> {
    let tokenizer = PromptTokenizer::load(dir)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = match (render, render.then(|| tokenizer.render(&line))) {
            (true, Some(Ok(text))) => serde_json::json!({ "text": text }),
            (true, Some(Err(e))) => serde_json::json!({ "error": e }),
            _ => match tokenizer.chat_ids(&line) {
                Ok(ids) => serde_json::json!({ "ids": ids }),
                Err(e) => serde_json::json!({ "error": e }),
            },
        };
        writeln!(out, "{answer}").map_err(|e| format!("stdout: {e}"))?;
    }
    out.flush().map_err(|e| format!("stdout: {e}"))
}

/// Microseconds to tokenize a chat of about `tokens` tokens on this thread, p50 and p99: a
/// prompt never seen before, all of it (`whole`); the same prompt again, a turn that re-sends
/// its history (`again`); and a new prompt keyed for routing, which stops at the first block no
/// engine holds, here its fifth (`keyed`).
pub fn bench(dir: &Path, sizes: &[usize], rounds: usize) -> Result<(), String> {
    let tokenizer = PromptTokenizer::load(dir)?;
    println!("chunk by chunk: {}", tokenizer.cuts_long_pieces());
    println!("tokens  prompt-bytes  whole p50  whole p99  again p50  again p99  keyed p50  keyed p99  (µs)");
    for &tokens in sizes {
        let (mut whole, mut again, mut keyed) = (Vec::new(), Vec::new(), Vec::new());
        let (mut bytes, mut counted) = (0, 0);
        for round in 0..rounds {
            // Seeds of their own per size: a smaller size's text is a prefix of a larger one's.
            let seed = tokens * 10_000 + 2 * round;
            let body = chat_of(tokens, seed);
            bytes = body.len();
            let started = Instant::now();
            counted = tokenizer.chat_ids(&body)?.len();
            whole.push(started.elapsed().as_secs_f64() * 1e6);
            let started = Instant::now();
            tokenizer.chat_ids(&body)?;
            again.push(started.elapsed().as_secs_f64() * 1e6);
            let fresh = chat_of(tokens, seed + 1);
            let started = Instant::now();
            tokenizer.chat_ids_until(&fresh, |ids| ids.len() >= 5 * 16)?;
            keyed.push(started.elapsed().as_secs_f64() * 1e6);
        }
        let [w, a, k] = [&mut whole, &mut again, &mut keyed].map(|s| percentiles(s));
        println!(
            "{counted:>6}  {bytes:>12}  {:>9.0}  {:>9.0}  {:>9.0}  {:>9.0}  {:>9.0}  {:>9.0}",
            w.0, w.1, a.0, a.1, k.0, k.1
        );
    }
    Ok(())
}

fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

/// A chat of roughly `tokens` tokens of English prose (about 4.5 bytes a token), different for
/// every `seed`: a system prompt, a long user document, a question.
fn chat_of(tokens: usize, seed: usize) -> String {
    const WORDS: [&str; 24] = [
        "the", "gateway", "routes", "requests", "to", "engines", "holding", "their", "prefix", "in", "memory", "while",
        "load", "stays", "balanced", "across", "every", "backend", "of", "a", "model", "and", "its", "cache",
    ];
    let mut state = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut document = String::with_capacity(tokens * 5);
    for i in 0..tokens {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        document.push_str(WORDS[(state % WORDS.len() as u64) as usize]);
        document.push(if i % 17 == 16 { '.' } else { ' ' });
    }
    serde_json::json!({"messages": [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": document},
        {"role": "user", "content": format!("Question {seed}: what does it say?")},
    ]})
    .to_string()
}
