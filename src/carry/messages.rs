//! Live threading of a `messages` conversation (`--carry-forward on`, OpenAI chat or
//! Anthropic Messages): a turn is sent as its parent's messages as sent, the parent's actual
//! answer as an assistant message (text, and its tool calls reassembled from their stream
//! deltas), then the turn's own messages. A trace records a turn one of two ways, told apart
//! by its messages:
//! - whole: they begin with its parent's recorded messages, then the recorded answer (an
//!   assistant message): both give way to what was sent and answered; the rest follows;
//! - delta: they are the turn's new messages only, appended (AIPerf's `message_mode: delta`).
//!
//! The recorded tool results that follow the answer keep their content; their call ids
//! become the live calls' ids, in order, so that a template that pairs them finds its calls.
//! A recorded answer that called tools where the live one called none is kept (its results
//! would follow nothing), and the record says so. Where calls and results sit is the
//! dialect's ([`Form`]).

use serde_json::{json, Value};

use super::{CarrySlot, History, NotCarried};

/// How the dialect writes tool calls and their results (the dialect says, in
/// [`crate::api::Dialect::messages_form`]).
pub use crate::api::MessagesForm as Form;

impl Form {
    /// The ids of an assistant message's tool calls.
    fn call_ids(self, m: &Value) -> Vec<String> {
        let calls = match self {
            Form::OpenAi => &m["tool_calls"],
            Form::Anthropic => &m["content"],
        };
        calls
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| self == Form::OpenAi || c["type"] == "tool_use")
            .filter_map(|c| c["id"].as_str().map(str::to_string))
            .collect()
    }

    /// A message of tool results.
    fn is_results(self, m: &Value) -> bool {
        match self {
            Form::OpenAi => m["role"] == "tool",
            Form::Anthropic => m["role"] == "user" && blocks(m).any(|b| b["type"] == "tool_result"),
        }
    }

    /// Points the results (in order) at the live calls `ids`.
    fn answer_calls(self, results: &mut [Value], ids: &[String]) {
        let mut ids = ids.iter();
        for m in results {
            let targets: Vec<&mut Value> = match self {
                Form::OpenAi => vec![m],
                Form::Anthropic => match m["content"].as_array_mut() {
                    Some(b) => b
                        .iter_mut()
                        .filter(|b| b["type"] == "tool_result")
                        .collect(),
                    None => Vec::new(),
                },
            };
            let key = match self {
                Form::OpenAi => "tool_call_id",
                Form::Anthropic => "tool_use_id",
            };
            for target in targets {
                let (Some(id), Some(o)) = (ids.next(), target.as_object_mut()) else {
                    return;
                };
                o.insert(key.into(), Value::String(id.clone()));
            }
        }
    }
}

/// A message's content blocks (none for a string content).
fn blocks(m: &Value) -> impl Iterator<Item = &Value> {
    m["content"].as_array().into_iter().flatten()
}

/// Tool calls of a streamed answer, put back together from their deltas.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveCalls {
    form: Form,
    calls: Vec<Call>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Call {
    /// Anthropic: the content block it is.
    block: u64,
    id: String,
    name: String,
    arguments: String,
}

/// Calls beyond these are not kept.
const MAX_CALLS: usize = 1024;

impl LiveCalls {
    pub fn new(form: Form) -> LiveCalls {
        LiveCalls {
            form,
            calls: Vec::new(),
        }
    }

    /// Whether a stream event may carry a piece of a call (a cheap search, before the parse).
    pub fn carries_calls(&self, payload: &[u8]) -> bool {
        let find = |key: &[u8]| memchr::memmem::find(payload, key).is_some();
        match self.form {
            Form::OpenAi => find(b"\"tool_calls\""),
            Form::Anthropic => find(b"\"tool_use\"") || find(b"\"input_json_delta\""),
        }
    }

    /// One stream event. OpenAI: `choices[0].delta.tool_calls`, the first delta of a call
    /// with its `id` and `function.name`, later ones pieces of `function.arguments`, each by
    /// `index`. Anthropic: a `tool_use` block's `content_block_start` (`id`, `name`), then
    /// its `input_json_delta` pieces of `partial_json`, by block `index`.
    pub fn feed_event(&mut self, payload: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(payload) else {
            return;
        };
        match self.form {
            Form::OpenAi => self.add(&v["choices"][0]["delta"]["tool_calls"]),
            Form::Anthropic => {
                let block = v["index"].as_u64().unwrap_or(0);
                match v["type"].as_str() {
                    Some("content_block_start") => self.start_block(block, &v["content_block"]),
                    Some("content_block_delta") => {
                        let piece = v["delta"]["partial_json"].as_str().unwrap_or_default();
                        if let Some(call) = self.calls.iter_mut().rev().find(|c| c.block == block) {
                            call.arguments.push_str(piece);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// A whole (not streamed) body: `choices[0].message.tool_calls`, or Anthropic's
    /// `tool_use` blocks.
    pub fn feed_body(&mut self, body: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return;
        };
        match self.form {
            Form::OpenAi => self.add(&v["choices"][0]["message"]["tool_calls"]),
            Form::Anthropic => {
                for (n, b) in v["content"].as_array().into_iter().flatten().enumerate() {
                    self.start_block(n as u64, b);
                    if let Some(call) = self.calls.last_mut().filter(|c| c.block == n as u64) {
                        call.arguments = b["input"].to_string();
                    }
                }
            }
        }
    }

    /// Anthropic: a content block starts; a `tool_use` one is a call.
    fn start_block(&mut self, block: u64, b: &Value) {
        if b["type"] != "tool_use" || self.calls.len() >= MAX_CALLS {
            return;
        }
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        self.calls.push(Call {
            block,
            id: text(&b["id"]),
            name: text(&b["name"]),
            arguments: String::new(),
        });
    }

    fn add(&mut self, calls: &Value) {
        for (n, delta) in calls.as_array().into_iter().flatten().enumerate() {
            let at = delta["index"].as_u64().map_or(n, |i| i as usize);
            if at >= MAX_CALLS {
                continue;
            }
            if self.calls.len() <= at {
                self.calls.resize_with(at + 1, Call::default);
            }
            let call = &mut self.calls[at];
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            if let Some(id) = delta["id"].as_str() {
                call.id = id.to_string();
            }
            let f = &delta["function"];
            call.name.push_str(&text(&f["name"]));
            call.arguments.push_str(&text(&f["arguments"]));
        }
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The answer as the assistant message a client sends back: `text` (JSON-escaped as the
    /// server sent it) and the calls.
    pub fn assistant_message(&self, text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len() + 64);
        out.extend_from_slice(b"{\"role\":\"assistant\",\"content\":");
        let quoted = |out: &mut Vec<u8>| {
            out.push(b'"');
            out.extend_from_slice(text);
            out.push(b'"');
        };
        let id = |i: usize, c: &Call| match c.id.is_empty() {
            true => format!("call_{i}"),
            false => c.id.clone(),
        };
        if self.calls.is_empty() {
            quoted(&mut out);
        } else if self.form == Form::Anthropic {
            // Blocks: the text (if any), then each call, its input an object.
            out.push(b'[');
            if !text.is_empty() {
                out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
                quoted(&mut out);
                out.extend_from_slice(b"},");
            }
            let calls: Vec<Value> = self
                .calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let input = serde_json::from_str::<Value>(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    json!({"type": "tool_use", "id": id(i, c), "name": c.name, "input": input})
                })
                .collect();
            let calls = serde_json::to_vec(&calls).unwrap_or_default();
            out.extend_from_slice(&calls[1..calls.len() - 1]);
            out.push(b']');
        } else {
            match text.is_empty() {
                true => out.extend_from_slice(b"null"),
                false => quoted(&mut out),
            }
            let calls: Vec<Value> = self
                .calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    json!({"id": id(i, c), "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            out.extend_from_slice(b",\"tool_calls\":");
            out.extend_from_slice(&serde_json::to_vec(&calls).unwrap_or_default());
        }
        out.push(b'}');
        out
    }
}

/// The elements of a JSON array's inside.
fn elements(inside: &[u8]) -> Option<Vec<Value>> {
    let mut array = Vec::with_capacity(inside.len() + 2);
    array.push(b'[');
    array.extend_from_slice(inside);
    array.push(b']');
    serde_json::from_slice(&array).ok()
}

fn is_assistant(m: &Value) -> bool {
    m["role"] == "assistant"
}

/// The new messages array's inside for a turn whose own recorded messages are `own`, after
/// `parent` (its messages as sent, its recorded own messages and its live answer), in the
/// dialect's `form`; and the note for the record when the recorded answer had to stay.
pub(super) fn thread(
    own: &[u8],
    parent: &History,
    form: Form,
) -> Result<(Vec<u8>, Option<NotCarried>), NotCarried> {
    let own = elements(own).ok_or("its messages are not a JSON array")?;
    let recorded_parent = elements(&parent.own).unwrap_or_default();
    let live_ids = serde_json::from_slice(&parent.answer)
        .map(|m: Value| form.call_ids(&m))
        .unwrap_or_default();
    // Whole form: the parent's recorded messages, then its recorded answer.
    let whole = !recorded_parent.is_empty()
        && own.len() > recorded_parent.len()
        && own[..recorded_parent.len()] == recorded_parent[..];
    let mut rest: Vec<Value> = match whole {
        true => own[recorded_parent.len()..].to_vec(),
        false => own,
    };
    let mut note = None;
    let mut answer: &[u8] = &parent.answer;
    let recorded_answer = rest.first().filter(|m| is_assistant(m)).cloned();
    if let Some(recorded) = &recorded_answer {
        let results = rest
            .iter()
            .skip(1)
            .take_while(|m| form.is_results(m))
            .count();
        if !form.call_ids(recorded).is_empty() && live_ids.is_empty() && results > 0 {
            note = Some("the live answer called no tool where the recorded one did: the recorded answer was kept for its tool results");
            answer = b"";
        } else {
            rest.remove(0);
        }
    }
    // The recorded tool results answer the live calls.
    if answer == parent.answer.as_slice() {
        let results = rest.iter().take_while(|m| form.is_results(m)).count();
        form.answer_calls(&mut rest[..results], &live_ids);
    }
    let mut out = Vec::with_capacity(parent.prompt.len() + parent.answer.len() + 256);
    out.extend_from_slice(&parent.prompt);
    if !answer.is_empty() {
        out.push(b',');
        out.extend_from_slice(answer);
    }
    for m in &rest {
        out.push(b',');
        serde_json::to_writer(&mut out, m).map_err(|_| "a message could not be written")?;
    }
    Ok((out, note))
}

/// Finds a `messages` array in a freshly built chat payload (of the dialect's `form`): its
/// inside is both the prompt and the turn's own messages.
pub fn locate(payload: &[u8], body: usize, form: Form) -> Option<CarrySlot> {
    const KEY: &[u8] = b"\"messages\":[";
    let open = body + memchr::memmem::find(&payload[body..], KEY)? + KEY.len() - 1;
    let mut values = serde_json::Deserializer::from_slice(&payload[open..]).into_iter::<Value>();
    let first: Value = values.next()?.ok()?;
    first.as_array()?;
    let close = open + values.byte_offset() - 1;
    Some(CarrySlot {
        shape: super::Shape::Messages(form),
        prompt: open + 1..close,
        content: open + 1..close,
        content_tokens: 0,
        turn_overhead: 0,
        recorded: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::carry::Shape;

    fn history(prompt: &str, own: &str, answer: &[u8]) -> History {
        History {
            shape: Shape::Messages(Form::OpenAi),
            prompt: prompt.as_bytes().to_vec(),
            own: own.as_bytes().to_vec(),
            content_tokens: 0,
            answer: answer.to_vec(),
            answer_tokens: 3,
            seam_tokens: None,
            tool_calls: 0,
        }
    }

    fn array(inside: &[u8]) -> Vec<Value> {
        elements(inside).unwrap()
    }

    #[test]
    fn tool_calls_are_put_back_together_from_their_deltas() {
        let mut calls = LiveCalls::default();
        for event in [
            r#"{"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"now","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}}]}"#,
        ] {
            calls.feed_event(event.as_bytes());
        }
        let m: Value = serde_json::from_slice(&calls.assistant_message(b"")).unwrap();
        assert_eq!(m["content"], Value::Null);
        assert_eq!(m["tool_calls"][0]["id"], "call_a");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Oslo\"}"
        );
        assert_eq!(m["tool_calls"][1]["function"]["name"], "now");
        let mut whole = LiveCalls::default();
        whole.feed_body(br#"{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}"#);
        assert_eq!(whole.len(), 1);
        let text: Value =
            serde_json::from_slice(&LiveCalls::default().assistant_message(br#"hi \"x\""#))
                .unwrap();
        assert_eq!(text["content"], "hi \"x\"");
    }

    #[test]
    fn a_whole_turn_trades_the_recorded_answer_for_the_live_one_and_its_results_follow() {
        let parent_own = r#"{"role":"user","content":"weather?"}"#;
        let live = br#"{"role":"assistant","content":null,"tool_calls":[{"id":"live_1","type":"function","function":{"name":"get","arguments":"{}"}}]}"#;
        let parent = history(parent_own, parent_own, live);
        let own = format!(
            r#"{parent_own},{{"role":"assistant","content":null,"tool_calls":[{{"id":"rec_1","type":"function","function":{{"name":"get","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"rec_1","content":"sunny"}},{{"role":"user","content":"thanks"}}"#
        );
        let (out, note) = thread(own.as_bytes(), &parent, Form::OpenAi).unwrap();
        assert!(note.is_none());
        let m = array(&out);
        assert_eq!(m.len(), 4, "{m:?}");
        assert_eq!(m[1]["tool_calls"][0]["id"], "live_1");
        assert_eq!(
            m[2]["tool_call_id"], "live_1",
            "the result answers the live call"
        );
        assert_eq!(m[2]["content"], "sunny");
        assert_eq!(m[3]["role"], "user");
    }

    #[test]
    fn a_delta_turn_is_appended_and_a_missing_live_call_keeps_the_recorded_one() {
        let parent = history(
            r#"{"role":"system","content":"s"},{"role":"user","content":"a"}"#,
            r#"{"role":"user","content":"a"}"#,
            br#"{"role":"assistant","content":"ok"}"#,
        );
        let (out, _) = thread(br#"{"role":"user","content":"b"}"#, &parent, Form::OpenAi).unwrap();
        let m = array(&out);
        assert_eq!(m.len(), 4);
        assert_eq!(
            (m[2]["content"].as_str(), m[3]["content"].as_str()),
            (Some("ok"), Some("b"))
        );
        // The live answer called nothing; the recorded one called a tool whose result follows.
        let own = r#"{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"r","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"r","content":"1"}"#;
        let (out, note) = thread(own.as_bytes(), &parent, Form::OpenAi).unwrap();
        assert!(note.unwrap().contains("recorded answer was kept"));
        let m = array(&out);
        assert_eq!(m[2]["tool_calls"][0]["id"], "r");
        assert_eq!(m[3]["tool_call_id"], "r");
    }

    #[test]
    fn anthropic_tool_use_blocks_are_put_back_together_and_their_results_follow_them() {
        let mut calls = LiveCalls::new(Form::Anthropic);
        let events = [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"lookup","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Pa"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ris\"}"}}"#,
        ];
        assert!(!calls.carries_calls(events[0].as_bytes()), "a text block");
        assert!(events[1..]
            .iter()
            .all(|e| calls.carries_calls(e.as_bytes())));
        for event in events {
            calls.feed_event(event.as_bytes());
        }
        let live = calls.assistant_message(b"Let me look.");
        let m: Value = serde_json::from_slice(&live).unwrap();
        assert_eq!(
            m,
            serde_json::json!({"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}}]})
        );
        let mut whole = LiveCalls::new(Form::Anthropic);
        whole
            .feed_body(br#"{"content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]}"#);
        let w: Value = serde_json::from_slice(&whole.assistant_message(b"")).unwrap();
        assert_eq!(w["content"][0]["input"]["a"], 1);
        assert_eq!(
            w["content"].as_array().unwrap().len(),
            1,
            "no empty text block"
        );

        // A whole turn: the recorded answer gives way, the results answer the live call.
        let parent_own = r#"{"role":"user","content":"weather?"}"#;
        let parent = History {
            shape: Shape::Messages(Form::Anthropic),
            ..history(parent_own, parent_own, &live)
        };
        let own = format!(
            r#"{parent_own},{{"role":"assistant","content":[{{"type":"tool_use","id":"rec_1","name":"lookup","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"rec_1","content":"18C"}}]}},{{"role":"user","content":"thanks"}}"#
        );
        let (out, note) = thread(own.as_bytes(), &parent, Form::Anthropic).unwrap();
        assert!(note.is_none());
        let m = array(&out);
        assert_eq!(m.len(), 4, "{m:?}");
        assert_eq!(m[1]["content"][1]["id"], "toolu_1");
        assert_eq!(
            m[2]["content"][0],
            serde_json::json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"})
        );
        assert_eq!(m[3]["content"], "thanks");
        // Read as OpenAI's, the same turn has no results to relabel: the form matters.
        let (out, _) = thread(own.as_bytes(), &parent, Form::OpenAi).unwrap();
        assert_eq!(array(&out)[2]["content"][0]["tool_use_id"], "rec_1");
    }
}
