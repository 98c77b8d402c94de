//! OpenAI `POST /v1/chat/completions` (vLLM, SGLang, llama.cpp, TGI's OpenAI layer, ...):
//! `messages`, answered by `choices[].delta` events.

use serde_json::{Map, Value};

use super::openai::{self, Render, CHAT_KEYS};
use super::{Answer, BodyOptions, Dialect, Discovery, FullResponse, MockRequest, Route};
use super::{StreamKeys, Synthesis};
use crate::prompt::{PromptMode, Wrapping};
use crate::trace::TraceRecord;

pub struct OpenaiChat;

const RENDER: Render = Render { chat: true };

impl Dialect for OpenaiChat {
    fn name(&self) -> &'static str {
        "openai-chat"
    }
    fn aliases(&self) -> &'static [&'static str] {
        // trace-replayer's name for it.
        &["openai"]
    }
    fn about(&self) -> &'static str {
        "OpenAI POST /v1/chat/completions (vLLM, SGLang, llama.cpp, TGI's OpenAI layer); `openai` is accepted for it"
    }
    fn path(&self, _stream: bool) -> &'static str {
        "/v1/chat/completions"
    }
    fn url_paths(&self) -> &'static [&'static str] {
        &["/v1/chat/completions"]
    }
    fn discovery(&self) -> Discovery {
        Discovery {
            path: "/v1/models",
            model: openai::first_model,
        }
    }
    fn wrapping(&self, mode: PromptMode) -> Option<Wrapping> {
        (mode == PromptMode::Text).then_some(Wrapping::Chat)
    }
    fn write_body(
        &self,
        record: &TraceRecord,
        opts: &BodyOptions,
        synthesis: Option<&mut Synthesis<'_>>,
        out: &mut Vec<u8>,
        saved: Option<&mut Vec<u8>>,
    ) -> Result<(), String> {
        openai::write_body(true, record, opts, synthesis, out, saved)
    }
    fn stream_keys(&self) -> &'static StreamKeys {
        &CHAT_KEYS
    }
    fn read_body(&self, v: &Value) -> FullResponse {
        openai::read_body(v)
    }

    fn routes(&self) -> &'static [Route] {
        &[Route {
            path: "/v1/chat/completions",
            stream: None,
        }]
    }
    fn mock_request<'a>(
        &self,
        obj: &'a Map<String, Value>,
        route: &Route,
    ) -> Result<MockRequest<'a>, String> {
        openai::mock_request(true, obj, route)
    }
    fn content_frame(&self, a: &Answer) -> Option<(Vec<u8>, &'static [u8])> {
        Some(RENDER.content_frame(a))
    }
    fn write_open(&self, a: &Answer, out: &mut Vec<u8>) {
        RENDER.write_event(a, out, true, None);
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
