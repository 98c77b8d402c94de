//! Generated tokens carried forward (`--carry-forward on`, the default): a turn's prompt holds
//! its parent's prompt as sent and the parent's actual answer, then the turn's own tokens, as
//! production's did, so a server that keeps generated tokens in its prefix cache (vLLM,
//! SGLang, llama.cpp) hits where production hit.
//!
//! The producers build every turn from its own hash ids ([`crate::pipeline`]); only the
//! sender knows the parent's answer, so it rebuilds the turn's body when the parent's end
//! releases it ([`splice`]). Its length stays exact: of its own content it keeps the tokens
//! after the history (a synthetic token is a space and lowercase letters, so the k-th token
//! starts at the k-th space). A Bailian child is then the parent's prompt, the parent's
//! answer and the child's blocks past them; a chat turn is sent as the parent's messages, the
//! answer as an assistant message, and the turn's new tokens as the next user message.
//!
//! The answer is pasted as the server sent it (JSON-escaped, never decoded); its token count
//! is the server's `completion_tokens` (else the tokens counted) less its reasoning, which is
//! not pasted: clients do not send reasoning back, and templates drop it from history. A
//! history longer than the turn's input, a parent that failed or called tools (a synthetic turn
//! has no tool result to follow them), or one whose history is gone leaves the turn as the
//! producer built it, and its record says why.

use std::io::Write;
use std::ops::Range;

pub mod messages;
pub mod seam;
pub use seam::{Seam, SeamCounter, SeamJob, Seams};

/// How the prompt sits in a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A JSON string (`prompt`, TGI's `inputs`).
    Completion,
    /// A `messages` array.
    Chat,
    /// A `messages` array recorded in the trace, threaded live ([`messages`]) in the
    /// dialect's form.
    Messages(messages::Form),
}

/// Where a synthetic prompt lies in a request's payload (byte ranges of the payload, after
/// its head), and what its children need to know of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CarrySlot {
    pub shape: Shape,
    /// The prompt: the string's inside, or the messages array's inside.
    pub prompt: Range<usize>,
    /// The turn's own content (the last user message's string inside; the prompt itself for
    /// a completion).
    pub content: Range<usize>,
    /// Tokens between the frame's head and tail: the input length less the frame.
    pub content_tokens: u64,
    /// Chat: what the template adds around an answer and the next user message beyond their
    /// texts (the generation prompt, the end of turn, the next role). 0 for a completion.
    pub turn_overhead: u64,
    /// Messages, once threaded: the turn's own messages as the trace recorded them (what a
    /// child's recorded messages begin with). None: they are `content`.
    pub recorded: Option<Vec<u8>>,
}

/// A finished turn as its children need it.
#[derive(Clone, Debug)]
pub struct History {
    pub shape: Shape,
    /// Its prompt region as sent.
    pub prompt: Vec<u8>,
    /// Messages: its own messages as recorded.
    pub own: Vec<u8>,
    pub content_tokens: u64,
    /// Its answer, JSON-escaped as the server sent it (Messages: the whole assistant
    /// message, its tool calls in it).
    pub answer: Vec<u8>,
    /// Tokens of the answer's text (its reasoning, not pasted, left out).
    pub answer_tokens: u64,
    /// Tokens the answer adds to a turn that carries it, counted in place with the real
    /// tokenizer and template ([`seam`]); None where it could not be (the server's count
    /// then stands in, and the turn may miss its length by the difference).
    pub seam_tokens: Option<u64>,
    /// Tool calls the answer made: a synthetic turn has no tool result to give them.
    pub tool_calls: u64,
}

impl History {
    pub fn bytes(&self) -> usize {
        self.prompt.len() + self.answer.len()
    }
}

const CHAT_USER: &[u8] = b"\"messages\":[{\"role\":\"user\",\"content\":\"";
const COMPLETION_KEYS: [&[u8]; 2] = [b"\"prompt\":\"", b"\"inputs\":\""];

/// Finds the synthetic prompt in a freshly built payload; None for a token-id prompt or
/// verbatim messages.
pub fn locate(payload: &[u8], content_tokens: u64, turn_overhead: u64) -> Option<CarrySlot> {
    let body = body_start(payload)?;
    let find =
        |key: &[u8]| memchr::memmem::find(&payload[body..], key).map(|at| body + at + key.len());
    if let Some(start) = find(CHAT_USER) {
        let end = start + memchr::memchr(b'"', &payload[start..])?;
        // The message object closes right after its content.
        if payload.get(end..end + 3) != Some(b"\"}]") {
            return None;
        }
        let open = start - CHAT_USER.len() + b"\"messages\":[".len();
        return Some(CarrySlot {
            shape: Shape::Chat,
            prompt: open..end + 2,
            content: start..end,
            content_tokens,
            turn_overhead,
            recorded: None,
        });
    }
    let start = COMPLETION_KEYS.iter().find_map(|k| find(k))?;
    let end = start + memchr::memchr(b'"', &payload[start..])?;
    Some(CarrySlot {
        shape: Shape::Completion,
        prompt: start..end,
        content: start..end,
        content_tokens,
        turn_overhead: 0,
        recorded: None,
    })
}

fn body_start(payload: &[u8]) -> Option<usize> {
    memchr::memmem::find(payload, b"\r\n\r\n").map(|at| at + 4)
}

/// The history a finished turn leaves: its prompt region, and its answer.
pub fn history(payload: &[u8], slot: &CarrySlot, answer: Vec<u8>, answer_tokens: u64) -> History {
    let own = match (slot.shape, &slot.recorded) {
        (Shape::Messages(_), Some(recorded)) => recorded.clone(),
        (Shape::Messages(_), None) => payload[slot.content.clone()].to_vec(),
        _ => Vec::new(),
    };
    History {
        shape: slot.shape,
        prompt: payload[slot.prompt.clone()].to_vec(),
        own,
        content_tokens: slot.content_tokens,
        answer,
        answer_tokens,
        seam_tokens: None,
        tool_calls: 0,
    }
}

/// The prompts.jsonl line of a turn as it was sent (`--save-prompts`): a completion's
/// prompt; a chat's or recorded conversation's messages (and tools), or a lone user
/// message's content, as the producers write it for a turn not rebuilt.
pub fn sent_line(index: u64, payload: &[u8]) -> Option<Vec<u8>> {
    let body: serde_json::Value = serde_json::from_slice(&payload[body_start(payload)?..]).ok()?;
    let mut line = serde_json::Map::new();
    line.insert("index".into(), index.into());
    match body["messages"].as_array() {
        Some(m) if m.len() == 1 && m[0]["role"] == "user" && m[0]["content"].is_string() => {
            line.insert("prompt".into(), m[0]["content"].clone());
        }
        Some(_) => {
            line.insert("messages".into(), body["messages"].clone());
            if !body["tools"].is_null() {
                line.insert("tools".into(), body["tools"].clone());
            }
        }
        None => {
            let prompt = body.get("prompt").or_else(|| body.get("inputs"))?;
            line.insert("prompt".into(), prompt.clone());
        }
    }
    let mut out = serde_json::to_vec(&line).ok()?;
    out.push(b'\n');
    Some(out)
}

/// Why a turn was sent as built rather than with its parent's history.
pub type NotCarried = &'static str;

/// A turn rebuilt around its parent's history: its payload, its slot, the tokens carried
/// (None where the recorded answer had to stay: nothing live was carried), and a note where
/// part of the recorded form had to stay.
pub type Spliced = (Vec<u8>, CarrySlot, Option<u64>, Option<NotCarried>);

/// Rebuilds `payload` (a record's head and body) with the parent's prompt and answer in
/// front of the turn's own tokens past them (a `messages` turn: in front of its own
/// messages, [`messages::thread`]).
pub fn splice(payload: &[u8], slot: &CarrySlot, parent: &History) -> Result<Spliced, NotCarried> {
    if parent.shape != slot.shape {
        return Err("the parent was sent in another dialect");
    }
    if let Shape::Messages(form) = slot.shape {
        let own = &payload[slot.content.clone()];
        let (inside, note) = messages::thread(own, parent, form)?;
        let (out, range) = rebuild(payload, slot.prompt.clone(), &inside)?;
        let slot = CarrySlot {
            prompt: range.clone(),
            content: range,
            recorded: Some(slot.recorded.clone().unwrap_or_else(|| own.to_vec())),
            ..slot.clone()
        };
        // The recorded answer stayed (the note says why): no live answer was carried.
        let carried = note.is_none().then_some(parent.answer_tokens);
        return Ok((out, slot, carried, note));
    }
    if parent.tool_calls > 0 {
        return Err("the parent's answer called tools, and a synthetic turn has no tool result to follow them");
    }
    let added = parent
        .seam_tokens
        .unwrap_or(parent.answer_tokens + slot.turn_overhead);
    let history = parent.content_tokens + added;
    if history >= slot.content_tokens {
        return Err("the parent's prompt and answer are as long as this turn or longer");
    }
    let own = &payload[slot.content.clone()];
    let cut =
        nth_token_start(own, history).ok_or("this turn's prompt has fewer tokens than planned")?;
    let body = body_start(payload).ok_or("no body")?;
    let mut out = Vec::with_capacity(payload.len() + parent.bytes() + 128);
    out.extend_from_slice(&payload[body..slot.prompt.start]);
    let prompt_start = out.len();
    out.extend_from_slice(&parent.prompt);
    let content_start = match slot.shape {
        Shape::Completion => {
            out.extend_from_slice(&parent.answer);
            prompt_start
        }
        Shape::Chat | Shape::Messages(_) => {
            out.extend_from_slice(b",{\"role\":\"assistant\",\"content\":\"");
            out.extend_from_slice(&parent.answer);
            out.extend_from_slice(b"\"},{\"role\":\"user\",\"content\":\"");
            out.len()
        }
    };
    out.extend_from_slice(&own[cut..]);
    let content_end = out.len();
    if slot.shape == Shape::Chat {
        out.extend_from_slice(b"\"}");
    }
    let prompt_end = out.len();
    out.extend_from_slice(&payload[slot.prompt.end..]);
    let (head, shift) = frame(payload, &out);
    let slot = CarrySlot {
        shape: slot.shape,
        prompt: shift + prompt_start..shift + prompt_end,
        content: shift + content_start..shift + content_end,
        content_tokens: slot.content_tokens,
        turn_overhead: slot.turn_overhead,
        recorded: None,
    };
    Ok((head, slot, Some(history), None))
}

/// `payload` with `body` for its body: its head's lines (the request's identity, its index)
/// kept, its `Content-Length` (always the last) made the new body's; and where the body
/// starts.
fn frame(payload: &[u8], body: &[u8]) -> (Vec<u8>, usize) {
    let head_end = body_start(payload).unwrap_or(0);
    let kept = memchr::memmem::rfind(&payload[..head_end], b"Content-Length: ").unwrap_or(0);
    let mut head = Vec::with_capacity(kept + 32 + body.len());
    head.extend_from_slice(&payload[..kept]);
    write!(head, "Content-Length: {}\r\n\r\n", body.len()).expect("a Vec takes any write");
    let shift = head.len();
    head.extend_from_slice(body);
    (head, shift)
}

/// `payload`'s body with `range` (of the payload) replaced by `inside`: the new payload, and
/// where `inside` lies in it.
fn rebuild(
    payload: &[u8],
    range: Range<usize>,
    inside: &[u8],
) -> Result<(Vec<u8>, Range<usize>), NotCarried> {
    let body = body_start(payload).ok_or("no body")?;
    let mut out = Vec::with_capacity(payload.len() + inside.len());
    out.extend_from_slice(&payload[body..range.start]);
    let start = out.len();
    out.extend_from_slice(inside);
    let end = out.len();
    out.extend_from_slice(&payload[range.end..]);
    let (framed, shift) = frame(payload, &out);
    Ok((framed, shift + start..shift + end))
}

/// The byte where synthetic token `n` starts (each starts with a space); the end for `n`
/// equal to the count.
fn nth_token_start(text: &[u8], n: u64) -> Option<usize> {
    if n == 0 {
        return Some(0);
    }
    let mut seen = 0;
    for at in memchr::memchr_iter(b' ', text) {
        if seen == n {
            return Some(at);
        }
        seen += 1;
    }
    (seen == n).then_some(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Record `index`'s payload, its identity's lines first.
    fn payload(index: u64, body: &str) -> Vec<u8> {
        format!(
            "X-Request-Id: run-{index}\r\nX-Llmreplay-Index: {index}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    /// A payload's body; its head kept the identity and the index, and says its length.
    fn body(payload: &[u8]) -> serde_json::Value {
        let text = std::str::from_utf8(payload).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let (id, index) = (head.lines().next().unwrap(), head.lines().nth(1).unwrap());
        assert_eq!(
            id.strip_prefix("X-Request-Id: run-"),
            index.strip_prefix("X-Llmreplay-Index: "),
            "{head}"
        );
        assert!(
            head.ends_with(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn a_completion_turn_holds_its_parents_prompt_and_answer_then_its_own_tail() {
        let parent = payload(0, r#"{"model":"m","prompt":" a b c","max_tokens":2}"#);
        let pslot = locate(&parent, 3, 0).unwrap();
        let history = history(&parent, &pslot, br#" x\"y"#.to_vec(), 2);
        // The child's own content is 8 tokens: 3 + 2 of history are dropped, 3 kept.
        let child = payload(
            1,
            r#"{"model":"m","prompt":" p q r s t u v w","max_tokens":1}"#,
        );
        let slot = locate(&child, 8, 0).unwrap();
        let (spliced, new_slot, tokens, _) = splice(&child, &slot, &history).unwrap();
        assert_eq!(tokens, Some(5));
        let v = body(&spliced);
        assert_eq!(v["prompt"], " a b c x\"y u v w");
        assert_eq!(v["max_tokens"], 1);
        assert_eq!(&spliced[new_slot.prompt.clone()], br#" a b c x\"y u v w"#);
        assert_eq!(&spliced[new_slot.content.clone()], br#" a b c x\"y u v w"#);
        // A history as long as the turn is not carried.
        let long = History {
            answer_tokens: 5,
            ..history.clone()
        };
        assert!(splice(&child, &slot, &long).is_err());
        // Nor one whose answer called tools: no tool result could follow them.
        let called = History {
            tool_calls: 1,
            ..history.clone()
        };
        assert!(splice(&child, &slot, &called)
            .unwrap_err()
            .contains("tools"));
    }

    #[test]
    fn a_chat_turn_is_the_parents_messages_the_answer_and_a_new_user_message() {
        let root = payload(
            0,
            r#"{"model":"m","messages":[{"role":"user","content":" a b"}],"stream":true}"#,
        );
        let slot = locate(&root, 2, 3).unwrap();
        assert_eq!(slot.shape, Shape::Chat);
        let h0 = history(&root, &slot, b" hi".to_vec(), 1);
        let child = payload(
            1,
            r#"{"model":"m","messages":[{"role":"user","content":" c d e f g h i j"}],"stream":true}"#,
        );
        let cslot = locate(&child, 8, 3).unwrap();
        let (spliced, s1, t1, _) = splice(&child, &cslot, &h0).unwrap();
        assert_eq!(t1, Some(2 + 1 + 3));
        let v = body(&spliced);
        assert_eq!(
            v["messages"],
            serde_json::json!([
                {"role": "user", "content": " a b"},
                {"role": "assistant", "content": " hi"},
                {"role": "user", "content": " i j"},
            ])
        );
        assert_eq!(v["stream"], true);
        // Its own children get the whole conversation so far.
        let h1 = history(&spliced, &s1, b" ok".to_vec(), 1);
        let grandchild = payload(
            2,
            r#"{"model":"m","messages":[{"role":"user","content":" k l m n o p q r s t u v w"}]}"#,
        );
        let gslot = locate(&grandchild, 13, 3).unwrap();
        let (g, _, t2, _) = splice(&grandchild, &gslot, &h1).unwrap();
        assert_eq!(t2, Some(8 + 1 + 3));
        let v = body(&g);
        assert_eq!(v["messages"].as_array().unwrap().len(), 5);
        assert_eq!(v["messages"][4]["content"], " w");
        assert_eq!(v["messages"][3]["content"], " ok");
    }

    #[test]
    fn token_id_and_verbatim_prompts_have_no_slot() {
        assert!(locate(&payload(0, r#"{"prompt":[1,2,3]}"#), 3, 0).is_none());
        let two = r#"{"messages":[{"role":"user","content":" a"},{"role":"user","content":" b"}]}"#;
        assert!(locate(&payload(0, two), 2, 0).is_none());
        let tgi = locate(&payload(0, r#"{"inputs":" a b","parameters":{}}"#), 2, 0).unwrap();
        assert_eq!(tgi.shape, Shape::Completion);
    }
}
