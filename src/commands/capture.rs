//! `llmreplay capture`: the proxy started on its listener, serving until a signal or
//! `--max-requests`.

use std::fs::File;

use crate::capture::{Capture, CaptureStats};
use crate::error::{Error, Result};
use crate::plan::CapturePlan;

/// Serves the plan's capture; says where it listens on stdout's first line.
pub fn run(plan: CapturePlan) -> Result<CaptureStats> {
    let out = File::create(&plan.output).map_err(|e| Error::io(&plan.output, e))?;
    let capture = Capture::bind(plan.listen, plan.config, out, plan.output.clone())
        .map_err(|e| Error::Run(format!("capture: cannot listen on {}: {e}", plan.listen)))?;
    let addr = capture
        .addr()
        .map_err(|e| Error::Run(format!("capture: {e}")))?;
    // From here a signal ends the capture with its trace complete (not the process at once).
    crate::sys::stop::run_started();
    println!("capturing on {addr}");
    eprintln!(
        "capture: every request to {addr} goes to {} unchanged; each generation request is a \
         line of {} (lengths, {} hash ids, timings; no text). Ctrl-C ends it.",
        plan.upstream_url,
        plan.output.display(),
        match plan.keyed {
            true => "keyed (--key-file)",
            false => "randomly keyed",
        },
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    capture.run()
}
