//! Conversations in a run summary (`sessions` in summary.json): how many started, finished
//! and were cut, how waiting for parents and for a `--max-active-sessions` place moved the
//! turns, whether parents' answers were carried forward, per round (turn number) the
//! prefix-cache hits production had (planned) against what the server reported (observed),
//! and the steady state (first to last send) beside the whole run (its drain included).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::tasks::{TaskBuilder, TaskSummary};
use super::Distribution;
use crate::record::{share, RequestRecord};

/// One round's hit tokens, planned and observed, over the same requests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Round {
    pub turn: u32,
    pub requests: u64,
    pub planned_cached: u64,
    pub input_tokens: u64,
    pub observed_cached: u64,
    pub prompt_tokens: u64,
}

impl Round {
    pub fn planned_share(&self) -> Option<f64> {
        share(self.planned_cached, self.input_tokens)
    }

    pub fn observed_share(&self) -> Option<f64> {
        share(self.observed_cached, self.prompt_tokens)
    }

    /// Observed less planned, in percentage points.
    pub fn diff_points(&self) -> Option<f64> {
        Some((self.observed_share()? - self.planned_share()?) * 100.0)
    }

    fn to_json(&self) -> Value {
        json!({
            "turn": self.turn,
            "requests": self.requests,
            "planned_hit_share": self.planned_share(),
            "observed_hit_share": self.observed_share(),
            "diff_points": self.diff_points(),
            "planned_cached_tokens": self.planned_cached,
            "cached_tokens": self.observed_cached,
        })
    }
}

/// One conversation's records so far.
#[derive(Default)]
struct Conversation {
    turns: u64,
    ok: u64,
    /// Its last turn in the trace was sent (and recorded).
    finished: bool,
    first_send_ns: Option<u64>,
    last_end_ns: u64,
}

#[derive(Default)]
pub(super) struct SessionBuilder {
    turns: u64,
    parent_failed: u64,
    delay_ms: Vec<f64>,
    carried: u64,
    not_carried: BTreeMap<String, u64>,
    rounds: BTreeMap<u32, Round>,
    conversations: HashMap<String, Conversation>,
    /// Records say whether they are their conversation's last turn.
    knows_last: bool,
    session_wait_ms: Vec<f64>,
    /// Every turn's (send, end, output tokens), for the steady state.
    ends: Vec<(u64, u64, u64)>,
    tasks: TaskBuilder,
}

impl SessionBuilder {
    /// A measured record (warmups are not); `good`: it succeeded within the SLOs.
    pub(super) fn add(&mut self, r: &RequestRecord, good: bool) {
        let Some(t) = &r.session else { return };
        self.tasks.add(r, good);
        let c = self.conversations.entry(t.root.clone()).or_default();
        c.turns += 1;
        c.ok += u64::from(r.ok());
        let sent = r.sent_ns.unwrap_or(r.scheduled_ns);
        c.first_send_ns = Some(c.first_send_ns.map_or(sent, |f| f.min(sent)));
        c.last_end_ns = c.last_end_ns.max(r.end_ns.unwrap_or(0));
        c.finished |= t.last == Some(true);
        self.knows_last |= t.last.is_some();
        if let Some(w) = t.session_wait_ns {
            self.session_wait_ms.push(w as f64 / 1e6);
        }
        let tokens = r.output_tokens.filter(|_| r.ok()).unwrap_or(0);
        self.ends.push((sent, r.end_ns.unwrap_or(sent), tokens));
        if t.parent_index.is_some() {
            self.turns += 1;
            self.parent_failed += u64::from(t.parent_failed);
            self.delay_ms.push(t.delay_ns as f64 / 1e6);
            // One count per turn: carried, or not and why.
            match (&t.carried_tokens, &t.carry_note) {
                (Some(_), _) => self.carried += 1,
                (None, Some(why)) => *self.not_carried.entry(why.clone()).or_default() += 1,
                (None, None) => {}
            }
        }
        // A round's shares are over the requests that have both figures.
        let (Some(planned), Some(input), Some(cached), true) = (
            t.planned_cached_tokens,
            r.input_tokens,
            r.cached_tokens,
            r.ok(),
        ) else {
            return;
        };
        let round = self.rounds.entry(t.turn).or_insert_with(|| Round {
            turn: t.turn,
            ..Round::default()
        });
        round.requests += 1;
        round.planned_cached += planned;
        round.input_tokens += input;
        round.observed_cached += cached;
        round.prompt_tokens += r.prompt_tokens.unwrap_or(input);
    }

    pub(super) fn finish(mut self, percentiles: &super::Percentiles) -> Option<SessionSummary> {
        if self.conversations.is_empty() {
            return None;
        }
        let mut latency: Vec<f64> = Vec::new();
        let mut rounds: Vec<f64> = Vec::new();
        for c in self.conversations.values() {
            rounds.push(c.turns as f64);
            if let Some(first) = c.first_send_ns {
                latency.push(c.last_end_ns.saturating_sub(first) as f64 / 1e6);
            }
        }
        let all_ok = self.conversations.values().filter(|c| c.ok == c.turns);
        let finished = self.conversations.values().filter(|c| c.finished).count() as u64;
        let steady = Window::steady_and_whole(&self.ends);
        Some(SessionSummary {
            finished: self.knows_last.then_some(finished),
            turns_cut: None,
            dropped: None,
            session_wait: Distribution::of(&mut self.session_wait_ms, percentiles),
            sessions_waited: self.session_wait_ms.len() as u64,
            steady_state: steady,
            conversations: self.conversations.len() as u64,
            conversations_all_ok: all_ok.count() as u64,
            turns_after_parent: self.turns,
            parent_failed: self.parent_failed,
            session_delay: Distribution::of(&mut self.delay_ms, percentiles),
            carried: self.carried,
            not_carried: self.not_carried,
            session_latency: Distribution::of(&mut latency, percentiles),
            rounds_per_session: Distribution::of(&mut rounds, percentiles),
            rounds: self.rounds.into_values().collect(),
            tasks: self.tasks.finish(percentiles),
        })
    }
}

/// Requests ended and output tokens in a stretch of the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub from_ns: u64,
    pub to_ns: u64,
    pub requests_ended: u64,
    pub output_tokens: u64,
}

impl Window {
    fn seconds(&self) -> f64 {
        self.to_ns.saturating_sub(self.from_ns) as f64 / 1e9
    }

    pub fn output_tokens_per_s(&self) -> Option<f64> {
        let s = self.seconds();
        (s > 0.0).then(|| self.output_tokens as f64 / s)
    }

    /// The steady state (first send to last send: the drain, when nothing new is sent,
    /// left out) and the whole run (first send to last end), over (send, end, tokens).
    fn steady_and_whole(ends: &[(u64, u64, u64)]) -> Option<(Window, Window)> {
        let from = ends.iter().map(|e| e.0).min()?;
        let last_send = ends.iter().map(|e| e.0).max()?;
        let last_end = ends.iter().map(|e| e.1).max()?.max(last_send);
        let within = |to: u64| {
            let ended = ends.iter().filter(|e| e.1 <= to);
            Window {
                from_ns: from,
                to_ns: to,
                requests_ended: ended.clone().count() as u64,
                output_tokens: ended.map(|e| e.2).sum(),
            }
        };
        Some((within(last_send), within(last_end)))
    }

    fn to_json(self) -> Value {
        json!({
            "from_ms": self.from_ns as f64 / 1e6,
            "to_ms": self.to_ns as f64 / 1e6,
            "requests_ended": self.requests_ended,
            "output_tokens": self.output_tokens,
            "output_tokens_per_s": self.output_tokens_per_s(),
        })
    }
}

/// The conversations of a run (`sessions` in summary.json).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSummary {
    /// Sessions whose last turn was sent (None for a run whose records do not say); the
    /// others of `conversations` were cut (by a bound, a stop, or `--max-requests`).
    pub finished: Option<u64>,
    /// Planned turns a session bound kept from being sent (run.json's `schedule.turns_cut`;
    /// None where the run directory does not say).
    pub turns_cut: Option<u64>,
    /// Sessions still waiting for a `--max-active-sessions` place at the bound: never
    /// started, so not among `conversations` (run.json's `schedule.sessions_dropped`).
    pub dropped: Option<u64>,
    /// First turns held by `--max-active-sessions`, and their waits for a place.
    pub sessions_waited: u64,
    pub session_wait: Option<Distribution>,
    /// (steady state, whole run).
    pub steady_state: Option<(Window, Window)>,
    /// Conversations with a measured record (started), and those whose every record
    /// succeeded.
    pub conversations: u64,
    pub conversations_all_ok: u64,
    /// Turns that had a parent to wait for.
    pub turns_after_parent: u64,
    pub parent_failed: u64,
    /// Their deadline minus their trace time.
    pub session_delay: Option<Distribution>,
    /// Turns whose prompt holds the parent's prompt and answer, and why the others do not.
    pub carried: u64,
    pub not_carried: BTreeMap<String, u64>,
    /// First send to last end of each conversation (ms).
    pub session_latency: Option<Distribution>,
    pub rounds_per_session: Option<Distribution>,
    /// Per turn number: planned against observed prefix-cache hits.
    pub rounds: Vec<Round>,
    /// Task graphs (sub-agents and joins), where the trace has them.
    pub tasks: Option<TaskSummary>,
}

impl SessionSummary {
    pub(super) fn to_json(&self) -> Value {
        let dist = |d: &Option<Distribution>| d.as_ref().map(Distribution::to_json);
        json!({
            "conversations": self.conversations,
            "started": self.conversations,
            "finished": self.finished,
            "cut": self.cut(),
            "turns_cut": self.turns_cut,
            "dropped": self.dropped,
            "sessions_waited": self.sessions_waited,
            "session_wait_ms": dist(&self.session_wait),
            "steady_state": self.steady_state.map(|s| s.0.to_json()),
            "whole_run": self.steady_state.map(|s| s.1.to_json()),
            "conversations_all_ok": self.conversations_all_ok,
            "turns_after_parent": self.turns_after_parent,
            "parent_failed": self.parent_failed,
            "session_delay_ms": dist(&self.session_delay),
            "carried_forward": self.carried,
            "not_carried_forward": self.not_carried,
            "session_latency_ms": dist(&self.session_latency),
            "rounds_per_session": dist(&self.rounds_per_session),
            "rounds": self.rounds.iter().map(Round::to_json).collect::<Vec<_>>(),
            "tasks": self.tasks.as_ref().map(TaskSummary::to_json),
        })
    }

    /// Started sessions whose last turn was not sent.
    pub fn cut(&self) -> Option<u64> {
        self.finished.map(|f| self.conversations.saturating_sub(f))
    }

    /// The summary table's lines: (label, value).
    pub fn lines(&self) -> Vec<(String, String)> {
        let mut out = vec![(
            "Conversations (all turns ok):".to_string(),
            format!("{} ({})", self.conversations, self.conversations_all_ok),
        )];
        if let (Some(finished), Some(cut)) = (self.finished, self.cut()) {
            let turns = match self.turns_cut {
                Some(1) => " (1 turn past the bound not sent)".to_string(),
                Some(n) if n > 1 => format!(" ({n} turns past the bound not sent)"),
                _ => String::new(),
            };
            out.push((
                "Sessions started / finished / cut:".into(),
                format!("{} / {finished} / {cut}{turns}", self.conversations),
            ));
            if let Some(dropped) = self.dropped.filter(|&d| d > 0) {
                out.push((
                    "Sessions dropped, no place by bound:".into(),
                    dropped.to_string(),
                ));
            }
        }
        if let Some(d) = &self.session_wait {
            out.push((
                "Waits for a session place p50 / p99 (ms):".into(),
                format!("{} ({} sessions)", d.p50_p99(), self.sessions_waited),
            ));
        }
        if let Some((steady, whole)) = self.steady_state {
            let rate = |w: Window| {
                w.output_tokens_per_s()
                    .map_or("-".into(), |r| format!("{r:.1}"))
            };
            out.push((
                "Output tok/s steady / whole run:".into(),
                format!(
                    "{} / {} (steady: first to last send, {:.2} s; drain {:.2} s)",
                    rate(steady),
                    rate(whole),
                    steady.seconds(),
                    whole.seconds() - steady.seconds()
                ),
            ));
        }
        out.push((
            "Turns after their parent:".into(),
            format!(
                "{} ({} parent failed, {} carried forward)",
                self.turns_after_parent, self.parent_failed, self.carried
            ),
        ));
        for (why, n) in &self.not_carried {
            out.push(("  not carried forward:".into(), format!("{n}: {why}")));
        }
        let dists = [
            ("Session delay p50 / p99 (ms):", &self.session_delay),
            ("Session latency p50 / p99 (ms):", &self.session_latency),
        ];
        for (label, d) in dists {
            if let Some(d) = d {
                out.push((label.into(), d.p50_p99()));
            }
        }
        out.extend(self.tasks.iter().flat_map(TaskSummary::lines));
        for r in &self.rounds {
            let pct = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.1}%", x * 100.0));
            out.push((
                format!("Round {} prefix hits planned / observed:", r.turn),
                format!(
                    "{} / {} ({:+.1} pt, {} requests)",
                    pct(r.planned_share()),
                    pct(r.observed_share()),
                    r.diff_points().unwrap_or(0.0),
                    r.requests
                ),
            ));
        }
        out
    }
}
