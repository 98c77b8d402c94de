//! Agentic tasks in a run summary (`sessions.tasks` in summary.json): a task is a graph of
//! agents' turns (a WEKA session, its sub-agents and their joins). Per task: its latency
//! (first send to last end), its turns and agents, and its critical path: from its last turn
//! back through the turn that released each one (the last of its parents to end). Along that
//! path, a turn's time is the server's (send to end) or a wait (its release to its send: the
//! tool's run or the user's think time, and any lateness); the tool-wait share is the waits'
//! part of the task's latency. Good tasks are those whose every turn succeeded and met
//! `--goodput`'s SLOs; their rate is the AgentPerf-style figure a sweep's knee is read from.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::Distribution;
use crate::record::RequestRecord;

/// One turn of a task, as its record gives it.
struct Step {
    waited_for: Vec<u64>,
    sent_ns: u64,
    end_ns: u64,
}

#[derive(Default)]
struct Task {
    steps: HashMap<u64, Step>,
    branches: HashSet<String>,
    good: bool,
}

#[derive(Default)]
pub(super) struct TaskBuilder {
    tasks: HashMap<String, Task>,
}

impl TaskBuilder {
    /// A measured turn of a task graph (`good`: it succeeded and met the SLOs).
    pub(super) fn add(&mut self, r: &RequestRecord, good: bool) {
        let Some(turn) = &r.session else { return };
        let Some(branch) = &turn.branch else { return };
        let task = self.tasks.entry(turn.root.clone()).or_insert_with(|| Task {
            good: true,
            ..Task::default()
        });
        task.good &= good;
        if !task.branches.contains(branch) {
            task.branches.insert(branch.clone());
        }
        let sent_ns = r.sent_ns.unwrap_or(r.scheduled_ns);
        task.steps.insert(
            r.index,
            Step {
                waited_for: turn
                    .parent_index
                    .into_iter()
                    .chain(turn.joins.iter().copied())
                    .collect(),
                sent_ns,
                end_ns: r.end_ns.unwrap_or(sent_ns),
            },
        );
    }

    pub(super) fn finish(self, percentiles: &super::Percentiles) -> Option<TaskSummary> {
        if self.tasks.is_empty() {
            return None;
        }
        let (mut latency, mut turns, mut agents, mut path_turns, mut wait_share) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut first, mut last, mut good) = (u64::MAX, 0, 0);
        for task in self.tasks.values() {
            let start = task.steps.values().map(|s| s.sent_ns).min().unwrap_or(0);
            let Some((&end_at, end)) = task.steps.iter().max_by_key(|(i, s)| (s.end_ns, *i)) else {
                continue;
            };
            let span = end.end_ns.saturating_sub(start);
            first = first.min(start);
            last = last.max(end.end_ns);
            good += u64::from(task.good);
            latency.push(span as f64 / 1e6);
            turns.push(task.steps.len() as f64);
            agents.push(task.branches.len() as f64);
            let (on_path, waits) = critical_path(&task.steps, end_at);
            path_turns.push(on_path as f64);
            if span > 0 {
                wait_share.push(waits as f64 / span as f64);
            }
        }
        let seconds = last.saturating_sub(first) as f64 / 1e9;
        Some(TaskSummary {
            tasks: self.tasks.len() as u64,
            good_tasks: good,
            good_tasks_per_s: (seconds > 0.0).then(|| good as f64 / seconds),
            latency: Distribution::of(&mut latency, percentiles),
            turns: Distribution::of(&mut turns, percentiles),
            agents: Distribution::of(&mut agents, percentiles),
            critical_path_turns: Distribution::of(&mut path_turns, percentiles),
            tool_wait_share: Distribution::of(&mut wait_share, percentiles),
        })
    }
}

/// The turns on the path that ends at `last`, and the waits along it (ns): each turn was
/// released by the last of the turns it waited for to end.
fn critical_path(steps: &HashMap<u64, Step>, last: u64) -> (u64, u64) {
    let (mut turns, mut waits) = (0, 0);
    let mut at = steps.get(&last);
    while let Some(step) = at {
        turns += 1;
        let releaser = step
            .waited_for
            .iter()
            .filter_map(|i| steps.get(i))
            .max_by_key(|s| s.end_ns);
        if let Some(r) = releaser {
            waits += step.sent_ns.saturating_sub(r.end_ns);
        }
        at = releaser;
    }
    (turns, waits)
}

/// The tasks of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSummary {
    pub tasks: u64,
    /// Tasks whose every measured turn succeeded and met the SLOs, and their rate over the
    /// tasks' span (first send to last end).
    pub good_tasks: u64,
    pub good_tasks_per_s: Option<f64>,
    /// First send to last end of each task (ms).
    pub latency: Option<Distribution>,
    pub turns: Option<Distribution>,
    /// Agents (the task's own and its sub-agents) per task.
    pub agents: Option<Distribution>,
    pub critical_path_turns: Option<Distribution>,
    /// Waits along the critical path over the task's latency (0 to 1).
    pub tool_wait_share: Option<Distribution>,
}

impl TaskSummary {
    pub(super) fn to_json(&self) -> Value {
        let dist = |d: &Option<Distribution>| d.as_ref().map(Distribution::to_json);
        json!({
            "tasks": self.tasks,
            "good_tasks": self.good_tasks,
            "good_tasks_per_s": self.good_tasks_per_s,
            "task_latency_ms": dist(&self.latency),
            "turns_per_task": dist(&self.turns),
            "agents_per_task": dist(&self.agents),
            "critical_path_turns": dist(&self.critical_path_turns),
            "tool_wait_share": dist(&self.tool_wait_share),
        })
    }

    pub fn lines(&self) -> Vec<(String, String)> {
        let mut out = vec![(
            "Tasks (good: all turns ok, within SLO):".to_string(),
            format!(
                "{} ({}{})",
                self.tasks,
                self.good_tasks,
                self.good_tasks_per_s
                    .map_or(String::new(), |r| format!(", {r:.3} good tasks/s"))
            ),
        )];
        let dists = [
            ("Task latency p50 / p99 (ms):", &self.latency),
            ("Turns per task p50 / p99:", &self.turns),
            ("Agents per task p50 / p99:", &self.agents),
            ("Critical path turns p50 / p99:", &self.critical_path_turns),
        ];
        for (label, d) in dists {
            if let Some(d) = d {
                out.push((label.into(), d.p50_p99()));
            }
        }
        if let Some(d) = &self.tool_wait_share {
            out.push((
                "Tool-wait share of task p50 / p99:".into(),
                match d.percentile(99.0) {
                    Some(p99) => format!("{:.1}% / {:.1}%", d.median * 100.0, p99 * 100.0),
                    None => format!("{:.1}% / {}", d.median * 100.0, d.not_held()),
                },
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::TurnRecord;

    fn turn(index: u64, branch: &str, parents: &[u64], sent: u64, end: u64) -> RequestRecord {
        RequestRecord {
            index,
            status: Some(200),
            sent_ns: Some(sent),
            end_ns: Some(end),
            session: Some(TurnRecord {
                root: "t".into(),
                parent_index: parents.first().copied(),
                joins: parents.iter().skip(1).copied().collect(),
                branch: Some(branch.into()),
                ..TurnRecord::default()
            }),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn the_critical_path_runs_through_the_branch_that_ended_last() {
        let mut b = TaskBuilder::default();
        // Main 0 (0-10), sub-agents a (12-20, then 21-40) and b (15-25), the join (45-50).
        for r in [
            turn(0, "t", &[], 0, 10),
            turn(1, "t::sa:a", &[0], 12, 20),
            turn(2, "t::sa:a", &[1], 21, 40),
            turn(3, "t::sa:b", &[0], 15, 25),
            turn(4, "t", &[0, 2, 3], 45, 50),
        ] {
            b.add(&r, true);
        }
        let s = b.finish(&crate::stats::Percentiles::default()).unwrap();
        assert_eq!((s.tasks, s.good_tasks), (1, 1));
        assert_eq!(s.latency.as_ref().unwrap().median, 50e-6);
        assert_eq!(s.agents.as_ref().unwrap().median, 3.0);
        // 4 → 2 (ended 40) → 1 → 0: waits 5 + 1 + 2 of 50.
        assert_eq!(s.critical_path_turns.as_ref().unwrap().median, 4.0);
        assert!((s.tool_wait_share.as_ref().unwrap().median - 8.0 / 50.0).abs() < 1e-9);
        let mut failed = TaskBuilder::default();
        failed.add(&turn(0, "t", &[], 0, 10), false);
        assert_eq!(
            failed
                .finish(&crate::stats::Percentiles::default())
                .unwrap()
                .good_tasks,
            0
        );
    }
}
