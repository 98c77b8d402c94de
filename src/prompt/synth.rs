//! Deterministic block synthesis.

use std::sync::Arc;

use super::SafeVocab;

/// Separates the random streams of hash-id blocks from those of per-record padding.
const BLOCK_STREAM: u64 = 0x626c_6f63_6b00_0000;
const PAD_STREAM: u64 = 0x7061_6400_0000_0000;

/// Builds prompts: a pure function of (seed, safe vocabulary, hash ids, lengths).
#[derive(Clone)]
pub struct PromptSynth {
    vocab: Arc<SafeVocab>,
    seed: u64,
    block_size: u64,
}

impl PromptSynth {
    pub fn new(vocab: Arc<SafeVocab>, seed: u64, block_size: u32) -> Self {
        PromptSynth {
            vocab,
            seed,
            block_size: u64::from(block_size.max(1)),
        }
    }

    pub fn vocab(&self) -> &SafeVocab {
        &self.vocab
    }

    /// Calls `f` with the safe-table position of each of the `input_length` tokens of a record.
    /// Block `i` covers tokens `[i*B, (i+1)*B)` and is drawn from the stream of `hash_ids[i]`;
    /// a last partial block is a prefix of the full one; tokens past the hash ids are padding
    /// drawn from the record's own stream; hash ids past the length are ignored.
    pub fn for_each_token(
        &self,
        index: u64,
        input_length: u64,
        hash_ids: &[u64],
        mut f: impl FnMut(usize),
    ) {
        let n = self.vocab.len() as u64;
        let mut remaining = input_length;
        for &hash in hash_ids {
            if remaining == 0 {
                return;
            }
            let take = remaining.min(self.block_size);
            let mut rng = SplitMix64::new(self.seed, BLOCK_STREAM ^ self.block_size, hash);
            for _ in 0..take {
                f(rng.below(n));
            }
            remaining -= take;
        }
        let mut rng = SplitMix64::new(self.seed, PAD_STREAM, index);
        for _ in 0..remaining {
            f(rng.below(n));
        }
    }

    /// Appends the prompt text of a record to `out`. The text needs no JSON escaping: it is
    /// spaces and lowercase ASCII letters only.
    pub fn write_text(&self, index: u64, input_length: u64, hash_ids: &[u64], out: &mut Vec<u8>) {
        let vocab = &*self.vocab;
        out.reserve(input_length as usize * 8);
        self.for_each_token(index, input_length, hash_ids, |i| {
            out.extend_from_slice(vocab.text(i).as_bytes())
        });
    }

    /// The token ids of a record's prompt.
    pub fn token_ids(&self, index: u64, input_length: u64, hash_ids: &[u64]) -> Vec<u32> {
        let mut ids = Vec::with_capacity(input_length as usize);
        self.for_each_token(index, input_length, hash_ids, |i| {
            ids.push(self.vocab.id(i))
        });
        ids
    }
}

/// SplitMix64 (Steele et al.): tiny, fast, and fully specified, so streams never change with a
/// dependency upgrade.
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64, stream: u64, key: u64) -> Self {
        let mut s = SplitMix64(seed ^ stream.rotate_left(17));
        let mixed = s.next_u64() ^ key;
        SplitMix64(mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-40 for our `n`).
    fn below(&mut self, n: u64) -> usize {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_pure_functions_of_their_keys() {
        let draw = |seed, stream, key| {
            let mut r = SplitMix64::new(seed, stream, key);
            (0..4).map(|_| r.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(1, BLOCK_STREAM, 7), draw(1, BLOCK_STREAM, 7));
        assert_ne!(draw(1, BLOCK_STREAM, 7), draw(2, BLOCK_STREAM, 7));
        assert_ne!(draw(1, BLOCK_STREAM, 7), draw(1, BLOCK_STREAM, 8));
        assert_ne!(draw(1, BLOCK_STREAM, 7), draw(1, PAD_STREAM, 7));
    }
}
