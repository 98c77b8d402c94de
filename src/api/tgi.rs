//! Hugging Face Text Generation Inference's own API: `POST /generate_stream` (SSE) and
//! `POST /generate`, with `inputs` and `parameters`.
//!
//! A streamed answer is one `data:` event per token (`{"index", "token": {"id", "text",
//! "logprob", "special"}, "generated_text": null, "details": null}`); the last event also
//! carries `generated_text` and `details` (`finish_reason`, `generated_tokens`). Errors are
//! `{"error": ..., "error_type": ...}`. TGI has no `min_tokens` or `ignore_eos`: an output
//! length is only capped by `max_new_tokens`. The model is the one the server was started
//! with (`GET /info` names it); the body carries none.

use std::io::Write;

use super::openai::{merge_extra, write_prompt};
use super::{BodyOptions, Synthesis};
use crate::trace::{Input, TraceRecord};

pub const STREAM_PATH: &str = "/generate_stream";
pub const PATH: &str = "/generate";
/// Where the served model is named (`model_id`).
pub const INFO_PATH: &str = "/info";

/// Appends the JSON body of `record`, and its `prompts.jsonl` line to `saved` when given.
pub fn write_body(
    record: &TraceRecord,
    opts: &BodyOptions,
    synthesis: Option<&mut Synthesis<'_>>,
    out: &mut Vec<u8>,
    saved: Option<&mut Vec<u8>>,
) -> Result<(), String> {
    let start = out.len();
    if let Input::Messages { .. } = record.input {
        return Err(
            "a record with `messages` needs --api openai-chat (TGI takes `inputs` text)".into(),
        );
    }
    out.extend_from_slice(b"{\"inputs\":");
    let prompt_start = out.len();
    let key = write_prompt(record, &record.input, synthesis, out)?;
    if key != b"prompt" {
        return Err("--prompt-mode token-ids needs --api openai-completions".into());
    }
    if let Some(saved) = saved {
        write!(saved, "{{\"index\":{},\"prompt\":", record.index).map_err(|e| e.to_string())?;
        saved.extend_from_slice(&out[prompt_start..]);
        saved.extend_from_slice(b"}\n");
    }
    out.extend_from_slice(b",\"parameters\":{\"details\":true");
    if let Some(n) = record.output_length {
        write!(out, ",\"max_new_tokens\":{n}").map_err(|e| e.to_string())?;
    }
    out.extend_from_slice(b"}");
    if opts.stream {
        out.extend_from_slice(b",\"stream\":true");
    }
    out.push(b'}');
    if opts.extra_body.is_some() || record.extra.is_some() {
        merge_extra(out, start, opts.extra_body.as_ref(), record.extra.as_ref())?;
    }
    Ok(())
}

/// The model a TGI server names at `GET /info`.
pub fn model_from_info(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("model_id")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceIds;
    use serde_json::{json, Value};

    #[test]
    fn bodies_carry_inputs_and_max_new_tokens_with_details() {
        let record = TraceRecord {
            index: 3,
            line: 4,
            timestamp_ms: Some(0.0),
            input: Input::Text {
                text: "hello there".into(),
                input_length: None,
            },
            output_length: Some(9),
            ids: TraceIds::default(),
            extra: Some(
                json!({"parameters": {"max_new_tokens": 9, "top_k": 5}})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        };
        let opts = BodyOptions {
            model_json: "\"m\"".into(),
            stream: true,
            exact_output: true,
            extra_body: None,
        };
        let (mut out, mut saved) = (Vec::new(), Vec::new());
        write_body(&record, &opts, None, &mut out, Some(&mut saved)).unwrap();
        let body: Value = serde_json::from_slice(&out).unwrap();
        // A record's `extra` replaces top-level keys (AIPerf's shallow merge).
        assert_eq!(
            body,
            json!({"inputs": "hello there", "parameters": {"max_new_tokens": 9, "top_k": 5}, "stream": true})
        );
        let mut out = Vec::new();
        let plain = TraceRecord {
            extra: None,
            ..record
        };
        write_body(
            &plain,
            &BodyOptions {
                stream: false,
                ..opts
            },
            None,
            &mut out,
            None,
        )
        .unwrap();
        let body: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            body,
            json!({"inputs": "hello there", "parameters": {"details": true, "max_new_tokens": 9}})
        );
        assert_eq!(
            std::str::from_utf8(&saved).unwrap(),
            "{\"index\":3,\"prompt\":\"hello there\"}\n"
        );
        assert_eq!(
            model_from_info(br#"{"model_id":"bigscience/bloom","max_input_tokens":4}"#).as_deref(),
            Some("bigscience/bloom")
        );
    }
}
