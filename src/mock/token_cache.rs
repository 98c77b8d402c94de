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
use crate::prefix_cache::{Chain, PrefixCache};

/// Answers the cache waits for at most.
const OPEN_ANSWERS: usize = 1 << 16;

pub struct TokenCache {
    block: u64,
    /// The token ids of one answer token ([`crate::api::TOKEN_TEXT`]) as this tokenizer
    /// writes it: what a client carrying the answer forward sends back.
    answer_ids: Vec<u32>,
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
    /// Looked-up arrivals still answering: where their prompt's blocks end (the newest
    /// [`OPEN_ANSWERS`]: one that never answers, its connection gone, is forgotten).
    chains: BTreeMap<u64, Chain>,
    /// Arrivals that answered before they were looked up: their answer's tokens.
    answered: BTreeMap<u64, u64>,
}

impl TokenCache {
    /// A cache of `blocks` blocks of `block` tokens; an answer token is `answer_ids`.
    pub fn new(blocks: usize, block: usize, answer_ids: Vec<u32>) -> TokenCache {
        TokenCache {
            block: block.max(1) as u64,
            answer_ids,
            state: Mutex::new(State {
                cache: PrefixCache::new(blocks, block),
                next: 0,
                waiting: BTreeMap::new(),
                counted: HashMap::new(),
                chains: BTreeMap::new(),
                answered: BTreeMap::new(),
            }),
        }
    }

    /// Arrival `seq` answered `tokens` tokens: they extend its prompt's blocks (now, or once
    /// it is looked up), so a turn that carries the answer forward hits on it.
    pub fn answered(&self, seq: u64, tokens: u64) {
        let mut state = self.state();
        match state.chains.remove(&seq) {
            Some(chain) => self.extend(&mut state, chain, tokens),
            None if seq >= state.next => {
                state.answered.insert(seq, tokens);
                while state.answered.len() > OPEN_ANSWERS {
                    state.answered.pop_first();
                }
            }
            None => {}
        }
    }

    fn extend(&self, state: &mut State, chain: Chain, tokens: u64) {
        let ids: Vec<[u8; 4]> = (0..tokens)
            .flat_map(|_| self.answer_ids.iter().map(|id| id.to_le_bytes()))
            .collect();
        state.cache.extend_words(chain, ids.iter().map(|w| &w[..]));
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
                    let (hits, chain) = state.cache.serve_chain(words.iter().map(|w| &w[..]));
                    match state.answered.remove(&next) {
                        Some(tokens) => self.extend(&mut state, chain, tokens),
                        None => {
                            state.chains.insert(next, chain);
                            while state.chains.len() > OPEN_ANSWERS {
                                state.chains.pop_first();
                            }
                        }
                    }
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
