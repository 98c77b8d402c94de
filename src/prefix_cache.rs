//! An LRU prefix cache shaped like vLLM's automatic prefix caching, for the mock
//! (`mock --cache-blocks N`): over the prompt's words (one per token in llmreplay's synthetic
//! prompts; token ids as they are) in blocks of `--cache-block-size`, it reports
//! `usage.prompt_tokens_details.cached_tokens`. (The hits a trace predicts are modelled apart,
//! over prompt shapes: [`crate::expected_cache`].)
//!
//! Each full block is keyed by the hash of itself and every block before it, so a block hits
//! only when the whole prefix up to it does. A prompt's hits are its leading blocks found;
//! then all its full blocks become the most recently used, and the least recently used
//! beyond the capacity are evicted.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::api::Prompt;

pub struct PrefixCache {
    block: usize,
    capacity: usize,
    /// Block key → the tick it was last used.
    used: HashMap<u64, u64>,
    /// Tick → block key, oldest first.
    order: BTreeMap<u64, u64>,
    tick: u64,
}

impl PrefixCache {
    pub fn new(capacity: usize, block: usize) -> PrefixCache {
        PrefixCache {
            block: block.max(1),
            capacity,
            used: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
        }
    }

    /// The cached tokens (leading blocks found x block size) of a prompt of these words; its
    /// blocks are kept for later ones.
    pub fn serve<'a>(&mut self, words: impl Iterator<Item = &'a [u8]>) -> u64 {
        self.serve_counted(words).0
    }

    /// [`Self::serve`], the words looked up (the prompt's length in words), and where its
    /// blocks end, for its answer to extend.
    fn serve_counted<'a>(&mut self, words: impl Iterator<Item = &'a [u8]>) -> (u64, u64, Chain) {
        let words: Vec<&[u8]> = words.collect();
        let mut key = 0u64;
        let mut leading = true;
        let mut hits = 0u64;
        let blocks = words.chunks_exact(self.block);
        let rest = blocks.remainder();
        for block in blocks {
            key = block_key(key, block);
            leading &= self.used.contains_key(&key);
            hits += u64::from(leading);
            self.touch(key);
        }
        let chain = Chain {
            key,
            pending: rest.iter().map(|w| w.to_vec()).collect(),
        };
        (hits * self.block as u64, words.len() as u64, chain)
    }

    /// [`Self::serve`], and where the prompt's blocks end, for its answer to extend.
    pub fn serve_chain<'a>(&mut self, words: impl Iterator<Item = &'a [u8]>) -> (u64, Chain) {
        let (hits, _, chain) = self.serve_counted(words);
        (hits, chain)
    }

    /// A server caches the tokens it generates too (vLLM keeps every full block of prompt
    /// and answer): the `n` words `word` of an answer extend its prompt's chain, so the next
    /// turn that carries the answer forward finds them.
    pub fn extend(&mut self, chain: Chain, word: &[u8], n: u64) {
        self.extend_words(chain, (0..n).map(|_| word));
    }

    /// The answer's `words` extend its prompt's chain (see [`Self::extend`]).
    pub fn extend_words<'a>(&mut self, mut chain: Chain, words: impl Iterator<Item = &'a [u8]>) {
        for word in words {
            chain.pending.push(word.to_vec());
            if chain.pending.len() == self.block {
                chain.key = block_key(chain.key, &chain.pending);
                self.touch(chain.key);
                chain.pending.clear();
            }
        }
    }

    /// The cached tokens of a request's prompt, and the words looked up: the words of its
    /// system prompt and messages' contents in order, or of its prompt (token ids taken one a
    /// word).
    pub fn serve_request(&mut self, prompt: &Prompt) -> (u64, u64, Chain) {
        let mut texts: Vec<&str> = Vec::new();
        let mut ids: Vec<[u8; 8]> = Vec::new();
        let prompts: Vec<&Value> = match *prompt {
            Prompt::Messages {
                messages, system, ..
            } => system
                .into_iter()
                .chain(messages.iter().map(|m| &m["content"]))
                .collect(),
            Prompt::Text(text) => vec![text],
        };
        for v in prompts {
            gather(v, &mut texts, &mut ids);
        }
        let words = texts
            .iter()
            .flat_map(|t| t.split_ascii_whitespace().map(str::as_bytes))
            .chain(ids.iter().map(|b| &b[..]));
        self.serve_counted(words)
    }

    fn touch(&mut self, key: u64) {
        self.tick += 1;
        if let Some(old) = self.used.insert(key, self.tick) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, key);
        while self.used.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.used.remove(&oldest);
        }
    }
}

/// Where a served prompt's blocks end: the key of its last full block, and the words after it.
#[derive(Debug)]
pub struct Chain {
    key: u64,
    pending: Vec<Vec<u8>>,
}

/// A block's key: its words and the key of every block before it (a slice of `&[u8]` and one
/// of `Vec<u8>` hash alike).
fn block_key<W: Hash>(prev: u64, block: &[W]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    prev.hash(&mut h);
    block.hash(&mut h);
    h.finish()
}

/// A prompt value's texts (a string, or text parts) and token ids.
fn gather<'a>(v: &'a Value, texts: &mut Vec<&'a str>, ids: &mut Vec<[u8; 8]>) {
    match v {
        Value::String(s) => texts.push(s),
        Value::Array(parts) => {
            for p in parts {
                match p {
                    Value::String(s) => texts.push(s),
                    Value::Number(n) => ids.push(n.as_u64().unwrap_or(0).to_le_bytes()),
                    other => {
                        if let Some(t) = other.get("text").and_then(Value::as_str) {
                            texts.push(t);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> impl Iterator<Item = &[u8]> {
        s.split_ascii_whitespace().map(str::as_bytes)
    }

    #[test]
    fn leading_full_blocks_hit_and_the_oldest_are_evicted() {
        let mut c = PrefixCache::new(3, 2);
        assert_eq!(c.serve(words("a b c d e")), 0, "cold");
        assert_eq!(c.serve(words("a b c d x y")), 4, "two shared blocks");
        assert_eq!(
            c.serve(words("a b z z c d")),
            2,
            "a block hits only after its prefix"
        );
        assert_eq!(c.serve(words("q q")), 0);
        // Capacity 3: "a b" was pushed out by the three blocks used after it.
        assert_eq!(c.serve(words("a b c d")), 0, "evicted");
        let mut big = PrefixCache::new(100, 2);
        big.serve(words("a b c d"));
        big.serve(words("q q r r s s"));
        assert_eq!(big.serve(words("a b c d")), 4, "a large cache keeps it");
    }
}
