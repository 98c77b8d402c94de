//! `llmreplay sweep`: the fastest replay of a trace that the servers still serve within their
//! SLOs.
//!
//! Each step is an ordinary replay of the same plan at its own `--time-scale`, in a run
//! directory of its own. Scales grow geometrically from `--start-scale` until a step fails
//! (its goodput share falls under `--min-goodput`, or a scraped server's queue keeps
//! growing); then bisection, on a log scale, between the last scale that passed and the first
//! that failed. A first step that fails sends the scales down instead. The answer is the
//! highest scale that passed, with the failing scale above it: the knee lies between them.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;

use crate::commands::replay;
use crate::error::Result;
use crate::plan::SweepPlan;
use crate::report::{self, html};
use crate::stats::Summary;

/// One step's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub scale: f64,
    pub dir: PathBuf,
    pub requests: u64,
    pub ok: u64,
    pub good: u64,
    /// Good requests over all requests (failed ones count as not good).
    pub goodput_share: f64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub e2el_p99_ms: Option<f64>,
    /// A scraped server's queue kept growing (None when nothing was scraped).
    pub queue_grew: Option<bool>,
    /// The prefix-cache hit share the trace predicts for the step, and the servers' own.
    pub prefix_expected_share: Option<f64>,
    pub prefix_observed_share: Option<f64>,
    /// The servers hit more than the step's own reuse explains (a cache warmed before it).
    pub cache_warning: Option<String>,
    pub passed: bool,
    /// The step's verdict (README "Can I trust this run?"): VALID, or INVALID and its
    /// reasons' keys.
    pub verdict: String,
    pub verdict_reasons: Vec<String>,
}

/// Observed prefix hits above the expected by more than this (percentage points) are warned
/// about: the step measured a cache that something before it filled.
const PREFIX_EXCESS_POINTS: f64 = 2.0;

/// The prompt seed of step `n` (1-based): the first step's is the plan's own (an ordinary
/// replay with `--seed` sends the same prompts); each later one differs, so no block of one
/// step equals a block of another, while reuse within a step is the trace's.
fn step_seed(seed: u64, n: usize) -> u64 {
    match n {
        0 | 1 => seed,
        n => seed ^ crate::rng::SplitMix64(n as u64).next_u64(),
    }
}

/// The sweep's answer.
#[derive(Debug, Serialize)]
pub struct Sweep {
    /// In the order they ran.
    pub steps: Vec<Step>,
    /// The highest scale that passed.
    pub passed_scale: Option<f64>,
    /// The lowest scale that failed.
    pub failed_scale: Option<f64>,
    /// A signal stopped the sweep during its last step (left out of the steps).
    pub stopped: bool,
    /// What every step did: the SLOs, the pass rule, whether prompts were new each step.
    pub configuration: Vec<String>,
}

/// The sweep's settings, said at its top (sweep.txt, sweep.html, stdout).
fn configuration(plan: &SweepPlan, slo: &crate::stats::Slo) -> Vec<String> {
    vec![
        format!(
            "a step passes when at least {:.0} % of its requests meet {}{}",
            plan.min_goodput * 100.0,
            describe_slo(slo),
            match plan.base.scrape {
                Some(_) => " and no scraped server's queue kept growing",
                None => "",
            }
        ),
        match plan.warm_cache {
            false => "prompts: new to the servers at each step (the prompt seed differs per \
                      step; reuse within a step is the trace's), so a step measures capacity, \
                      not a cache filled by the step before"
                .into(),
            true => "prompts: the same at every step (--warm-cache): from the second step on, \
                     the servers' prefix caches hold them"
                .into(),
        },
    ]
    .into_iter()
    .chain(plan.base.prime.then(|| {
        "each step is primed (--prime): one unmeasured pass of its own prompts fills the \
         caches before it is measured"
            .to_string()
    }))
    .collect()
}

pub fn run(plan: &SweepPlan) -> Result<Sweep> {
    report::prepare_dir(&plan.dir, plan.base.force)?;
    let slo = plan.base.render.slo.as_ref().expect("checked in the plan");
    eprintln!(
        "sweep: time scales {} x{} ... (at most {} steps) until fewer than {:.0} % of the \
         requests meet {}; then {} bisection steps. Each step's run goes to {}/step-NN-xSCALE.",
        plan.start_scale,
        plan.step_factor,
        plan.max_steps,
        plan.min_goodput * 100.0,
        describe_slo(slo),
        plan.bisect,
        plan.dir.display()
    );
    let mut sweep = Sweep {
        steps: Vec::new(),
        passed_scale: None,
        failed_scale: None,
        stopped: false,
        configuration: configuration(plan, slo),
    };
    // Whatever ends the steps (a signal, an error), the steps done are written.
    let result = steps(plan, &mut sweep);
    write_outputs(plan, &sweep)?;
    result.map(|()| sweep)
}

fn steps(plan: &SweepPlan, sweep: &mut Sweep) -> Result<()> {
    // Growing (or, when the first step fails, shrinking) until the outcome changes.
    let mut scale = plan.start_scale;
    for _ in 0..plan.max_steps {
        let Some(passed) = step(plan, sweep, scale)? else {
            return Ok(());
        };
        if sweep.passed_scale.is_some() && sweep.failed_scale.is_some() {
            break;
        }
        scale = match passed {
            true => scale * plan.step_factor,
            false => scale / plan.step_factor,
        };
    }
    for _ in 0..plan.bisect {
        let (Some(lo), Some(hi)) = (sweep.passed_scale, sweep.failed_scale) else {
            break;
        };
        if step(plan, sweep, (lo * hi).sqrt())?.is_none() {
            break;
        }
    }
    Ok(())
}

/// Runs one scale and narrows the bracket with its outcome: whether it passed, None when a
/// signal stopped it (its run directory holds what it measured).
fn step(plan: &SweepPlan, sweep: &mut Sweep, scale: f64) -> Result<Option<bool>> {
    let n = sweep.steps.len() + 1;
    let dir = plan.dir.join(format!("step-{n:02}-x{scale:.3}"));
    let mut run = plan.base.clone();
    run.time_scale = scale;
    if !plan.warm_cache {
        // The arrivals (--rate's gaps) keep their own seed: only the prompts change.
        run.prompt.seed = step_seed(plan.base.prompt.seed, n);
    }
    run.output = Some(dir.clone());
    run.force = false;
    run.quiet = true;
    let outcome = replay::run(&run)?;
    if outcome.ending == crate::ending::Ending::Signal {
        eprintln!("stopped during step {n} (its run is in {})", dir.display());
        sweep.stopped = true;
        return Ok(None);
    }
    let s = &outcome.summary;
    let goodput_share = match s.total {
        0 => 0.0,
        total => s.good_requests as f64 / total as f64,
    };
    let queue_grew = queue_grew(s);
    let passed = goodput_share >= plan.min_goodput && queue_grew != Some(true);
    let p = |key: &str, q| s.latency(key).and_then(|d| d.percentile(q));
    let expected = s.prefix.expected_share();
    let observed = s.observed_prefix_share().map(|(share, _)| share);
    let cache_warning = match (expected, observed) {
        // Primed, the caches hold the step's prompts by design (said in the configuration).
        (Some(e), Some(o)) if !plan.base.prime && (o - e) * 100.0 > PREFIX_EXCESS_POINTS => {
            Some(format!(
                "step {n} (x{scale:.3}): the servers hit {:.1} % of prompt tokens in their prefix \
             caches where the step's own reuse explains {:.1} %: it measured a cache filled \
             before it{}",
                o * 100.0,
                e * 100.0,
                match plan.warm_cache {
                    true => " (--warm-cache)",
                    false => " (by an earlier run, or by another client)",
                }
            ))
        }
        _ => None,
    };
    if let Some(w) = &cache_warning {
        eprintln!("warning: {w}");
    }
    let step = Step {
        scale,
        dir,
        requests: s.total,
        ok: s.ok,
        good: s.good_requests,
        goodput_share,
        request_throughput: s.request_throughput,
        output_throughput: s.output_throughput,
        ttft_p50_ms: p("ttft_ms", 50.0),
        ttft_p99_ms: p("ttft_ms", 99.0),
        e2el_p99_ms: p("e2el_ms", 99.0),
        queue_grew,
        prefix_expected_share: expected,
        prefix_observed_share: observed,
        cache_warning,
        passed,
        verdict: s.verdict.as_ref().map_or("-", |v| v.word()).to_string(),
        verdict_reasons: s
            .verdict
            .iter()
            .flat_map(|v| v.reasons.iter().map(|r| r.key.to_string()))
            .collect(),
    };
    eprintln!("{}", step_line(&step));
    match passed {
        true => sweep.passed_scale = Some(sweep.passed_scale.map_or(scale, |p| p.max(scale))),
        false => sweep.failed_scale = Some(sweep.failed_scale.map_or(scale, |f| f.min(scale))),
    }
    sweep.steps.push(step);
    Ok(Some(passed))
}

/// Whether any scraped server's waiting queue grew over the run: its mean over the second
/// half of the scrapes during the run above twice the first half's, plus one request.
fn queue_grew(s: &Summary) -> Option<bool> {
    let targets = s.server.as_ref()?;
    let mut any = None;
    for t in targets {
        let Some(points) = t.points.get("waiting") else {
            continue;
        };
        let during: Vec<f64> = points
            .iter()
            .filter(|p| p.0 >= 0.0 && p.0 <= s.duration_s)
            .map(|p| p.1)
            .collect();
        if during.len() < 4 {
            continue;
        }
        let (first, second) = during.split_at(during.len() / 2);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let grew = mean(second) > 2.0 * mean(first) + 1.0;
        any = Some(any.unwrap_or(false) || grew);
    }
    any
}

fn describe_slo(slo: &crate::stats::Slo) -> String {
    let parts: Vec<String> = [
        ("TTFT", slo.ttft_ms),
        ("TPOT", slo.tpot_ms),
        ("E2EL", slo.e2el_ms),
        ("TTFT from schedule", slo.ttft_from_schedule_ms),
        ("E2EL from schedule", slo.e2el_from_schedule_ms),
    ]
    .iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} <= {v} ms")))
    .collect();
    parts.join(", ")
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

fn step_line(s: &Step) -> String {
    let verdict = match s.verdict_reasons.is_empty() {
        true => s.verdict.clone(),
        false => format!("{} ({})", s.verdict, s.verdict_reasons.join(", ")),
    };
    format!(
        "x{:<8.3} {:>8.2} req/s  goodput {:>5.1} %  TTFT p50 {:>8} p99 {:>8} ms  E2EL p99 {:>8} ms{}  {}  {verdict}",
        s.scale,
        s.request_throughput,
        s.goodput_share * 100.0,
        ms(s.ttft_p50_ms),
        ms(s.ttft_p99_ms),
        ms(s.e2el_p99_ms),
        match s.queue_grew {
            Some(true) => "  queue grew",
            _ => "",
        },
        if s.passed { "pass" } else { "FAIL" }
    )
}

impl Sweep {
    /// The steps by scale, and the answer.
    pub fn table(&self) -> String {
        let mut steps: Vec<&Step> = self.steps.iter().collect();
        steps.sort_by(|a, b| a.scale.total_cmp(&b.scale));
        let mut out = String::new();
        for c in &self.configuration {
            writeln!(out, "{c}").ok();
        }
        for s in &steps {
            writeln!(out, "{}", step_line(s)).ok();
        }
        for w in steps.iter().filter_map(|s| s.cache_warning.as_ref()) {
            writeln!(out, "warning: {w}").ok();
        }
        if self.stopped {
            out.push_str("stopped by a signal before the sweep ended; ");
        }
        out.push_str(&match (self.passed_scale, self.failed_scale) {
            (Some(p), None) if self.stopped => {
                format!("every step run met the SLOs, up to x{p:.3}\n")
            }
            (Some(p), Some(f)) => format!(
                "highest scale meeting every SLO: x{p:.3} (the knee lies between x{p:.3} and x{f:.3})\n"
            ),
            (Some(p), None) => format!(
                "every step met the SLOs, up to x{p:.3}: no knee found (raise --max-steps)\n"
            ),
            (None, Some(f)) => format!(
                "no step met the SLOs, down to x{f:.3}: the servers miss them even slowed down\n"
            ),
            (None, None) => "no step ran\n".into(),
        });
        out
    }
}

/// sweep.json, sweep.txt and sweep.html in the sweep's directory.
fn write_outputs(plan: &SweepPlan, sweep: &Sweep) -> Result<()> {
    let value = json!({
        "min_goodput": plan.min_goodput,
        "slo": plan.base.render.slo,
        "steps": sweep.steps,
        "passed_scale": sweep.passed_scale,
        "failed_scale": sweep.failed_scale,
        "warm_cache": plan.warm_cache,
        "configuration": sweep.configuration,
    });
    report::write_json(&plan.dir.join("sweep.json"), &value)?;
    report::write_atomic(&plan.dir.join("sweep.txt"), sweep.table().as_bytes())?;
    report::write_atomic(&plan.dir.join("sweep.html"), page(plan, sweep).as_bytes())
}

fn page(plan: &SweepPlan, sweep: &Sweep) -> String {
    let slo = plan.base.render.slo.clone().unwrap_or_default();
    let mut steps: Vec<&Step> = sweep.steps.iter().collect();
    steps.sort_by(|a, b| a.scale.total_cmp(&b.scale));
    let line = |f: &dyn Fn(&Step) -> Option<f64>| -> Vec<(f64, f64)> {
        steps
            .iter()
            .filter_map(|s| Some((s.request_throughput, f(s)?)))
            .collect()
    };
    // An SLO as a horizontal line across the throughputs measured.
    let (x0, x1) = steps.iter().fold((f64::MAX, f64::MIN), |(a, b), s| {
        (a.min(s.request_throughput), b.max(s.request_throughput))
    });
    let slo_line = |name: &str, v: Option<f64>| {
        v.filter(|_| x0 <= x1)
            .map(|v| html::Series::line(name, vec![(x0, v), (x1, v)]))
    };
    let ttft: Vec<html::Series> = [
        Some(html::Series::line("TTFT p50", line(&|s| s.ttft_p50_ms))),
        Some(html::Series::line("TTFT p99", line(&|s| s.ttft_p99_ms))),
        slo_line("TTFT SLO", slo.ttft_ms),
    ]
    .into_iter()
    .flatten()
    .collect();
    let e2el: Vec<html::Series> = [
        Some(html::Series::line("E2EL p99", line(&|s| s.e2el_p99_ms))),
        slo_line("E2EL SLO", slo.e2el_ms),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut out = html::page_start(
        "llmreplay sweep",
        "Each step replays the same trace at its own time scale; its settings head the table.",
    );
    writeln!(out, "<pre>{}</pre>", html::escape(&sweep.table())).ok();
    html::section(
        &mut out,
        "latency-vs-throughput",
        "Latency against throughput",
        "One point per step (its achieved request throughput); the knee is where latency turns up.",
        &[
            html::chart("TTFT", "requests/s", "ms", &ttft),
            html::chart("E2EL p99", "requests/s", "ms", &e2el),
            html::chart(
                "Goodput share by time scale",
                "time scale",
                "share of requests within SLOs",
                &[html::Series::line(
                    "goodput share",
                    steps.iter().map(|s| (s.scale, s.goodput_share)).collect(),
                )],
            ),
        ],
    );
    out.push_str("</body>\n</html>\n");
    out
}
