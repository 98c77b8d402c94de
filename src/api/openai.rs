//! OpenAI-compatible request bodies.

use std::io::Write;

use serde_json::{Map, Value};

use super::Api;
use crate::prompt::{BlockCache, PromptSynth, Rendering};
use crate::trace::{Input, TraceRecord};

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

/// Appends the JSON body of `record` to `out`. With `saved`, also appends the record's
/// `prompts.jsonl` line there (the prompt exactly as sent, CONTRACT §2 `--save-prompts`).
pub(super) fn write_body(
    api: Api,
    record: &TraceRecord,
    opts: &BodyOptions,
    synthesis: Option<&mut Synthesis<'_>>,
    out: &mut Vec<u8>,
    saved: Option<&mut Vec<u8>>,
) -> Result<(), String> {
    let start = out.len();
    out.extend_from_slice(b"{\"model\":");
    out.extend_from_slice(opts.model_json.as_bytes());
    let prompt_start;
    let key: &[u8] = match (api, &record.input) {
        (Api::OpenaiChat, Input::Messages { messages, tools }) => {
            out.extend_from_slice(b",\"messages\":");
            prompt_start = out.len();
            serde_json::to_writer(&mut *out, messages).map_err(|e| e.to_string())?;
            if let Some(tools) = tools {
                out.extend_from_slice(b",\"tools\":");
                serde_json::to_writer(&mut *out, tools).map_err(|e| e.to_string())?;
            }
            b"messages"
        }
        (Api::OpenaiCompletions, Input::Messages { .. }) => {
            return Err("a record with `messages` needs --api openai-chat".into());
        }
        (_, input) => {
            out.extend_from_slice(match api {
                Api::OpenaiChat => b",\"messages\":[{\"role\":\"user\",\"content\":",
                Api::OpenaiCompletions | Api::Tgi => b",\"prompt\":",
            });
            prompt_start = out.len();
            let key = write_prompt(record, input, synthesis, out)?;
            if api == Api::OpenaiChat {
                out.extend_from_slice(b"}]");
            }
            key
        }
    };
    if let Some(saved) = saved {
        // Messages are saved without the tools that follow them in the body.
        let end = match &record.input {
            Input::Messages { messages, .. } => {
                prompt_start + serde_json::to_vec(messages).map_or(0, |v| v.len())
            }
            _ if api == Api::OpenaiChat => out.len() - 2,
            _ => out.len(),
        };
        write!(saved, "{{\"index\":{},\"", record.index).map_err(|e| e.to_string())?;
        saved.extend_from_slice(key);
        saved.extend_from_slice(b"\":");
        saved.extend_from_slice(&out[prompt_start..end]);
        saved.extend_from_slice(b"}\n");
    }
    if let Some(n) = record.output_length {
        write!(out, ",\"max_tokens\":{n}").map_err(|e| e.to_string())?;
        if opts.exact_output {
            write!(out, ",\"min_tokens\":{n},\"ignore_eos\":true").map_err(|e| e.to_string())?;
        }
    }
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

/// Writes the prompt value; returns its `prompts.jsonl` key.
pub(super) fn write_prompt(
    record: &TraceRecord,
    input: &Input,
    synthesis: Option<&mut Synthesis<'_>>,
    out: &mut Vec<u8>,
) -> Result<&'static [u8], String> {
    match input {
        Input::Text { text, .. } => {
            serde_json::to_writer(&mut *out, text).map_err(|e| e.to_string())?;
            Ok(b"prompt")
        }
        Input::Synthetic {
            input_length,
            hash_ids,
        } => {
            let s =
                synthesis.ok_or("the trace has no text: give --tokenizer to synthesise prompts")?;
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

/// Rare path: re-reads the body just written and shallow-merges the extras into it.
pub(super) fn merge_extra(
    out: &mut Vec<u8>,
    start: usize,
    cli: Option<&Map<String, Value>>,
    record: Option<&Map<String, Value>>,
) -> Result<(), String> {
    let mut body: Map<String, Value> =
        serde_json::from_slice(&out[start..]).map_err(|e| e.to_string())?;
    for extra in [cli, record].into_iter().flatten() {
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
    }
    out.truncate(start);
    serde_json::to_writer(&mut *out, &body).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
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
        write_body(api, rec, opts, None, &mut out, None).unwrap();
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
        assert!(write_body(Api::OpenaiCompletions, &rec, &o, None, &mut out, None).is_err());
    }

    /// `--save-prompts` lines hold the prompt exactly as sent: the chat user content, the
    /// completions prompt, or the messages (without tools), and survive the `extra` merge.
    #[test]
    fn saved_prompt_lines() {
        let saved = |api, rec: &TraceRecord| {
            let (mut out, mut line) = (Vec::new(), Vec::new());
            write_body(api, rec, &opts(), None, &mut out, Some(&mut line)).unwrap();
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
        assert_eq!(line, serde_json::json!({"index": 0, "messages": msgs}));
    }
}
