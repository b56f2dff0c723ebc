//! A chat request's prompt as the engine will see it, in tokens: the model's chat template
//! (`template`) rendered and then tokenized with its `tokenizer.json`, as vLLM and SGLang do.
//!
//! A model directory as Hugging Face ships it: `tokenizer.json`, and `tokenizer_config.json`
//! with `chat_template` (or a `chat_template.jinja` beside it) and the special tokens the
//! template refers to. The rendered text is tokenized without adding special tokens (the
//! template wrote them), as `apply_chat_template(tokenize=True)` does.
//!
//! Tokenizing is split at the tokenizer's special tokens (which a tokenizer never merges with
//! their neighbours, so the pieces tokenize independently) and each piece's ids are kept in a
//! small cache: a conversation re-sends its system prompt and history at every turn, and only
//! the new turn is tokenized again.

mod chunks;
mod conversation;
mod template;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Mutex;

pub use template::ChatTemplate;

/// The special tokens a template may name.
const SPECIAL_NAMES: [&str; 6] = ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token"];

/// Pieces whose ids are kept (by hash of the text); when full, the cache starts again.
const CACHE_PIECES: usize = 4096;
/// Pieces shorter than this are tokenized every time (a hash and a lock cost about as much).
const CACHE_MIN_BYTES: usize = 256;

/// A model's tokenizer and chat template.
pub struct PromptTokenizer {
    tokenizer: tokenizers::Tokenizer,
    /// The same tokenizer without its normalizer, for ASCII text, when that normalizer is a
    /// Unicode normal form (which leaves ASCII as it is): about a tenth of the work saved.
    ascii: Option<tokenizers::Tokenizer>,
    template: ChatTemplate,
    /// The special tokens' texts, to split rendered prompts at (none when pieces would not
    /// tokenize as the whole does).
    specials: Option<aho_corasick::AhoCorasick>,
    /// Long pieces may be cut into chunks between words (`chunks.rs`): the tokenizer was found to
    /// give the same ids either way.
    chunked: bool,
    pieces: Mutex<HashMap<u64, Vec<u32>>>,
}

impl PromptTokenizer {
    /// Loads `dir`'s `tokenizer.json` and `tokenizer_config.json` (and `chat_template.jinja`).
    pub fn load(dir: &Path) -> Result<Self, String> {
        let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| format!("{}: {e}", dir.join("tokenizer.json").display()))?;
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = std::fs::read_to_string(&config_path)
            .map_err(|e| format!("{}: {e}", config_path.display()))
            .and_then(|text| serde_json::from_str(&text).map_err(|e| format!("{}: {e}", config_path.display())))?;
        let source = chat_template(dir, &config)?;
        let special = SPECIAL_NAMES
            .iter()
            .filter_map(|name| Some(((*name).to_owned(), token_text(config.get(*name)?)?)))
            .collect();
        let template = ChatTemplate::new(source, special)?;
        // Special tokens that take no whitespace with them split a text into pieces that tokenize
        // alone, unless the tokenizer treats a text's start specially (a prepended space).
        let mut specials: Vec<String> = tokenizer
            .get_added_tokens_decoder()
            .values()
            .filter(|t| t.special && !t.lstrip && !t.rstrip && !t.single_word && !t.content.is_empty())
            .map(|t| t.content.clone())
            .collect();
        specials.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let ascii = normal_form_only(&tokenizer).then(|| {
            let mut bare = tokenizer.clone();
            bare.with_normalizer(None::<tokenizers::NormalizerWrapper>);
            bare
        });
        let pieces = Mutex::new(HashMap::new());
        // Whole texts first; splitting and chunking are turned on where they were checked to agree.
        let mut loaded = PromptTokenizer { tokenizer, ascii, template, specials: None, chunked: false, pieces };
        loaded.chunked = chunks::cuts_compose(|text| loaded.encode(text));
        if !specials.is_empty() && loaded.pieces_compose(&specials) {
            let matcher = aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .build(&specials)
                .map_err(|e| format!("special tokens: {e}"))?;
            loaded.specials = Some(matcher);
        }
        Ok(loaded)
    }

    /// Whether a text tokenizes as its pieces do, checked on a sample around each special token.
    fn pieces_compose(&self, specials: &[String]) -> bool {
        specials.iter().all(|s| {
            let sample = format!("Hello world{s}\nHi there {s} ok");
            let whole = self.encode(&sample);
            let mut pieces = Vec::new();
            for part in [&sample[..11], s, "\nHi there ", s, " ok"] {
                pieces.extend(self.encode(part).unwrap_or_default());
            }
            whole.is_ok_and(|w| w == pieces)
        })
    }

    /// Whether long text is tokenized chunk by chunk (`chunks.rs`; checked at load).
    pub fn cuts_long_pieces(&self) -> bool {
        self.chunked
    }

    /// The rendered prompt of an OpenAI chat request body.
    pub fn render(&self, body: &str) -> Result<String, String> {
        self.template.render(body)
    }

    /// The token ids of an OpenAI chat request body's prompt.
    pub fn chat_ids(&self, body: &str) -> Result<Vec<u32>, String> {
        Ok(self.chat_ids_until(body, |_| false)?.ids)
    }

    /// The token ids of a chat request's prompt from its start, produced a piece (or a chunk of
    /// a long piece) at a time until `enough` says the ids so far are all that is needed: a
    /// caller looking the prompt up in a cache stops where nothing holds it any more.
    pub fn chat_ids_until(&self, body: &str, enough: impl FnMut(&[u32]) -> bool) -> Result<Partial, String> {
        let text = self.render(body)?;
        self.text_ids_until(&text, enough)
    }

    /// `text`'s ids up to where `enough` says so: the pieces between special tokens each
    /// tokenized (or found in the cache) chunk by chunk, the special tokens themselves too.
    fn text_ids_until(&self, text: &str, mut enough: impl FnMut(&[u32]) -> bool) -> Result<Partial, String> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        for (a, b) in self.pieces_of(text) {
            ids.extend(self.piece_ids(&text[a..b])?);
            if b < text.len() && enough(&ids) {
                return Ok(Partial { ids, rest_bytes: text.len() - b });
            }
        }
        Ok(Partial { ids, rest_bytes: 0 })
    }

    /// The ranges `text` is tokenized in, in order: the text between special tokens (cut into
    /// chunks between words when long and the tokenizer allows), and each special token.
    fn pieces_of(&self, text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let plain = |from: usize, to: usize, out: &mut Vec<(usize, usize)>| match (from < to, self.chunked) {
            (false, _) => {}
            (true, true) => out.extend(chunks::cut(&text[from..to]).into_iter().map(|(a, b)| (from + a, from + b))),
            (true, false) => out.push((from, to)),
        };
        let mut at = 0;
        for found in self.specials.iter().flat_map(|s| s.find_iter(text)) {
            plain(at, found.start(), &mut out);
            out.push((found.start(), found.end()));
            at = found.end();
        }
        plain(at, text.len(), &mut out);
        out
    }

    fn piece_ids(&self, piece: &str) -> Result<Vec<u32>, String> {
        if piece.len() < CACHE_MIN_BYTES {
            return self.encode(piece);
        }
        let mut h = foldhash::quality::FixedState::with_seed(0x746f_6b65_6e73).build_hasher();
        h.write(piece.as_bytes());
        h.write_usize(piece.len());
        let key = h.finish();
        if let Some(ids) = self.pieces.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(ids.clone());
        }
        let ids = self.encode(piece)?;
        let mut pieces = self.pieces.lock().unwrap_or_else(|e| e.into_inner());
        if pieces.len() >= CACHE_PIECES {
            pieces.clear();
        }
        pieces.insert(key, ids.clone());
        Ok(ids)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let tokenizer = match &self.ascii {
            Some(bare) if text.is_ascii() => bare,
            _ => &self.tokenizer,
        };
        let encoding = tokenizer.encode_fast(text, false).map_err(|e| e.to_string())?;
        Ok(encoding.get_ids().to_vec())
    }
}

/// A prompt's ids from its start, and how much of the rendered text was left untokenized (0:
/// all of it was tokenized).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partial {
    pub ids: Vec<u32>,
    pub rest_bytes: usize,
}

/// Whether the tokenizer's normalizer only puts text in a Unicode normal form (NFC, NFKC, NFD,
/// NFKD, or a sequence of them): the identity on ASCII.
fn normal_form_only(tokenizer: &tokenizers::Tokenizer) -> bool {
    use tokenizers::NormalizerWrapper as N;
    fn normal(n: &N) -> bool {
        match n {
            N::NFC(_) | N::NFD(_) | N::NFKC(_) | N::NFKD(_) => true,
            N::Sequence(seq) => seq.as_ref().iter().all(normal),
            _ => false,
        }
    }
    tokenizer.get_normalizer().is_some_and(normal)
}

/// The chat template: `chat_template.jinja` beside the tokenizer when there is one (it wins, as
/// in transformers), else `tokenizer_config.json`'s `chat_template` (a string, or a list of named
/// templates of which `default` is used).
fn chat_template(dir: &Path, config: &serde_json::Value) -> Result<String, String> {
    if let Ok(text) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
        return Ok(text);
    }
    match config.get("chat_template") {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .or_else(|| named.first())
            .and_then(|t| t.get("template")?.as_str())
            .map(str::to_owned)
            .ok_or_else(|| format!("{}: no default chat template", dir.display())),
        _ => Err(format!("{}: no chat_template in tokenizer_config.json, and no chat_template.jinja", dir.display())),
    }
}

/// A special token as `tokenizer_config.json` writes it: a string, or `{"content": …}`.
fn token_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}
