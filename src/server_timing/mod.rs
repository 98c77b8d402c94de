//! Where a request's time to first token went, as the server itself tells it: the phases it
//! spent on the request (queue, prefill, KV transfer, decode). A record holds them beside
//! what the client measured, so a TTFT splits into the server's share and the rest (the
//! network, HTTP, the client, and whatever the server does not time).
//!
//! Each source is one module: [`llama_cpp`] reads the `timings` llama.cpp's server puts in
//! its answers, as they come; the sources in [`SOURCES`] are files a server's tracing wrote,
//! joined to a finished run's records by `report DIR --server-timings SOURCE:FILE` (a new
//! one is a module and its line there).

pub mod dynamo;
pub mod llama_cpp;
pub mod vllm_otel;

use std::collections::HashMap;
use std::path::Path;

/// A file of a server's own timings, read into each traced request's phases.
pub struct Source {
    /// Its name in `--server-timings NAME:FILE`.
    pub name: &'static str,
    /// What its requests are known by.
    pub key: JoinKey,
    /// The phases of each request in the file, by its key; Err: why the file cannot be read
    /// as this source's.
    pub read: fn(&Path) -> Result<HashMap<String, ServerPhases>, String>,
}

/// What a source knows a request by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinKey {
    /// The W3C trace id its `traceparent` carried (32 lowercase hex digits: a record's
    /// `trace_id`).
    TraceId,
    /// The id its `X-Request-Id` carried (`RUN-INDEX`).
    RequestId,
}

/// Every file source.
pub const SOURCES: &[Source] = &[vllm_otel::SOURCE, dynamo::SOURCE];

/// The source named `name`.
pub fn source(name: &str) -> Option<&'static Source> {
    SOURCES.iter().find(|s| s.name == name)
}

/// What a server says it spent on one request, by phase, in ms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerPhases {
    /// Waiting for a place in a batch.
    pub queue_ms: Option<f64>,
    /// Computing the prompt's KV (the uncached part).
    pub prefill_ms: Option<f64>,
    /// Moving the KV from a prefill worker to a decode worker (disaggregated serving).
    pub kv_transfer_ms: Option<f64>,
    /// Generating the answer's tokens.
    pub decode_ms: Option<f64>,
}

/// A time a server wrote, as a phase's: finite and not negative, else none.
pub fn duration(v: f64) -> Option<f64> {
    (v.is_finite() && v >= 0.0).then_some(v)
}

impl ServerPhases {
    /// The server's own time to first token: its phases before the first token (the prefill
    /// at least; the queue and the KV transfer where it times them).
    pub fn ttft_ms(&self) -> Option<f64> {
        let before = [self.queue_ms, self.kv_transfer_ms];
        Some(self.prefill_ms? + before.iter().flatten().sum::<f64>())
    }
}
