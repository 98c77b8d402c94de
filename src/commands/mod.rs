//! The subcommands. Each takes a validated plan or plain values ([`crate::plan`]), never a
//! clap type, and returns what it measured; printing and exit codes are the caller's.

pub mod calibrate;
pub mod capture;
pub mod k8s_job;
pub mod merge;
pub mod prompts;
pub mod replay;
pub mod report;
pub mod sweep;
pub mod watch;

use crate::error::Result;
use crate::trace::{self, inspect::TraceStats, Format, ReadOptions, TraceFile};

/// `llmreplay inspect` (and the first step of a replay): reads a whole trace and returns its
/// format (resolved from `auto`) and statistics.
pub fn inspect(
    trace: &TraceFile,
    format: Format,
    block_size: Option<u32>,
    read: ReadOptions,
    strict: bool,
) -> Result<(Format, TraceStats)> {
    let format = trace::detect_format(trace, format, read.skip_invalid)?;
    let block = trace::block_size(trace, format, block_size)?;
    let stats = trace::inspect::scan(trace, format, block, read)?;
    if strict {
        stats.require_order(trace.shown())?;
    }
    Ok((format, stats))
}
