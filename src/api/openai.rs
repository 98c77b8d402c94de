//! OpenAI-compatible request bodies.

use std::io::Write;

use serde_json::{Map, Value};

use super::Api;
use crate::prompt::PromptSynth;
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

/// Appends the JSON body of `record` to `out`.
pub fn write_body(
    api: Api,
    record: &TraceRecord,
    opts: &BodyOptions,
    synth: Option<&PromptSynth>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let start = out.len();
    out.extend_from_slice(b"{\"model\":");
    out.extend_from_slice(opts.model_json.as_bytes());
    match (api, &record.input) {
        (Api::OpenaiChat, Input::Messages { messages, tools }) => {
            out.extend_from_slice(b",\"messages\":");
            serde_json::to_writer(&mut *out, messages).map_err(|e| e.to_string())?;
            if let Some(tools) = tools {
                out.extend_from_slice(b",\"tools\":");
                serde_json::to_writer(&mut *out, tools).map_err(|e| e.to_string())?;
            }
        }
        (Api::OpenaiCompletions, Input::Messages { .. }) => {
            return Err("a record with `messages` needs --api openai-chat".into());
        }
        (_, input) => {
            out.extend_from_slice(match api {
                Api::OpenaiChat => b",\"messages\":[{\"role\":\"user\",\"content\":",
                Api::OpenaiCompletions => b",\"prompt\":",
            });
            write_prompt(record, input, synth, out)?;
            if api == Api::OpenaiChat {
                out.extend_from_slice(b"}]");
            }
        }
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

fn write_prompt(
    record: &TraceRecord,
    input: &Input,
    synth: Option<&PromptSynth>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    match input {
        Input::Text { text, .. } => {
            serde_json::to_writer(&mut *out, text).map_err(|e| e.to_string())
        }
        Input::Synthetic {
            input_length,
            hash_ids,
        } => {
            let synth =
                synth.ok_or("the trace has no text: give --tokenizer to synthesise prompts")?;
            // Synthetic text is spaces and ASCII letters: no escaping needed.
            out.push(b'"');
            synth.write_text(record.index, *input_length, hash_ids, out);
            out.push(b'"');
            Ok(())
        }
        Input::Messages { .. } => unreachable!("handled by the caller"),
    }
}

/// Rare path: re-reads the body just written and shallow-merges the extras into it.
fn merge_extra(
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
        write_body(api, rec, opts, None, &mut out).unwrap();
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
        assert!(write_body(Api::OpenaiCompletions, &rec, &o, None, &mut out).is_err());
    }
}
