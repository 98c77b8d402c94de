//! The two OpenAI dialects: chat (`POST /v1/chat/completions`: `messages`, answered by
//! `choices[].delta` events) and completions (`POST /v1/completions`: a `prompt` string or
//! token ids, answered by `choices[].text` events), served by vLLM, SGLang, llama.cpp and
//! TGI's OpenAI layer. They share their body, their usage and their events' envelope, and
//! differ where `chat` says.

use std::io::Write;

use serde_json::{json, Map, Value};

use super::body::{
    merge_extra, write_lengths, write_prompt, write_saved_line, BodyOptions, Synthesis,
};
use super::events::{nonempty, text_of, FullResponse, StreamKeys};
use super::serve::{
    answer_text, stream_of, tokens_asked, uint, Answer, MockRequest, Prompt, Route,
};
use super::{BodyError, Dialect, Discovery, MessagesForm};
use crate::prompt::{PromptMode, Wrapping};
use crate::trace::{Input, TraceRecord};

/// An OpenAI dialect: chat, or completions.
pub struct OpenAi {
    chat: bool,
}

// Named as the other dialects' types are, for the registry.
#[allow(non_upper_case_globals)]
pub const OpenaiChat: OpenAi = OpenAi { chat: true };
#[allow(non_upper_case_globals)]
pub const OpenaiCompletions: OpenAi = OpenAi { chat: false };

/// Where OpenAI stream events keep content and usage. A chat delta's `content`, its
/// `reasoning_content` and tool-call `arguments` are all output; a completion's is `text`.
/// Reasoning comes as `reasoning_content` (SGLang, DeepSeek's API, llama.cpp, vLLM before
/// 0.10) or `reasoning` (vLLM since); a tool call starts with `"type":"function"`.
const CHAT_KEYS: StreamKeys = StreamKeys {
    content: &[b"\"content\":", b"\"arguments\":"],
    reasoning: &[b"\"reasoning_content\":", b"\"reasoning\":"],
    tool_call: Some(b"function"),
    ..COMPLETION_KEYS
};
const COMPLETION_KEYS: StreamKeys = StreamKeys {
    content: &[b"\"text\":"],
    reasoning: &[],
    tool_call: None,
    reasoning_tokens: Some(b"\"reasoning_tokens\":"),
    usage: b"\"usage\":",
    prompt_tokens: &[b"\"prompt_tokens\":"],
    cached_tokens: Some(b"\"cached_tokens\":"),
    completion_tokens: b"\"completion_tokens\":",
    error: (b"\"object\":", Some(b"error")),
    server_timings: true,
};

/// Appends the JSON body of `record` to `out`. With `saved`, also appends the record's
/// `prompts.jsonl` line there (the prompt exactly as sent, CONTRACT §2 `--save-prompts`).
fn write_body(
    chat: bool,
    record: &TraceRecord,
    opts: &BodyOptions,
    synthesis: Option<&mut Synthesis<'_>>,
    out: &mut Vec<u8>,
    saved: Option<&mut Vec<u8>>,
) -> Result<(), BodyError> {
    let start = out.len();
    out.extend_from_slice(b"{\"model\":");
    out.extend_from_slice(opts.model_json.as_bytes());
    let prompt_start;
    let key: &[u8] = match (chat, &record.input) {
        (true, Input::Messages { messages, tools }) => {
            out.extend_from_slice(b",\"messages\":");
            prompt_start = out.len();
            serde_json::to_writer(&mut *out, &super::images::for_openai(messages))?;
            if let Some(tools) = tools {
                out.extend_from_slice(b",\"tools\":");
                serde_json::to_writer(&mut *out, tools)?;
            }
            b"messages"
        }
        (false, Input::Messages { .. }) => {
            return Err(BodyError::Unsupported(
                "a record with `messages` needs --api openai-chat",
            ));
        }
        (_, input) => {
            out.extend_from_slice(match chat {
                true => b",\"messages\":[{\"role\":\"user\",\"content\":",
                false => b",\"prompt\":",
            });
            prompt_start = out.len();
            let key = write_prompt(record, input, synthesis, out)?;
            if chat {
                out.extend_from_slice(b"}]");
            }
            key
        }
    };
    if let Some(saved) = saved {
        // Messages are saved with the tools that follow them in the body: the template renders
        // both into the prompt.
        let end = match &record.input {
            Input::Messages { .. } => out.len(),
            _ if chat => out.len() - 2,
            _ => out.len(),
        };
        write_saved_line(saved, record.index, key, &out[prompt_start..end]);
    }
    write_lengths(record, opts, out);
    if opts.stream {
        out.extend_from_slice(b",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    } else {
        out.extend_from_slice(b",\"stream\":false");
    }
    out.push(b'}');
    if opts.extra_body.is_some() || record.extra.is_some() {
        merge_extra(out, start, opts.extra_body.as_ref(), record.extra.as_ref())?;
    }
    Ok(())
}

/// The first model id of a `GET /v1/models` answer.
pub(super) fn first_model(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("data")?
        .as_array()?
        .first()?
        .get("id")?
        .as_str()
        .map(str::to_string)
}

/// A whole OpenAI answer: its usage, and whether some choice carries output.
fn read_body(v: &Value) -> FullResponse {
    let usage = v.get("usage");
    let count = |k: &str| usage.and_then(|u| u.get(k)).and_then(super::events::count);
    let choices = v.get("choices").and_then(Value::as_array);
    let any = |f: &dyn Fn(&Value) -> bool| choices.is_some_and(|c| c.iter().any(f));
    fn tool_calls(choice: &Value) -> u64 {
        choice
            .pointer("/message/tool_calls")
            .and_then(Value::as_array)
            .map_or(0, Vec::len) as u64
    }
    let answered = any(&|c| {
        nonempty(c.get("text")) || nonempty(c.pointer("/message/content")) || tool_calls(c) > 0
    });
    let reasoning = any(&|c| {
        ["reasoning_content", "reasoning"]
            .iter()
            .any(|k| nonempty(c.get("message").and_then(|m| m.get(*k))))
    });
    FullResponse {
        prompt_tokens: count("prompt_tokens"),
        cached_tokens: usage
            .and_then(|u| u.pointer("/prompt_tokens_details/cached_tokens"))
            .and_then(super::events::count),
        completion_tokens: count("completion_tokens"),
        reasoning_tokens: usage
            .and_then(|u| u.pointer("/completion_tokens_details/reasoning_tokens"))
            .and_then(super::events::count),
        content: answered || reasoning,
        answered,
        reasoning,
        tool_calls: choices.map_or(0, |c| c.iter().map(tool_calls).sum()),
        answer: v.pointer("/choices/0").and_then(|c| {
            text_of(c.get("text")).or_else(|| text_of(c.pointer("/message/content")))
        }),
        server: crate::server_timing::llama_cpp::from_value(v),
        ..FullResponse::default()
    }
}

/// What the mock reads from an OpenAI request: `messages` (chat) or `prompt`, `max_tokens`
/// (or `max_completion_tokens`), and `stream_options`.
fn mock_request<'a>(
    chat: bool,
    obj: &'a Map<String, Value>,
    route: &Route,
) -> Result<MockRequest<'a>, String> {
    let prompt = if chat {
        let messages = obj.get("messages").ok_or("`messages` is required")?;
        Prompt::Messages {
            messages: messages.as_array().ok_or("`messages` must be an array")?,
            tools: obj.get("tools").filter(|t| !t.is_null()),
            system: None,
            thinking: obj
                .get("chat_template_kwargs")
                .and_then(|k| k.get("enable_thinking"))
                .and_then(Value::as_bool),
        }
    } else {
        Prompt::Text(obj.get("prompt").ok_or("`prompt` is required")?)
    };
    let max_tokens = uint(obj, "max_tokens")?.or(uint(obj, "max_completion_tokens")?);
    let opts = obj.get("stream_options");
    let flag = |k: &str| {
        opts.and_then(|o| o.get(k))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    Ok(MockRequest {
        prompt,
        tokens: tokens_asked(obj, max_tokens)?,
        stream: stream_of(obj, route),
        reports_usage: true,
        usage_at_start: false,
        include_usage: flag("include_usage"),
        continuous_usage: flag("continuous_usage_stats"),
    })
}

impl Dialect for OpenAi {
    fn name(&self) -> &'static str {
        if self.chat {
            "openai-chat"
        } else {
            "openai-completions"
        }
    }
    fn aliases(&self) -> &'static [&'static str] {
        // trace-replayer's name for chat.
        if self.chat {
            &["openai"]
        } else {
            &[]
        }
    }
    fn about(&self) -> &'static str {
        if self.chat {
            "OpenAI POST /v1/chat/completions (vLLM, SGLang, llama.cpp, TGI's OpenAI layer); `openai` is accepted for it"
        } else {
            "OpenAI POST /v1/completions: a prompt string, or token ids with --prompt-mode token-ids"
        }
    }
    fn path(&self, _stream: bool) -> &'static str {
        self.url_paths()[0]
    }
    fn url_paths(&self) -> &'static [&'static str] {
        if self.chat {
            &["/v1/chat/completions"]
        } else {
            &["/v1/completions"]
        }
    }
    fn discovery(&self) -> Discovery {
        Discovery {
            path: "/v1/models",
            model: first_model,
        }
    }
    fn wrapping(&self, mode: PromptMode) -> Option<Wrapping> {
        match (self.chat, mode) {
            (true, PromptMode::Text) => Some(Wrapping::Chat),
            (true, PromptMode::TokenIds) => None,
            (false, PromptMode::Text) => Some(Wrapping::Completion),
            (false, PromptMode::TokenIds) => Some(Wrapping::TokenIds),
        }
    }
    fn write_body(
        &self,
        record: &TraceRecord,
        opts: &BodyOptions,
        synthesis: Option<&mut Synthesis<'_>>,
        out: &mut Vec<u8>,
        saved: Option<&mut Vec<u8>>,
    ) -> Result<(), BodyError> {
        write_body(self.chat, record, opts, synthesis, out, saved)
    }
    fn messages_form(&self) -> Option<MessagesForm> {
        self.chat.then_some(MessagesForm::OpenAi)
    }
    fn stream_keys(&self) -> &'static StreamKeys {
        if self.chat {
            &CHAT_KEYS
        } else {
            &COMPLETION_KEYS
        }
    }
    fn read_body(&self, v: &Value) -> FullResponse {
        read_body(v)
    }

    fn routes(&self) -> &'static [Route] {
        const CHAT: [Route; 1] = [Route {
            path: "/v1/chat/completions",
            stream: None,
        }];
        const COMPLETIONS: [Route; 1] = [Route {
            path: "/v1/completions",
            stream: None,
        }];
        if self.chat {
            &CHAT
        } else {
            &COMPLETIONS
        }
    }
    fn mock_request<'a>(
        &self,
        obj: &'a Map<String, Value>,
        route: &Route,
    ) -> Result<MockRequest<'a>, String> {
        mock_request(self.chat, obj, route)
    }
    fn content_frame(&self, a: &Answer) -> Option<(Vec<u8>, &'static [u8])> {
        Some(self.frame(a, "content"))
    }
    /// Chat reasoning in `reasoning_content` (SGLang, llama.cpp, DeepSeek; vLLM's newer name
    /// `reasoning` is read as well).
    fn reasoning_frame(&self, a: &Answer) -> Option<(Vec<u8>, &'static [u8])> {
        self.chat.then(|| self.frame(a, "reasoning_content"))
    }
    fn write_open(&self, a: &Answer, out: &mut Vec<u8>) {
        if self.chat {
            self.write_event(a, out, true, None);
        }
    }
    fn write_running_usage(&self, a: &Answer, out: &mut Vec<u8>) {
        let (p, c) = (a.prompt_tokens, a.sent);
        let _ = write!(out, ",\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\"completion_tokens\":{c}}}", p + c);
    }
    /// The finish event, the usage event when asked for, and `[DONE]`.
    fn write_close(&self, a: &Answer, out: &mut Vec<u8>) -> bool {
        self.write_event(a, out, false, Some("length"));
        if a.include_usage {
            let usage = Self::usage(a);
            let _ = write!(out, "data: {{\"id\":\"{}\",\"object\":\"{}\",\"created\":0,\"model\":{},\"choices\":[],\"usage\":{usage}}}\n\n", self.id(a), self.object(a), json!(a.model));
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        true
    }
    fn full_response(&self, a: &Answer) -> Value {
        let text = answer_text(a.tokens - a.reasoning);
        let choice = match self.chat {
            true => {
                let mut message = json!({"role": "assistant", "content": text});
                if a.reasoning > 0 {
                    message["reasoning_content"] = json!(answer_text(a.reasoning));
                }
                json!({"index": 0, "message": message, "logprobs": null, "finish_reason": "length"})
            }
            false => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": "length"})
            }
        };
        json!({"id": self.id(a), "object": self.object(a), "created": 0, "model": a.model, "choices": [choice], "usage": Self::usage(a)})
    }
}

/// The mock's answers: the parts chat and completions share around the choices.
impl OpenAi {
    fn object(&self, a: &Answer) -> &'static str {
        match (self.chat, a.stream) {
            (true, true) => "chat.completion.chunk",
            (true, false) => "chat.completion",
            (false, _) => "text_completion",
        }
    }

    fn id(&self, a: &Answer) -> String {
        match self.chat {
            true => format!("chatcmpl-{}", a.id),
            false => format!("cmpl-{}", a.id),
        }
    }

    fn usage(a: &Answer) -> Value {
        let mut usage = json!({"prompt_tokens": a.prompt_tokens, "total_tokens": a.prompt_tokens + a.sent, "completion_tokens": a.sent});
        if let Some(cached) = a.cached_tokens {
            usage["prompt_tokens_details"] = json!({ "cached_tokens": cached });
        }
        if a.reasoning > 0 {
            let reasoning = a.reasoning.min(a.sent);
            usage["completion_tokens_details"] = json!({ "reasoning_tokens": reasoning });
        }
        usage
    }

    /// The text of a content event before and after its token text: the hot path is memcpy.
    fn frame(&self, a: &Answer, delta_key: &str) -> (Vec<u8>, &'static [u8]) {
        let (field, suffix): (String, &'static [u8]) = match self.chat {
            true => (
                format!("\"delta\":{{\"{delta_key}\":\""),
                b"\"},\"logprobs\":null,\"finish_reason\":null}]",
            ),
            false => (
                "\"text\":\"".to_string(),
                b"\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]",
            ),
        };
        let prefix = format!(
            "data: {{\"id\":\"{}\",\"object\":\"{}\",\"created\":0,\"model\":{},\"choices\":[{{\"index\":0,{field}",
            self.id(a),
            self.object(a),
            json!(a.model)
        );
        (prefix.into_bytes(), suffix)
    }

    /// A role or finish event (rare: content events take the pre-rendered path).
    fn write_event(&self, a: &Answer, out: &mut Vec<u8>, role: bool, finish: Option<&str>) {
        let choice = match self.chat {
            true if role => {
                json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null})
            }
            true => {
                json!({"index": 0, "delta": {"content": ""}, "logprobs": null, "finish_reason": finish})
            }
            false => {
                json!({"index": 0, "text": "", "logprobs": null, "finish_reason": finish, "stop_reason": null})
            }
        };
        let mut event = json!({"id": self.id(a), "object": self.object(a), "created": 0, "model": a.model, "choices": [choice]});
        if a.continuous_usage {
            event["usage"] = Self::usage(a);
        }
        out.extend_from_slice(b"data: ");
        let _ = serde_json::to_writer(&mut *out, &event);
        out.extend_from_slice(b"\n\n");
    }

}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Api;
    use crate::trace::TraceIds;

    fn record(input: Input, extra: Option<Value>) -> TraceRecord {
        TraceRecord {
            index: 0,
            line: 1,
            timestamp_ms: Some(0.0),
            input,
            output_length: Some(7),
            ids: TraceIds::default(),
            extra: extra.map(|v| v.as_object().unwrap().clone()),
        }
    }

    fn body(api: Api, rec: &TraceRecord, opts: &BodyOptions) -> Value {
        let mut out = Vec::new();
        api.write_body(rec, opts, None, &mut out, None).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    fn opts() -> BodyOptions {
        BodyOptions {
            model_json: "\"m\\\"x\"".into(),
            stream: true,
            exact_output: true,
            extra_body: None,
        }
    }

    #[test]
    fn chat_and_completions_bodies() {
        let rec = record(
            Input::Text {
                text: "say \"hi\"\n".into(),
                input_length: None,
            },
            None,
        );
        let v = body(Api::OpenaiChat, &rec, &opts());
        assert_eq!(v["model"], "m\"x");
        assert_eq!(v["messages"][0]["content"], "say \"hi\"\n");
        assert_eq!(v["max_tokens"], 7);
        assert_eq!(v["min_tokens"], 7);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        let v = body(
            Api::OpenaiCompletions,
            &rec,
            &BodyOptions {
                stream: false,
                exact_output: false,
                ..opts()
            },
        );
        assert_eq!(v["prompt"], "say \"hi\"\n");
        assert_eq!(v["stream"], false);
        assert!(v.get("min_tokens").is_none());
    }

    #[test]
    fn messages_tools_and_extras() {
        let msgs = vec![
            serde_json::json!({"role": "system", "content": "s"}),
            serde_json::json!({"role": "user", "content": "u"}),
        ];
        let rec = record(
            Input::Messages {
                messages: msgs,
                tools: Some(serde_json::json!([{"type": "function"}])),
            },
            Some(serde_json::json!({"temperature": 0.5, "top_p": 0.1})),
        );
        let mut o = opts();
        o.extra_body = Some(
            serde_json::json!({"temperature": 1.0, "seed": 3})
                .as_object()
                .unwrap()
                .clone(),
        );
        let v = body(Api::OpenaiChat, &rec, &o);
        assert_eq!(v["messages"][1]["content"], "u");
        assert_eq!(v["tools"][0]["type"], "function");
        assert_eq!(
            v["temperature"], 0.5,
            "the record's extra wins over --extra-body"
        );
        assert_eq!(v["seed"], 3);
        assert_eq!(v["top_p"], 0.1);
        let mut out = Vec::new();
        assert!(Api::OpenaiCompletions
            .write_body(&rec, &o, None, &mut out, None)
            .is_err());
    }

    /// `--save-prompts` lines hold the prompt exactly as sent: the chat user content, the
    /// completions prompt, or the messages (without tools), and survive the `extra` merge.
    #[test]
    fn saved_prompt_lines() {
        let saved = |api: Api, rec: &TraceRecord| {
            let (mut out, mut line) = (Vec::new(), Vec::new());
            api.write_body(rec, &opts(), None, &mut out, Some(&mut line))
                .unwrap();
            let body: Value = serde_json::from_slice(&out).unwrap();
            (body, serde_json::from_slice::<Value>(&line).unwrap())
        };
        let text = record(
            Input::Text {
                text: "a \"quoted\" prompt".into(),
                input_length: None,
            },
            Some(serde_json::json!({"temperature": 0.1})),
        );
        let (body, line) = saved(Api::OpenaiChat, &text);
        assert_eq!(
            line,
            serde_json::json!({"index": 0, "prompt": "a \"quoted\" prompt"})
        );
        assert_eq!(body["temperature"], 0.1);
        let (_, line) = saved(Api::OpenaiCompletions, &text);
        assert_eq!(line["prompt"], "a \"quoted\" prompt");
        let msgs = vec![serde_json::json!({"role": "user", "content": "u"})];
        let rec = record(
            Input::Messages {
                messages: msgs.clone(),
                tools: Some(serde_json::json!([{"type": "function"}])),
            },
            None,
        );
        let (_, line) = saved(Api::OpenaiChat, &rec);
        let tools = serde_json::json!([{"type": "function"}]);
        assert_eq!(line, serde_json::json!({"index": 0, "messages": msgs, "tools": tools}));
    }
}
