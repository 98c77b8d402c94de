//! Proof by re-encoding: builds a record's prompt exactly as the producers do, then counts it
//! with the real tokenizer and chat template as the server would (`llmreplay prompts --verify`
//! and the exactness tests). Slow by nature (the tokenizer runs at ~0.2M tokens/s), so it is a
//! check, never part of a replay.

use serde_json::{json, Value};

use super::{BlockCache, PromptCounter, PromptSynth, Wrapping};

/// What the server would see of one record's prompt.
#[derive(Debug)]
pub struct Checked {
    /// The prompt's token ids on the server (template and special tokens included).
    pub server_ids: Vec<u32>,
    /// Where the content's tokens sit in `server_ids`.
    pub content_start: usize,
    pub content_len: usize,
}

impl Checked {
    pub fn server_tokens(&self) -> u64 {
        self.server_ids.len() as u64
    }

    pub fn content_ids(&self) -> &[u32] {
        &self.server_ids[self.content_start..self.content_start + self.content_len]
    }
}

/// Builds the prompt of one record through `cache` (as a producer would), re-encodes it, and
/// checks that the synthetic token ids come back unchanged inside the server's sequence. The
/// first content token may come back as its bare word (templates that trim the content drop
/// its leading space; the safe table guarantees that is one token too).
pub fn check_record(
    synth: &PromptSynth,
    counter: &PromptCounter,
    wrapping: Wrapping,
    cache: &mut BlockCache,
    index: u64,
    input_length: u64,
    hash_ids: &[u64],
) -> Result<Checked, String> {
    let len = synth.content_len(input_length);
    let mut json = Vec::new();
    synth.write_json(cache, index, len, hash_ids, &mut json);
    let sent: Value =
        serde_json::from_slice(&json).map_err(|e| format!("the built prompt is not JSON: {e}"))?;
    let server_ids = match (wrapping, &sent) {
        (Wrapping::Chat, Value::String(content)) => {
            counter.chat_ids(&json!([{"role": "user", "content": content}]), None)?
        }
        (Wrapping::Completion, Value::String(prompt)) => counter.completion_ids(prompt)?,
        (Wrapping::TokenIds, Value::Array(ids)) => ids
            .iter()
            .map(|v| {
                v.as_u64()
                    .map(|n| n as u32)
                    .ok_or("a token id is not a number")
            })
            .collect::<Result<_, _>>()?,
        _ => return Err("the prompt's JSON type does not match the mode".into()),
    };
    let want = synth.token_ids(index, len, hash_ids);
    let n = want.len();
    if server_ids.len() < n {
        return Err(format!(
            "{n} synthetic tokens came back as only {} tokens",
            server_ids.len()
        ));
    }
    // The content follows the head the frame measured, every token intact but the first,
    // which may be its bare word.
    let content_start = synth.frame().head as usize;
    if server_ids.get(content_start + 1..content_start + n) != Some(&want[1..]) {
        return Err(format!(
            "the {n} synthetic tokens are not found intact after the {content_start}-token head \
             among the {} tokens the server would see",
            server_ids.len()
        ));
    }
    Ok(Checked {
        server_ids,
        content_start,
        content_len: n,
    })
}
