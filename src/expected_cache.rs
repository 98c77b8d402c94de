//! The prefix-cache hits a trace predicts (issue 19's headline): for each endpoint, in the
//! order its requests are built (trace order), a request's leading full content blocks whose
//! whole prefix of hash ids that endpoint has already been sent hit an unbounded cache. The
//! servers' `cached_tokens` are compared with it (summary.json `prefix_cache`).
//!
//! Content blocks: block i of a synthetic prompt's content is hash id i's tokens (see
//! [`crate::prompt::PromptSynth`]); only full blocks count, as in vLLM.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

#[derive(Default)]
pub struct ExpectedPrefixHits {
    /// Per endpoint: the hash-id prefixes sent to it (as chain hashes).
    seen: Vec<HashSet<u64>>,
}

impl ExpectedPrefixHits {
    /// The leading blocks of `ids` (full content blocks) already sent to `endpoint` as the
    /// same prefix; then they all are.
    pub fn hits(&mut self, endpoint: usize, ids: &[u64]) -> u64 {
        if self.seen.len() <= endpoint {
            self.seen.resize_with(endpoint + 1, HashSet::new);
        }
        let seen = &mut self.seen[endpoint];
        let mut chain = 0u64;
        let mut leading = true;
        let mut hits = 0;
        for id in ids {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (chain, id).hash(&mut h);
            chain = h.finish();
            leading &= !seen.insert(chain);
            hits += u64::from(leading);
        }
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_hits_when_its_whole_prefix_was_sent_to_that_endpoint() {
        let mut e = ExpectedPrefixHits::default();
        assert_eq!(e.hits(0, &[1, 2, 3]), 0);
        assert_eq!(e.hits(0, &[1, 2, 4]), 2);
        assert_eq!(e.hits(0, &[5, 2, 3]), 0, "same blocks, another prefix");
        assert_eq!(
            e.hits(1, &[1, 2, 3]),
            0,
            "another endpoint has its own cache"
        );
        assert_eq!(e.hits(0, &[1, 2, 3, 9]), 3);
    }
}
