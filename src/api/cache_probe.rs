//! `--require-cache-report`'s probe of one endpoint: the same prompt twice, in the
//! endpoint's dialect, on one kept connection; what the second answer says of cached tokens.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{Api, BodyOptions, EventScanner};
use crate::http::blocking::KeptConnection;
use crate::trace::{Input, TraceIds, TraceRecord};
use crate::transport::TlsTarget;

/// Words in the probe prompt: several blocks of any server's cache (vLLM 16, SGLang 1,
/// llama.cpp 1, the mock's --cache-block-size).
const PROBE_WORDS: usize = 512;

/// A probe answer may take a cold prefill of the prompt.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the probe goes.
pub struct ProbeTarget<'a> {
    pub api: Api,
    pub model: &'a str,
    pub addr: SocketAddr,
    pub tls: Option<TlsTarget>,
    pub host: String,
    /// The dialect's path under the endpoint's base.
    pub path: String,
    /// The run's headers for this endpoint (each line ending in CRLF).
    pub headers: &'a str,
}

/// The cached prompt tokens the second of two identical requests reports (None: its answer
/// has no such field). Err: why the probe got no answer to read, for the user.
pub fn cached_on_repeat(
    to: &ProbeTarget,
    extra_body: Option<&Map<String, Value>>,
) -> Result<Option<u64>, String> {
    let prompt: String = (0..PROBE_WORDS)
        .map(|i| ["the", "cache", "probe", "of", "llmreplay", "run"][i % 6])
        .collect::<Vec<_>>()
        .join(" ");
    let body = probe_body(to.api, to.model, &prompt, extra_body)?;
    let scanner = EventScanner::new(to.api);
    let mut conn = KeptConnection::new(to.addr, to.tls.clone(), PROBE_TIMEOUT);
    let mut cached = None;
    for _ in 0..2 {
        let (status, answer) = conn
            .post_json(&to.host, &to.path, &body, to.headers)
            .map_err(|err| format!("the probe request failed: {err}"))?;
        if status != 200 {
            let text = super::excerpt(&answer);
            return Err(format!("the probe request answered HTTP {status}: {text}"));
        }
        cached = scanner.parse_body(&answer).cached_tokens;
    }
    Ok(cached)
}

/// The probe's body: the dialect's own body for a one-token answer to `prompt`, with the
/// run's `--extra-body` (a `{"cache_prompt": false}` must fail the check, not pass it).
fn probe_body(
    api: Api,
    model: &str,
    prompt: &str,
    extra_body: Option<&Map<String, Value>>,
) -> Result<Vec<u8>, String> {
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
        .map_err(|e| format!("the probe body: {e}"))?;
    Ok(body)
}
