//! Anthropic Messages, `POST /v1/messages` (served by vLLM and llama.cpp's llama-server too):
//! `messages` with the system prompt beside them, and `max_tokens`.
//!
//! A stream is named events: `message_start` (its `message.usage` has the prompt's counts),
//! `content_block_start`, one `content_block_delta` per piece of output (`text_delta`,
//! `thinking_delta`, a tool call's `input_json_delta`), `content_block_stop`, `message_delta`
//! (its `usage.output_tokens` is the answer's count), `message_stop`; `ping` may come between
//! them, and an `error` event ends a failed stream. `input_tokens` leaves out the prompt
//! tokens read from the cache (`cache_read_input_tokens`) or written to it
//! (`cache_creation_input_tokens`): the prompt's tokens are their sum, and the cached ones
//! are those read. The exact output length is asked for as with the OpenAI dialects
//! (`min_tokens`, `ignore_eos`: vLLM's and llama.cpp's extensions; `--no-exact-output` for a
//! server that refuses them). Anthropic's own API also wants `-H 'anthropic-version: ...'`
//! and `-H 'x-api-key: ...'`.

use std::io::Write;

use serde_json::{json, Map, Value};

use super::body::{merge_extra, write_lengths, write_prompt, write_saved_line};
use super::events::{nonempty, text_of};
use super::serve::{answer_text, stream_of, tokens_asked, uint};
use super::{Answer, BodyOptions, Dialect, Discovery, FullResponse, MockRequest, Prompt, Route};
use super::{BodyError, MessagesForm, StreamKeys, Synthesis};
use crate::prompt::{PromptMode, Wrapping};
use crate::trace::{Input, TraceRecord};

pub struct AnthropicMessages;

const PATH: &str = "/v1/messages";

const KEYS: StreamKeys = StreamKeys {
    content: &[b"\"text\":", b"\"partial_json\":"],
    reasoning: &[b"\"thinking\":"],
    tool_call: Some(b"tool_use"),
    reasoning_tokens: None,
    usage: b"\"usage\":",
    prompt_tokens: &[
        b"\"input_tokens\":",
        b"\"cache_read_input_tokens\":",
        b"\"cache_creation_input_tokens\":",
    ],
    cached_tokens: Some(b"\"cache_read_input_tokens\":"),
    completion_tokens: b"\"output_tokens\":",
    error: (b"\"type\":", Some(b"error")),
    server_timings: false,
};

impl Dialect for AnthropicMessages {
    fn name(&self) -> &'static str {
        "anthropic-messages"
    }
    fn aliases(&self) -> &'static [&'static str] {
        &["anthropic"]
    }
    fn about(&self) -> &'static str {
        "Anthropic Messages POST /v1/messages (vLLM, llama.cpp's llama-server); `anthropic` is accepted for it"
    }
    fn path(&self, _stream: bool) -> &'static str {
        PATH
    }
    fn url_paths(&self) -> &'static [&'static str] {
        &[PATH]
    }
    fn discovery(&self) -> Discovery {
        Discovery {
            path: "/v1/models",
            // Anthropic's model list has the shape of OpenAI's: `data[0].id`.
            model: super::openai::first_model,
        }
    }
    fn wrapping(&self, mode: PromptMode) -> Option<Wrapping> {
        (mode == PromptMode::Text).then_some(Wrapping::Chat)
    }

    /// `{"model", ["system",] "messages", ["tools",] "max_tokens", "stream"}`: a text or
    /// synthetic prompt is one user message; a record's `messages` go as they are, their
    /// system messages moved to `system`, and OpenAI-style tools, tool calls and tool results
    /// rewritten as Anthropic's.
    fn write_body(
        &self,
        record: &TraceRecord,
        opts: &BodyOptions,
        synthesis: Option<&mut Synthesis<'_>>,
        out: &mut Vec<u8>,
        saved: Option<&mut Vec<u8>>,
    ) -> Result<(), BodyError> {
        let start = out.len();
        out.extend_from_slice(b"{\"model\":");
        out.extend_from_slice(opts.model_json.as_bytes());
        let (key, prompt): (&[u8], std::ops::Range<usize>) = match &record.input {
            Input::Messages { messages, tools } => {
                let (system, turns): (Vec<&Value>, Vec<&Value>) = messages
                    .iter()
                    .partition(|m| m.get("role").and_then(Value::as_str) == Some("system"));
                if let Some(system) = system_prompt(&system) {
                    out.extend_from_slice(b",\"system\":");
                    serde_json::to_writer(&mut *out, &system)?;
                }
                out.extend_from_slice(b",\"messages\":");
                let at = out.len();
                let mut turns = anthropic_messages(&turns);
                super::images::for_anthropic(&mut turns);
                serde_json::to_writer(&mut *out, &turns)?;
                if let Some(Value::Array(tools)) = tools {
                    let tools: Vec<Value> = tools.iter().map(anthropic_tool).collect();
                    out.extend_from_slice(b",\"tools\":");
                    serde_json::to_writer(&mut *out, &tools)?;
                }
                // Saved with its tools, as sent: the template renders both into the prompt.
                (b"messages", at..out.len())
            }
            input => {
                out.extend_from_slice(b",\"messages\":[{\"role\":\"user\",\"content\":");
                let at = out.len();
                let key = write_prompt(record, input, synthesis, out)?;
                let prompt = at..out.len();
                out.extend_from_slice(b"}]");
                (key, prompt)
            }
        };
        if let Some(saved) = saved {
            write_saved_line(saved, record.index, key, &out[prompt]);
        }
        write_lengths(record, opts, out);
        let _ = write!(out, ",\"stream\":{}}}", opts.stream);
        if opts.extra_body.is_some() || record.extra.is_some() {
            merge_extra(out, start, opts.extra_body.as_ref(), record.extra.as_ref())?;
        }
        Ok(())
    }

    fn messages_form(&self) -> Option<MessagesForm> {
        Some(MessagesForm::Anthropic)
    }
    fn stream_keys(&self) -> &'static StreamKeys {
        &KEYS
    }

    fn read_body(&self, v: &Value) -> FullResponse {
        let usage = v.get("usage");
        let count = |k: &str| usage.and_then(|u| u.get(k)).and_then(super::events::count);
        let parts = [
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ]
        .map(count);
        let blocks = v.get("content").and_then(Value::as_array);
        let kind = |block: &Value| block.get("type").and_then(Value::as_str).map(str::to_string);
        let tool_calls = blocks.map_or(0, |b| {
            b.iter().filter(|block| kind(block).as_deref() == Some("tool_use")).count()
        }) as u64;
        let answered = tool_calls > 0
            || blocks.is_some_and(|b| b.iter().any(|block| nonempty(block.get("text"))));
        let reasoning =
            blocks.is_some_and(|b| b.iter().any(|block| nonempty(block.get("thinking"))));
        FullResponse {
            prompt_tokens: parts.iter().any(Option::is_some).then(|| parts.iter().flatten().sum()),
            cached_tokens: count("cache_read_input_tokens"),
            completion_tokens: count("output_tokens"),
            content: answered || reasoning,
            answered,
            reasoning,
            tool_calls,
            answer: blocks.and_then(|b| {
                b.iter()
                    .find(|block| kind(block).as_deref() == Some("text"))
                    .and_then(|block| text_of(block.get("text")))
            }),
            ..FullResponse::default()
        }
    }

    fn routes(&self) -> &'static [Route] {
        &[Route {
            path: PATH,
            stream: None,
        }]
    }

    fn mock_request<'a>(
        &self,
        obj: &'a Map<String, Value>,
        route: &Route,
    ) -> Result<MockRequest<'a>, String> {
        let messages = obj.get("messages").ok_or("`messages` is required")?;
        Ok(MockRequest {
            prompt: Prompt::Messages {
                messages: messages.as_array().ok_or("`messages` must be an array")?,
                tools: obj.get("tools").filter(|t| !t.is_null()),
                system: obj.get("system").filter(|s| !s.is_null()),
                thinking: None,
            },
            tokens: tokens_asked(obj, uint(obj, "max_tokens")?)?,
            stream: stream_of(obj, route),
            reports_usage: true,
            usage_at_start: true,
            include_usage: true,
            continuous_usage: false,
        })
    }

    /// The text block is the first, or the second after a thinking block.
    fn content_frame(&self, a: &Answer) -> Option<(Vec<u8>, &'static [u8])> {
        let index = u8::from(a.reasoning > 0);
        let prefix = format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{{\"type\":\"text_delta\",\"text\":\"");
        Some((prefix.into_bytes(), b"\"}"))
    }

    fn reasoning_frame(&self, _a: &Answer) -> Option<(Vec<u8>, &'static [u8])> {
        let prefix = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"";
        Some((prefix.to_vec(), b"\"}"))
    }

    fn write_open(&self, a: &Answer, out: &mut Vec<u8>) {
        let mut message = message(a, json!([]), Value::Null);
        message["usage"]["output_tokens"] = json!(0);
        event(out, "message_start", &json!({"type": "message_start", "message": message}));
        let block = match a.reasoning > 0 {
            true => json!({"type": "thinking", "thinking": ""}),
            false => json!({"type": "text", "text": ""}),
        };
        let start = json!({"type": "content_block_start", "index": 0, "content_block": block});
        event(out, "content_block_start", &start);
    }

    fn write_answer_start(&self, _a: &Answer, out: &mut Vec<u8>) {
        event(out, "content_block_stop", &json!({"type": "content_block_stop", "index": 0}));
        let block = json!({"type": "text", "text": ""});
        let start = json!({"type": "content_block_start", "index": 1, "content_block": block});
        event(out, "content_block_start", &start);
    }

    fn write_close(&self, a: &Answer, out: &mut Vec<u8>) -> bool {
        // The open block: the text's, or the thinking's when the answer ended in it.
        let index = u8::from(a.reasoning > 0 && a.sent > a.reasoning);
        let stop = json!({"type": "content_block_stop", "index": index});
        event(out, "content_block_stop", &stop);
        let delta = json!({"type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
            "usage": {"output_tokens": a.sent}});
        event(out, "message_delta", &delta);
        event(out, "message_stop", &json!({"type": "message_stop"}));
        true
    }

    fn full_response(&self, a: &Answer) -> Value {
        let mut content = vec![json!({"type": "text", "text": answer_text(a.tokens - a.reasoning)})];
        if a.reasoning > 0 {
            let thinking = json!({"type": "thinking", "thinking": answer_text(a.reasoning), "signature": "mock"});
            content.insert(0, thinking);
        }
        message(a, json!(content), json!("max_tokens"))
    }
}

/// The system messages of a record, as Anthropic's `system`: one message's content as it is,
/// several as text blocks.
fn system_prompt(system: &[&Value]) -> Option<Value> {
    match system {
        [] => None,
        [one] => one.get("content").cloned(),
        many => Some(Value::Array(
            many.iter()
                .map(|m| json!({"type": "text", "text": m.get("content").and_then(Value::as_str).unwrap_or_default()}))
                .collect(),
        )),
    }
}

/// A record's messages in Anthropic's form: an OpenAI-style assistant message's
/// `tool_calls` become `tool_use` blocks after its text, and each run of `tool` messages one
/// user message of `tool_result` blocks. Messages already in Anthropic's form go as they are.
fn anthropic_messages(turns: &[&Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(turns.len());
    for &m in turns {
        let role = m.get("role").and_then(Value::as_str);
        if role == Some("tool") {
            let result = json!({"type": "tool_result",
                "tool_use_id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
                "content": m.get("content").cloned().unwrap_or(json!(""))});
            let previous = out.last_mut().filter(|p| p["role"] == "user");
            match previous.and_then(|p| p["content"].as_array_mut()) {
                Some(blocks) if blocks.iter().all(|b| b["type"] == "tool_result") => {
                    blocks.push(result)
                }
                _ => out.push(json!({"role": "user", "content": [result]})),
            }
            continue;
        }
        let Some(calls) = m.get("tool_calls").and_then(Value::as_array) else {
            out.push(m.clone());
            continue;
        };
        let mut blocks = Vec::with_capacity(calls.len() + 1);
        match m.get("content") {
            Some(Value::String(text)) if !text.is_empty() => {
                blocks.push(json!({"type": "text", "text": text}))
            }
            Some(Value::Array(parts)) => blocks.extend(parts.iter().cloned()),
            _ => {}
        }
        for call in calls {
            let f = &call["function"];
            // OpenAI's arguments are a JSON text; Anthropic's input is the object.
            let input = f["arguments"]
                .as_str()
                .and_then(|a| serde_json::from_str::<Value>(a).ok())
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            blocks.push(json!({"type": "tool_use", "id": call["id"], "name": f["name"], "input": input}));
        }
        out.push(json!({"role": "assistant", "content": blocks}));
    }
    out
}

/// An OpenAI function tool (`{"type":"function","function":{name, description, parameters}}`)
/// as an Anthropic tool (`{name, description, input_schema}`); others go as they are.
fn anthropic_tool(tool: &Value) -> Value {
    let Some(f) = tool.get("function") else {
        return tool.clone();
    };
    let mut t = json!({"name": f.get("name"), "input_schema": f.get("parameters").cloned().unwrap_or(json!({"type": "object"}))});
    if let Some(d) = f.get("description") {
        t["description"] = d.clone();
    }
    t
}

/// The mock's message object: its prompt's counts split as Anthropic's are.
fn message(a: &Answer, content: Value, stop_reason: Value) -> Value {
    let cached = a.cached_tokens.unwrap_or(0);
    json!({"id": format!("msg_mock_{}", a.id), "type": "message", "role": "assistant",
        "model": a.model, "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": a.prompt_tokens.saturating_sub(cached), "cache_read_input_tokens": cached,
                  "cache_creation_input_tokens": 0, "output_tokens": a.sent}})
}

/// One named SSE event.
fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
    let _ = write!(out, "event: {name}\ndata: {data}\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Api, EventScanner};
    use crate::trace::TraceIds;

    fn api() -> Api {
        Api::from_name("anthropic-messages").expect("registered")
    }

    fn record(input: Input) -> TraceRecord {
        TraceRecord {
            index: 2,
            line: 3,
            timestamp_ms: Some(0.0),
            input,
            output_length: Some(7),
            ids: TraceIds::default(),
            extra: None,
        }
    }

    fn opts(stream: bool) -> BodyOptions {
        BodyOptions {
            model_json: "\"m\"".into(),
            stream,
            exact_output: true,
            extra_body: None,
        }
    }

    #[test]
    fn bodies_put_the_prompt_in_one_user_message_and_the_system_beside_the_messages() {
        let text = record(Input::Text {
            text: "say \"hi\"".into(),
            input_length: None,
        });
        let (mut out, mut saved) = (Vec::new(), Vec::new());
        api()
            .write_body(&text, &opts(true), None, &mut out, Some(&mut saved))
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v,
            json!({"model": "m", "messages": [{"role": "user", "content": "say \"hi\""}],
                   "max_tokens": 7, "min_tokens": 7, "ignore_eos": true, "stream": true})
        );
        let line: Value = serde_json::from_slice(&saved).unwrap();
        assert_eq!(line, json!({"index": 2, "prompt": "say \"hi\""}));
        // The shape carry-forward finds and extends: one user message's plain content.
        let plain = record(Input::Text {
            text: " a b c".into(),
            input_length: None,
        });
        let mut payload = b"Content-Length: 0\r\n\r\n".to_vec();
        api()
            .write_body(&plain, &opts(true), None, &mut payload, None)
            .unwrap();
        let slot = crate::carry::locate(&payload, 3, 0).expect("a chat-shaped body");
        assert_eq!(&payload[slot.content.clone()], b" a b c");

        let chat = record(Input::Messages {
            messages: vec![
                json!({"role": "system", "content": "be brief"}),
                json!({"role": "user", "content": "u"}),
            ],
            tools: Some(json!([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}])),
        });
        let (mut out, mut saved) = (Vec::new(), Vec::new());
        api()
            .write_body(&chat, &opts(false), None, &mut out, Some(&mut saved))
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["system"], "be brief");
        assert_eq!(v["messages"], json!([{"role": "user", "content": "u"}]));
        assert_eq!(v["tools"], json!([{"name": "f", "description": "d", "input_schema": {"type": "object"}}]));
        // prompts.jsonl keeps the messages and the tools as sent.
        let line: Value = serde_json::from_slice(&saved).unwrap();
        assert_eq!((&line["messages"], &line["tools"]), (&v["messages"], &v["tools"]));
        assert_eq!(v["stream"], false);

        // OpenAI-style tool calls and results, as ATIF and DAG traces record them.
        let tools = record(Input::Messages {
            messages: vec![
                json!({"role": "user", "content": "weather?"}),
                json!({"role": "assistant", "content": "Looking.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "now", "arguments": "not json"}}]}),
                json!({"role": "tool", "tool_call_id": "c1", "content": "18C"}),
                json!({"role": "tool", "tool_call_id": "c2", "content": "noon"}),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "as is"}]}),
            ],
            tools: None,
        });
        let mut out = Vec::new();
        api()
            .write_body(&tools, &opts(false), None, &mut out, None)
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["messages"],
            json!([
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "c1", "name": "get", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "c2", "name": "now", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "18C"},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "noon"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "as is"}]},
            ])
        );
    }

    /// Anthropic's documented stream: content from text, thinking and tool-call deltas only;
    /// the prompt's counts from `message_start`, the answer's from `message_delta`.
    #[test]
    fn the_documented_stream_reads_as_content_usage_and_errors() {
        let s = EventScanner::new(api());
        let start = br#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":5,"cache_read_input_tokens":70,"output_tokens":1}}}"#;
        let ev = s.scan(start);
        assert!(!ev.content && ev.error.is_none());
        assert_eq!(
            (ev.prompt_tokens, ev.cached_tokens, ev.completion_tokens),
            (Some(100), Some(70), Some(1))
        );
        let block = br#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;
        assert!(!s.scan(block).content);
        let text = br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#;
        assert!(s.scan(text).content);
        assert_eq!(s.answer_text(text), Some(&b"Hello"[..]));
        let thinking = br#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}"#;
        assert!(s.scan(thinking).content);
        let tool = br#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"loc"}}"#;
        assert!(s.scan(tool).content);
        assert!(!s.scan(br#"{"type": "ping"}"#).content);
        let end = br#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#;
        let ev = s.scan(end);
        assert_eq!((ev.content, ev.prompt_tokens, ev.completion_tokens), (false, None, Some(15)));
        let err = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(s.scan(err).error.as_deref(), Some("Overloaded"));
        // As Anthropic's documentation writes it, with spaces; a nested type is no error.
        let err = br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
        assert_eq!(s.scan(err).error.as_deref(), Some("Overloaded"));
        let stop = br#"{"type": "message_stop", "note": {"type": "error_free"}}"#;
        assert_eq!(s.scan(stop).error, None);

        let full = s.parse_body(br#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi there"}],"model":"m","stop_reason":"end_turn","usage":{"input_tokens":10,"cache_read_input_tokens":30,"output_tokens":2}}"#);
        assert_eq!(
            (full.prompt_tokens, full.cached_tokens, full.completion_tokens, full.content),
            (Some(40), Some(30), Some(2), true)
        );
        assert_eq!(full.answer.as_deref(), Some("Hi there"));
        let refused = s.parse_body(br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#);
        assert_eq!(refused.error.as_deref(), Some("max_tokens: Field required"));
    }
}
