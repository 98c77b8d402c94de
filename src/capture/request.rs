//! A client's request as the capture reads it: framed (head and `content-length` body), its
//! dialect found by its path, and what the trace keeps of it: the model, whether it streams,
//! the tokens it asks for, and its prompt's tokens as the served model's template renders
//! them. The bytes themselves go upstream unchanged.

use serde_json::Value;

use super::links::Thread;
use crate::api::{self, Api, Prompt};
use crate::prompt::analysis::Analysis;
use crate::prompt::{PromptCounter, Wrapping};

/// Longest request head read.
pub const MAX_HEAD: usize = 64 * 1024;

/// Largest request body taken (larger: 413).
pub const MAX_BODY: usize = 256 << 20;

/// Where a request's bytes end, or why none will.
pub enum Framed {
    /// Still arriving.
    Partial,
    /// A request of `len` bytes; its body starts at `body_at`.
    Whole {
        len: usize,
        body_at: usize,
        method: String,
        path: String,
        /// The client closes after this request (`connection: close`, or HTTP/1.0 without
        /// keep-alive): so does the proxy, once the answer is written.
        last: bool,
        /// Its body is sent in chunks (`transfer-encoding: chunked`): [`dechunk`] reads it.
        chunked: bool,
    },
    /// Not one the capture can frame: answered with this status and reason, and closed.
    Refused(u16, String),
}

/// Frames the request at the start of `input`.
pub fn frame(input: &[u8]) -> Framed {
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut req = httparse::Request::new(&mut headers);
    let body_at = match req.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if input.len() > MAX_HEAD => {
            return Framed::Refused(431, "request head too large".into())
        }
        Ok(httparse::Status::Partial) => return Framed::Partial,
        Err(e) => return Framed::Refused(400, format!("invalid request: {e}")),
    };
    let mut body_len = 0usize;
    let mut chunked = false;
    let mut last = req.version == Some(0);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            let has = |token: &str| {
                h.value
                    .split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
            };
            last = has("close") || (last && !has("keep-alive"));
        }
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if !h.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Framed::Refused(
                    501,
                    "llmreplay capture takes request bodies plain or chunked, no other \
                     transfer-encoding"
                        .into(),
                );
            }
            chunked = true;
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(h.value).ok().map(str::trim);
            match value.and_then(|v| v.parse().ok()) {
                Some(n) => body_len = n,
                None => return Framed::Refused(400, "invalid content-length".into()),
            }
        }
    }
    let too_large = || Framed::Refused(413, format!("a request body over {} MiB", MAX_BODY >> 20));
    if chunked {
        match chunked_len(&input[body_at..]) {
            Ok(Some(n)) => body_len = n,
            Ok(None) if input.len() - body_at > MAX_BODY => return too_large(),
            Ok(None) => return Framed::Partial,
            Err(why) => return Framed::Refused(400, format!("invalid chunked body: {why}")),
        }
    }
    if body_len > MAX_BODY {
        return too_large();
    }
    if input.len() < body_at + body_len {
        return Framed::Partial;
    }
    Framed::Whole {
        len: body_at + body_len,
        body_at,
        method: req.method.unwrap_or("").to_string(),
        path: req.path.unwrap_or("").to_string(),
        last,
        chunked,
    }
}

/// The chunks of a chunked body, each as `(start, end)` of its data in `body`, and where
/// the body ends (its last chunk and trailers included); `Ok(None)` while it is arriving.
fn chunks(body: &[u8], mut each: impl FnMut(usize, usize)) -> Result<Option<usize>, String> {
    let mut at = 0;
    loop {
        let (line, size) = match httparse::parse_chunk_size(&body[at..]) {
            Ok(httparse::Status::Complete(c)) => c,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err("a chunk size that is not hexadecimal".into()),
        };
        at += line;
        if size == 0 {
            // Trailer lines, then an empty one.
            loop {
                let Some(eol) = memchr::memmem::find(&body[at..], b"\r\n") else {
                    return Ok(None);
                };
                at += eol + 2;
                if eol == 0 {
                    return Ok(Some(at));
                }
            }
        }
        let size = usize::try_from(size)
            .ok()
            .filter(|&n| n <= MAX_BODY)
            .ok_or("a chunk over the body limit")?;
        if body.len() < at + size + 2 {
            return Ok(None);
        }
        if &body[at + size..at + size + 2] != b"\r\n" {
            return Err("a chunk not ended by CRLF".into());
        }
        each(at, at + size);
        at += size + 2;
    }
}

fn chunked_len(body: &[u8]) -> Result<Option<usize>, String> {
    chunks(body, |_, _| {})
}

/// A whole chunked body's data, its chunks joined.
pub fn dechunk(body: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(body.len());
    let _ = chunks(body, |start, end| data.extend_from_slice(&body[start..end]));
    data
}

/// The tokens every prompt of a wrapping begins with as the served model renders it (the
/// chat template's opening, a default system prompt; a completion's BOS): left out of the
/// hashed blocks ([`super::BlockHasher::hash_ids`]), since a replay puts them back itself.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Openings {
    pub chat: usize,
    pub completion: usize,
}

impl Openings {
    /// The heads of the frames prompt synthesis measured ([`Analysis::frame`]); none where
    /// there is no template, or one that rewrites content.
    pub fn of(analysis: &Analysis) -> Openings {
        let head = |w| match analysis.frame(w) {
            Ok(Some(frame)) => frame.head as usize,
            _ => 0,
        };
        Openings {
            chat: head(Wrapping::Chat),
            completion: head(Wrapping::Completion),
        }
    }

    /// The opening of a prompt rendered as `wrapping`.
    pub fn opening(&self, wrapping: Wrapping) -> usize {
        match wrapping {
            Wrapping::Chat => self.chat,
            Wrapping::Completion => self.completion,
            Wrapping::TokenIds => 0,
        }
    }
}

/// What the trace keeps of a generation request.
pub struct Seen {
    pub api: Api,
    pub model: Option<String>,
    pub stream: bool,
    /// The output tokens it asks for (`max_tokens` or the dialect's own).
    pub max_tokens: u64,
    /// Its prompt's tokens as the served model's template renders them; Err: why the body
    /// could not be read (it was still forwarded).
    pub tokens: Result<Vec<u32>, String>,
    /// Its prompt as a conversation's turn (None: unread).
    pub thread: Option<Thread>,
    /// How its prompt was rendered (messages through the chat template, a text prompt,
    /// token ids).
    pub wrapping: Wrapping,
}

/// A generation request's dialect, found by its path (a base path before it, as `/proxy/v1/
/// chat/completions`, is allowed); None for other requests (`GET /v1/models`, `/health`),
/// which pass through unrecorded.
pub fn dialect_of(method: &str, path: &str) -> Option<(Api, api::Route)> {
    let path = path.split('?').next().unwrap_or("");
    if method != "POST" {
        return None;
    }
    api::REGISTRY.iter().find_map(|&api| {
        let route = api.routes().iter().find(|r| path.ends_with(r.path))?;
        Some((api, *route))
    })
}

/// Whether a request asks for a stream (its route says, or its body's `stream`), told
/// without parsing the body on the event loop.
pub fn streams(route: &api::Route, body: &[u8]) -> bool {
    let finder = |needle: &[u8]| memchr::memmem::find(body, needle).is_some();
    route
        .stream
        .unwrap_or_else(|| finder(b"\"stream\":true") || finder(b"\"stream\": true"))
}

/// Reads a generation request's body.
pub fn read(api: Api, route: &api::Route, body: &[u8], counter: &PromptCounter) -> Seen {
    let parsed = serde_json::from_slice::<Value>(body).map_err(|e| format!("not JSON: {e}"));
    let object = parsed
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|v| v.as_object().ok_or_else(|| "not a JSON object".to_string()));
    let request = object.and_then(|o| Ok((o, api.mock_request(o, route)?)));
    match request {
        Ok((object, request)) => {
            let (tokens, thread) = prompt(counter, &request.prompt);
            let wrapping = match request.prompt {
                Prompt::Messages { .. } => Wrapping::Chat,
                Prompt::Text(Value::String(_)) => Wrapping::Completion,
                Prompt::Text(_) => Wrapping::TokenIds,
            };
            Seen {
                wrapping,
                api,
                model: object
                    .get("model")
                    .and_then(Value::as_str)
                    .map(String::from),
                stream: request.stream,
                max_tokens: max_tokens(object).unwrap_or(request.tokens),
                tokens,
                thread,
            }
        }
        Err(why) => Seen {
            api,
            model: None,
            stream: false,
            max_tokens: 0,
            tokens: Err(why),
            thread: None,
            wrapping: Wrapping::TokenIds,
        },
    }
}

/// The output tokens a request asks for at most, by any dialect's name for them (the mock's
/// own reading of a request is how many it would generate).
fn max_tokens(o: &serde_json::Map<String, Value>) -> Option<u64> {
    ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|k| o.get(*k)?.as_u64())
        .or_else(|| o.get("parameters")?.get("max_new_tokens")?.as_u64())
}

/// The value of the first of `names` among the request head's headers.
pub fn header<'a>(head: &'a [u8], names: &[String]) -> Option<&'a [u8]> {
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(head).ok()?;
    names.iter().find_map(|name| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    })
}

/// The prompt's token ids, as the server renders and encodes it, and the prompt as a turn
/// of a conversation (None: not a prompt the capture reads).
fn prompt(counter: &PromptCounter, prompt: &Prompt) -> (Result<Vec<u32>, String>, Option<Thread>) {
    match *prompt {
        Prompt::Messages {
            messages,
            tools,
            system,
            thinking,
        } => {
            let mut messages = api::with_system(messages, system);
            let thread = messages.as_array().map(|m| Thread::of_messages(m));
            // An assistant turn that only calls tools has `content: null` (OpenAI's SDK sends
            // it so); templates test its content as a string, as the servers hand it to them.
            for m in messages.as_array_mut().into_iter().flatten() {
                if m.get("content").is_some_and(Value::is_null) {
                    m["content"] = Value::from("");
                }
            }
            (
                counter.chat_ids_thinking(&messages, tools, thinking),
                thread,
            )
        }
        Prompt::Text(Value::String(text)) => (
            counter.completion_ids(text),
            Some(Thread::Text(text.as_bytes().to_vec())),
        ),
        Prompt::Text(Value::Array(items)) => {
            let ids = items
                .iter()
                .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(|| "a prompt given as a list is captured only as token ids".into());
            let bytes = items
                .iter()
                .flat_map(|t| t.as_u64().unwrap_or(u64::MAX).to_le_bytes())
                .collect();
            (ids, Some(Thread::Text(bytes)))
        }
        Prompt::Text(_) => (Err("the prompt is not a string".into()), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_framed_once_its_body_is_whole() {
        let req = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\nabcdGET";
        assert!(matches!(frame(&req[..20]), Framed::Partial));
        assert!(matches!(frame(&req[..60]), Framed::Partial));
        match frame(req) {
            Framed::Whole {
                len,
                body_at,
                method,
                path,
                last,
                chunked,
            } => {
                assert!(!last && !chunked, "HTTP/1.1 keeps the connection");
                assert_eq!(&req[body_at..len], b"abcd");
                assert_eq!(
                    (method.as_str(), path.as_str()),
                    ("POST", "/v1/completions")
                );
            }
            _ => panic!("whole"),
        }
        for (head, last) in [
            ("HTTP/1.1\r\nConnection: keep-alive, Close", true),
            ("HTTP/1.0", true),
            ("HTTP/1.0\r\nconnection: keep-alive", false),
        ] {
            let req = format!("POST /v1/completions {head}\r\ncontent-length: 0\r\n\r\n");
            assert!(
                matches!(frame(req.as_bytes()), Framed::Whole { last: l, .. } if l == last),
                "{head}"
            );
        }
        let chunked = b"POST /v1/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n\
                        4\r\n{\"a\"\r\n3;ext=1\r\n: 1\r\n1\r\n}\r\n0\r\nx-t: 1\r\n\r\nNEXT";
        for cut in [70, chunked.len() - 7] {
            assert!(matches!(frame(&chunked[..cut]), Framed::Partial), "{cut}");
        }
        match frame(chunked) {
            Framed::Whole {
                len,
                body_at,
                chunked: true,
                ..
            } => {
                assert_eq!(&chunked[len..], b"NEXT");
                assert_eq!(dechunk(&chunked[body_at..len]), br#"{"a": 1}"#);
            }
            _ => panic!("a whole chunked request"),
        }
        let gzip = b"POST /v1/completions HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n";
        assert!(matches!(frame(gzip), Framed::Refused(501, _)));
        let bad = b"POST /v1/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n";
        assert!(matches!(frame(bad), Framed::Refused(400, _)));
        assert!(matches!(
            frame(b"\x01\x02 nonsense\r\n\r\n"),
            Framed::Refused(400, _)
        ));
    }

    #[test]
    fn generation_routes_are_found_by_their_path_and_others_pass() {
        let (api, _) = dialect_of("POST", "/v1/chat/completions").unwrap();
        assert_eq!(api, Api::OpenaiChat);
        let (api, _) = dialect_of("POST", "/gateway/v1/messages?beta=true").unwrap();
        assert_eq!(api.name(), "anthropic-messages");
        assert!(dialect_of("GET", "/v1/models").is_none());
        assert!(dialect_of("POST", "/v1/embeddings").is_none());
    }
}
