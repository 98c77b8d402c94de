//! The verdict on a run, as MLPerf LoadGen ends each run: VALID, or INVALID with every reason
//! its numbers may not hold. It is judged from the records (through the summary) and run.json,
//! so a live run, `report DIR`, a sweep step and a merged run are judged by the same code.
//! Each bound has a default, a reason for it (the README's "Can I trust this run?" prints
//! this table) and a name that `--bound NAME=VALUE` sets.

use serde_json::{json, Map, Value};

use super::Summary;

/// One bound of the verdict: its name for `--bound`, its default and why.
pub struct Bound {
    pub name: &'static str,
    pub default: f64,
    pub why: &'static str,
}

/// Every bound, in the order the reasons are checked.
pub const BOUNDS: [Bound; 8] = [
    Bound {
        name: "drift-p99-ms",
        default: 50.0,
        why: "p99 of send drift (sent - scheduled): 50 ms is a tenth of a typical 500 ms TTFT \
              SLO; later, the server met another arrival pattern than the trace's",
    },
    Bound {
        name: "late-share",
        default: 0.05,
        why: "share of sends more than 1 ms late, and of requests that reached their sender \
              after their time (producers behind): one in twenty changes the burst shape",
    },
    Bound {
        name: "stall-ms",
        default: 1000.0,
        why: "the longest a due request waited to be sent: a second without sends is a hole \
              in the load that no percentile shows",
    },
    Bound {
        name: "shard-skew-ms",
        default: 50.0,
        why: "how far a shard of a merged run started from the agreed instant, on the \
              reference clock: every request of that shard is shifted so far against the \
              others', as drift shifts one",
    },
    Bound {
        name: "sender-cpu",
        default: 0.9,
        why: "share of the run the sender threads were on a CPU: above 90 % their timestamps \
              wait for the CPU as much as for the server",
    },
    Bound {
        name: "failed-share",
        default: 0.01,
        why: "share of requests that failed: latencies of the 99 % that succeeded describe \
              another load than the one sent",
    },
    Bound {
        name: "warm-cache-points",
        default: 10.0,
        why: "observed prefix-cache hits above expected, in percentage points: a cache warmed \
              before the run (an earlier replay of the same prompts) makes every TTFT too good",
    },
    Bound {
        name: "tail-samples",
        default: 5.0,
        why: "samples beyond a printed percentile (p99 needs 500 requests at 5): fewer, and \
              the percentile is one or two requests, not a distribution",
    },
];

/// The bounds a run is judged by: the defaults, with what `--bound` changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds([f64; BOUNDS.len()]);

impl Default for Bounds {
    fn default() -> Self {
        Bounds(BOUNDS.map(|b| b.default))
    }
}

impl Bounds {
    /// `--bound NAME=VALUE`, each a known name and a non-negative number, over the defaults.
    pub fn parse(specs: &[String]) -> Result<Bounds, String> {
        Bounds::default().with(specs)
    }

    /// These bounds with `--bound NAME=VALUE` specs applied: the others stay as they are.
    pub fn with(self, specs: &[String]) -> Result<Bounds, String> {
        let mut bounds = self;
        for spec in specs {
            let names = || BOUNDS.map(|b| b.name).join(", ");
            let (name, value) = spec
                .split_once('=')
                .ok_or_else(|| format!("--bound {spec:?}: expected NAME=VALUE ({})", names()))?;
            let at = BOUNDS
                .iter()
                .position(|b| b.name == name.trim())
                .ok_or_else(|| format!("--bound {spec:?}: no bound {name:?} ({})", names()))?;
            bounds.0[at] = value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("--bound {spec:?}: {value:?} is not a number >= 0"))?;
        }
        Ok(bounds)
    }

    pub fn get(&self, name: &str) -> f64 {
        let at = BOUNDS.iter().position(|b| b.name == name);
        self.0[at.expect("a bound of BOUNDS")]
    }

    pub fn to_json(&self) -> Value {
        let m: Map<String, Value> = BOUNDS
            .iter()
            .zip(self.0)
            .map(|(b, v)| (b.name.to_string(), json!(v)))
            .collect();
        Value::Object(m)
    }

    /// The bounds run.json recorded (`verdict_bounds`); defaults for any it lacks.
    pub fn from_json(v: &Value) -> Bounds {
        let mut bounds = Bounds::default();
        for (at, b) in BOUNDS.iter().enumerate() {
            if let Some(x) = v[b.name].as_f64() {
                bounds.0[at] = x;
            }
        }
        bounds
    }
}

/// One reason a run is INVALID: a stable key and a sentence with the figures and the fix.
#[derive(Clone, Debug, PartialEq)]
pub struct Reason {
    pub key: &'static str,
    pub text: String,
}

/// VALID when there is no reason.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    pub reasons: Vec<Reason>,
    pub bounds: Bounds,
}

impl Verdict {
    pub fn valid(&self) -> bool {
        self.reasons.is_empty()
    }

    pub fn word(&self) -> &'static str {
        match self.valid() {
            true => "VALID",
            false => "INVALID",
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "result": self.word(),
            "reasons": self.reasons.iter().map(|r| json!({"key": r.key, "text": r.text})).collect::<Vec<_>>(),
            "bounds": self.bounds.to_json(),
        })
    }

    /// The lines that open summary.txt: the word, then a reason a line.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![match self.reasons.len() {
            0 => "Verdict: VALID (every check of README \"Can I trust this run?\" passed)".into(),
            n => format!(
                "Verdict: INVALID ({n} reason{})",
                if n == 1 { "" } else { "s" }
            ),
        }];
        out.extend(
            self.reasons
                .iter()
                .map(|r| format!("  - {}: {}", r.key, r.text)),
        );
        out
    }
}

/// A merged run's shards (merged run.json's `merged.shards`): each must have started within
/// `bound` ms of the agreed instant, by clocks known to agree: checked with `--ntp`, or one
/// host's.
fn shard_clocks(rows: &[Value], bound: f64, say: &mut impl FnMut(&'static str, String)) {
    let name = |r: &Value| r["shard"].as_str().unwrap_or("?").to_string();
    let skewed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let skew = r["start_skew_ms"].as_f64()?;
            (skew.abs() > bound).then(|| format!("{} by {skew:+.1} ms", name(r)))
        })
        .collect();
    if !skewed.is_empty() {
        say(
            "shard-clocks",
            format!(
                "shards started apart from the agreed instant: {} (bound {bound} ms); their \
                 loads did not overlap as one schedule (start every shard with one --start-at)",
                skewed.join(", ")
            ),
        );
    }
    let unchecked: Vec<&Value> = rows
        .iter()
        .filter(|r| r["clock_offset_ms"].is_null())
        .collect();
    let host = rows.first().and_then(|r| r["host"].as_str());
    let one_host = host.is_some() && rows.iter().all(|r| r["host"].as_str() == host);
    // Fine: every clock checked, or none and all on one host (one clock).
    let known = unchecked.is_empty() || (unchecked.len() == rows.len() && one_host);
    if !known {
        say(
            "shard-clocks",
            format!(
                "the clocks of shards {} were not checked, and not every shard ran on one \
                 host: their start skew is unknown (give every shard --ntp HOST)",
                unchecked
                    .iter()
                    .map(|r| name(r))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
}

/// What run.json says of the senders (`senders`), for the reasons the records cannot give.
fn senders(run: Option<&Value>) -> (Option<f64>, u64) {
    let s = run.map(|r| &r["senders"]);
    let late = s.and_then(|s| s["arrived_late"].as_u64()).unwrap_or(0);
    (s.and_then(sender_cpu_share), late)
}

/// The share of the run the sender threads were on a CPU, from run.json's `senders`.
pub fn sender_cpu_share(senders: &Value) -> Option<f64> {
    let (cpu, threads) = (senders["cpu_s"].as_f64()?, senders["threads"].as_f64()?);
    let wall = senders["wall_s"].as_f64()?;
    (threads * wall > 0.0).then(|| cpu / (threads * wall))
}

/// Judges a run by `bounds`: its summary and (when there is one) its run.json.
pub fn judge(s: &Summary, run: Option<&Value>, bounds: &Bounds) -> Verdict {
    let mut reasons = Vec::new();
    let mut say = |key: &'static str, text: String| reasons.push(Reason { key, text });
    let pct = |x: f64| format!("{:.1} %", x * 100.0);
    if let Some(how) = s.ended.as_ref().and_then(|e| e["how"].as_str()) {
        if how != "completed" {
            let detail = s.ended.as_ref().and_then(|e| e["detail"].as_str());
            say(
                "ended",
                format!("the run did not complete: {}", detail.unwrap_or(how)),
            );
        }
    }
    if let Some(d) = s.latency("drift_ms") {
        let p99 = d.percentile(99.0).unwrap_or(d.max);
        let bound = bounds.get("drift-p99-ms");
        if p99 > bound {
            say(
                "schedule",
                format!(
                "send drift p99 {p99:.1} ms > {bound} ms: the client did not keep the schedule \
                 (see the sender and producer reasons, or lower --time-scale)"
            ),
            );
        }
        let share = s.late_sends as f64 / d.count.max(1) as f64;
        if share > bounds.get("late-share") {
            say(
                "late-sends",
                format!(
                    "{} of {} sends ({}) were more than 1 ms late (bound {})",
                    s.late_sends,
                    d.count,
                    pct(share),
                    pct(bounds.get("late-share"))
                ),
            );
        }
        let stall = bounds.get("stall-ms");
        if d.max > stall {
            say(
                "stall",
                format!(
                    "a due request waited {:.2} s to be sent (bound {:.2} s): the load had a hole",
                    d.max / 1e3,
                    stall / 1e3
                ),
            );
        }
    }
    if let Some(rows) = run.and_then(|r| r["merged"]["shards"].as_array()) {
        shard_clocks(rows, bounds.get("shard-skew-ms"), &mut say);
    }
    let (cpu, arrived_late) = senders(run);
    if let Some(cpu) = cpu.filter(|&c| c > bounds.get("sender-cpu")) {
        say(
            "sender-saturated",
            format!(
            "the sender threads were on a CPU {} of the run (bound {}): give --num-sender more \
             threads or cores",
            pct(cpu), pct(bounds.get("sender-cpu"))
        ),
        );
    }
    if run.is_some_and(|r| r["senders"]["out_of_descriptors"] == true) {
        say(
            "descriptors",
            "this client ran out of file descriptors (ulimit -n): requests \
             waited for a connection another request freed, so the load was capped by the \
             client, not the server (raise ulimit -n)"
                .into(),
        );
    }
    let share = arrived_late as f64 / s.total.max(1) as f64;
    if share > bounds.get("late-share") {
        say(
            "producers-behind",
            format!(
                "{arrived_late} requests ({}) reached their sender after their send time: the \
             producers could not build prompts fast enough (give --num-producer more threads)",
                pct(share)
            ),
        );
    }
    let failed = s.failed as f64 / s.total.max(1) as f64;
    if s.total > 0 && failed > bounds.get("failed-share") {
        say(
            "failed",
            format!(
                "{} of {} requests failed ({}, bound {})",
                s.failed,
                s.total,
                pct(failed),
                pct(bounds.get("failed-share"))
            ),
        );
    }
    let shares = (s.prefix.observed_share(), s.prefix.expected_share());
    // A primed run's cache was filled on purpose (summary's "Primed" line).
    if let (Some(observed), Some(expected), false) = (shares.0, shares.1, s.primed) {
        let points = (observed - expected) * 100.0;
        if points > bounds.get("warm-cache-points") {
            say(
                "warm-cache",
                format!(
                    "observed prefix-cache hits {} against {} expected (+{points:.1} points): the \
                 server's cache was warm before the run (give --fresh-prompts, or restart the \
                 server)",
                    pct(observed),
                    pct(expected)
                ),
            );
        }
    }
    for (what, m) in [
        ("input", &s.input_length_match),
        ("output", &s.output_length_match),
    ] {
        if m.checked > m.exact {
            say(
                match what {
                    "input" => "inexact-input",
                    _ => "inexact-output",
                },
                format!(
                    "{} of {} {what} lengths differ from the trace's (up to {} tokens)",
                    m.checked - m.exact,
                    m.checked,
                    m.max_abs_diff
                ),
            );
        }
    }
    if s.reasoning.ended_in_thinking > 0 {
        say(
            "ended-in-thinking",
            format!(
                "{} of {} reasoning answers ended inside their thinking: their output length \
             bought no answer (raise output_length or cap the reasoning)",
                s.reasoning.ended_in_thinking, s.reasoning.answers
            ),
        );
    }
    let tail = bounds.get("tail-samples");
    let n = s.ok as f64;
    let holds = |p: f64| n * (1.0 - p / 100.0) >= tail;
    let unsupported: Vec<String> = s
        .percentiles
        .iter()
        .filter(|&&p| !holds(p))
        .map(|p| format!("p{p}"))
        .collect();
    if !unsupported.is_empty() {
        let held: Vec<String> = s
            .percentiles
            .iter()
            .filter(|&&p| holds(p))
            .map(|p| format!("p{p}"))
            .collect();
        say(
            "few-samples",
            format!(
            "{} successful requests leave fewer than {tail} samples beyond {}; {} (more requests, \
             or --bound tail-samples=N)",
            s.ok,
            unsupported.join(", "),
            match held.is_empty() {
                true => "no printed percentile holds".to_string(),
                false => format!("{} hold", held.join(", ")),
            }
        ),
        );
    }
    Verdict {
        reasons,
        bounds: bounds.clone(),
    }
}
