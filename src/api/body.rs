//! What every dialect's body writer shares: the options, the prompt value, the saved prompt
//! line, the lengths asked for, `--extra-body`.

use std::io::Write;

use serde_json::{Map, Value};

use crate::prompt::{BlockCache, PromptSynth, Rendering};
use crate::trace::{Input, TraceRecord};

/// Why a record's request body cannot be written in a dialect.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the trace has no text: give --tokenizer to synthesise prompts")]
    NoTokenizer,
    /// The record or the prompt mode asks for what the dialect cannot carry.
    #[error("{0}")]
    Unsupported(&'static str),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

/// Everything about a body that does not come from the record.
#[derive(Clone, Debug)]
pub struct BodyOptions {
    /// The model name, already JSON-encoded (with its quotes).
    pub model_json: String,
    pub stream: bool,
    /// Ask for exactly `output_length` tokens: `min_tokens` and `ignore_eos` beside `max_tokens`.
    pub exact_output: bool,
    /// `--extra-body`: merged into every body; a record's own `extra` wins over it.
    pub extra_body: Option<Map<String, Value>>,
}

/// What builds synthetic prompts in one producer: the shared synthesiser and the producer's
/// own block cache.
pub struct Synthesis<'a> {
    pub synth: &'a PromptSynth,
    pub cache: &'a mut BlockCache,
}

/// Appends a `prompts.jsonl` line: `{"index":i,"<key>":<prompt JSON as sent>}`.
pub(super) fn write_saved_line(saved: &mut Vec<u8>, index: u64, key: &[u8], prompt: &[u8]) {
    // Writing to a Vec cannot fail.
    let _ = write!(saved, "{{\"index\":{index},\"");
    saved.extend_from_slice(key);
    saved.extend_from_slice(b"\":");
    saved.extend_from_slice(prompt);
    saved.extend_from_slice(b"}\n");
}

/// `max_tokens` for the record's output length and, for an exact one, vLLM's and SGLang's
/// `min_tokens` and `ignore_eos` beside it.
pub(super) fn write_lengths(record: &TraceRecord, opts: &BodyOptions, out: &mut Vec<u8>) {
    if let Some(n) = record.output_length {
        let _ = write!(out, ",\"max_tokens\":{n}");
        if opts.exact_output {
            let _ = write!(out, ",\"min_tokens\":{n},\"ignore_eos\":true");
        }
    }
}

/// Writes the prompt value; returns its `prompts.jsonl` key.
pub(super) fn write_prompt(
    record: &TraceRecord,
    input: &Input,
    synthesis: Option<&mut Synthesis<'_>>,
    out: &mut Vec<u8>,
) -> Result<&'static [u8], BodyError> {
    match input {
        Input::Text { text, .. } => {
            serde_json::to_writer(&mut *out, text)?;
            Ok(b"prompt")
        }
        Input::Synthetic {
            input_length,
            hash_ids,
        } => {
            let s = synthesis.ok_or(BodyError::NoTokenizer)?;
            let len = s.synth.content_len(*input_length);
            s.synth
                .write_json(s.cache, record.index, len, hash_ids, out);
            Ok(match s.synth.rendering() {
                Rendering::Text => b"prompt",
                Rendering::TokenIds => b"token_ids",
            })
        }
        Input::Messages { .. } => unreachable!("handled by the caller"),
    }
}

/// Rare path: re-reads the body just written and shallow-merges the extras into it.
pub(super) fn merge_extra(
    out: &mut Vec<u8>,
    start: usize,
    cli: Option<&Map<String, Value>>,
    record: Option<&Map<String, Value>>,
) -> Result<(), BodyError> {
    let mut body: Map<String, Value> = serde_json::from_slice(&out[start..])?;
    for extra in [cli, record].into_iter().flatten() {
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
    }
    out.truncate(start);
    Ok(serde_json::to_writer(&mut *out, &body)?)
}
