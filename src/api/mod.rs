//! API dialects: how a record becomes a request body, what a response means, and how the mock
//! answers in that dialect.
//!
//! Each dialect is one file that implements [`Dialect`] (two that share a wire format may share
//! one: `openai.rs`), and one line of [`dialects!`] below registers it: `--api`, endpoint URLs, the run's bodies, the stream reader, the
//! `--require-cache-report` probe and the mock's routes all find it there. Bodies are written
//! straight into the request buffer (the prompt is never copied twice). Stream events are
//! classified with a few substring searches ([`StreamKeys`]); JSON is parsed only for whole
//! bodies and the rare events that carry an error.

mod body;
pub mod cache_probe;
mod events;
mod images;
mod serve;

pub use body::{BodyError, BodyOptions, Synthesis};
pub use events::{excerpt, EventScanner, FullResponse, StreamEvent, StreamKeys, EXCERPT};
pub use serve::{with_system, Answer, MockRequest, Prompt, Route, TOKEN_TEXT};

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::prompt::{PromptMode, Wrapping};
use crate::trace::TraceRecord;

/// Declares each dialect module and lists its dialects in [`REGISTRY`], in `--help` order.
macro_rules! dialects {
    ($($module:ident: [$($dialect:ident),+],)*) => {
        $(mod $module;)*
        /// Every dialect llmreplay speaks.
        pub static REGISTRY: &[Api] = &[$($(Api(&$module::$dialect)),+),*];
    };
}

dialects! {
    openai: [OpenaiChat, OpenaiCompletions],
    tgi: [Tgi],
    anthropic: [AnthropicMessages],
}

/// How a dialect writes tool calls and their results into messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MessagesForm {
    /// OpenAI chat: an assistant message's `tool_calls` (`id`, `function.name`,
    /// `function.arguments` as a JSON string), answered by `tool` messages' `tool_call_id`.
    #[default]
    OpenAi,
    /// Anthropic Messages: `tool_use` blocks of an assistant message's `content` (`id`,
    /// `name`, `input` object), answered by `tool_result` blocks' `tool_use_id` in a user
    /// message.
    Anthropic,
}

/// What one API dialect is, for the client and for the mock.
pub trait Dialect: Sync {
    /// The name `--api` takes, and run.json writes.
    fn name(&self) -> &'static str;
    /// Other names `--api` accepts for it.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    /// One line for `--help`.
    fn about(&self) -> &'static str;

    /// The request path.
    fn path(&self, stream: bool) -> &'static str;
    /// URL path endings that name this dialect (`http://h:8000/v1/completions`), longest first.
    fn url_paths(&self) -> &'static [&'static str];
    /// Where a server of this dialect names the model it serves.
    fn discovery(&self) -> Discovery;
    /// Whether request bodies name the model.
    fn body_names_model(&self) -> bool {
        true
    }
    /// Whether the server can be told to generate exactly `output_length` tokens.
    fn enforces_output_length(&self) -> bool {
        true
    }
    /// What the server wraps around synthetic content sent in `mode`; `None` when the
    /// dialect cannot send that mode.
    fn wrapping(&self, mode: PromptMode) -> Option<Wrapping>;
    /// Appends the JSON body of `record` to `out`; with `saved`, also its `prompts.jsonl`
    /// line (the prompt exactly as sent, CONTRACT §2 `--save-prompts`).
    fn write_body(
        &self,
        record: &TraceRecord,
        opts: &BodyOptions,
        synthesis: Option<&mut Synthesis<'_>>,
        out: &mut Vec<u8>,
        saved: Option<&mut Vec<u8>>,
    ) -> Result<(), BodyError>;

    /// How recorded `messages` hold tool calls and their results in this dialect, where a
    /// conversation of them is threaded live (`--carry-forward`, [`crate::carry::messages`]);
    /// None: they are sent as recorded.
    fn messages_form(&self) -> Option<MessagesForm> {
        None
    }
    /// Where a stream event's content, usage and errors are.
    fn stream_keys(&self) -> &'static StreamKeys;
    /// Reads a whole answer that is not an error.
    fn read_body(&self, v: &Value) -> FullResponse;

    /// The mock's routes for it.
    fn routes(&self) -> &'static [Route];
    /// The mock reads a request body that came to `route`.
    fn mock_request<'a>(
        &self,
        obj: &'a Map<String, Value>,
        route: &Route,
    ) -> Result<MockRequest<'a>, String>;
    /// The text of a content event before and after its token text (`None`: its token events
    /// are written by [`Dialect::write_tokens`]).
    fn content_frame(&self, a: &Answer) -> Option<(Vec<u8>, &'static [u8])>;
    /// The text of a reasoning event around its token text (`None`: the mock streams no
    /// reasoning in this dialect).
    fn reasoning_frame(&self, _a: &Answer) -> Option<(Vec<u8>, &'static [u8])> {
        None
    }
    /// Events before the first token.
    fn write_open(&self, _a: &Answer, _out: &mut Vec<u8>) {}
    /// Events between the reasoning and the first answer token.
    fn write_answer_start(&self, _a: &Answer, _out: &mut Vec<u8>) {}
    /// A token event carrying `n` tokens, for a dialect without a content frame.
    fn write_tokens(&self, _a: &Answer, _n: u64, _out: &mut Vec<u8>) {}
    /// Inside a framed content event, after the frame: the running usage (with
    /// `continuous_usage`).
    fn write_running_usage(&self, _a: &Answer, _out: &mut Vec<u8>) {}
    /// The events after the last token; false when it has none.
    fn write_close(&self, a: &Answer, out: &mut Vec<u8>) -> bool;
    /// The whole answer of a request that did not ask for a stream.
    fn full_response(&self, a: &Answer) -> Value;
}

/// A dialect, as the rest of llmreplay holds it: one of [`REGISTRY`].
#[derive(Clone, Copy)]
pub struct Api(&'static dyn Dialect);

#[allow(non_upper_case_globals)]
impl Api {
    /// OpenAI `POST /v1/chat/completions`.
    pub const OpenaiChat: Api = Api(&openai::OpenaiChat);
    /// OpenAI `POST /v1/completions`.
    pub const OpenaiCompletions: Api = Api(&openai::OpenaiCompletions);
    /// Hugging Face TGI's own API.
    pub const Tgi: Api = Api(&tgi::Tgi);

    /// The dialect named `name` (an alias too), as `--api` reads it.
    pub fn from_name(name: &str) -> Option<Api> {
        REGISTRY
            .iter()
            .copied()
            .find(|api| api.name() == name || api.aliases().contains(&name))
    }

    /// The dialects that can send prompts in `mode`.
    pub fn sending(mode: PromptMode) -> impl Iterator<Item = Api> {
        REGISTRY
            .iter()
            .copied()
            .filter(move |api| api.wrapping(mode).is_some())
    }
}

impl std::ops::Deref for Api {
    type Target = dyn Dialect;
    fn deref(&self) -> &(dyn Dialect + 'static) {
        self.0
    }
}

impl PartialEq for Api {
    fn eq(&self, other: &Api) -> bool {
        self.name() == other.name()
    }
}
impl Eq for Api {}

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Api {
    type Err = String;
    fn from_str(name: &str) -> Result<Api, String> {
        Api::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = REGISTRY.iter().map(|api| api.name()).collect();
            format!("unknown API `{name}` (one of: {})", names.join(", "))
        })
    }
}

impl serde::Serialize for Api {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Model discovery: `GET path`, then `model` reads the answer's body.
pub struct Discovery {
    pub path: &'static str,
    pub model: fn(&[u8]) -> Option<String>,
}

/// Appends the JSON body of `record` in dialect `api` to `out` (see [`Dialect::write_body`]).
pub fn write_body(
    api: Api,
    record: &TraceRecord,
    opts: &BodyOptions,
    synthesis: Option<&mut Synthesis<'_>>,
    out: &mut Vec<u8>,
    saved: Option<&mut Vec<u8>>,
) -> Result<(), BodyError> {
    api.write_body(record, opts, synthesis, out, saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_is_found_by_its_names_and_paths() {
        for &api in REGISTRY {
            assert_eq!(Api::from_name(api.name()), Some(api));
            assert_eq!(api.name().parse::<Api>(), Ok(api));
            for alias in api.aliases() {
                assert_eq!(Api::from_name(alias), Some(api));
            }
            assert!(!api.url_paths().is_empty(), "{api}");
            assert!(!api.routes().is_empty(), "{api}");
        }
        assert_eq!(Api::from_name("openai"), Some(Api::OpenaiChat));
        assert!("nope".parse::<Api>().unwrap_err().contains("openai-chat"));
    }
}
