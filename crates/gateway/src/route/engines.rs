//! Routing on what the engines say they hold: the KV-cache events of backends that publish them
//! (`backends[].kv_events`, followed by `switchyard_kvevents` feeds), and prompts keyed the way
//! those engines key them (the model's tokenizer and chat template, `models.*.tokenizer`).
//!
//! For a model with such backends, the cache-aware strategy takes each publishing backend's
//! figure from its events (the longest run of the prompt's blocks it holds, weighted by tier)
//! and every other backend's from the estimate (`prefix.rs`), so a mixed pool works. A backend
//! whose feed is not live (not connected, or not caught up) is unknown, and the estimate
//! speaks for it. Tokenizing runs only for models with publishing backends and a tokenizer;
//! a long prompt is tokenized off the async threads.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use switchyard_kvevents::{keys, BlockKey, FeedConfig, FeedStats, KvIndex, Tier};
use switchyard_tokenize::PromptTokenizer;

use crate::config::{Config, FastMap};

/// Prompts longer than this are tokenized on the blocking pool, not on an async thread: about a
/// thousand tokens, half a millisecond at most when none of it was seen before.
const BLOCKING_BYTES: usize = 4 * 1024;

/// Every event-publishing backend's feed, their shared index, and the models' tokenizers.
pub struct Engines {
    pub index: Arc<KvIndex>,
    /// Per backend id: where it publishes and what its feed did (None: it publishes nothing).
    feeds: Vec<Option<(FeedConfig, Arc<FeedStats>)>>,
    tokenizers: FastMap<String, Arc<PromptTokenizer>>,
}

/// A prompt keyed for the engines: its block keys at the block size they use, from its start
/// up to the first block no engine holds (nothing after it can match).
#[derive(Debug, Clone, Default)]
pub struct EngineKeys {
    pub keys: Vec<BlockKey>,
    /// The prompt's length in blocks (estimated from its bytes when tokenizing stopped early).
    pub total_blocks: usize,
}

/// Bytes per token assumed for the part of a prompt left untokenized.
const BYTES_PER_TOKEN: usize = 4;

/// What one backend's events say about a prompt.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventRun {
    /// Consecutive blocks from the prompt's start it holds.
    pub blocks: usize,
    /// Those blocks weighted by tier, as a fraction of the prompt's blocks.
    pub fraction: f64,
    /// The run ends where other sequences branch off (a shared prefix only).
    pub shared: bool,
}

impl Engines {
    /// `None` when no backend publishes events.
    pub fn new(config: &Config) -> Result<Option<Engines>, String> {
        if config.backends.iter().all(|b| b.kv_events.is_none()) {
            return Ok(None);
        }
        let feeds =
            config.backends.iter().map(|b| b.kv_events.clone().map(|f| (f, Arc::new(FeedStats::default())))).collect();
        let mut tokenizers = FastMap::default();
        for (model, dir) in &config.tokenizers {
            let tokenizer = PromptTokenizer::load(dir).map_err(|e| format!("models.{model}.tokenizer: {e}"))?;
            tokenizers.insert(model.clone(), Arc::new(tokenizer));
        }
        Ok(Some(Engines { index: Arc::new(KvIndex::new()), feeds, tokenizers }))
    }

    /// Starts a feed per publishing backend (retired with the routing state they belong to).
    pub fn spawn_feeds(&self) -> Vec<tokio::task::JoinHandle<()>> {
        self.feeds
            .iter()
            .enumerate()
            .filter_map(|(id, feed)| {
                let (config, stats) = feed.as_ref()?;
                Some(switchyard_kvevents::feed::spawn(self.index.clone(), id, config.clone(), stats.clone()))
            })
            .collect()
    }

    /// Whether backend `id` publishes events and its feed is live.
    pub fn live(&self, id: usize) -> bool {
        self.stats(id).is_some_and(|s| s.live.load(Relaxed))
    }

    /// Whether backend `id` publishes events (live or not).
    pub fn publishes(&self, id: usize) -> bool {
        self.feeds.get(id).is_some_and(Option::is_some)
    }

    fn stats(&self, id: usize) -> Option<&Arc<FeedStats>> {
        self.feeds.get(id)?.as_ref().map(|(_, s)| s)
    }

    /// Whether `model` has a tokenizer (its prompts can be keyed).
    pub fn tokenizes(&self, model: &str) -> bool {
        self.tokenizers.contains_key(model)
    }

    /// The block keys of an OpenAI chat body's prompt for `model`, at `block_size`; `None`
    /// when the model has no tokenizer or the body does not render.
    pub async fn prompt_keys(&self, model: &str, body: &bytes::Bytes, block_size: usize) -> Option<EngineKeys> {
        let tokenizer = self.tokenizers.get(model)?.clone();
        let text = std::str::from_utf8(body).ok()?;
        // A LoRA adapter is served under its own name; blocks stored for it are keyed under it.
        let lora = self.index.knows_lora(model).then(|| model.to_owned());
        let (index, model) = (self.index.clone(), model.to_owned());
        let key = move |text: &str| -> Option<EngineKeys> {
            let mut keys = Vec::new();
            let mut parent = keys::root(lora.as_deref());
            // Tokenized from the start, a chunk at a time, until a block nobody holds.
            let mut add_blocks = |ids: &[u32]| -> bool {
                while ids.len() >= (keys.len() + 1) * block_size {
                    let at = keys.len() * block_size;
                    parent = keys::next(parent, &ids[at..at + block_size], None, 0);
                    keys.push(parent);
                    if !index.held_anywhere(parent) {
                        return true;
                    }
                }
                false
            };
            let partial = tokenizer.chat_ids_until(text, &mut add_blocks);
            let partial = partial.map_err(|e| tracing::debug!(%model, "tokenize: {e}")).ok()?;
            if partial.rest_bytes == 0 {
                add_blocks(&partial.ids);
            }
            let total_blocks = (partial.ids.len() + partial.rest_bytes / BYTES_PER_TOKEN) / block_size;
            Some(EngineKeys { keys, total_blocks: total_blocks.max(1) })
        };
        if text.len() < BLOCKING_BYTES {
            return key(text);
        }
        let owned = body.clone();
        tokio::task::spawn_blocking(move || key(std::str::from_utf8(&owned).ok()?)).await.ok().flatten()
    }

    /// The block size of `model`'s publishing backends (the first one's; engines serving one
    /// model share it).
    pub fn block_size_of(&self, ids: impl Iterator<Item = usize>) -> Option<usize> {
        ids.filter_map(|id| self.feeds.get(id)?.as_ref()).map(|(f, _)| f.block_size).next()
    }

    /// What each of `ids` holds of the prompt, from its events (live feeds only: `None` for a
    /// backend the events cannot speak for).
    pub fn runs(&self, keys: &EngineKeys, ids: &[usize]) -> Vec<Option<EventRun>> {
        let runs = self.index.runs(&keys.keys, ids);
        let total = keys.total_blocks.max(keys.keys.len()).max(1) as f64;
        ids.iter()
            .zip(runs)
            .map(|(&id, run)| {
                self.live(id).then(|| EventRun {
                    blocks: run.blocks,
                    fraction: run.score / total,
                    shared: run.blocks > 0
                        && self.index.ends_shared(keys.keys[run.blocks - 1], keys.keys.get(run.blocks).copied()),
                })
            })
            .collect()
    }

    /// Backend `id` lost its cache (it stopped answering probes): forget its blocks, and let its
    /// feed start a new numbering.
    pub fn forget(&self, id: usize) {
        if let Some(stats) = self.stats(id) {
            self.index.clear(id);
            stats.reset();
        }
    }

    /// Backend `id`'s blocks per tier and whether they come from live events, for the console.
    pub fn describe(&self, id: usize) -> Option<(bool, [usize; 3])> {
        self.stats(id)?;
        Some((self.live(id), self.index.counts(id)))
    }

    /// Prometheus lines for every publishing backend; `names[id]` is backend `id`'s name.
    pub fn render(&self, names: &[&str], out: &mut String) {
        use std::fmt::Write;
        type Counter = fn(&FeedStats) -> u64;
        let counters: [(&str, &str, Counter); 8] = [
            ("switchyard_kv_events_received_total", "KV-cache events received from the engine.", |s| {
                s.received.load(Relaxed)
            }),
            ("switchyard_kv_events_applied_total", "KV-cache events applied to the index.", |s| {
                s.applied.load(Relaxed)
            }),
            (
                "switchyard_kv_events_orphaned_total",
                "Stored blocks whose parent block was never seen (not indexed).",
                |s| s.orphaned.load(Relaxed),
            ),
            ("switchyard_kv_event_gaps_total", "Skips in the engine's sequence numbers.", |s| s.gaps.load(Relaxed)),
            (
                "switchyard_kv_event_replays_total",
                "Replays asked of the engine's replay socket (on connect and on gaps).",
                |s| s.replays.load(Relaxed),
            ),
            ("switchyard_kv_event_unrecovered_total", "Gaps the replay could not fill.", |s| {
                s.unrecovered.load(Relaxed)
            }),
            (
                "switchyard_kv_event_restarts_total",
                "Engine restarts seen (its numbering went back): its blocks forgotten.",
                |s| s.restarts.load(Relaxed),
            ),
            ("switchyard_kv_events_undecodable_total", "Messages that could not be decoded.", |s| {
                s.undecodable.load(Relaxed)
            }),
        ];
        let published: Vec<(usize, &Arc<FeedStats>)> =
            self.feeds.iter().enumerate().filter_map(|(id, f)| Some((id, &f.as_ref()?.1))).collect();
        for (name, help, read) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (id, stats) in &published {
                let _ = writeln!(out, "{name}{{backend=\"{}\"}} {}", names[*id], read(stats));
            }
        }
        let _ = writeln!(out, "# HELP switchyard_kv_events_live Whether the backend's event feed is connected and caught up (1), or its cache unknown (0).\n# TYPE switchyard_kv_events_live gauge");
        for (id, stats) in &published {
            let _ = writeln!(
                out,
                "switchyard_kv_events_live{{backend=\"{}\"}} {}",
                names[*id],
                u8::from(stats.live.load(Relaxed))
            );
        }
        let _ = writeln!(out, "# HELP switchyard_kv_event_lag_seconds How old the last applied batch was when it arrived (engine clock to the gateway's).\n# TYPE switchyard_kv_event_lag_seconds gauge");
        for (id, stats) in &published {
            let lag = stats.lag_ms.load(Relaxed) as f64 / 1000.0;
            let _ = writeln!(out, "switchyard_kv_event_lag_seconds{{backend=\"{}\"}} {lag}", names[*id]);
        }
        let _ = writeln!(out, "# HELP switchyard_kv_blocks KV-cache blocks the backend's events say it holds, by tier.\n# TYPE switchyard_kv_blocks gauge");
        for (id, _) in &published {
            let counts = self.index.counts(*id);
            for tier in Tier::ALL {
                let _ = writeln!(
                    out,
                    "switchyard_kv_blocks{{backend=\"{}\",tier=\"{}\"}} {}",
                    names[*id],
                    tier.as_str(),
                    counts[tier as usize]
                );
            }
        }
    }
}
