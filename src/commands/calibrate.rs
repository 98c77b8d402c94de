//! `llmreplay calibrate`: how fast this machine can replay with a trusted schedule.
//!
//! Replays a generated trace at increasing request rates against the in-process mock (or
//! `--endpoint`) and reports, per rate: achieved req/s and tok/s, send drift p50/p99/max, late
//! sends and the sender threads' CPU share; then the highest rate whose p99 drift stays under
//! 1 ms. Each step is an ordinary replay, so the figures mean what `replay` reports.

use std::fmt;
use std::io::Write;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::plan::{CalibratePlan, ReplayPlan, Targets};

/// The p99 drift a trusted rate must stay under.
const TRUSTED_P99_MS: f64 = 1.0;

#[derive(Debug, Serialize)]
pub struct Step {
    pub target_rps: f64,
    pub achieved_rps: f64,
    pub output_tokens_per_s: f64,
    pub drift_p50_ms: f64,
    pub drift_p99_ms: f64,
    pub drift_max_ms: f64,
    pub late_sends: u64,
    pub failed: u64,
    /// The first error of each kind among them (`KIND: message`).
    pub first_errors: Vec<String>,
    /// Sender threads' CPU time over the run's duration, in % of one core.
    pub sender_cpu_pct: f64,
}

#[derive(Debug, Serialize)]
pub struct Calibration {
    pub steps: Vec<Step>,
    /// The highest target rate with p99 drift under 1 ms and no failures.
    pub max_trusted_rps: Option<f64>,
}

pub fn run(plan: &CalibratePlan, quiet: bool) -> Result<Calibration> {
    let dir = std::env::temp_dir().join(format!("llmreplay-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let mut steps = Vec::new();
    for &rate in &plan.rates {
        if !quiet {
            eprintln!("replaying {rate} req/s for {} s ...", plan.seconds);
        }
        let step = run_step(plan, rate, &dir);
        let _ = std::fs::remove_file(dir.join("trace.jsonl"));
        steps.push(step?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let max_trusted_rps = steps
        .iter()
        .filter(|s| s.drift_p99_ms < TRUSTED_P99_MS && s.failed == 0)
        .map(|s| s.target_rps)
        .reduce(f64::max);
    Ok(Calibration {
        steps,
        max_trusted_rps,
    })
}

fn run_step(plan: &CalibratePlan, rate: f64, dir: &std::path::Path) -> Result<Step> {
    let trace = dir.join("trace.jsonl");
    let n = ((rate * plan.seconds).ceil() as u64).max(1);
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(&trace).map_err(|e| Error::io(&trace, e))?);
    for i in 0..n {
        writeln!(
            f,
            r#"{{"timestamp": {:.6}, "text_input": "calibrate", "input_length": 1, "output_length": {}}}"#,
            i as f64 * 1000.0 / rate,
            plan.tokens
        )
        .map_err(|e| Error::io(&trace, e))?;
    }
    f.flush().map_err(|e| Error::io(&trace, e))?;
    drop(f);

    let targets = match &plan.endpoint {
        Some(spec) => Targets::Servers(vec![spec.clone()]),
        None => Targets::Mock {
            ttft_ms: plan.mock_ttft_ms,
            itl_ms: plan.mock_itl_ms,
            cache_blocks: None,
            date_offset_ms: 0,
        },
    };
    let replay = ReplayPlan {
        model: Some("calibrate".into()),
        output: Some(dir.join("run")),
        force: true,
        num_sender: plan.num_sender,
        // A rate beyond what the machine can hold may leave requests that never complete
        // (e.g. the in-process mock, sharing the descriptor limit, cannot accept more
        // connections): they fail as timeouts instead of holding up the table.
        request_timeout_s: 20.0,
        ..ReplayPlan::new(trace, targets)
    };
    let outcome = super::replay::run(&replay)?;
    let s = &outcome.summary;
    let drift = |p: f64| {
        s.latency(&crate::stats::latency::DRIFT)
            .and_then(|d| d.raw_percentile(p))
            .unwrap_or(f64::NAN)
    };
    Ok(Step {
        target_rps: rate,
        achieved_rps: s.request_throughput,
        output_tokens_per_s: s.output_throughput,
        drift_p50_ms: drift(50.0),
        drift_p99_ms: drift(99.0),
        drift_max_ms: s
            .latency(&crate::stats::latency::DRIFT)
            .map_or(f64::NAN, |d| d.max),
        late_sends: s.late_sends,
        failed: s.failed,
        first_errors: s
            .first_error_by_kind
            .iter()
            .map(|(kind, message)| format!("{kind}: {message}"))
            .collect(),
        sender_cpu_pct: 100.0 * outcome.sender_cpu_s / s.duration_s.max(1e-9),
    })
}

const HEADER: &str =
    "target req/s  achieved  out tok/s  drift p50 ms  p99 ms  max ms  late  failed  sender CPU %";

fn row(s: &Step) -> String {
    format!(
        "{:>12.0}  {:>8.1}  {:>9.0}  {:>12.3}  {:>6.3}  {:>6.3}  {:>4}  {:>6}  {:>12.0}",
        s.target_rps,
        s.achieved_rps,
        s.output_tokens_per_s,
        s.drift_p50_ms,
        s.drift_p99_ms,
        s.drift_max_ms,
        s.late_sends,
        s.failed,
        s.sender_cpu_pct
    )
}

impl fmt::Display for Calibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{HEADER}")?;
        for s in &self.steps {
            writeln!(f, "{}", row(s))?;
        }
        // Why requests failed, with the server's own words (escaped: no terminal control).
        for s in self.steps.iter().filter(|s| s.failed > 0) {
            for e in &s.first_errors {
                writeln!(f, "{} req/s: {} failed; first {e}", s.target_rps, s.failed)?;
            }
        }
        match self.max_trusted_rps {
            Some(r) => writeln!(
                f,
                "highest rate with p99 send drift under {TRUSTED_P99_MS} ms: {r} req/s"
            ),
            None => writeln!(
                f,
                "no rate kept p99 send drift under {TRUSTED_P99_MS} ms without failures"
            ),
        }
    }
}
