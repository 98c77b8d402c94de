//! `llmreplay sweep`: the fastest replay of a trace (or the most sessions at once) that the
//! servers still serve within their SLOs.
//!
//! Each step is an ordinary replay of the same plan at its own level, in a run directory of
//! its own: a `--time-scale` (`--over scale`) or a `--max-active-sessions` (`--over
//! sessions`: conversations or agent tasks at once, each closed-loop). Levels grow
//! geometrically from the start until a step fails (its goodput share, or for a task trace its
//! share of good tasks, falls under `--min-goodput`, or a scraped server's queue keeps
//! growing); then bisection, on a log scale, between the last level that passed and the first
//! that failed. A first step that fails sends the levels down instead. The answer is the
//! highest level that passed, with the failing level above it: the knee lies between them.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;

use crate::commands::replay;
use crate::error::Result;
use crate::plan::{SweepAxis, SweepPlan};
use crate::report::{self, html};
use crate::stats::{latency, Summary};

/// One step's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// Its time scale (with `--over sessions`, the same at every step).
    pub scale: f64,
    /// With `--over sessions`: the sessions it ran at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_active_sessions: Option<u64>,
    pub dir: PathBuf,
    pub requests: u64,
    pub ok: u64,
    pub good: u64,
    /// Good requests over all requests (failed ones count as not good).
    pub goodput_share: f64,
    /// A task trace's tasks, the good ones (every turn succeeded within the SLOs), and
    /// their rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub good_tasks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub good_tasks_per_s: Option<f64>,
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

impl Step {
    /// Where it stands on the sweep's axis.
    fn level(&self, axis: SweepAxis) -> f64 {
        match axis {
            SweepAxis::Scale => self.scale,
            SweepAxis::Sessions => self.max_active_sessions.unwrap_or(0) as f64,
        }
    }
}

/// The sweep's answer.
#[derive(Debug, Serialize)]
pub struct Sweep {
    pub axis: SweepAxis,
    /// In the order they ran.
    pub steps: Vec<Step>,
    /// The highest level (time scale, or sessions at once) that passed.
    pub passed: Option<f64>,
    /// The lowest level that failed.
    pub failed: Option<f64>,
    /// `--over sessions`: a step that passed held no session back (they all ran at once),
    /// so no higher level could differ.
    pub all_at_once: bool,
    /// A signal stopped the sweep during its last step (left out of the steps).
    pub stopped: bool,
    /// What every step did: the SLOs, the pass rule, whether prompts were new each step.
    pub configuration: Vec<String>,
}

/// The sweep's settings, said at its top (sweep.txt, sweep.html, stdout).
fn configuration(plan: &SweepPlan, slo: &crate::stats::Slo) -> Vec<String> {
    vec![
        format!(
            "a step passes when at least {:.0} % of its {} meet {}{}",
            plan.min_goodput * 100.0,
            match plan.axis {
                SweepAxis::Scale => "requests",
                SweepAxis::Sessions => "tasks (of a task trace; else requests)",
            },
            slo.describe(),
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
    let (what, dir) = match plan.axis {
        SweepAxis::Scale => ("time scales", "step-NN-xSCALE"),
        SweepAxis::Sessions => ("sessions at once (--max-active-sessions)", "step-NN-sN"),
    };
    eprintln!(
        "sweep: {what} {} x{} ... (at most {} steps) until fewer than {:.0} % of the \
         {} meet {}; then {} bisection steps. Each step's run goes to {}/{dir}.",
        plan.start,
        plan.step_factor,
        plan.max_steps,
        plan.min_goodput * 100.0,
        match plan.axis {
            SweepAxis::Scale => "requests",
            SweepAxis::Sessions => "tasks (or requests)",
        },
        slo.describe(),
        plan.bisect,
        plan.dir.display()
    );
    let mut sweep = Sweep {
        axis: plan.axis,
        steps: Vec::new(),
        passed: None,
        failed: None,
        all_at_once: false,
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
    let mut level = plan.level(plan.start);
    for _ in 0..plan.max_steps {
        let Some(passed) = step(plan, sweep, level)? else {
            return Ok(());
        };
        if (sweep.passed.is_some() && sweep.failed.is_some()) || (passed && sweep.all_at_once) {
            break;
        }
        let next = plan.level(match passed {
            true => level * plan.step_factor,
            false => level / plan.step_factor,
        });
        if next == level {
            break; // one session at once failed: there is nothing lower
        }
        level = next;
    }
    for _ in 0..plan.bisect {
        let (Some(lo), Some(hi)) = (sweep.passed, sweep.failed) else {
            break;
        };
        let mid = plan.level((lo * hi).sqrt());
        if mid <= lo || mid >= hi {
            break; // whole sessions: nothing lies between
        }
        if step(plan, sweep, mid)?.is_none() {
            break;
        }
    }
    Ok(())
}

/// Runs one level and narrows the bracket with its outcome: whether it passed, None when a
/// signal stopped it (its run directory holds what it measured).
fn step(plan: &SweepPlan, sweep: &mut Sweep, level: f64) -> Result<Option<bool>> {
    let n = sweep.steps.len() + 1;
    let mut run = plan.base.clone();
    let dir = match plan.axis {
        SweepAxis::Scale => {
            run.time_scale = level;
            plan.dir.join(format!("step-{n:02}-x{level:.3}"))
        }
        SweepAxis::Sessions => {
            run.sessions.max_active = Some(level as usize);
            plan.dir.join(format!("step-{n:02}-s{level}"))
        }
    };
    if !plan.warm_cache {
        // The arrivals (--rate's gaps) keep their own seed: only the prompts change. Recorded
        // messages, which have no seed, get the step's marker (pipeline::salt).
        run.prompt.seed = step_seed(plan.base.prompt.seed, n);
        if n > 1 {
            let base = plan.base.prompt.salt.unwrap_or(0);
            run.prompt.salt = Some(base ^ step_seed(0, n));
        }
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
    let tasks = s.sessions.as_ref().and_then(|x| x.tasks.as_ref());
    // Over sessions, a task trace passes on its tasks: a task is the user's unit of work.
    let share = match (plan.axis, tasks) {
        (SweepAxis::Sessions, Some(t)) if t.tasks > 0 => t.good_tasks as f64 / t.tasks as f64,
        _ => goodput_share,
    };
    let queue_grew = queue_grew(s);
    let passed = share >= plan.min_goodput && queue_grew != Some(true);
    let p = |l: &latency::Latency, q| s.latency(l).and_then(|d| d.percentile(q));
    let expected = s.prefix.expected_share();
    let observed = s.observed_prefix_share().map(|(share, _)| share);
    let name = level_name(plan.axis, level);
    let cache_warning = match (expected, observed) {
        // Primed, the caches hold the step's prompts by design (said in the configuration).
        (Some(e), Some(o)) if !plan.base.prime && (o - e) * 100.0 > PREFIX_EXCESS_POINTS => {
            Some(format!(
                "step {n} ({name}): the servers hit {:.1} % of prompt tokens in their prefix \
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
        scale: run.time_scale,
        max_active_sessions: (plan.axis == SweepAxis::Sessions).then_some(level as u64),
        dir,
        requests: s.total,
        ok: s.ok,
        good: s.good_requests,
        goodput_share,
        tasks: tasks.map(|t| t.tasks),
        good_tasks: tasks.map(|t| t.good_tasks),
        good_tasks_per_s: tasks.and_then(|t| t.good_tasks_per_s),
        request_throughput: s.request_throughput,
        output_throughput: s.output_throughput,
        ttft_p50_ms: p(&latency::TTFT, 50.0),
        ttft_p99_ms: p(&latency::TTFT, 99.0),
        e2el_p99_ms: p(&latency::E2EL, 99.0),
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
    eprintln!("{}", step_line(&step, plan.axis));
    match passed {
        true => sweep.passed = Some(sweep.passed.map_or(level, |p| p.max(level))),
        false => sweep.failed = Some(sweep.failed.map_or(level, |f| f.min(level))),
    }
    // No session waited for a place: every one ran at once, and a higher cap is this run.
    let held = s.sessions.as_ref().map_or(0, |x| x.sessions_waited);
    if plan.axis == SweepAxis::Sessions && passed && held == 0 {
        sweep.all_at_once = true;
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

/// A level as the sweep's texts name it: `x2.000`, `3 sessions at once`.
fn level_name(axis: SweepAxis, v: f64) -> String {
    match axis {
        SweepAxis::Scale => format!("x{v:.3}"),
        SweepAxis::Sessions => format!("{v} sessions at once"),
    }
}

fn axis_label(axis: SweepAxis) -> &'static str {
    match axis {
        SweepAxis::Scale => "time scale",
        SweepAxis::Sessions => "sessions at once",
    }
}

/// A step's percentile: "n/a" where its successful requests are too few to hold it (the
/// step's own summary says how many it needs), "-" where it had none.
fn ms(v: Option<f64>, ok: u64) -> String {
    match v {
        Some(v) => format!("{v:.1}"),
        None if ok > 0 => "n/a".into(),
        None => "-".into(),
    }
}

fn step_line(s: &Step, axis: SweepAxis) -> String {
    let verdict = match s.verdict_reasons.is_empty() {
        true => s.verdict.clone(),
        false => format!("{} ({})", s.verdict, s.verdict_reasons.join(", ")),
    };
    let level = match axis {
        SweepAxis::Scale => format!("x{:<8.3}", s.scale),
        SweepAxis::Sessions => format!("{:>4} sessions", s.level(axis)),
    };
    let tasks = match (s.tasks, s.good_tasks) {
        (Some(t), Some(g)) => format!(
            "  good tasks {g}/{t} ({} /s)",
            s.good_tasks_per_s.map_or("-".into(), |r| format!("{r:.2}"))
        ),
        _ => String::new(),
    };
    format!(
        "{level} {:>8.2} req/s  goodput {:>5.1} %{tasks}  TTFT p50 {:>8} p99 {:>8} ms  E2EL p99 {:>8} ms{}  {}  {verdict}",
        s.request_throughput,
        s.goodput_share * 100.0,
        ms(s.ttft_p50_ms, s.ok),
        ms(s.ttft_p99_ms, s.ok),
        ms(s.e2el_p99_ms, s.ok),
        match s.queue_grew {
            Some(true) => "  queue grew",
            _ => "",
        },
        if s.passed { "pass" } else { "FAIL" }
    )
}

impl Sweep {
    /// The steps by level, and the answer.
    pub fn table(&self) -> String {
        let axis = self.axis;
        let mut steps: Vec<&Step> = self.steps.iter().collect();
        steps.sort_by(|a, b| a.level(axis).total_cmp(&b.level(axis)));
        let mut out = String::new();
        for c in &self.configuration {
            writeln!(out, "{c}").ok();
        }
        for s in &steps {
            writeln!(out, "{}", step_line(s, axis)).ok();
        }
        for w in steps.iter().filter_map(|s| s.cache_warning.as_ref()) {
            writeln!(out, "warning: {w}").ok();
        }
        if self.stopped {
            out.push_str("stopped by a signal before the sweep ended; ");
        }
        let name = |v: f64| level_name(axis, v);
        let what = match axis {
            SweepAxis::Scale => "highest scale",
            SweepAxis::Sessions => "most sessions at once",
        };
        out.push_str(&match (self.passed, self.failed) {
            (Some(p), None) if self.stopped => {
                format!("every step run met the SLOs, up to {}\n", name(p))
            }
            (Some(p), Some(f)) => match axis {
                SweepAxis::Scale => format!(
                    "{what} meeting every SLO: x{p:.3} (the knee lies between x{p:.3} and x{f:.3})\n"
                ),
                SweepAxis::Sessions => format!(
                    "{what} meeting every SLO: {p} (the knee lies between {p} and {f})\n"
                ),
            },
            (Some(p), None) if self.all_at_once => format!(
                "every step met the SLOs, up to {}: every session of the trace ran at once \
                 (a larger trace, or --loop, finds the knee)\n",
                name(p)
            ),
            (Some(p), None) => format!(
                "every step met the SLOs, up to {}: no knee found (raise --max-steps)\n",
                name(p)
            ),
            (None, Some(f)) => format!(
                "no step met the SLOs, down to {}: the servers miss them even {}\n",
                name(f),
                match axis {
                    SweepAxis::Scale => "slowed down",
                    SweepAxis::Sessions => "so",
                }
            ),
            (None, None) => "no step ran\n".into(),
        });
        out
    }
}

/// sweep.json, sweep.txt and sweep.html in the sweep's directory.
fn write_outputs(plan: &SweepPlan, sweep: &Sweep) -> Result<()> {
    let mut value = json!({
        "over": plan.axis.name(),
        "min_goodput": plan.min_goodput,
        "slo": plan.base.render.slo,
        "steps": sweep.steps,
        "warm_cache": plan.warm_cache,
        "configuration": sweep.configuration,
    });
    let (passed, failed) = match plan.axis {
        SweepAxis::Scale => ("passed_scale", "failed_scale"),
        SweepAxis::Sessions => ("passed_sessions", "failed_sessions"),
    };
    value[passed] = json!(sweep.passed);
    value[failed] = json!(sweep.failed);
    if sweep.all_at_once {
        value["all_at_once"] = json!(true);
    }
    report::write_json(&plan.dir.join("sweep.json"), &value)?;
    report::write_atomic(&plan.dir.join("sweep.txt"), sweep.table().as_bytes())?;
    report::write_atomic(&plan.dir.join("sweep.html"), page(plan, sweep).as_bytes())
}

fn page(plan: &SweepPlan, sweep: &Sweep) -> String {
    let slo = plan.base.render.slo.clone().unwrap_or_default();
    let mut steps: Vec<&Step> = sweep.steps.iter().collect();
    let axis = plan.axis;
    steps.sort_by(|a, b| a.level(axis).total_cmp(&b.level(axis)));
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
        slo_line("TTFT SLO", slo.limit(&latency::TTFT)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let e2el: Vec<html::Series> = [
        Some(html::Series::line("E2EL p99", line(&|s| s.e2el_p99_ms))),
        slo_line("E2EL SLO", slo.limit(&latency::E2EL)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut out = html::page_start(
        "llmreplay sweep",
        match plan.axis {
            SweepAxis::Scale => {
                "Each step replays the same trace at its own time scale; its settings head the table."
            }
            SweepAxis::Sessions => {
                "Each step replays the same trace with its own number of sessions at once; its \
                 settings head the table."
            }
        },
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
                &format!("Goodput share by {}", axis_label(axis)),
                axis_label(axis),
                "share of requests within SLOs",
                &[html::Series::line(
                    "goodput share",
                    steps
                        .iter()
                        .map(|s| (s.level(axis), s.goodput_share))
                        .collect(),
                )],
            ),
        ],
    );
    let good_tasks: Vec<(f64, f64)> = steps
        .iter()
        .filter_map(|s| Some((s.level(axis), s.good_tasks_per_s?)))
        .collect();
    if !good_tasks.is_empty() {
        html::section(
            &mut out,
            "good-tasks",
            "Good tasks per second",
            "Tasks whose every turn met the SLOs, per second of the step: the knee is the load \
             a deployment serves agents at.",
            &[html::chart(
                &format!("Good tasks/s by {}", axis_label(axis)),
                axis_label(axis),
                "good tasks/s",
                &[html::Series::line("good tasks/s", good_tasks)],
            )],
        );
    }
    out.push_str("</body>\n</html>\n");
    out
}
