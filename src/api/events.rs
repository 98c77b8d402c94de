//! What a response says: stream events (one per SSE `data:` payload) and whole bodies.

use memchr::memmem::Finder;
use serde_json::Value;

use super::Api;
use crate::server_timing::{llama_cpp, ServerPhases};

/// The meaning of one stream event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamEvent {
    /// Carries generated output (answer text, reasoning, tool-call arguments): counts as a
    /// chunk.
    pub content: bool,
    /// Its output is reasoning only (no answer text or tool call beside it).
    pub reasoning: bool,
    /// Tool calls it starts.
    pub tool_calls: u32,
    /// `usage.completion_tokens_details.reasoning_tokens`: the server's count of reasoning
    /// tokens among the completion tokens.
    pub reasoning_tokens: Option<u64>,
    /// `[DONE]`.
    pub done: bool,
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`: prompt tokens the server's prefix cache
    /// served (vLLM, SGLang and llama.cpp's server send it).
    pub cached_tokens: Option<u64>,
    /// Cumulative completion tokens from `usage` (final event, or every event with vLLM's
    /// `continuous_usage_stats`).
    pub completion_tokens: Option<u64>,
    pub error: Option<String>,
    /// The data is not a JSON object (cut or garbled): the stream cannot be trusted.
    pub malformed: bool,
    /// The server's own timing of the request (llama.cpp's `timings`, in its last event;
    /// boxed: every event is returned, few hold it).
    pub server: Option<Box<ServerPhases>>,
}

/// Where a dialect's stream events keep what llmreplay reads: static data, searched for with
/// pre-built substring finders ([`EventScanner`]).
pub struct StreamKeys {
    /// Keys whose non-empty string value is answer output (text, tool-call arguments): such
    /// an event counts as a chunk. The first one holds the answer text that carry-forward
    /// pastes into the next turn.
    pub content: &'static [&'static [u8]],
    /// Keys whose non-empty string value is reasoning (thinking): a chunk too, of reasoning.
    pub reasoning: &'static [&'static [u8]],
    /// The `"type":` value that starts a tool call (`function`, `tool_use`).
    pub tool_call: Option<&'static [u8]>,
    /// The key in the usage object of its reasoning tokens.
    pub reasoning_tokens: Option<&'static [u8]>,
    /// The object that holds the counts (`"usage":`).
    pub usage: &'static [u8],
    /// Keys in it whose numbers add up to the prompt's tokens.
    pub prompt_tokens: &'static [&'static [u8]],
    /// The key in it of the prompt tokens the server's prefix cache served.
    pub cached_tokens: Option<&'static [u8]>,
    /// The key in it of the completion tokens so far.
    pub completion_tokens: &'static [u8],
    /// What marks an event without content as an error, besides a leading `"error"` key: a key,
    /// and the string it must hold (any value where None). Spaces may stand around the colon
    /// (Anthropic documents `{"type": "error", ...}`).
    pub error: (&'static [u8], Option<&'static [u8]>),
    /// Its events may end with the server's own timings ([`crate::server_timing`]).
    pub server_timings: bool,
}

/// Pre-built substring searchers for one API (built once per sender thread).
pub struct EventScanner {
    api: Api,
    content_keys: Vec<Finder<'static>>,
    reasoning_keys: Vec<Finder<'static>>,
    type_key: Finder<'static>,
    tool_call: Option<&'static [u8]>,
    reasoning_tokens: Option<Finder<'static>>,
    usage: Finder<'static>,
    prompt_tokens: Vec<Finder<'static>>,
    cached_tokens: Option<Finder<'static>>,
    completion_tokens: Finder<'static>,
    error_marker: (Finder<'static>, Option<&'static [u8]>),
    server_timings: Option<(Finder<'static>, llama_cpp::Reader)>,
}

impl EventScanner {
    pub fn new(api: Api) -> Self {
        let keys = api.stream_keys();
        EventScanner {
            api,
            content_keys: keys.content.iter().map(|k| Finder::new(*k)).collect(),
            reasoning_keys: keys.reasoning.iter().map(|k| Finder::new(*k)).collect(),
            type_key: Finder::new(b"\"type\":"),
            tool_call: keys.tool_call,
            reasoning_tokens: keys.reasoning_tokens.map(Finder::new),
            usage: Finder::new(keys.usage),
            prompt_tokens: keys.prompt_tokens.iter().map(|k| Finder::new(*k)).collect(),
            cached_tokens: keys.cached_tokens.map(Finder::new),
            completion_tokens: Finder::new(keys.completion_tokens),
            error_marker: (Finder::new(keys.error.0), keys.error.1),
            server_timings: keys
                .server_timings
                .then(|| (Finder::new(llama_cpp::KEY), llama_cpp::Reader::default())),
        }
    }

    pub fn api(&self) -> Api {
        self.api
    }

    /// The answer text an event carries, JSON-escaped as sent (the inside of its first
    /// content string): what [`crate::carry`] pastes into the next turn.
    pub fn answer_text<'a>(&self, payload: &'a [u8]) -> Option<&'a [u8]> {
        string_after(payload, &self.content_keys[0])
    }

    pub fn scan(&self, payload: &[u8]) -> StreamEvent {
        let payload = payload.trim_ascii();
        let mut ev = StreamEvent::default();
        if payload == b"[DONE]" {
            ev.done = true;
            return ev;
        }
        if !(payload.starts_with(b"{") && payload.ends_with(b"}")) {
            ev.malformed = true;
            return ev;
        }
        // The hot path is one search: most events carry answer text under the first key.
        // Only the others are searched for tool-call arguments, reasoning, then a tool
        // call's start (whose arguments are still empty).
        let nonempty = |keys: &[Finder]| keys.iter().any(|k| has_nonempty_string(payload, k));
        let text = has_nonempty_string(payload, &self.content_keys[0]);
        let arguments = !text && nonempty(&self.content_keys[1..]);
        let reasoning = !text && !arguments && nonempty(&self.reasoning_keys);
        if !text && !reasoning {
            ev.tool_calls = self
                .tool_call
                .map_or(0, |kind| count_string_values(payload, &self.type_key, kind));
        }
        ev.content = text || arguments || reasoning;
        ev.reasoning = reasoning;
        // An event that carries text is not an error, so the search for an error object (a
        // whole pass over the payload) is spent only on the few events without text.
        if !ev.content
            && (skip_ws(&payload[1..]).starts_with(b"\"error\"") || self.marks_error(payload))
        {
            ev.error = Some(error_message(payload));
            return ev;
        }
        if let Some(at) = self.usage.find(payload) {
            let rest = skip_ws(&payload[at + self.usage.needle().len()..]);
            if rest.first() == Some(&b'{') {
                let parts: Vec<u64> = self
                    .prompt_tokens
                    .iter()
                    .filter_map(|k| number_after(rest, k))
                    .collect();
                ev.prompt_tokens = (!parts.is_empty()).then(|| parts.iter().sum());
                ev.cached_tokens = self
                    .cached_tokens
                    .as_ref()
                    .and_then(|k| number_after(rest, k));
                ev.completion_tokens = number_after(rest, &self.completion_tokens);
                ev.reasoning_tokens = self
                    .reasoning_tokens
                    .as_ref()
                    .and_then(|k| number_after(rest, k));
            }
        }
        // Only an event without output can be the last, which holds the timings.
        if let (false, Some((key, reader))) = (ev.content, &self.server_timings) {
            ev.server = key
                .find(payload)
                .and_then(|at| reader.read(&payload[at + key.needle().len()..]))
                .map(Box::new);
        }
        ev
    }

    /// Whether the payload holds this dialect's error marker.
    fn marks_error(&self, payload: &[u8]) -> bool {
        match self.error_marker {
            (ref key, Some(value)) => count_string_values(payload, key, value) > 0,
            (ref key, None) => key.find(payload).is_some(),
        }
    }

    /// Reads a whole (non-streamed) response body.
    pub fn parse_body(&self, body: &[u8]) -> FullResponse {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return FullResponse {
                not_json: true,
                ..FullResponse::default()
            };
        };
        let is_error = |v: &Value| {
            v.get("error").is_some()
                || ["object", "type"]
                    .iter()
                    .any(|k| v.get(*k).and_then(Value::as_str) == Some("error"))
        };
        if is_error(&v) {
            return FullResponse {
                error: Some(error_message(body)),
                ..FullResponse::default()
            };
        }
        self.api.read_body(&v)
    }
}

/// A string value, if it is one.
pub fn text_of(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

/// A string value that is not empty.
pub fn nonempty(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FullResponse {
    pub prompt_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub error: Option<String>,
    /// The answer carries output (what counts when the server gives no usage).
    pub content: bool,
    /// The body is not JSON at all (an HTML page, compressed bytes, ...).
    pub not_json: bool,
    /// The answer's text (the first choice's).
    pub answer: Option<String>,
    /// It carries reasoning; `answered`: answer text or a tool call besides.
    pub reasoning: bool,
    pub answered: bool,
    pub reasoning_tokens: Option<u64>,
    pub tool_calls: u64,
    /// The server's own timing of the request (llama.cpp's `timings`).
    pub server: Option<ServerPhases>,
}

/// Longest excerpt of a server's error text kept in a record.
pub const EXCERPT: usize = 512;

/// A bounded, printable excerpt of a body.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(EXCERPT)]);
    text.trim().to_string()
}

/// The `message` of an error object (OpenAI, vLLM, TGI, Anthropic), or an excerpt of the
/// payload.
fn error_message(payload: &[u8]) -> String {
    let message = serde_json::from_slice::<Value>(payload).ok().and_then(|v| {
        let e = v.get("error").unwrap_or(&v);
        match e {
            Value::String(s) => Some(s.clone()),
            _ => e.get("message").and_then(Value::as_str).map(str::to_string),
        }
    });
    match message {
        Some(m) => m.chars().take(EXCERPT).collect(),
        None => excerpt(payload),
    }
}

/// True when some occurrence of `key` is followed by a string value that is not empty.
fn has_nonempty_string(payload: &[u8], key: &Finder) -> bool {
    key.find_iter(payload).any(|at| {
        let rest = skip_ws(&payload[at + key.needle().len()..]);
        rest.len() >= 2 && rest[0] == b'"' && rest[1] != b'"'
    })
}

/// How many times `key` is followed by the string `value` (`"type": "function"`).
fn count_string_values(payload: &[u8], key: &Finder, value: &[u8]) -> u32 {
    key.find_iter(payload)
        .filter(|&at| {
            let rest = skip_ws(&payload[at + key.needle().len()..]);
            rest.strip_prefix(b"\"")
                .and_then(|r| r.strip_prefix(value))
                .is_some_and(|r| r.first() == Some(&b'"'))
        })
        .count() as u32
}

/// The inside of the first string value after `key`, escapes kept.
fn string_after<'a>(payload: &'a [u8], key: &Finder) -> Option<&'a [u8]> {
    let at = key.find(payload)?;
    let rest = skip_ws(&payload[at + key.needle().len()..]);
    let inner = rest.strip_prefix(b"\"")?;
    let mut escaped = false;
    let end = inner.iter().position(|&b| {
        let closes = b == b'"' && !escaped;
        escaped = b == b'\\' && !escaped;
        closes
    })?;
    Some(&inner[..end])
}

fn number_after(payload: &[u8], key: &Finder) -> Option<u64> {
    let at = key.find(payload)?;
    let rest = skip_ws(&payload[at + key.needle().len()..]);
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let number = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        .count();
    if digits == 0 {
        return None;
    }
    if number > digits {
        // A count some server wrote as a float (`6.758e3`): its value, not its first digits.
        let text = std::str::from_utf8(&rest[..number]).ok()?;
        return count_of(text.parse::<f64>().ok()?);
    }
    if digits > 19 {
        return None;
    }
    rest[..digits].iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// A token count as a JSON number: an integer, or a float with an integral value (as some
/// servers write them); None for a fraction, a negative or one beyond 2^53.
pub(super) fn count(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| count_of(v.as_f64()?))
}

fn count_of(x: f64) -> Option<u64> {
    (x >= 0.0 && x.fract() == 0.0 && x <= 9_007_199_254_740_992.0).then_some(x as u64)
}

fn skip_ws(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &s[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts written as floats are read as their value (`6.758e3` is 6758, not 6); a
    /// fraction or a negative is no count.
    #[test]
    fn counts_written_as_floats_keep_their_value() {
        let s = EventScanner::new(Api::OpenaiChat);
        let usage = br#"{"choices":[],"usage":{"prompt_tokens":6.758e3,"completion_tokens":12.0}}"#;
        let ev = s.scan(usage);
        assert_eq!(
            (ev.prompt_tokens, ev.completion_tokens),
            (Some(6758), Some(12))
        );
        let odd = br#"{"choices":[],"usage":{"prompt_tokens":1.5,"completion_tokens":-3}}"#;
        let ev = s.scan(odd);
        assert_eq!((ev.prompt_tokens, ev.completion_tokens), (None, None));
        let body = br#"{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":2E1,"completion_tokens":3.0}}"#;
        let full = s.parse_body(body);
        assert_eq!(
            (full.prompt_tokens, full.completion_tokens),
            (Some(20), Some(3))
        );
    }

    #[test]
    fn chat_events() {
        let s = EventScanner::new(Api::OpenaiChat);
        let role = br#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        assert_eq!(s.scan(role), StreamEvent::default());
        let tok =
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":" Hi"},"finish_reason":null}]}"#;
        assert!(s.scan(tok).content);
        let spaced = br#"{"choices": [{"delta": {"content": "x"}}]}"#;
        assert!(s.scan(spaced).content);
        let reasoning = br#"{"choices":[{"delta":{"reasoning_content":"hm","content":null}}]}"#;
        assert!(s.scan(reasoning).content);
        let usage = br#"{"id":"x","choices":[],"usage":{"prompt_tokens":12,"total_tokens":19,"completion_tokens":7,"completion_tokens_details":null}}"#;
        let ev = s.scan(usage);
        assert!(!ev.content);
        assert_eq!(
            (ev.prompt_tokens, ev.completion_tokens),
            (Some(12), Some(7))
        );
        // vLLM's final usage with prefix-cache hits.
        let cached = br#"{"choices":[],"usage":{"prompt_tokens":1200,"total_tokens":1207,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":1024}}}"#;
        let ev = s.scan(cached);
        assert_eq!(
            (ev.prompt_tokens, ev.cached_tokens),
            (Some(1200), Some(1024))
        );
        assert_eq!(s.scan(usage).cached_tokens, None);
        let null_usage = br#"{"choices":[{"delta":{"content":"a"}}],"usage":null}"#;
        assert_eq!(s.scan(null_usage).completion_tokens, None);
        assert!(s.scan(b"[DONE]").done);
        let err = br#"{"object":"error","message":"boom","type":"BadRequestError","code":400}"#;
        assert_eq!(s.scan(err).error.as_deref(), Some("boom"));
        let err = br#"{"error":{"message":"overloaded","code":503}}"#;
        assert_eq!(s.scan(err).error.as_deref(), Some("overloaded"));
    }

    #[test]
    fn completion_events_and_bodies() {
        let s = EventScanner::new(Api::OpenaiCompletions);
        assert!(s.scan(br#"{"choices":[{"text":" a","index":0}]}"#).content);
        assert!(!s.scan(br#"{"choices":[{"text":"","index":0}]}"#).content);
        let full = s.parse_body(
            br#"{"choices":[{"text":"abc"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        );
        assert_eq!(
            full,
            FullResponse {
                prompt_tokens: Some(3),
                cached_tokens: None,
                completion_tokens: Some(2),
                content: true,
                answered: true,
                answer: Some("abc".into()),
                ..FullResponse::default()
            }
        );
        // The answer a carried-forward turn pastes: the raw string, escapes kept.
        let event = br#"{"choices":[{"text":" say \"hi\"\\n","index":0}]}"#;
        assert_eq!(s.answer_text(event), Some(&br#" say \"hi\"\\n"#[..]));
        let chat = EventScanner::new(Api::OpenaiChat);
        let delta = br#"{"choices":[{"delta":{"reasoning_content":"r","content":"c\""}}]}"#;
        assert_eq!(chat.answer_text(delta), Some(&br#"c\""#[..]));
        let full = s.parse_body(
            br#"{"choices":[{"text":"abc"}],"usage":{"prompt_tokens":48,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}}"#,
        );
        assert_eq!(
            (full.prompt_tokens, full.cached_tokens),
            (Some(48), Some(32))
        );
        assert!(s.parse_body(b"<html>not json</html>").not_json);
        let silent = s.parse_body(br#"{"choices":[{"text":""}],"usage":{"completion_tokens":0}}"#);
        assert!(!silent.content && silent.completion_tokens == Some(0));
    }

    /// TGI's stream (as text-generation-inference's `generate_stream` writes it) and bodies.
    #[test]
    fn tgi_events_and_bodies() {
        let s = EventScanner::new(Api::Tgi);
        let tok = br#"{"index":1,"token":{"id":1634,"text":" Deep","logprob":-0.9,"special":false},"generated_text":null,"details":null,"top_tokens":null}"#;
        let ev = s.scan(tok);
        assert!(ev.content && ev.completion_tokens.is_none());
        let last = br#"{"index":3,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":" Deep learning","details":{"finish_reason":"eos_token","generated_tokens":3,"seed":null}}"#;
        let ev = s.scan(last);
        assert!(ev.content);
        assert_eq!(ev.completion_tokens, Some(3));
        let err = br#"{"error":"Input validation error: `inputs` must have less than 4096 tokens","error_type":"validation"}"#;
        assert!(s
            .scan(err)
            .error
            .unwrap()
            .starts_with("Input validation error"));
        let full = s.parse_body(
            br#"{"generated_text":" a b","details":{"finish_reason":"length","generated_tokens":2}}"#,
        );
        assert_eq!((full.completion_tokens, full.error), (Some(2), None));
        let listed = s.parse_body(br#"[{"generated_text":"x","details":{"generated_tokens":1}}]"#);
        assert_eq!((listed.completion_tokens, listed.content), (Some(1), true));
        let refused = s.parse_body(br#"{"error":"Model is overloaded","error_type":"overloaded"}"#);
        assert_eq!(refused.error.as_deref(), Some("Model is overloaded"));
    }
}
