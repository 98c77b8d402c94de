//! The prefix-cache hits a trace predicts (issue 19's headline): for each endpoint, in the
//! order its requests are built (trace order), a request's leading full content blocks whose
//! whole prefix of hash ids that endpoint has already been sent hit an LRU cache of
//! `--expected-cache-blocks` blocks (default [`DEFAULT_BLOCKS`]: more than a GPU's KV cache
//! holds at any block size, so in effect one that never evicts, in bounded memory). The
//! servers' `cached_tokens` are compared with it (summary.json `prefix_cache`). Trace order
//! is the order a trace-timed run sends in; `--route least-inflight` picks the endpoint only
//! at send time, and then nothing is predicted.
//!
//! Content blocks: block i of a synthetic prompt's content is hash id i's tokens (see
//! [`crate::prompt::PromptSynth`]); only full blocks count, as in vLLM.

use crate::prefix_cache::PrefixCache;

/// Blocks per endpoint when `--expected-cache-blocks` is not given (~50 MB at most each):
/// 16M tokens at Bailian's 16-token blocks, 512M at Mooncake's 512.
pub const DEFAULT_BLOCKS: usize = 1 << 20;

pub struct ExpectedPrefixHits {
    capacity: usize,
    /// Per endpoint: its cache, over hash ids (one a block).
    caches: Vec<PrefixCache>,
}

impl ExpectedPrefixHits {
    /// Caches of `capacity` blocks (None: [`DEFAULT_BLOCKS`]).
    pub fn new(capacity: Option<usize>) -> ExpectedPrefixHits {
        ExpectedPrefixHits {
            capacity: capacity.unwrap_or(DEFAULT_BLOCKS),
            caches: Vec::new(),
        }
    }

    /// The leading blocks of `ids` (full content blocks) already sent to `endpoint` as the
    /// same prefix; then they all are.
    pub fn hits(&mut self, endpoint: usize, ids: &[u64]) -> u64 {
        while self.caches.len() <= endpoint {
            self.caches.push(PrefixCache::new(self.capacity, 1));
        }
        let words: Vec<[u8; 8]> = ids.iter().map(|id| id.to_le_bytes()).collect();
        self.caches[endpoint].serve(words.iter().map(|w| &w[..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_hits_when_its_whole_prefix_was_sent_to_that_endpoint() {
        let mut e = ExpectedPrefixHits::new(None);
        assert_eq!(e.hits(0, &[1, 2, 3]), 0);
        assert_eq!(e.hits(0, &[1, 2, 4]), 2);
        assert_eq!(e.hits(0, &[5, 2, 3]), 0, "same blocks, another prefix");
        assert_eq!(
            e.hits(1, &[1, 2, 3]),
            0,
            "another endpoint has its own cache"
        );
        assert_eq!(e.hits(0, &[1, 2, 3, 9]), 3);
        let mut small = ExpectedPrefixHits::new(Some(2));
        small.hits(0, &[1, 2, 3]);
        assert_eq!(
            small.hits(0, &[1, 2]),
            0,
            "a 2-block LRU kept only the last two"
        );
    }
}
