//! `--require-cache-report`: before the run, each endpoint gets the same prompt twice; unless
//! the second answer reports cached prompt tokens, the run stops with the reason. A server
//! started without prefix caching, or without reporting prompt-token details (vLLM before
//! `--enable-prompt-tokens-details`), would otherwise make an hour-long cache experiment
//! publish 0 % hits.

use serde_json::{Map, Value};

use super::setup::Fleet;
use crate::api::cache_probe::{cached_on_repeat, ProbeTarget};
use crate::error::{Error, Result};

/// Each endpoint's cached tokens on the second of two identical requests; the error names
/// the endpoint and what its answer said.
pub fn require_cache_report(
    fleet: &Fleet,
    extra_body: Option<&Map<String, Value>>,
) -> Result<Vec<u64>> {
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
        let headers = fleet.headers.for_endpoint(e);
        let target = ProbeTarget {
            api: spec.api,
            model: &fleet.models[i],
            addr: fleet.addrs[i],
            tls: fleet.tls[i].clone(),
            host: e.host_header(),
            path: e.request_path(spec.api.path(false)),
            headers: &headers,
        };
        match cached_on_repeat(&target, extra_body).map_err(fail)? {
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
