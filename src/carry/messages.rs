//! Live threading of a `messages` conversation (`--carry-forward on`, OpenAI chat): a turn is
//! sent as its parent's messages as sent, the parent's actual answer as an assistant message
//! (text, and its tool calls reassembled from their stream deltas), then the turn's own
//! messages. A trace records a turn one of two ways, told apart by its messages:
//! - whole: they begin with its parent's recorded messages, then the recorded answer (an
//!   assistant message): both give way to what was sent and answered; the rest follows;
//! - delta: they are the turn's new messages only, appended (AIPerf's `message_mode: delta`).
//!
//! The recorded tool results that follow the answer keep their content; their
//! `tool_call_id`s become the live calls' ids, in order, so that a template that pairs them
//! finds its calls. A recorded answer that called tools where the live one called none is
//! kept (its results would follow nothing), and the record says so.

use serde_json::Value;

use super::{CarrySlot, History, NotCarried};

/// Tool calls of a streamed answer, put back together from their deltas.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveCalls {
    calls: Vec<Call>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

impl LiveCalls {
    /// One stream event (`choices[0].delta.tool_calls`: the first delta of a call has its
    /// `id` and `function.name`, later ones pieces of `function.arguments`, each by `index`).
    pub fn feed_event(&mut self, payload: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(payload) else {
            return;
        };
        self.add(&v["choices"][0]["delta"]["tool_calls"]);
    }

    /// A whole (not streamed) body: `choices[0].message.tool_calls`.
    pub fn feed_body(&mut self, body: &[u8]) {
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            self.add(&v["choices"][0]["message"]["tool_calls"]);
        }
    }

    fn add(&mut self, calls: &Value) {
        for (n, delta) in calls.as_array().into_iter().flatten().enumerate() {
            let at = delta["index"].as_u64().map_or(n, |i| i as usize);
            if at >= 1024 {
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
        match (text.is_empty(), self.calls.is_empty()) {
            (true, false) => out.extend_from_slice(b"null"),
            _ => {
                out.push(b'"');
                out.extend_from_slice(text);
                out.push(b'"');
            }
        }
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let id = match c.id.is_empty() {
                        true => format!("call_{i}"),
                        false => c.id.clone(),
                    };
                    serde_json::json!({"id": id, "type": "function",
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

/// The ids of an assistant message's tool calls.
fn call_ids(message: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(message).unwrap_or_default();
    v["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect()
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

fn calls_tools(m: &Value) -> bool {
    m["tool_calls"].as_array().is_some_and(|c| !c.is_empty())
}

/// The new messages array's inside for a turn whose own recorded messages are `own`, after
/// `parent` (its messages as sent, its recorded own messages and its live answer); and the
/// note for the record when the recorded answer had to stay.
pub(super) fn thread(
    own: &[u8],
    parent: &History,
) -> Result<(Vec<u8>, Option<NotCarried>), NotCarried> {
    let own = elements(own).ok_or("its messages are not a JSON array")?;
    let recorded_parent = elements(&parent.own).unwrap_or_default();
    let live_ids = call_ids(&parent.answer);
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
            .take_while(|m| m["role"] == "tool")
            .count();
        if calls_tools(recorded) && live_ids.is_empty() && results > 0 {
            note = Some("the live answer called no tool where the recorded one did: the recorded answer was kept for its tool results");
            answer = b"";
        } else {
            rest.remove(0);
        }
    }
    // The recorded tool results answer the live calls.
    if answer == parent.answer.as_slice() {
        for (m, id) in rest
            .iter_mut()
            .take_while(|m| m["role"] == "tool")
            .zip(&live_ids)
        {
            if let Some(o) = m.as_object_mut() {
                o.insert("tool_call_id".into(), Value::String(id.clone()));
            }
        }
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

/// Finds a `messages` array in a freshly built chat payload: its inside is both the prompt
/// and the turn's own messages.
pub fn locate(payload: &[u8], body: usize) -> Option<CarrySlot> {
    const KEY: &[u8] = b"\"messages\":[";
    let open = body + memchr::memmem::find(&payload[body..], KEY)? + KEY.len() - 1;
    let mut values = serde_json::Deserializer::from_slice(&payload[open..]).into_iter::<Value>();
    let first: Value = values.next()?.ok()?;
    first.as_array()?;
    let close = open + values.byte_offset() - 1;
    Some(CarrySlot {
        shape: super::Shape::Messages,
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
            shape: Shape::Messages,
            prompt: prompt.as_bytes().to_vec(),
            own: own.as_bytes().to_vec(),
            content_tokens: 0,
            answer: answer.to_vec(),
            answer_tokens: 3,
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
        let (out, note) = thread(own.as_bytes(), &parent).unwrap();
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
        let (out, _) = thread(br#"{"role":"user","content":"b"}"#, &parent).unwrap();
        let m = array(&out);
        assert_eq!(m.len(), 4);
        assert_eq!(
            (m[2]["content"].as_str(), m[3]["content"].as_str()),
            (Some("ok"), Some("b"))
        );
        // The live answer called nothing; the recorded one called a tool whose result follows.
        let own = r#"{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"r","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"r","content":"1"}"#;
        let (out, note) = thread(own.as_bytes(), &parent).unwrap();
        assert!(note.unwrap().contains("recorded answer was kept"));
        let m = array(&out);
        assert_eq!(m[2]["tool_calls"][0]["id"], "r");
        assert_eq!(m[3]["tool_call_id"], "r");
    }
}
