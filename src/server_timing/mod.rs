//! Where a request's time to first token went, as the server itself tells it: the phases it
//! spent on the request (queue, prefill, KV transfer, decode). A record holds them beside
//! what the client measured, so a TTFT splits into the server's share and the rest (the
//! network, HTTP, the client, and whatever the server does not time).
//!
//! Each source is one module: [`llama_cpp`] reads the `timings` llama.cpp's server puts in
//! its answers.

pub mod llama_cpp;

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

impl ServerPhases {
    /// The server's own time to first token: its phases before the first token (the prefill
    /// at least; the queue and the KV transfer where it times them).
    pub fn ttft_ms(&self) -> Option<f64> {
        let before = [self.queue_ms, self.kv_transfer_ms];
        Some(self.prefill_ms? + before.iter().flatten().sum::<f64>())
    }
}
