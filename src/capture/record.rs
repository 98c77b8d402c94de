//! A captured request as a line of the trace: what `replay` reads, in Qwen-Bailian's form
//! (`chat_id`, `parent_chat_id` -1 for a conversation's first turn, `turn`, `timestamp` in
//! seconds, `input_length`, `output_length`, `hash_ids`, and a turn's think time as `delay` in
//! ms: from its parent's end to its own arrival), the `block_size` its ids cover, and what the
//! capture saw of it (dialect, model, status, the server's counts, TTFT, TPOT and E2EL as the
//! proxy measured them). No text, header value or tool argument is ever in it: lengths, ids
//! and structure only.

use serde_json::{json, Map, Value};

use super::blocks::BlockHasher;
use super::links::Turn;
use super::request::Seen;
use crate::record::RequestRecord;

/// Where a request stands in the trace: when it came (ms since the first), the turn it
/// continues, and its own turn's number.
pub struct Place {
    pub timestamp_ms: f64,
    pub parent: Option<Turn>,
    pub turn: u32,
    /// From the parent's end to this request's arrival.
    pub think_ms: Option<f64>,
}

/// The line of a generation request whose prompt was read (`tokens`).
pub fn line(
    seen: &Seen,
    tokens: &[u32],
    r: &RequestRecord,
    hasher: &BlockHasher,
    opening: usize,
    place: &Place,
) -> Value {
    let counted = tokens.len() as u64;
    // The server's count where it gave one (the prefix cache and the length it served).
    let input_length = r.prompt_tokens.unwrap_or(counted).max(1);
    // What it answered; a failed request is replayed asking what the client asked.
    let answered = r.output_tokens.filter(|&n| r.ok() && n > 0);
    let mut line = Map::new();
    line.insert("chat_id".into(), json!(r.index));
    line.insert(
        "parent_chat_id".into(),
        json!(place.parent.map_or(-1, |p| p.id as i64)),
    );
    line.insert("turn".into(), json!(place.turn));
    // Seconds, to the microsecond.
    line.insert(
        "timestamp".into(),
        json!((place.timestamp_ms * 1e3).round() / 1e6),
    );
    line.insert("input_length".into(), json!(input_length));
    line.insert(
        "output_length".into(),
        json!(answered.unwrap_or(seen.max_tokens).max(1)),
    );
    let ids = input_length.div_ceil(hasher.block_size() as u64) as usize;
    line.insert(
        "hash_ids".into(),
        json!(hasher.hash_ids(tokens, opening, ids)),
    );
    line.insert("block_size".into(), json!(hasher.block_size()));
    line.insert("api".into(), json!(seen.api.name()));
    line.insert("model".into(), json!(seen.model));
    line.insert("stream".into(), json!(seen.stream));
    line.insert("status".into(), json!(r.status));
    let mut optional = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            line.insert(key.into(), v);
        }
    };
    optional(
        "input_length_counted",
        (counted != input_length).then(|| json!(counted)),
    );
    optional("error", r.error.as_ref().map(|e| json!(e.kind.as_str())));
    optional("cached_tokens", r.cached_tokens.map(|n| json!(n)));
    optional("reasoning_tokens", r.reasoning_tokens.map(|n| json!(n)));
    optional("tool_calls", r.tool_calls.map(|n| json!(n)));
    let ms = |v: Option<f64>| v.map(|v| json!((v * 1e3).round() / 1e3));
    optional("delay", ms(place.think_ms));
    optional("ttft_ms", ms(r.ttft_ms()));
    optional("tpot_ms", ms(r.tpot_ms()));
    optional("e2el_ms", ms(r.e2el_ms()));
    Value::Object(line)
}
