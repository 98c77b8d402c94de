//! OpenAI `POST /v1/completions`: a `prompt` (text or token ids), answered by `choices[].text`
//! events.

use serde_json::{Map, Value};

use super::openai::{self, Render, COMPLETION_KEYS};
use super::{Answer, BodyOptions, Dialect, Discovery, FullResponse, MockRequest, Route};
use super::{StreamKeys, Synthesis};
use crate::prompt::{PromptMode, Wrapping};
use crate::trace::TraceRecord;

pub struct OpenaiCompletions;

const RENDER: Render = Render { chat: false };

impl Dialect for OpenaiCompletions {
    fn name(&self) -> &'static str {
        "openai-completions"
    }
    fn about(&self) -> &'static str {
        "OpenAI POST /v1/completions: a prompt string, or token ids with --prompt-mode token-ids"
    }
    fn path(&self, _stream: bool) -> &'static str {
        "/v1/completions"
    }
    fn url_paths(&self) -> &'static [&'static str] {
        &["/v1/completions"]
    }
    fn discovery(&self) -> Discovery {
        Discovery {
            path: "/v1/models",
            model: openai::first_model,
        }
    }
    fn wrapping(&self, mode: PromptMode) -> Option<Wrapping> {
        Some(match mode {
            PromptMode::Text => Wrapping::Completion,
            PromptMode::TokenIds => Wrapping::TokenIds,
        })
    }
    fn write_body(
        &self,
        record: &TraceRecord,
        opts: &BodyOptions,
        synthesis: Option<&mut Synthesis<'_>>,
        out: &mut Vec<u8>,
        saved: Option<&mut Vec<u8>>,
    ) -> Result<(), String> {
        openai::write_body(false, record, opts, synthesis, out, saved)
    }
    fn stream_keys(&self) -> &'static StreamKeys {
        &COMPLETION_KEYS
    }
    fn read_body(&self, v: &Value) -> FullResponse {
        openai::read_body(v)
    }

    fn routes(&self) -> &'static [Route] {
        &[Route {
            path: "/v1/completions",
            stream: None,
        }]
    }
    fn mock_request<'a>(
        &self,
        obj: &'a Map<String, Value>,
        route: &Route,
    ) -> Result<MockRequest<'a>, String> {
        openai::mock_request(false, obj, route)
    }
    fn content_frame(&self, a: &Answer) -> Option<(Vec<u8>, &'static [u8])> {
        Some(RENDER.content_frame(a))
    }
    fn write_running_usage(&self, a: &Answer, out: &mut Vec<u8>) {
        Render::write_running_usage(a, out);
    }
    fn write_close(&self, a: &Answer, out: &mut Vec<u8>) -> bool {
        RENDER.write_close(a, out)
    }
    fn full_response(&self, a: &Answer) -> Value {
        RENDER.full_response(a)
    }
}
