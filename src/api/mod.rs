//! API dialects: how a record becomes a request body, and what a response means.
//!
//! Bodies are written straight into the request buffer (the prompt is never copied twice).
//! Stream events are classified with a few substring searches; JSON is parsed only for the
//! rare events that carry an error.

mod events;
mod openai;
pub mod tgi;

pub use events::{excerpt, EventScanner, FullResponse, StreamEvent, EXCERPT};
pub use openai::{BodyOptions, Synthesis};

use crate::trace::TraceRecord;

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
    /// Hugging Face TGI's own `POST /generate_stream` and `/generate` (`inputs`,
    /// `parameters.max_new_tokens`); TGI cannot be asked for an exact output length.
    Tgi,
}

impl Api {
    /// The name `--api` takes.
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenaiChat => "openai-chat",
            Api::OpenaiCompletions => "openai-completions",
            Api::Tgi => "tgi",
        }
    }

    /// The dialect named `name` (an alias too), as `--api` reads it.
    pub fn from_name(name: &str) -> Option<Api> {
        <Api as clap::ValueEnum>::from_str(name, false).ok()
    }

    /// The request path (TGI streams on a path of its own).
    pub fn path(self, stream: bool) -> &'static str {
        match (self, stream) {
            (Api::OpenaiChat, _) => "/v1/chat/completions",
            (Api::OpenaiCompletions, _) => "/v1/completions",
            (Api::Tgi, true) => tgi::STREAM_PATH,
            (Api::Tgi, false) => tgi::PATH,
        }
    }

    /// URL path endings that name this dialect (`http://h:8000/v1/completions`, as
    /// trace-replayer's users give endpoints), longest first.
    pub fn url_paths(self) -> &'static [&'static str] {
        match self {
            Api::OpenaiChat => &["/v1/chat/completions"],
            Api::OpenaiCompletions => &["/v1/completions"],
            Api::Tgi => &[tgi::STREAM_PATH, tgi::PATH],
        }
    }

    /// Where a server of this dialect names the model it serves (under the endpoint's base
    /// URL), and how that answer is read.
    pub fn discovery(self) -> Discovery {
        match self {
            Api::OpenaiChat | Api::OpenaiCompletions => Discovery {
                path: "/v1/models",
                model: openai::first_model,
            },
            Api::Tgi => Discovery {
                path: tgi::INFO_PATH,
                model: tgi::model_from_info,
            },
        }
    }

    /// Whether request bodies name the model (TGI serves the one it was started with).
    pub fn body_names_model(self) -> bool {
        !matches!(self, Api::Tgi)
    }

    /// Every dialect: what `--endpoint` URLs are matched against.
    pub const ALL: [Api; 3] = [Api::OpenaiChat, Api::OpenaiCompletions, Api::Tgi];

    /// Whether the server can be told to generate exactly `output_length` tokens
    /// (`min_tokens` + `ignore_eos`, vLLM and SGLang extensions of the OpenAI API).
    pub fn enforces_output_length(self) -> bool {
        !matches!(self, Api::Tgi)
    }
}

/// Model discovery: `GET path`, then `model` reads the answer's body.
pub struct Discovery {
    pub path: &'static str,
    pub model: fn(&[u8]) -> Option<String>,
}

/// Appends the JSON body of `record` in dialect `api` to `out`; with `saved`, also its
/// `prompts.jsonl` line (the prompt exactly as sent, CONTRACT §2 `--save-prompts`).
pub fn write_body(
    api: Api,
    record: &TraceRecord,
    opts: &BodyOptions,
    synthesis: Option<&mut Synthesis<'_>>,
    out: &mut Vec<u8>,
    saved: Option<&mut Vec<u8>>,
) -> Result<(), String> {
    match api {
        Api::OpenaiChat | Api::OpenaiCompletions => {
            openai::write_body(api, record, opts, synthesis, out, saved)
        }
        Api::Tgi => tgi::write_body(record, opts, synthesis, out, saved),
    }
}
