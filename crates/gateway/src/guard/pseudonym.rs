//! Reversible masking (`action: pseudonymize`): each value a guard finds in a request becomes a
//! placeholder naming its kind and its order of first appearance (`<EMAIL_1>`, `<CARD_2>`; the
//! same value, the same placeholder, across the whole conversation sent), and the answer gets the
//! values back where those placeholders come — in a whole answer, and in a stream whose events cut
//! a placeholder anywhere. The mapping lives in one request's memory only (`Vault`): it is never
//! logged, stored or exported, and its `Debug` shows a count, not a value. A placeholder the model
//! makes up (one never issued) is left as it is.

use std::collections::HashMap;
use std::sync::Mutex;

/// One request's placeholders and the values they stand for.
#[derive(Default)]
pub struct Vault(Mutex<Issued>);

#[derive(Default)]
struct Issued {
    /// (label, value) → placeholder.
    placeholders: HashMap<(String, String), String>,
    /// placeholder → value.
    values: HashMap<String, String>,
    /// Whether the answer gets the values back (a guard that issued one watches answers).
    restores: bool,
    /// The longest placeholder issued: what a stream holds back at most.
    longest: usize,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vault({} values)", self.lock().values.len())
    }
}

impl Vault {
    fn lock(&self) -> std::sync::MutexGuard<'_, Issued> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The placeholder for `value`, a value of the kind `label` (`EMAIL`), issued now if new;
    /// `restore`: the guard that found it watches answers, which then get the value back.
    pub fn placeholder(&self, label: &str, value: &str, restore: bool) -> String {
        let mut issued = self.lock();
        issued.restores |= restore;
        let key = (label.to_owned(), value.to_owned());
        if let Some(placeholder) = issued.placeholders.get(&key) {
            return placeholder.clone();
        }
        let placeholder = format!("<{label}_{}>", issued.values.len() + 1);
        issued.longest = issued.longest.max(placeholder.len());
        issued.values.insert(placeholder.clone(), value.to_owned());
        issued.placeholders.insert(key, placeholder.clone());
        placeholder
    }

    /// Whether an answer is to get values back.
    pub fn restores(&self) -> bool {
        let issued = self.lock();
        issued.restores && !issued.values.is_empty()
    }

    /// `text` with every placeholder issued here replaced by its value; `None` when it has none.
    pub fn restore(&self, text: &str) -> Option<String> {
        let issued = self.lock();
        let mut out: Option<String> = None;
        let mut copied = 0;
        let mut from = 0;
        while let Some(open) = text[from..].find('<').map(|i| from + i) {
            let Some(close) = text[open..].find('>').map(|i| open + i) else { break };
            if let Some(value) = issued.values.get(&text[open..=close]) {
                let out = out.get_or_insert_with(|| String::with_capacity(text.len() + 32));
                out.push_str(&text[copied..open]);
                out.push_str(value);
                copied = close + 1;
                from = close + 1;
            } else {
                from = open + 1;
            }
        }
        out.map(|mut out| {
            out.push_str(&text[copied..]);
            out
        })
    }

    fn longest(&self) -> usize {
        self.lock().longest
    }
}

/// A stream's text restored as it comes: what could be the start of a placeholder cut by the
/// event's end is held back until the next event says (at most the longest placeholder issued).
pub struct StreamRestorer {
    vault: std::sync::Arc<Vault>,
    held: String,
}

impl StreamRestorer {
    pub fn new(vault: std::sync::Arc<Vault>) -> StreamRestorer {
        StreamRestorer { vault, held: String::new() }
    }

    /// The next piece of text: what can go out now, restored.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let keep = self.open_tail();
        let ready: String = self.held.drain(..self.held.len() - keep).collect();
        self.vault.restore(&ready).unwrap_or(ready)
    }

    /// The text ends: what was held back, restored.
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.held);
        self.vault.restore(&rest).unwrap_or(rest)
    }

    /// How many bytes at the end of what is held could still grow into a placeholder: from the
    /// last `<` with no `>` after it, if that is shorter than the longest placeholder.
    fn open_tail(&self) -> usize {
        let Some(open) = self.held.rfind('<') else { return 0 };
        let tail = self.held.len() - open;
        match self.held[open..].contains('>') || tail >= self.vault.longest() {
            true => 0,
            false => tail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_value_keeps_its_placeholder_and_only_issued_ones_are_restored() {
        let v = Vault::default();
        assert_eq!(v.placeholder("EMAIL", "jane@example.com", true), "<EMAIL_1>");
        assert_eq!(v.placeholder("CARD", "4111 1111 1111 1111", true), "<CARD_2>");
        assert_eq!(v.placeholder("EMAIL", "jane@example.com", true), "<EMAIL_1>", "the same value");
        assert_eq!(format!("{v:?}"), "Vault(2 values)", "no value in debug output");
        assert_eq!(
            v.restore("Write to <EMAIL_1> about <CARD_2>, not <EMAIL_9> or <b>").as_deref(),
            Some("Write to jane@example.com about 4111 1111 1111 1111, not <EMAIL_9> or <b>")
        );
        assert_eq!(v.restore("nothing <here"), None);
        assert!(v.restores());
    }

    /// However a stream's events cut the text, what goes out is the whole text restored.
    #[test]
    fn placeholders_split_anywhere_across_events_are_restored() {
        let vault = Arc::new(Vault::default());
        vault.placeholder("EMAIL", "jane@example.com", true);
        vault.placeholder("PHONE", "+1 415 555 0100", true);
        let text = "Dear <EMAIL_1>, call <PHONE_2> or <<EMAIL_1>> (not <EMAIL_3>) <";
        let want = vault.restore(text).unwrap();
        for a in 0..=text.len() {
            for b in a..=text.len() {
                let mut r = StreamRestorer::new(vault.clone());
                let out = [r.push(&text[..a]), r.push(&text[a..b]), r.push(&text[b..]), r.finish()].concat();
                assert_eq!(out, want, "split at {a} and {b}");
            }
        }
    }
}
