//! Which earlier request a request continues: its conversation's parent.
//!
//! A parent's answer ended before its child came. A chat turn's messages are its parent's
//! messages, the parent's answer as an assistant message, then what came after it (the user's
//! next message, tool results). So a request whose messages before its last assistant message
//! are exactly an earlier request's whole messages is that request's child. A completion (or
//! TGI) turn's prompt is its parent's whole prompt, then the parent's streamed answer, then
//! its own: the longest such earlier prompt is its parent (a non-streamed text answer is not
//! kept, so its turns are linked by session headers only). A shared system prompt is no link:
//! the earlier request's whole prompt must be a prefix, not only its start. Where nothing
//! matches, a session header the client sent (`x-session-id` and the like, or
//! `--session-header`) makes the request the next turn of the session's latest one.
//!
//! Only hashes of prompts are held, in memory (never written), for the last [`WINDOW`]
//! requests: a turn whose parent is older than that starts a conversation of its own.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{DefaultHasher, Hasher};

use serde_json::Value;

/// Requests whose prompts are remembered as possible parents.
pub const WINDOW: usize = 65_536;

/// Session headers read when `--session-header` names none: those that routers and load
/// generators send (SGLang's and llm-d's affinity, Dynamo's, AIPerf's).
pub const SESSION_HEADERS: [&str; 4] = [
    "x-session-id",
    "x-session-affinity",
    "x-dynamo-session-id",
    "session-id",
];

/// What a request's prompt is, as a parent or a child.
pub enum Thread {
    /// Hashes of its messages' chain: of all of them, and of those before its last
    /// assistant message (its parent's, if it has one).
    Messages {
        whole: u64,
        before_answer: Option<u64>,
    },
    /// Its prompt's bytes (a string's, or token ids' little-endian).
    Text(Vec<u8>),
}

impl Thread {
    /// A chat request's thread, from its messages (a system prompt given beside them first).
    pub fn of_messages(messages: &[Value]) -> Thread {
        let mut h = DefaultHasher::new();
        h.write_u8(b'm');
        let mut before_answer = None;
        for m in messages {
            if m.get("role").and_then(Value::as_str) == Some("assistant") {
                before_answer = Some(h.finish());
            }
            // Keys are sorted (serde_json's map), so one message is hashed alike every time.
            h.write(m.to_string().as_bytes());
            h.write_u8(0xff);
        }
        Thread::Messages {
            whole: h.finish(),
            before_answer,
        }
    }
}

/// A request as its children see it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Turn {
    /// Its `chat_id`.
    pub id: u64,
    /// 1 for a conversation's first.
    pub turn: u32,
    /// When its answer ended (the capture's clock).
    pub ended_ns: u64,
    /// Its conversation's first turn's id.
    pub root: u64,
    /// A text prompt's answer: its length in bytes and hash.
    answer: Option<(usize, u64)>,
}

/// A request as [`Links::link`] reads it.
pub struct Request<'a> {
    pub thread: &'a Thread,
    /// The value of its session header.
    pub session: Option<&'a [u8]>,
    pub id: u64,
    pub arrived_ns: u64,
    pub ended_ns: u64,
    /// A text prompt's streamed answer, JSON-escaped as the server sent it.
    pub answer: Option<&'a [u8]>,
}

/// What is remembered of one of the last [`WINDOW`] requests, to forget it.
struct Remembered {
    id: u64,
    key: u64,
    text_len: Option<usize>,
    session: Option<u64>,
}

#[derive(Default)]
pub struct Links {
    /// A whole prompt's key → the latest request that sent it.
    by_prompt: HashMap<u64, Turn>,
    /// A session header's value (hashed) → the session's latest request.
    by_session: HashMap<u64, Turn>,
    /// Lengths of the remembered text prompts, and how many have each.
    text_lengths: BTreeMap<usize, u32>,
    order: VecDeque<Remembered>,
}

impl Links {
    /// The parent of `req` (None: it starts a conversation) and `req`'s own turn, which is
    /// remembered as a parent for those after it.
    pub fn link(&mut self, req: &Request) -> (Option<Turn>, Turn) {
        let session = req.session.map(|s| hash(b's', s));
        let (parent, key, text_len) = match req.thread {
            Thread::Messages {
                whole,
                before_answer,
            } => (
                before_answer.and_then(|k| self.by_prompt.get(&k).copied()),
                *whole,
                None,
            ),
            Thread::Text(bytes) => (self.text_parent(bytes), text_key(bytes), Some(bytes.len())),
        };
        let ended = |p: &Turn| p.ended_ns <= req.arrived_ns;
        let parent = parent
            .filter(ended)
            .or_else(|| self.by_session.get(&session?).copied().filter(ended));
        let me = Turn {
            id: req.id,
            turn: parent.map_or(1, |p| p.turn + 1),
            ended_ns: req.ended_ns,
            root: parent.map_or(req.id, |p| p.root),
            answer: req
                .answer
                .and_then(decoded)
                .map(|a| (a.len(), hash(b'a', &a))),
        };
        self.remember(me, key, text_len, session);
        (parent, me)
    }

    /// The latest request whose whole prompt, then its answer, begin `bytes`; the longest.
    fn text_parent(&self, bytes: &[u8]) -> Option<Turn> {
        let mut h = DefaultHasher::new();
        h.write_u8(b't');
        let mut at = 0;
        let mut found = None;
        for &len in self.text_lengths.range(1..bytes.len()).map(|(len, _)| len) {
            h.write(&bytes[at..len]);
            at = len;
            let Some(turn) = self.by_prompt.get(&mix(len, h.finish())) else {
                continue;
            };
            let answered = turn.answer.is_some_and(|(n, answer)| {
                n > 0
                    && bytes
                        .get(len..len + n)
                        .is_some_and(|b| hash(b'a', b) == answer)
            });
            if answered {
                found = Some(*turn);
            }
        }
        found
    }

    fn remember(&mut self, me: Turn, key: u64, text_len: Option<usize>, session: Option<u64>) {
        if self.order.len() == WINDOW {
            if let Some(old) = self.order.pop_front() {
                self.forget(old);
            }
        }
        self.by_prompt.insert(key, me);
        if let Some(s) = session {
            self.by_session.insert(s, me);
        }
        if let Some(len) = text_len {
            *self.text_lengths.entry(len).or_insert(0) += 1;
        }
        self.order.push_back(Remembered {
            id: me.id,
            key,
            text_len,
            session,
        });
    }

    fn forget(&mut self, old: Remembered) {
        // A later request with the same prompt or session took its place: that one stays.
        if self.by_prompt.get(&old.key).is_some_and(|t| t.id == old.id) {
            self.by_prompt.remove(&old.key);
        }
        if let Some(s) = old.session {
            if self.by_session.get(&s).is_some_and(|t| t.id == old.id) {
                self.by_session.remove(&s);
            }
        }
        if let Some(len) = old.text_len {
            if let Some(n) = self.text_lengths.get_mut(&len) {
                *n -= 1;
                if *n == 0 {
                    self.text_lengths.remove(&len);
                }
            }
        }
    }
}

/// A whole text prompt's key.
fn text_key(bytes: &[u8]) -> u64 {
    mix(bytes.len(), hash(b't', bytes))
}

fn hash(tag: u8, bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write_u8(tag);
    h.write(bytes);
    h.finish()
}

/// An answer as the server sent it inside a JSON string, decoded: the text a client pastes
/// into its next prompt.
fn decoded(escaped: &[u8]) -> Option<Vec<u8>> {
    let quoted = [b"\"".as_slice(), escaped, b"\""].concat();
    serde_json::from_slice::<String>(&quoted)
        .ok()
        .map(String::into_bytes)
}

fn mix(len: usize, hash: u64) -> u64 {
    hash ^ (len as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Links request `id`, which came at `id * 10` and was answered at once, with `answer`.
    fn link(links: &mut Links, thread: Thread, session: Option<&str>, id: u64) -> Option<Turn> {
        link_answered(links, thread, session, id, None)
    }

    fn link_answered(
        links: &mut Links,
        thread: Thread,
        session: Option<&str>,
        id: u64,
        answer: Option<&str>,
    ) -> Option<Turn> {
        links
            .link(&Request {
                thread: &thread,
                session: session.map(str::as_bytes),
                id,
                arrived_ns: id * 10,
                ended_ns: id * 10 + 5,
                answer: answer.map(str::as_bytes),
            })
            .0
    }

    fn chat(messages: Value) -> Thread {
        Thread::of_messages(messages.as_array().unwrap())
    }

    fn text(s: &str) -> Thread {
        Thread::Text(s.as_bytes().to_vec())
    }

    #[test]
    fn a_chat_turn_is_the_child_of_the_request_whose_messages_it_extends() {
        let mut links = Links::default();
        let sys = json!({"role": "system", "content": "be brief"});
        let u1 = json!({"role": "user", "content": "hi"});
        let a1 = json!({"role": "assistant", "content": "hello"});
        let u2 = json!({"role": "user", "content": "more"});
        assert_eq!(link(&mut links, chat(json!([sys, u1])), None, 0), None);
        // Another conversation with the same system prompt is not a child.
        let other = json!([sys, {"role": "user", "content": "else"}]);
        assert_eq!(link(&mut links, chat(other), None, 1), None);
        let second = link(&mut links, chat(json!([sys, u1, a1, u2])), None, 2);
        assert_eq!(second.map(|p| (p.id, p.turn, p.ended_ns)), Some((0, 1, 5)));
        // An agent's next step after a tool result is the child of the step that called it.
        let a2 = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]});
        let tool = json!({"role": "tool", "content": "42"});
        let third = link(
            &mut links,
            chat(json!([sys, u1, a1, u2, a2, tool])),
            None,
            3,
        );
        assert_eq!(third.map(|p| (p.id, p.turn, p.root)), Some((2, 2, 0)));
    }

    #[test]
    fn a_completion_turn_is_the_child_of_the_prompt_and_answer_it_begins_with() {
        let mut links = Links::default();
        let answered = |links: &mut Links, prompt: &str, id: u64, answer: &str| {
            link_answered(links, text(prompt), None, id, Some(answer))
        };
        answered(&mut links, "Q1.", 0, r#" A \"1\"."#);
        answered(&mut links, "Q1. A \"1\".", 1, " A2.");
        answered(&mut links, "Q2.", 2, " B.");
        let child = answered(&mut links, "Q1. A \"1\". A2. Q3.", 3, " C.");
        assert_eq!(child.map(|p| (p.id, p.turn)), Some((1, 2)));
        // A prompt that begins with another's but not with its answer is no turn of it (a
        // shared start, or a synthetic prompt longer than another).
        assert_eq!(answered(&mut links, "Q2. more", 4, "x"), None);
        // The same prompt again is a retry, not a turn.
        assert_eq!(answered(&mut links, "Q2.", 5, " B."), None);
    }

    #[test]
    fn a_parent_ends_before_its_child_comes() {
        let mut links = Links::default();
        let sys = json!({"role": "system", "content": "s"});
        let u1 = json!({"role": "user", "content": "hi"});
        let a1 = json!({"role": "assistant", "content": "hello"});
        let mut send = |thread: Thread, session: &[u8], id, arrived_ns, ended_ns| {
            let req = Request {
                thread: &thread,
                session: Some(session),
                id,
                arrived_ns,
                ended_ns,
                answer: None,
            };
            links.link(&req).0.map(|p| p.id)
        };
        send(chat(json!([sys, u1])), b"t", 0, 0, 100);
        let child = chat(json!([sys, u1, a1, {"role": "user", "content": "?"}]));
        // Its prompt's parent had not answered yet when it came: not its parent.
        assert_eq!(send(child, b"t", 1, 50, 60), None);
        // Then its session's latest that had, if there is one.
        send(text("other"), b"s", 2, 10, 20);
        let child = chat(json!([sys, u1, a1, {"role": "user", "content": "!"}]));
        assert_eq!(send(child, b"s", 3, 50, 60), Some(2));
    }

    #[test]
    fn a_session_header_links_what_the_prompts_do_not() {
        let mut links = Links::default();
        link(&mut links, text("a"), Some("s1"), 0);
        link(&mut links, text("b"), Some("s2"), 1);
        let next = link(&mut links, text("c"), Some("s1"), 2);
        assert_eq!(next.map(|p| (p.id, p.turn)), Some((0, 1)));
        let after = link(&mut links, text("d"), Some("s1"), 3);
        assert_eq!(after.map(|p| p.turn), Some(2));
    }

    #[test]
    fn memory_is_bounded_by_the_window() {
        let mut links = Links::default();
        for id in 0..(WINDOW as u64 + 10) {
            let prompt = format!("{id}-").repeat(1 + (id % 3) as usize);
            let session = id.to_string();
            link_answered(&mut links, text(&prompt), Some(&session), id, Some("!"));
        }
        assert_eq!(links.order.len(), WINDOW);
        assert_eq!(links.by_prompt.len(), WINDOW);
        assert_eq!(links.by_session.len(), WINDOW);
        assert_eq!(links.text_lengths.values().sum::<u32>() as usize, WINDOW);
        // The oldest are forgotten: the first prompt's continuation starts anew; a recent
        // one's is still linked.
        let late = WINDOW as u64 + 20;
        assert_eq!(link(&mut links, text("0-!?"), None, late), None);
        let recent = format!("{}-!?", WINDOW + 8);
        let linked = link(&mut links, text(&recent), None, late + 1);
        assert_eq!(linked.map(|p| p.id), Some(WINDOW as u64 + 8));
    }
}
