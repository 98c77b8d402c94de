//! The mock's side of a dialect: what it reads from a request, and the answer it renders.
//! Each dialect implements the rendering in its own file; these are the values it works on.

use serde_json::{Map, Value};

/// A route the mock answers for a dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// `POST` path.
    pub path: &'static str,
    /// The route decides whether the answer streams (TGI's `/generate_stream`); `None`: the
    /// body's `stream` does.
    pub stream: Option<bool>,
}

/// Where a request's prompt is, for the mock's token count and prefix cache.
#[derive(Debug)]
pub enum Prompt<'a> {
    /// Chat messages (their `content`s), the tools offered, and a system prompt given beside
    /// them (Anthropic's `system`).
    Messages {
        messages: &'a [Value],
        tools: Option<&'a Value>,
        system: Option<&'a Value>,
        /// `chat_template_kwargs.enable_thinking`, when the request sets it.
        thinking: Option<bool>,
    },
    /// A prompt string, a list of strings, or token ids.
    Text(&'a Value),
}

/// Chat messages as a template reads them: a system prompt given beside them (Anthropic's
/// `system`) is the first message.
pub fn with_system(messages: &[Value], system: Option<&Value>) -> Value {
    let system = system.map(|s| serde_json::json!({"role": "system", "content": s}));
    Value::Array(system.into_iter().chain(messages.iter().cloned()).collect())
}

/// What the mock reads from a request body.
#[derive(Debug)]
pub struct MockRequest<'a> {
    pub prompt: Prompt<'a>,
    /// Tokens to generate.
    pub tokens: u64,
    pub stream: bool,
    /// Its answer reports the prompt's tokens (TGI's does not).
    pub reports_usage: bool,
    /// A stream's first event already carries the prompt count (Anthropic's `message_start`).
    pub usage_at_start: bool,
    /// A stream ends with a usage event (OpenAI's `stream_options.include_usage`).
    pub include_usage: bool,
    /// Every event carries the usage so far (vLLM's `stream_options.continuous_usage_stats`).
    pub continuous_usage: bool,
}

/// An answer as the mock renders it, at one moment.
#[derive(Clone, Copy, Debug)]
pub struct Answer<'a> {
    /// The request's number on the mock (ids are built from it).
    pub id: u64,
    pub model: &'a str,
    pub stream: bool,
    /// Tokens to generate, and those sent so far.
    pub tokens: u64,
    pub sent: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: Option<u64>,
    pub include_usage: bool,
    pub continuous_usage: bool,
    /// The first tokens that are reasoning.
    pub reasoning: u64,
}

/// Default `max_tokens` when a request gives none (vLLM's default for completions).
pub const DEFAULT_MAX_TOKENS: u64 = 16;
/// Each generated token's text.
pub const TOKEN_TEXT: &str = " tok";

/// The answer's whole text.
pub fn answer_text(tokens: u64) -> String {
    TOKEN_TEXT.repeat(tokens as usize)
}

/// A non-negative integer field (absent or null: `None`).
pub fn uint(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or(format!("`{key}` must be a non-negative integer")),
    }
}

/// The tokens a request for `max_tokens` gets: the mock model "emits EOS" at half of it,
/// unless `min_tokens` or `ignore_eos` ask for more (vLLM's and SGLang's extensions): so a
/// client that wants exact lengths must say so, as with a real model.
pub fn tokens_asked(obj: &Map<String, Value>, max_tokens: Option<u64>) -> Result<u64, String> {
    let max_tokens = max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let min_tokens = uint(obj, "min_tokens")?.unwrap_or(0);
    let ignore_eos = obj
        .get("ignore_eos")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(if ignore_eos || min_tokens >= max_tokens {
        max_tokens
    } else {
        min_tokens.max(max_tokens.div_ceil(2))
    })
}

/// A request's `stream`, unless its route decides.
pub fn stream_of(obj: &Map<String, Value>, route: &Route) -> bool {
    route
        .stream
        .unwrap_or_else(|| obj.get("stream").and_then(Value::as_bool).unwrap_or(false))
}
