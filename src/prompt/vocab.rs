//! The table of boundary-stable tokens of a tokenizer.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use crate::error::{Error, Result};

/// Fewer stable tokens than this and prompts would repeat too often to look like text.
const MIN_SAFE_TOKENS: usize = 1000;
/// Every piece fits a fixed slot so that prompts are built with fixed-width copies.
pub const SLOT: usize = 16;

/// Loads a Hugging Face `tokenizer.json`, given as the file, a directory holding it, or a
/// model in the local Hugging Face cache (`ORG/NAME[@REV]`, see [`super::hub`]).
pub fn load_tokenizer(path: &Path) -> Result<(Tokenizer, PathBuf)> {
    let file = super::tokenizer_file(path)?;
    // No rayon pool behind pinned threads: the tokenizer only runs at start-up anyway.
    tokenizers::utils::parallelism::set_parallelism(false);
    let tokenizer = Tokenizer::from_file(&file).map_err(|e| Error::Tokenizer {
        path: file.clone(),
        message: format!(
            "not a tokenizer: the Hugging Face tokenizers library cannot read it as a \
             tokenizer.json ({e})"
        ),
    })?;
    Ok((tokenizer, file))
}

/// Token ids that are a space followed by lowercase ASCII letters, sorted by id so the table is
/// the same on every host. Each was checked to re-encode to itself (so any concatenation of
/// them re-encodes to the same ids, one per piece: the pre-tokenizers of byte-level BPE and
/// Metaspace tokenizers split `" word"` pieces apart), and its bare word (`"word"`) to encode
/// to a single token too, so a chat template that trims the content keeps the count.
pub struct SafeVocab {
    ids: Vec<u32>,
    /// Each token's text, left-aligned in a 16-byte slot; its length in `lens`.
    slots: Vec<[u8; SLOT]>,
    lens: Vec<u8>,
}

impl SafeVocab {
    /// Scans the base vocabulary once (about a second for 150k-token vocabularies).
    pub fn from_tokenizer(tokenizer: &Tokenizer, path: &Path) -> Result<SafeVocab> {
        let fail = |message: String| Error::Tokenizer {
            path: path.to_path_buf(),
            message,
        };
        let size = tokenizer.get_vocab_size(false) as u32;
        let context = Context::find(tokenizer)
            .ok_or_else(|| fail("cannot decode a plain letter: not a text tokenizer".into()))?;
        let mut vocab = SafeVocab {
            ids: Vec::new(),
            slots: Vec::new(),
            lens: Vec::new(),
        };
        for id in 0..size {
            let Some(text) = context.text_of(tokenizer, id) else {
                continue;
            };
            let b = text.as_bytes();
            if is_word_piece(&text)
                && encodes_to(tokenizer, &text, &[id])
                && encodes_to_one(tokenizer, &text[1..])
            {
                let mut slot = [0u8; SLOT];
                slot[..b.len()].copy_from_slice(b);
                vocab.ids.push(id);
                vocab.slots.push(slot);
                vocab.lens.push(b.len() as u8);
            }
        }
        if vocab.ids.len() < MIN_SAFE_TOKENS {
            return Err(fail(format!(
                "only {} tokens of the form \" word\" re-encode to themselves (need {MIN_SAFE_TOKENS}); \
                 this tokenizer cannot be used to synthesise prompts: use a trace with text, or another tokenizer",
                vocab.ids.len()
            )));
        }
        vocab.check_samples(tokenizer).map_err(fail)?;
        Ok(vocab)
    }

    /// Builds a table from explicit (id, text) pairs, for tests of the synthesis that need no
    /// tokenizer. Texts must be `" word"` pieces of at most 16 bytes.
    pub fn from_pieces(pieces: &[(u32, &str)]) -> SafeVocab {
        let mut vocab = SafeVocab {
            ids: Vec::new(),
            slots: Vec::new(),
            lens: Vec::new(),
        };
        for &(id, text) in pieces {
            assert!(text.len() <= SLOT && text.starts_with(' '));
            let mut slot = [0u8; SLOT];
            slot[..text.len()].copy_from_slice(text.as_bytes());
            vocab.ids.push(id);
            vocab.slots.push(slot);
            vocab.lens.push(text.len() as u8);
        }
        vocab
    }

    /// The table as an earlier scan found it (the analysis cache), or None when a piece is
    /// not of the stable shape, the ids are not ascending, or there are too few.
    pub fn from_checked_pieces(pieces: &[(u32, &str)]) -> Option<SafeVocab> {
        let ascending = pieces.windows(2).all(|w| w[0].0 < w[1].0);
        (pieces.len() >= MIN_SAFE_TOKENS
            && ascending
            && pieces.iter().all(|(_, t)| is_word_piece(t)))
        .then(|| SafeVocab::from_pieces(pieces))
    }

    /// Encodes a few whole prompts drawn from the table: the per-token checks say each piece is
    /// stable alone; this says the tokenizer's pre-tokenizer really splits them apart (a
    /// tokenizer whose normaliser prepends a space, as legacy SentencePiece exports do, fails
    /// here rather than silently sending prompts one token too long).
    fn check_samples(&self, tokenizer: &Tokenizer) -> std::result::Result<(), String> {
        for sample in 0..4u64 {
            let picks: Vec<usize> = (0..256u64)
                .map(|i| ((sample * 7919 + i * 104_729) % self.len() as u64) as usize)
                .collect();
            let text: String = picks.iter().map(|&i| self.text(i)).collect();
            let want: Vec<u32> = picks.iter().map(|&i| self.id(i)).collect();
            let got = tokenizer
                .encode_fast(text.as_str(), false)
                .map_err(|e| e.to_string())?;
            if got.get_ids() != want.as_slice() {
                return Err(format!(
                    "a prompt of {} stable tokens re-encodes to {} tokens: this tokenizer does not split \" word\" pieces apart \
                     (its normaliser or pre-tokenizer merges them), so exact prompts cannot be synthesised",
                    want.len(),
                    got.len()
                ));
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn id(&self, i: usize) -> u32 {
        self.ids[i]
    }

    pub fn text(&self, i: usize) -> &str {
        std::str::from_utf8(&self.slots[i][..self.lens[i] as usize]).expect("ASCII")
    }

    /// The fixed slot of token `i` and its length.
    pub fn slot(&self, i: usize) -> (&[u8; SLOT], usize) {
        (&self.slots[i], self.lens[i] as usize)
    }
}

/// How a token's text is read in context: decoding a token alone drops its leading space with
/// some decoders (Metaspace strips it from the first token), so each token is decoded after an
/// anchor token and the anchor's own text is cut off.
struct Context {
    anchor: u32,
    anchor_text: String,
}

impl Context {
    fn find(tokenizer: &Tokenizer) -> Option<Context> {
        let enc = tokenizer.encode_fast("a", false).ok()?;
        let anchor = *enc.get_ids().last()?;
        let anchor_text = tokenizer.decode(&[anchor], false).ok()?;
        (!anchor_text.is_empty()).then_some(Context {
            anchor,
            anchor_text,
        })
    }

    fn text_of(&self, tokenizer: &Tokenizer, id: u32) -> Option<String> {
        let both = tokenizer.decode(&[self.anchor, id], false).ok()?;
        both.strip_prefix(self.anchor_text.as_str())
            .map(str::to_owned)
    }
}

/// `" word"`: a space and lowercase ASCII letters, fitting a slot.
fn is_word_piece(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 2 && b.len() <= SLOT && b[0] == b' ' && b[1..].iter().all(u8::is_ascii_lowercase)
}

fn encodes_to(tokenizer: &Tokenizer, text: &str, ids: &[u32]) -> bool {
    tokenizer
        .encode_fast(text, false)
        .is_ok_and(|enc| enc.get_ids() == ids)
}

fn encodes_to_one(tokenizer: &Tokenizer, text: &str) -> bool {
    tokenizer
        .encode_fast(text, false)
        .is_ok_and(|enc| enc.get_ids().len() == 1)
}
