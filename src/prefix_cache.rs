//! An LRU prefix cache shaped like vLLM's automatic prefix caching, used twice: by the mock
//! (`mock --cache-blocks N`), over the prompt's words (one per token in llmreplay's synthetic
//! prompts; token ids as they are) in blocks of `--cache-block-size`, to report
//! `usage.prompt_tokens_details.cached_tokens`; and by the replay over each record's hash ids
//! (one a block) for the hits the trace predicts ([`crate::expected_cache`]).
//!
//! Each full block is keyed by the hash of itself and every block before it, so a block hits
//! only when the whole prefix up to it does. A prompt's hits are its leading blocks found;
//! then all its full blocks become the most recently used, and the least recently used
//! beyond the capacity are evicted.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::mock::Dialect;

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

    /// [`Self::serve`], and the words looked up (the prompt's length in words).
    fn serve_counted<'a>(&mut self, words: impl Iterator<Item = &'a [u8]>) -> (u64, u64) {
        let words: Vec<&[u8]> = words.collect();
        let mut key = 0u64;
        let mut leading = true;
        let mut hits = 0u64;
        for block in words.chunks_exact(self.block) {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            key.hash(&mut h);
            block.hash(&mut h);
            key = h.finish();
            leading &= self.used.contains_key(&key);
            hits += u64::from(leading);
            self.touch(key);
        }
        (hits * self.block as u64, words.len() as u64)
    }

    /// The cached tokens of a request body's prompt, and the words looked up: the words of its
    /// messages' contents in order, or of its prompt (token ids taken one a word).
    pub fn serve_request(&mut self, dialect: Dialect, body: &Value) -> (u64, u64) {
        let mut texts: Vec<&str> = Vec::new();
        let mut ids: Vec<[u8; 8]> = Vec::new();
        let prompts: Vec<&Value> = match dialect {
            Dialect::Chat => body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| &m["content"])
                .collect(),
            Dialect::Completions => vec![&body["prompt"]],
            Dialect::Tgi { .. } => vec![&body["inputs"]],
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
