//! Options of a request's identity on the wire (README "Following a request").

use clap::Args;

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Request identity")]
pub struct IdentityArgs {
    /// The header that carries each request's id: the run's id (--run-id, or the one minted
    /// for run.json) and the record's index, `RUN-INDEX`, the same on every shard of a run.
    /// `none` sends no id.
    #[arg(long, value_name = "NAME", default_value = "X-Request-Id")]
    pub request_id_header: String,

    /// Send no W3C `traceparent`. By default each request carries one whose trace id is drawn
    /// from the run's id and the record's index (each record's `trace_id`), so a server that
    /// traces (vLLM with OpenTelemetry) puts its spans under it.
    #[arg(long)]
    pub no_traceparent: bool,

    /// The header that names each request's conversation (its first turn's id, or the
    /// trace's session_id; an agentic trace's task), for a router that keeps a session on one
    /// worker: a header name, or `affinity` (X-Session-Affinity, as AIPerf sends), `dynamo`
    /// (X-Dynamo-Session-ID), `session-id` (X-Session-Id). Records of no conversation carry
    /// none.
    #[arg(long, value_name = "NAME")]
    pub session_header: Option<String>,
}
