//! `llmreplay capture`: the proxy started on its listener, serving until a signal or
//! `--max-requests`.

use crate::capture::parts::Parts;
use crate::capture::{Capture, CaptureStats};
use crate::error::{Error, Result};
use crate::plan::CapturePlan;

/// Serves the plan's capture; says where it listens on stdout's first line.
pub fn run(plan: CapturePlan) -> Result<CaptureStats> {
    let out = Parts::create(&plan.output, plan.rotation)?;
    let files = files(&plan);
    let capture = Capture::bind(plan.listen, plan.config, out)
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
        plan.upstream_urls.join(", "),
        files,
        match plan.keyed {
            true => "keyed (--key-file)",
            false => "randomly keyed",
        },
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    capture.run()
}

/// Where the lines go, as said before the capture starts.
fn files(plan: &CapturePlan) -> String {
    let r = &plan.rotation;
    let first = Parts::path(&plan.output, r, 0);
    if !r.rotates() {
        return first.display().to_string();
    }
    let mut full = Vec::new();
    if let Some(n) = r.records {
        full.push(format!("{n} lines"));
    }
    if let Some(s) = r.seconds {
        full.push(format!("{s} s"));
    }
    format!(
        "{}, {}, ... (a new part after {})",
        first.display(),
        Parts::path(&plan.output, r, 1).display(),
        full.join(" or ")
    )
}
