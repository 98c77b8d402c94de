//! API dialects: how a record becomes a request body, and what a response means.
//!
//! Bodies are written straight into the request buffer (the prompt is never copied twice).
//! Stream events are classified with a few substring searches; JSON is parsed only for the
//! rare events that carry an error.

mod events;
mod openai;

pub use events::{excerpt, EventScanner, FullResponse, StreamEvent, EXCERPT};
pub use openai::{write_body, BodyOptions, Synthesis};

/// The request dialect (`--api`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// OpenAI `POST /v1/chat/completions` (vLLM, SGLang, TGI's OpenAI layer, ...); `openai`
    /// is accepted for it, as trace-replayer names it.
    #[value(alias = "openai")]
    OpenaiChat,
    /// OpenAI `POST /v1/completions`.
    OpenaiCompletions,
}

impl Api {
    /// The name `--api` takes.
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenaiChat => "openai-chat",
            Api::OpenaiCompletions => "openai-completions",
        }
    }

    /// The dialect named `name` (an alias too), as `--api` reads it.
    pub fn from_name(name: &str) -> Option<Api> {
        <Api as clap::ValueEnum>::from_str(name, false).ok()
    }

    pub fn path(self) -> &'static str {
        match self {
            Api::OpenaiChat => "/v1/chat/completions",
            Api::OpenaiCompletions => "/v1/completions",
        }
    }
}
