//! The table of boundary-stable tokens of a tokenizer.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use crate::error::{Error, Result};

/// Fewer stable tokens than this and prompts would repeat too often to look like text.
const MIN_SAFE_TOKENS: usize = 1000;

/// Loads a Hugging Face `tokenizer.json`, given as the file or a directory holding it.
pub fn load_tokenizer(path: &Path) -> Result<(Tokenizer, PathBuf)> {
    let file = if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path.to_path_buf()
    };
    if !file.is_file() {
        return Err(Error::Tokenizer {
            path: file,
            message: "no such file (give a tokenizer.json or a directory holding one)".into(),
        });
    }
    // No rayon pool behind pinned threads: the tokenizer only runs at start-up anyway.
    tokenizers::utils::parallelism::set_parallelism(false);
    let tokenizer = Tokenizer::from_file(&file).map_err(|e| Error::Tokenizer {
        path: file.clone(),
        message: e.to_string(),
    })?;
    Ok((tokenizer, file))
}

/// Token ids whose text is a space followed by lowercase ASCII letters and which re-encode to
/// themselves, sorted by id so the table is the same on every host.
pub struct SafeVocab {
    ids: Vec<u32>,
    /// The texts of all safe tokens, back to back; token `i` is `text[ends[i-1]..ends[i]]`.
    text: String,
    ends: Vec<u32>,
}

impl SafeVocab {
    /// Scans the base vocabulary once (a fraction of a second for 150k-token vocabularies).
    pub fn from_tokenizer(tokenizer: &Tokenizer, path: &Path) -> Result<SafeVocab> {
        let size = tokenizer.get_vocab_size(false) as u32;
        let mut candidates: Vec<(u32, String)> = Vec::new();
        for id in 0..size {
            let Ok(text) = tokenizer.decode(&[id], false) else {
                continue;
            };
            let b = text.as_bytes();
            if b.len() >= 2 && b[0] == b' ' && b[1..].iter().all(u8::is_ascii_lowercase) {
                candidates.push((id, text));
            }
        }
        let mut vocab = SafeVocab {
            ids: Vec::new(),
            text: String::new(),
            ends: Vec::new(),
        };
        for (id, text) in candidates {
            let stable = tokenizer
                .encode(text.as_str(), false)
                .is_ok_and(|enc| enc.get_ids() == [id]);
            if stable {
                vocab.ids.push(id);
                vocab.text.push_str(&text);
                vocab.ends.push(vocab.text.len() as u32);
            }
        }
        if vocab.ids.len() < MIN_SAFE_TOKENS {
            return Err(Error::Tokenizer {
                path: path.to_path_buf(),
                message: format!(
                    "only {} tokens of the form \" word\" re-encode to themselves (need {MIN_SAFE_TOKENS}); \
                     this tokenizer cannot be used to synthesise prompts",
                    vocab.ids.len()
                ),
            });
        }
        Ok(vocab)
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
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }
}
