//! A line of a trace `llmreplay capture` wrote, read as the record of what the proxy saw: so
//! that `report CAPTURE.jsonl RUN` puts the captured traffic's own TTFT, TPOT, E2EL, lengths
//! and cached tokens beside a replay of it ([`crate::capture`] writes these keys).
//!
//! | capture line | record |
//! |---|---|
//! | `chat_id` | `index` |
//! | `timestamp` (s since the first request) | the request's schedule and send |
//! | `ttft_ms`, `e2el_ms` | its first token and end, after the send |
//! | `input_length` (the server's count where it gave one) | `input_tokens`, `prompt_tokens` |
//! | `output_length` | `output_tokens` (the tokens asked, for a failed request) |
//! | `cached_tokens`, `reasoning_tokens`, `tool_calls`, `status`, `error` | the same |

use serde_json::Value;

use super::{ErrorKind, RequestError, RequestRecord};

/// Whether a line is a capture's: a Qwen-Bailian line with what the proxy measured.
pub fn is_captured(v: &Value) -> bool {
    v.get("chat_id").is_some() && v.get("block_size").is_some() && v.get("status").is_some()
}

pub fn from_json(v: &Value) -> Result<RequestRecord, String> {
    let need = |key: &str| {
        v.get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("a captured line has a number `{key}`"))
    };
    let count = |key: &str| v.get(key).and_then(Value::as_u64);
    let ns = |ms: f64| (ms * 1e6).round().max(0.0) as u64;
    let sent = ns(need("timestamp")? * 1e3);
    let status = count("status").and_then(|s| u16::try_from(s).ok());
    let error = v
        .get("error")
        .and_then(Value::as_str)
        .map(|kind| RequestError {
            kind: ErrorKind::parse(kind),
            message: format!("{kind} (as captured)"),
        });
    let ok = error.is_none();
    Ok(RequestRecord {
        index: need("chat_id")? as u64,
        status,
        scheduled_ns: sent,
        sent_ns: Some(sent),
        first_token_ns: v
            .get("ttft_ms")
            .and_then(Value::as_f64)
            .map(|t| sent + ns(t)),
        end_ns: v
            .get("e2el_ms")
            .and_then(Value::as_f64)
            .map(|t| sent + ns(t)),
        input_tokens: count("input_length"),
        prompt_tokens: count("input_length"),
        cached_tokens: count("cached_tokens"),
        output_tokens: count("output_length").filter(|_| ok),
        output_tokens_target: count("output_length"),
        // A streamed answer's TPOT is measured from its chunks: where the proxy gave one.
        chunks: u64::from(v.get("tpot_ms").is_some()),
        reasoning_tokens: count("reasoning_tokens"),
        tool_calls: count("tool_calls"),
        error,
        ..RequestRecord::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_captured_line_is_the_record_of_what_the_proxy_saw() {
        let line = json!({"chat_id": 7, "parent_chat_id": -1, "turn": 1, "timestamp": 1.5,
            "input_length": 120, "output_length": 8, "hash_ids": [1], "block_size": 16,
            "api": "openai-chat", "status": 200, "cached_tokens": 96,
            "ttft_ms": 20.0, "tpot_ms": 5.0, "e2el_ms": 55.0});
        assert!(is_captured(&line));
        let r = from_json(&line).unwrap();
        assert_eq!((r.index, r.sent_ns), (7, Some(1_500_000_000)));
        assert_eq!(r.ttft_ms(), Some(20.0));
        assert_eq!(r.e2el_ms(), Some(55.0));
        assert_eq!(r.tpot_ms(), Some(5.0));
        assert_eq!(
            (r.prompt_tokens, r.cached_tokens, r.output_tokens),
            (Some(120), Some(96), Some(8))
        );
        let failed = json!({"chat_id": 8, "timestamp": 2.0, "input_length": 5, "output_length": 3,
            "block_size": 16, "status": 502, "error": "connect"});
        let r = from_json(&failed).unwrap();
        assert_eq!(r.error.map(|e| e.kind), Some(ErrorKind::Connect));
        assert_eq!(r.output_tokens, None);
        // A Bailian trace line is not a capture's.
        assert!(!is_captured(
            &json!({"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0})
        ));
    }
}
