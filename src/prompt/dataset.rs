//! `--prompt-source dataset`: the trace's timing and lengths with prompt text from a dataset
//! (UCM TraceReplay's "benchmark mode"). Each record takes the entry chosen by (seed, record
//! index), cut or extended to exactly its `input_length` tokens as the server counts them
//! (chat template or special tokens included), checked with the tokenizer.
//!
//! Cutting token ids and decoding is not always the inverse of encoding (merges across the
//! cut), so the length is counted again after each cut and corrected; a text too short is
//! extended after a newline with the synthesiser's own tokens and counted again. A record that
//! does not settle within a few rounds gets the synthesiser's text instead, and is counted in
//! [`DatasetPrompts::fallbacks`]. Hash ids are not used: prefix sharing is the dataset's own.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use super::{PromptCounter, PromptSynth, Wrapping};
use crate::error::{Error, Result};
use crate::rng::SplitMix64;
use crate::trace::{Input, TraceRecord};

/// Rounds of counting before a record falls back to synthetic text.
const ROUNDS: usize = 8;

pub struct DatasetPrompts {
    texts: Vec<String>,
    counter: Arc<PromptCounter>,
    wrapping: Wrapping,
    synth: Arc<PromptSynth>,
    seed: u64,
    fallbacks: AtomicU64,
}

/// The prompts of a dataset file: ShareGPT JSON (an array of `{"conversations": [{"from":
/// "human", "value": ...}, ...]}`: each conversation's first human turn) or JSONL of
/// `{"prompt": ...}`.
pub fn load_texts(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let bad = |line: u64, message: String| Error::Trace {
        file: path.to_path_buf(),
        line,
        message,
    };
    let mut texts = Vec::new();
    if text.trim_start().starts_with('[') {
        let all: Vec<Value> = serde_json::from_str(&text)
            .map_err(|e| bad(e.line() as u64, format!("invalid JSON: {e}")))?;
        for conv in &all {
            let first = conv["conversations"].as_array().and_then(|turns| {
                turns
                    .iter()
                    .find(|t| matches!(t["from"].as_str(), Some("human" | "user")))
                    .and_then(|t| t["value"].as_str())
            });
            // ShareGPT has conversations without a human turn: skipped.
            if let Some(t) = first.filter(|t| !t.trim().is_empty()) {
                texts.push(t.to_string());
            }
        }
    } else {
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value = serde_json::from_str(line)
                .map_err(|e| bad(i as u64 + 1, format!("invalid JSON: {e}")))?;
            let prompt = v["prompt"]
                .as_str()
                .ok_or_else(|| bad(i as u64 + 1, "missing field `prompt` (a string)".into()))?;
            texts.push(prompt.to_string());
        }
    }
    if texts.is_empty() {
        return Err(bad(
            1,
            "no prompts: give ShareGPT JSON or JSONL of {\"prompt\": ...}".into(),
        ));
    }
    Ok(texts)
}

impl DatasetPrompts {
    pub fn new(
        texts: Vec<String>,
        counter: Arc<PromptCounter>,
        wrapping: Wrapping,
        synth: Arc<PromptSynth>,
        seed: u64,
    ) -> DatasetPrompts {
        DatasetPrompts {
            texts,
            counter,
            wrapping,
            synth,
            seed,
            fallbacks: AtomicU64::new(0),
        }
    }

    /// Records that got synthetic text because no cut of their dataset text settled.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// Gives a record with a length (and no text) its dataset text of exactly that length.
    pub fn fill(&self, record: &mut TraceRecord) -> std::result::Result<(), String> {
        let Input::Synthetic { input_length, .. } = record.input else {
            return Ok(());
        };
        let pick =
            SplitMix64(self.seed ^ record.index.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64();
        let source = &self.texts[(pick % self.texts.len() as u64) as usize];
        let text = match self.fit(source, input_length, record.index)? {
            Some(text) => text,
            None => {
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
                let mut out = Vec::new();
                let len = self.synth.content_len(input_length);
                self.synth.write_text(record.index, len, &[], &mut out);
                String::from_utf8(out).map_err(|e| e.to_string())?
            }
        };
        record.input = Input::Text {
            text,
            input_length: Some(input_length),
        };
        Ok(())
    }

    /// `source` cut or extended to `target` tokens as the server counts them.
    fn fit(
        &self,
        source: &str,
        target: u64,
        index: u64,
    ) -> std::result::Result<Option<String>, String> {
        let ids = self.counter.content_ids(source)?;
        let mut keep = ids.len().min(target as usize);
        for _ in 0..ROUNDS {
            let text = self.counter.decode(&ids[..keep])?;
            let n = self.count(&text)?;
            if n == target {
                return Ok(Some(text));
            }
            if n > target {
                let over = (n - target) as usize;
                if keep == 0 {
                    return Ok(None); // the wrapping alone is longer than the target
                }
                keep = keep.saturating_sub(over.max(1));
                continue;
            }
            if keep < ids.len() {
                keep = (keep + (target - n) as usize).min(ids.len());
                continue;
            }
            return self.extend(text, n, target, index);
        }
        Ok(None)
    }

    /// The whole dataset text is too short: synthetic tokens after a newline, corrected until
    /// the count is exact.
    fn extend(
        &self,
        base: String,
        base_count: u64,
        target: u64,
        index: u64,
    ) -> std::result::Result<Option<String>, String> {
        let mut pad = target.saturating_sub(base_count + 1);
        for _ in 0..ROUNDS {
            let mut out = base.clone().into_bytes();
            out.push(b'\n');
            self.synth.write_text(index, pad, &[], &mut out);
            let text = String::from_utf8(out).map_err(|e| e.to_string())?;
            let n = self.count(&text)?;
            if n == target {
                return Ok(Some(text));
            }
            let next = pad as i64 + target as i64 - n as i64;
            if next < 0 {
                return Ok(None);
            }
            pad = next as u64;
        }
        Ok(None)
    }

    /// Tokens the server counts for this text as the record's prompt.
    fn count(&self, text: &str) -> std::result::Result<u64, String> {
        let ids = match self.wrapping {
            Wrapping::Chat => self
                .counter
                .chat_ids(&json!([{"role": "user", "content": text}]), None)?,
            Wrapping::Completion => self.counter.completion_ids(text)?,
            Wrapping::TokenIds => {
                return Err(
                    "--prompt-source dataset sends text: not with --prompt-mode token-ids".into(),
                )
            }
        };
        Ok(ids.len() as u64)
    }
}
