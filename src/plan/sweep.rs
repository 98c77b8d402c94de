//! `llmreplay sweep`, validated: the run every step repeats, what grows from step to step
//! ([`SweepAxis`]), and how.

use std::path::PathBuf;

use super::{hosts, positive, ReplayPlan};
use crate::cli;
use crate::error::{Error, Result};
use crate::session::SessionMode;

pub use crate::load::SweepAxis;

/// `llmreplay sweep`, validated.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    /// Each step's plan is this one with its own level and output directory.
    pub base: ReplayPlan,
    /// Where the steps' directories and sweep.json / sweep.html go.
    pub dir: PathBuf,
    pub axis: SweepAxis,
    /// The first step's level: a time scale, or a number of sessions.
    pub start: f64,
    pub step_factor: f64,
    pub max_steps: u32,
    pub bisect: u32,
    pub min_goodput: f64,
    /// `--warm-cache`: every step sends the same prompts (else each step's are new).
    pub warm_cache: bool,
}

impl SweepPlan {
    pub fn from_args(a: &cli::SweepArgs) -> Result<SweepPlan> {
        let usage = |m: &str| Err(Error::Usage(m.into()));
        if hosts::asked(&a.replay.hosts) {
            return usage("a sweep runs on one host: --shard, --start-at and --ntp are replay's");
        }
        let base = ReplayPlan::from_args(&a.replay)?;
        if base.render.slo.is_none() {
            return usage(
                "sweep needs the SLOs a step must meet: --goodput ttft:MS [tpot:MS] [e2el:MS]",
            );
        }
        if base.output_path.is_some() {
            return usage(
                "--output-path names one file; a sweep writes one run per step under --output",
            );
        }
        // The other axis's start would be ignored: refused rather than dropped unsaid.
        match a.over {
            SweepAxis::Scale if a.start_sessions != 1 => {
                return usage("--start-sessions is the first step of --over sessions");
            }
            SweepAxis::Sessions if a.start_scale != 1.0 => {
                return usage(
                    "--start-scale is the first step of --over scale; over sessions every step \
                     runs at --time-scale",
                );
            }
            _ => {}
        }
        let start = match a.over {
            SweepAxis::Scale => {
                if base.time_scale != 1.0 {
                    return usage(
                        "sweep sets each step's --time-scale: give the first with --start-scale",
                    );
                }
                if let crate::load::Pace::Closed { .. } = base.load.pace {
                    // Every step would be the same run: a closed loop has no time to scale.
                    return usage(
                        "a closed loop (--concurrency) does not follow --time-scale, so every \
                         sweep step would be the same run: sweep a trace's timing or a --rate, \
                         or the sessions at once (--over sessions)",
                    );
                }
                positive("--start-scale", a.start_scale)?
            }
            SweepAxis::Sessions => {
                if base.session_mode != SessionMode::AfterParent {
                    return usage(
                        "--over sessions grows the conversations run at once, each turn after \
                         its parent: it needs --session-mode after-parent",
                    );
                }
                if base.sessions.max_active.is_some() {
                    return usage(&format!(
                        "--over sessions sets each step's --max-active-sessions: give the first \
                         with --start-sessions{}",
                        match &base.scenario {
                            Some(s) => format!(
                                " (--scenario {} fixes it: a sweep over sessions is not that \
                                 scenario's run)",
                                s["name"].as_str().unwrap_or_default()
                            ),
                            None => String::new(),
                        }
                    ));
                }
                if a.start_sessions == 0 {
                    return usage("--start-sessions 0 would start no session");
                }
                a.start_sessions as f64
            }
        };
        if !(a.step_factor > 1.0 && a.step_factor.is_finite()) {
            return Err(Error::Usage(format!(
                "--step-factor {}: give a factor above 1",
                a.step_factor
            )));
        }
        if !(0.0..=1.0).contains(&a.min_goodput) {
            return Err(Error::Usage(format!(
                "--min-goodput {}: give a share between 0 and 1",
                a.min_goodput
            )));
        }
        if a.max_steps == 0 {
            return usage("--max-steps must be at least 1");
        }
        Ok(SweepPlan {
            dir: base
                .output
                .clone()
                .unwrap_or_else(crate::report::default_dir),
            axis: a.over,
            start,
            step_factor: a.step_factor,
            max_steps: a.max_steps,
            bisect: a.bisect,
            min_goodput: a.min_goodput,
            warm_cache: a.warm_cache,
            base,
        })
    }

    /// A level as its step sets it: a time scale, or a whole number of sessions (at least 1).
    pub fn level(&self, x: f64) -> f64 {
        match self.axis {
            SweepAxis::Scale => x,
            SweepAxis::Sessions => x.round().max(1.0),
        }
    }
}
