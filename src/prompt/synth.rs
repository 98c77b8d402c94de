//! Deterministic block synthesis.

use std::sync::Arc;

use super::vocab::SLOT;
use super::{BlockCache, Frame, SafeVocab};
use crate::rng::SplitMix64;

/// Separates the random streams of hash-id blocks from those of per-record padding.
const BLOCK_STREAM: u64 = 0x626c_6f63_6b00_0000;
const PAD_STREAM: u64 = 0x7061_6400_0000_0000;

/// How each token is written into the request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rendering {
    /// The token's text (`" word"`: no JSON escaping needed), inside a JSON string.
    Text,
    /// The token id, inside a JSON array (`--prompt-mode token-ids`).
    TokenIds,
}

/// Builds prompts: a pure function of (seed, safe vocabulary, block size, hash ids, lengths).
pub struct PromptSynth {
    vocab: Arc<SafeVocab>,
    seed: u64,
    block_size: u64,
    rendering: Rendering,
    /// Each token as written into the body, in a fixed slot (text, or `id,`).
    pieces: Vec<[u8; SLOT]>,
    piece_lens: Vec<u8>,
    /// Tokens the server adds around the prompt (chat template, special tokens), taken off the
    /// content so that the server counts `input_length` in all.
    overhead: u64,
    /// What the server puts before and after the content (counted in `overhead` or not).
    frame: Frame,
}

impl PromptSynth {
    pub fn new(vocab: Arc<SafeVocab>, seed: u64, block_size: u32, rendering: Rendering) -> Self {
        let (pieces, piece_lens) = (0..vocab.len())
            .map(|i| match rendering {
                Rendering::Text => {
                    let (slot, len) = vocab.slot(i);
                    (*slot, len as u8)
                }
                Rendering::TokenIds => {
                    let text = format!("{},", vocab.id(i));
                    let mut slot = [0u8; SLOT];
                    slot[..text.len()].copy_from_slice(text.as_bytes());
                    (slot, text.len() as u8)
                }
            })
            .unzip();
        PromptSynth {
            vocab,
            seed,
            block_size: u64::from(block_size.max(1)),
            rendering,
            pieces,
            piece_lens,
            overhead: 0,
            frame: Frame::default(),
        }
    }

    /// Sets the number of tokens the server adds around the content (see [`super::Overhead`]).
    pub fn with_overhead(mut self, overhead: u64) -> Self {
        self.overhead = overhead;
        self
    }

    /// Sets what the server puts around the content (see [`Frame`]).
    pub fn with_frame(mut self, frame: Frame) -> Self {
        self.frame = frame;
        self
    }

    pub fn frame(&self) -> Frame {
        self.frame
    }

    pub fn vocab(&self) -> &SafeVocab {
        &self.vocab
    }

    pub fn rendering(&self) -> Rendering {
        self.rendering
    }

    pub fn overhead(&self) -> u64 {
        self.overhead
    }

    /// Content tokens for a record that asks for `input_length` tokens in all: the overhead is
    /// taken off, keeping at least one token (a record shorter than the template cannot match).
    pub fn content_len(&self, input_length: u64) -> u64 {
        input_length.saturating_sub(self.overhead).max(1)
    }

    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// A cache sized for this synthesiser's blocks within `budget_bytes`.
    pub fn block_cache(&self, budget_bytes: usize) -> BlockCache {
        let block_bytes = self.mean_piece_len() * self.block_size as f64;
        BlockCache::new(budget_bytes, block_bytes.ceil() as usize)
    }

    /// Calls `f` with the table position of each of the `len` content tokens of a record.
    /// Block `i` covers tokens `[i*B, (i+1)*B)` and is drawn from the stream of `hash_ids[i]`;
    /// a last partial block is a prefix of the full one; tokens past the hash ids are padding
    /// drawn from the record's own stream; hash ids past the length are ignored.
    pub fn for_each_token(&self, index: u64, len: u64, hash_ids: &[u64], mut f: impl FnMut(usize)) {
        let n = self.vocab.len() as u64;
        let mut remaining = len;
        for &hash in hash_ids {
            if remaining == 0 {
                return;
            }
            let take = remaining.min(self.block_size);
            let mut rng = self.block_stream(hash);
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

    /// Appends the prompt of a record as a JSON value (a string, or an array of ids) with
    /// `len` content tokens. Full blocks come from `cache`, rendered once per hash id.
    pub fn write_json(
        &self,
        cache: &mut BlockCache,
        index: u64,
        len: u64,
        hash_ids: &[u64],
        out: &mut Vec<u8>,
    ) {
        out.reserve(self.estimated_bytes(len));
        out.push(match self.rendering {
            Rendering::Text => b'"',
            Rendering::TokenIds => b'[',
        });
        let mut remaining = len;
        for &hash in hash_ids {
            if remaining == 0 {
                break;
            }
            if remaining >= self.block_size {
                cache.append(hash, out, |o| {
                    self.emit(&mut self.block_stream(hash), self.block_size, o)
                });
                remaining -= self.block_size;
            } else {
                self.emit(&mut self.block_stream(hash), remaining, out);
                remaining = 0;
            }
        }
        self.emit(
            &mut SplitMix64::new(self.seed, PAD_STREAM, index),
            remaining,
            out,
        );
        match self.rendering {
            Rendering::Text => out.push(b'"'),
            Rendering::TokenIds => {
                // Every piece ends with a comma: the last one becomes the closing bracket.
                if out.last() == Some(&b',') {
                    out.pop();
                }
                out.push(b']');
            }
        }
    }

    /// Appends the text of a record's content (`Rendering::Text` pieces), without quotes.
    pub fn write_text(&self, index: u64, len: u64, hash_ids: &[u64], out: &mut Vec<u8>) {
        self.for_each_token(index, len, hash_ids, |i| {
            out.extend_from_slice(self.vocab.text(i).as_bytes())
        });
    }

    /// The token ids of a record's content.
    pub fn token_ids(&self, index: u64, len: u64, hash_ids: &[u64]) -> Vec<u32> {
        let mut ids = Vec::with_capacity(len as usize);
        self.for_each_token(index, len, hash_ids, |i| ids.push(self.vocab.id(i)));
        ids
    }

    fn block_stream(&self, hash: u64) -> SplitMix64 {
        SplitMix64::new(self.seed, BLOCK_STREAM ^ self.block_size, hash)
    }

    /// Appends `count` pieces drawn from `rng`: one fixed 16-byte copy per token into room made
    /// beforehand, then the buffer is cut to what was written. Room is made 64 tokens at a time,
    /// so a buffer sized with [`PromptSynth::estimated_bytes`] does not grow.
    fn emit(&self, rng: &mut SplitMix64, count: u64, out: &mut Vec<u8>) {
        const STRIDE: u64 = 64;
        let n = self.pieces.len() as u64;
        let mut left = count;
        while left > 0 {
            let step = left.min(STRIDE);
            let mut pos = out.len();
            out.resize(pos + step as usize * SLOT, 0);
            for _ in 0..step {
                let i = rng.below(n);
                out[pos..pos + SLOT].copy_from_slice(&self.pieces[i]);
                pos += self.piece_lens[i] as usize;
            }
            out.truncate(pos);
            left -= step;
        }
    }

    /// A generous estimate of the bytes a prompt of `len` tokens takes in a body.
    pub fn estimated_bytes(&self, len: u64) -> usize {
        (len as f64 * (self.mean_piece_len() + 0.5)) as usize + 64 * SLOT + 16
    }

    fn mean_piece_len(&self) -> f64 {
        self.piece_lens.iter().map(|&l| f64::from(l)).sum::<f64>()
            / self.piece_lens.len().max(1) as f64
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

    fn vocab() -> Arc<SafeVocab> {
        let words: Vec<String> = (0..300u32)
            .map(|i| {
                format!(" w{}", char::from(b'a' + (i % 26) as u8)).repeat(1 + (i as usize % 3))
            })
            .collect();
        let pieces: Vec<(u32, &str)> = words
            .iter()
            .enumerate()
            .map(|(i, w)| (1000 + i as u32, w.as_str()))
            .collect();
        Arc::new(SafeVocab::from_pieces(&pieces))
    }

    /// The cached, fixed-slot writer and the plain per-token walk agree, for every shape of
    /// record: padded, truncated, partial last block, hits and misses.
    #[test]
    fn cached_json_equals_the_token_walk() {
        for rendering in [Rendering::Text, Rendering::TokenIds] {
            let synth = PromptSynth::new(vocab(), 3, 4, rendering);
            let mut cache = synth.block_cache(1 << 16);
            for (len, hashes) in [
                (1u64, vec![9u64]),
                (8, vec![1, 2]),
                (10, vec![1, 2, 3]),
                (11, vec![1]),
                (3, vec![1, 2, 3, 4]),
                (5, vec![]),
            ] {
                for _ in 0..2 {
                    let mut json = Vec::new();
                    synth.write_json(&mut cache, 42, len, &hashes, &mut json);
                    let ids = synth.token_ids(42, len, &hashes);
                    let want = match rendering {
                        Rendering::Text => {
                            let mut t = Vec::new();
                            synth.write_text(42, len, &hashes, &mut t);
                            serde_json::Value::String(String::from_utf8(t).unwrap())
                        }
                        Rendering::TokenIds => serde_json::json!(ids),
                    };
                    let got: serde_json::Value = serde_json::from_slice(&json).unwrap();
                    assert_eq!(got, want, "{rendering:?} len {len} hashes {hashes:?}");
                    assert_eq!(ids.len() as u64, len);
                }
            }
            assert!(cache.hits() > 0);
        }
    }

    #[test]
    fn equal_hash_ids_give_equal_blocks_and_padding_is_per_record() {
        let synth = PromptSynth::new(vocab(), 0, 4, Rendering::Text);
        let a = synth.token_ids(0, 12, &[5, 6, 7]);
        let b = synth.token_ids(1, 10, &[5, 6, 8]);
        assert_eq!(a[..8], b[..8]);
        assert_ne!(a[8..10], b[8..10]);
        // Padding past the hash ids depends on the record, not on the blocks.
        let c = synth.token_ids(0, 6, &[5]);
        let d = synth.token_ids(1, 6, &[5]);
        assert_eq!(c[..4], d[..4]);
        assert_ne!(c[4..], d[4..]);
    }

    #[test]
    fn overhead_is_taken_off_the_content() {
        let synth = PromptSynth::new(vocab(), 0, 4, Rendering::Text).with_overhead(5);
        assert_eq!(synth.content_len(100), 95);
        assert_eq!(synth.content_len(5), 1);
    }
}
