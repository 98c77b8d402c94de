//! `--require-cache-report`: before the run, each endpoint gets the same prompt twice; unless
//! the second answer reports cached prompt tokens, the run stops with the reason. A server
//! started without prefix caching, or without reporting prompt-token details (vLLM before
//! `--enable-prompt-tokens-details`), would otherwise make an hour-long cache experiment
//! publish 0 % hits.

use std::time::Duration;

use serde_json::{Map, Value};

use super::setup::Fleet;
use crate::api::{Api, BodyOptions, EventScanner};
use crate::error::{Error, Result};
use crate::http::blocking::KeptConnection;
use crate::trace::{Input, TraceIds, TraceRecord};

/// Words in the probe prompt: several blocks of any server's cache (vLLM 16, SGLang 1,
/// llama.cpp 1, the mock's --cache-block-size).
const PROBE_WORDS: usize = 512;

/// A probe answer may take a cold prefill of the prompt.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// Each endpoint's cached tokens on the second of two identical requests; the error names
/// the endpoint and what its answer said.
pub fn require_cache_report(
    fleet: &Fleet,
    extra_body: Option<&Map<String, Value>>,
) -> Result<Vec<u64>> {
    let prompt: String = (0..PROBE_WORDS)
        .map(|i| ["the", "cache", "probe", "of", "llmreplay", "run"][i % 6])
        .collect::<Vec<_>>()
        .join(" ");
    let mut seen = Vec::with_capacity(fleet.specs.len());
    for (i, spec) in fleet.specs.iter().enumerate() {
        let e = &spec.endpoint;
        let fail = |why: String| {
            Error::Run(format!(
                "--require-cache-report: endpoint {}: {why}; start the server with prefix caching on and cached tokens reported \
                 (vLLM: --enable-prefix-caching --enable-prompt-tokens-details; SGLang: --enable-cache-report; llama.cpp's server reports them), \
                 or leave out --require-cache-report",
                e.url
            ))
        };
        let body = probe_body(spec.api, &fleet.models[i], &prompt, extra_body)?;
        let path = e.request_path(spec.api.path(false));
        let headers = fleet.headers.for_endpoint(e);
        let scanner = EventScanner::new(spec.api);
        let mut conn = KeptConnection::new(fleet.addrs[i], fleet.tls[i].clone(), PROBE_TIMEOUT);
        let mut cached = None;
        for _ in 0..2 {
            let (status, answer) = conn
                .post_json(&e.host_header(), &path, &body, &headers)
                .map_err(|err| fail(format!("the probe request failed: {err}")))?;
            if status != 200 {
                let text = crate::api::excerpt(&answer);
                return Err(fail(format!(
                    "the probe request answered HTTP {status}: {text}"
                )));
            }
            cached = scanner.parse_body(&answer).cached_tokens;
        }
        match cached {
            Some(n) if n > 0 => seen.push(n),
            Some(_) => {
                return Err(fail(
                    "the second of two identical requests reported 0 cached prompt tokens".into(),
                ))
            }
            None => {
                return Err(fail(
                    "its answers carry no usage.prompt_tokens_details.cached_tokens".into(),
                ))
            }
        }
    }
    Ok(seen)
}

/// The probe's body: the dialect's own body for a one-token answer to `prompt`, with the
/// run's `--extra-body` (a `{"cache_prompt": false}` must fail the check, not pass it).
fn probe_body(
    api: Api,
    model: &str,
    prompt: &str,
    extra_body: Option<&Map<String, Value>>,
) -> Result<Vec<u8>> {
    let record = TraceRecord {
        index: 0,
        line: 0,
        timestamp_ms: None,
        input: Input::Text {
            text: prompt.to_string(),
            input_length: None,
        },
        output_length: Some(1),
        ids: TraceIds::default(),
        extra: None,
    };
    let opts = BodyOptions {
        model_json: Value::from(model).to_string(),
        stream: false,
        exact_output: false,
        extra_body: extra_body.cloned(),
    };
    let mut body = Vec::new();
    api.write_body(&record, &opts, None, &mut body, None)
        .map_err(|e| Error::Run(format!("--require-cache-report: the probe body: {e}")))?;
    Ok(body)
}
