//! `mock --tokenizer --cache-blocks N`: the prefix cache over each prompt's real token ids
//! (the chat template's included), as a server's cache sees them, so that a replay's expected
//! hits can be checked token for token.
//!
//! The ids come from the counting threads, which finish out of order; a cache must see the
//! prompts in the order they arrived. So each counted prompt waits here until every earlier
//! one is counted, and they are looked up and added in arrival order. A request held by its
//! count has the earlier ones counted too (see [`super::counting`]), so nothing waits on a
//! starved thread.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::count_job::{CountFor, Counted, PendingCount};
use crate::prefix_cache::PrefixCache;

pub struct TokenCache {
    block: u64,
    state: Mutex<State>,
}

struct State {
    cache: PrefixCache,
    /// The next arrival to look up.
    next: u64,
    /// Arrivals not yet looked up, with their jobs.
    waiting: BTreeMap<u64, (CountFor, Arc<PendingCount>)>,
    /// Counted arrivals that wait for an earlier one.
    counted: HashMap<u64, Result<Vec<u32>, String>>,
}

impl TokenCache {
    /// A cache of `blocks` blocks of `block` tokens.
    pub fn new(blocks: usize, block: usize) -> TokenCache {
        TokenCache {
            block: block.max(1) as u64,
            state: Mutex::new(State {
                cache: PrefixCache::new(blocks, block),
                next: 0,
                waiting: BTreeMap::new(),
                counted: HashMap::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A prompt arrived (in arrival order: `job.seq` counts up from 0).
    pub fn arrived(&self, of: CountFor, job: Arc<PendingCount>) {
        let seq = job.seq.load(Ordering::Relaxed);
        self.state().waiting.insert(seq, (of, job));
    }

    /// The arrivals up to `seq` not yet counted by anyone: a held request needs them all.
    pub fn uncounted_up_to(&self, seq: u64) -> Vec<(CountFor, Arc<PendingCount>)> {
        self.state()
            .waiting
            .range(..=seq)
            .filter(|(_, (_, job))| !job.is_done())
            .map(|(_, (of, job))| (*of, Arc::clone(job)))
            .collect()
    }

    /// Arrival `seq` is counted (`ids`): the results of every arrival this lets through, in
    /// order. A second count of the same arrival is ignored.
    pub fn counted(&self, seq: u64, ids: Result<Vec<u32>, String>) -> Vec<Counted> {
        let mut state = self.state();
        if seq < state.next || state.counted.contains_key(&seq) {
            return Vec::new();
        }
        state.counted.insert(seq, ids);
        let mut out = Vec::new();
        loop {
            let next = state.next;
            let Some(ids) = state.counted.remove(&next) else {
                break;
            };
            let (of, job) = state.waiting.remove(&next).expect("arrived before counted");
            state.next += 1;
            let (prompt_tokens, cached_tokens) = match ids {
                Ok(ids) => {
                    let words: Vec<[u8; 4]> = ids.iter().map(|id| id.to_le_bytes()).collect();
                    let hits = state.cache.serve(words.iter().map(|w| &w[..]));
                    let len = ids.len() as u64;
                    // The last token is always computed, as a server must to answer.
                    let most = len.saturating_sub(1) / self.block * self.block;
                    (Ok(len), Some(hits.min(most)))
                }
                Err(e) => (Err(e), None),
            };
            out.push(Counted {
                of,
                prompt_tokens: Some(prompt_tokens),
                cached_tokens,
                job,
            });
        }
        out
    }
}
