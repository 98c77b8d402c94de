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

use serde_json::{json, Map, Value};

use super::body::{merge_extra, write_prompt, write_saved_line};
use super::events::{nonempty, text_of};
use super::serve::{answer_text, stream_of, TOKEN_TEXT, DEFAULT_MAX_TOKENS};
use super::{Answer, BodyOptions, Dialect, Discovery, FullResponse, MockRequest, Prompt, Route};
use super::{BodyError, StreamKeys, Synthesis};
use crate::prompt::{PromptMode, Wrapping};
use crate::trace::{Input, TraceRecord};

pub const STREAM_PATH: &str = "/generate_stream";
pub const PATH: &str = "/generate";
/// Where the served model is named (`model_id`).
pub const INFO_PATH: &str = "/info";

pub struct Tgi;

/// A token event's `token.text` is output; the last event's `details.generated_tokens` counts
/// them (TGI reports no prompt count).
const KEYS: StreamKeys = StreamKeys {
    content: &[b"\"text\":"],
    reasoning: &[],
    tool_call: None,
    reasoning_tokens: None,
    usage: b"\"details\":",
    prompt_tokens: &[],
    cached_tokens: None,
    completion_tokens: b"\"generated_tokens\":",
    error: (b"\"error_type\":", None),
    server_timings: false,
};

impl Dialect for Tgi {
    fn name(&self) -> &'static str {
        "tgi"
    }
    fn about(&self) -> &'static str {
        "Hugging Face TGI's own POST /generate_stream and /generate (inputs, parameters.max_new_tokens); TGI cannot be asked for an exact output length"
    }
    fn path(&self, stream: bool) -> &'static str {
        if stream {
            STREAM_PATH
        } else {
            PATH
        }
    }
    fn url_paths(&self) -> &'static [&'static str] {
        &[STREAM_PATH, PATH]
    }
    fn discovery(&self) -> Discovery {
        Discovery {
            path: INFO_PATH,
            model: model_from_info,
        }
    }
    fn body_names_model(&self) -> bool {
        false
    }
    fn enforces_output_length(&self) -> bool {
        false
    }
    fn wrapping(&self, mode: PromptMode) -> Option<Wrapping> {
        // TGI tokenizes `inputs` with the tokenizer's special tokens, as completions do.
        (mode == PromptMode::Text).then_some(Wrapping::Completion)
    }
    fn write_body(
        &self,
        record: &TraceRecord,
        opts: &BodyOptions,
        synthesis: Option<&mut Synthesis<'_>>,
        out: &mut Vec<u8>,
        saved: Option<&mut Vec<u8>>,
    ) -> Result<(), BodyError> {
        write_body(record, opts, synthesis, out, saved)
    }
    fn stream_keys(&self) -> &'static StreamKeys {
        &KEYS
    }
    fn read_body(&self, v: &Value) -> FullResponse {
        // `/generate` answers an object; TGI's compat route `/` a list of one.
        let first = v.as_array().and_then(|a| a.first()).unwrap_or(v);
        FullResponse {
            completion_tokens: first
                .pointer("/details/generated_tokens")
                .and_then(super::events::count),
            content: nonempty(first.get("generated_text")),
            answer: text_of(first.get("generated_text")),
            ..FullResponse::default()
        }
    }

    fn routes(&self) -> &'static [Route] {
        &[
            Route {
                path: STREAM_PATH,
                stream: Some(true),
            },
            Route {
                path: PATH,
                stream: Some(false),
            },
        ]
    }
    fn mock_request<'a>(
        &self,
        obj: &'a Map<String, Value>,
        route: &Route,
    ) -> Result<MockRequest<'a>, String> {
        // TGI has no min_tokens or ignore_eos: this mock stops at max_new_tokens.
        let tokens = match obj.get("parameters") {
            None | Some(Value::Null) => DEFAULT_MAX_TOKENS,
            Some(p) => match p.get("max_new_tokens") {
                None | Some(Value::Null) => DEFAULT_MAX_TOKENS,
                Some(v) => v
                    .as_u64()
                    .ok_or("`parameters.max_new_tokens` must be a non-negative integer")?,
            },
        };
        Ok(MockRequest {
            prompt: Prompt::Text(obj.get("inputs").ok_or("`inputs` is required")?),
            tokens,
            stream: stream_of(obj, route),
            reports_usage: false,
            usage_at_start: false,
            include_usage: false,
            continuous_usage: false,
        })
    }
    fn content_frame(&self, _a: &Answer) -> Option<(Vec<u8>, &'static [u8])> {
        None
    }
    /// One token event carrying `n` tokens' text; the last one also carries the whole text
    /// and `details`, as TGI's `generate_stream` ends.
    fn write_tokens(&self, a: &Answer, n: u64, out: &mut Vec<u8>) {
        let _ = write!(out, "data:{{\"index\":{},\"token\":{{\"id\":1,\"text\":\"", a.sent);
        for _ in 0..n {
            out.extend_from_slice(TOKEN_TEXT.as_bytes());
        }
        out.extend_from_slice(b"\",\"logprob\":0.0,\"special\":false},");
        if a.sent >= a.tokens {
            let _ = write!(
                out,
                "\"generated_text\":{},\"details\":{{\"finish_reason\":\"length\",\"generated_tokens\":{},\"seed\":null}}}}\n\n",
                json!(answer_text(a.tokens)),
                a.tokens
            );
        } else {
            out.extend_from_slice(b"\"generated_text\":null,\"details\":null}\n\n");
        }
    }
    /// TGI's last token event closes the stream.
    fn write_close(&self, _a: &Answer, _out: &mut Vec<u8>) -> bool {
        false
    }
    fn full_response(&self, a: &Answer) -> Value {
        json!({"generated_text": answer_text(a.tokens), "details": {"finish_reason": "length", "generated_tokens": a.tokens, "seed": null}})
    }
}

/// Appends the JSON body of `record`, and its `prompts.jsonl` line to `saved` when given.
fn write_body(
    record: &TraceRecord,
    opts: &BodyOptions,
    synthesis: Option<&mut Synthesis<'_>>,
    out: &mut Vec<u8>,
    saved: Option<&mut Vec<u8>>,
) -> Result<(), BodyError> {
    let start = out.len();
    if let Input::Messages { .. } = record.input {
        return Err(BodyError::Unsupported(
            "a record with `messages` needs --api openai-chat (TGI takes `inputs` text)",
        ));
    }
    out.extend_from_slice(b"{\"inputs\":");
    let prompt_start = out.len();
    let key = write_prompt(record, &record.input, synthesis, out)?;
    if key != b"prompt" {
        return Err(BodyError::Unsupported(
            "--prompt-mode token-ids needs --api openai-completions",
        ));
    }
    if let Some(saved) = saved {
        write_saved_line(saved, record.index, b"prompt", &out[prompt_start..]);
    }
    out.extend_from_slice(b",\"parameters\":{\"details\":true");
    if let Some(n) = record.output_length {
        let _ = write!(out, ",\"max_new_tokens\":{n}");
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
fn model_from_info(body: &[u8]) -> Option<String> {
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
