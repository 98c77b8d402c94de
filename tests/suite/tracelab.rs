//! TraceLab's coding-agent sessions replayed closed-loop: each round goes after the previous
//! round's answer plus its tool wait, `--max-active-sessions` caps the sessions running at
//! once (a session waiting for a place says how long), carry-forward makes the server's hits
//! the trace's `prefix_len`, and a `--duration` bound counts sessions started, finished and
//! cut.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::common;
use common::{read_jsonl, temp_dir};
use llmreplay::mock::MockConfig;

const OUTPUT: u64 = 16;

/// `sessions` sessions of `rounds` rounds, a session every 5 ms; each round keeps the whole
/// context before it (the previous prompt and answer) and appends 32 tokens; `wait(s)` is
/// session s's tool wait after each round but its last.
fn csv(sessions: u64, rounds: u64, wait: impl Fn(u64) -> f64) -> String {
    let mut out = String::from(
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n",
    );
    for s in 0..sessions {
        let mut context = 0;
        for r in 0..rounds {
            let appended = if r == 0 { 64 } else { 32 };
            let w = if r + 1 == rounds { 0.0 } else { wait(s) };
            out.push_str(&format!(
                "agent-{s},{},{r},{context},{appended},{OUTPUT},{w}\n",
                s * 5
            ));
            context += appended + OUTPUT;
        }
    }
    out
}

/// Replays `trace` against a mock with a 16-token prefix cache that keeps generated tokens.
fn replay(dir: &Path, name: &str, trace: &str, extra: &[&str]) -> (Vec<Value>, Value, String) {
    replay_at(dir, name, trace, extra, 3_000_000)
}

/// [`replay`] against a mock whose first token takes `ttft_ns`.
fn replay_at(
    dir: &Path,
    name: &str,
    trace: &str,
    extra: &[&str],
    ttft_ns: u64,
) -> (Vec<Value>, Value, String) {
    let file = dir.join(format!("{name}.csv"));
    std::fs::write(&file, trace).unwrap();
    let cfg = MockConfig {
        ttft_ns,
        itl_ns: 100_000,
        prefix_cache: Some((100_000, 16)),
        ..MockConfig::default()
    };
    let out = dir.join(name);
    let tokenizer = common::tokenizer("qwen3");
    let mut args = vec!["--tokenizer", common::path(&tokenizer)];
    args.extend(["--api", "openai-completions", "--server-block-size", "16"]);
    args.extend(extra);
    common::replay_against_mock(cfg, &file, &out, &args);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let table = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    (read_jsonl(&out.join("requests.jsonl")), summary, table)
}

fn ms(r: &Value, key: &str) -> f64 {
    r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {r}"))
}

/// The most sessions running at one moment, each from its first send to its last end.
fn most_active(rows: &[Value]) -> usize {
    let mut spans: HashMap<&str, (f64, f64)> = HashMap::new();
    for r in rows {
        let s = spans
            .entry(r["session_id"].as_str().unwrap())
            .or_insert((f64::MAX, 0.0));
        s.0 = s.0.min(ms(r, "sent_ms"));
        s.1 = s.1.max(ms(r, "end_ms"));
    }
    // Ends sort before starts at the same instant: a place freed then taken.
    let mut events: Vec<(f64, i32)> = spans
        .values()
        .flat_map(|&(a, b)| [(a, 1), (b, -1)])
        .collect();
    events.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn rounds_follow_answers_and_tool_waits_under_a_session_cap() {
    let dir = temp_dir("tracelab");
    let trace = csv(6, 3, |_| 20.0);
    let (rows, summary, table) = replay(&dir, "capped", &trace, &["--max-active-sessions", "2"]);
    assert_eq!(rows.len(), 18, "{table}");
    assert!(rows.iter().all(|r| r["status"] == 200), "{table}");
    let by_index: HashMap<u64, &Value> = rows
        .iter()
        .map(|r| (r["index"].as_u64().unwrap(), r))
        .collect();
    let mut drifts = Vec::new();
    for r in rows.iter().filter(|r| r["turn"].as_u64() > Some(1)) {
        let parent = by_index[&r["parent_index"].as_u64().unwrap()];
        // Released by the parent's end; due 20 ms (its tool wait) later; sent then.
        assert_eq!(ms(r, "released_ms"), ms(parent, "end_ms"), "{r}");
        let due = ms(parent, "end_ms") + 20.0;
        assert!((ms(r, "scheduled_ms") - due).abs() < 1e-3, "{r}");
        assert!(ms(r, "sent_ms") >= ms(r, "scheduled_ms"), "{r}");
        drifts.push(ms(r, "sent_ms") - due);
        // The whole context before it is carried: the server's hits are the trace's.
        assert_eq!(r["prompt_tokens"], r["input_tokens"], "{r}");
        assert_eq!(r["cached_tokens"], r["planned_cached_tokens"], "{r}");
        assert_eq!(
            r["planned_cached_tokens"].as_u64(),
            Some(r["input_tokens"].as_u64().unwrap() - 32),
            "{r}"
        );
    }
    drifts.sort_by(f64::total_cmp);
    eprintln!(
        "round send after answer + tool wait: p50 {:.3} ms, max {:.3} ms",
        drifts[drifts.len() / 2],
        drifts[drifts.len() - 1]
    );
    assert!(most_active(&rows) <= 2, "never three sessions at once");
    let s = &summary["sessions"];
    assert_eq!(
        (
            s["started"].as_u64(),
            s["finished"].as_u64(),
            s["cut"].as_u64()
        ),
        (Some(6), Some(6), Some(0)),
        "{s}"
    );
    // Six sessions due within 25 ms, two places: the later ones waited, and say so.
    let waited: Vec<&Value> = rows
        .iter()
        .filter(|r| r.get("session_wait_ms").is_some())
        .collect();
    assert!(
        !waited.is_empty() && waited.iter().all(|r| r["turn"] == 1),
        "{table}"
    );
    assert_eq!(s["sessions_waited"].as_u64(), Some(waited.len() as u64));
    assert!(
        table.contains("Waits for a session place p50 / p99 (ms):"),
        "{table}"
    );
    for round in s["rounds"].as_array().unwrap() {
        assert_eq!(round["diff_points"].as_f64(), Some(0.0), "{round}");
    }

    // The same trace without the cap runs them all at once: the check above can fail.
    let (rows, summary, _) = replay(&dir, "open", &trace, &[]);
    assert!(most_active(&rows) > 2);
    assert_eq!(summary["sessions"]["sessions_waited"], 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_duration_bound_counts_sessions_started_finished_and_cut() {
    let dir = temp_dir("tracelab-bound");
    // Even sessions wait 1 ms between rounds and finish far inside the 1 s bound; odd ones
    // wait 5 s, so their second round would leave after it.
    let trace = csv(6, 3, |s| if s % 2 == 0 { 1.0 } else { 5000.0 });
    let (rows, summary, table) = replay(&dir, "bound", &trace, &["--duration", "1"]);
    let s = &summary["sessions"];
    let (started, finished, cut) = (
        s["started"].as_u64().unwrap(),
        s["finished"].as_u64().unwrap(),
        s["cut"].as_u64().unwrap(),
    );
    assert_eq!((started, finished, cut), (6, 3, 3), "{table}");
    assert_eq!(started, finished + cut);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("Sessions started / finished / cut:")
                && l.trim_end()
                    .ends_with(" 6 / 3 / 3 (6 turns past the bound not sent)")),
        "{table}"
    );
    // The odd sessions' two later rounds each: planned, cut, and counted, so that what was
    // sent and what was cut add up to the plan.
    assert_eq!(s["turns_cut"], 6, "{s}");
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("bound/run.json")).unwrap())
            .unwrap();
    let plan = &run["schedule"];
    assert_eq!(plan["records_at_most"], true, "{plan}");
    assert_eq!(plan["turns_cut"], 6, "{plan}");
    assert_eq!(
        plan["records"].as_u64(),
        Some(rows.len() as u64 + 6),
        "{plan}"
    );
    let per_session = |name: &str| rows.iter().filter(|r| r["session_id"] == name).count();
    for i in 0..6 {
        assert_eq!(
            per_session(&format!("agent-{i}")),
            if i % 2 == 0 { 3 } else { 1 },
            "{table}"
        );
    }
    assert!(rows.iter().all(|r| ms(r, "scheduled_ms") <= 1000.0));
    assert_eq!(s["dropped"], 0, "every session got its place: {s}");
    // The steady state (first to last send) beside the whole run.
    let (steady, whole) = (&s["steady_state"], &s["whole_run"]);
    assert!(steady["to_ms"].as_f64() <= whole["to_ms"].as_f64(), "{s}");
    assert_eq!(whole["requests_ended"].as_u64(), Some(rows.len() as u64));
    // report.html's conversation section says the same.
    let html = std::fs::read_to_string(dir.join("bound/report.html")).unwrap();
    let at = html
        .find("<section id=\"conversations\">")
        .expect("a Conversations section");
    let section = &html[at..at + html[at..].find("</section>").unwrap()];
    assert!(
        section.contains("Sessions started / finished / cut</td><td class=\"text\">6 / 3 / 3"),
        "{section}"
    );
    assert!(section.contains("Prefix-cache hits per round"), "{section}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sessions still waiting for a `--max-active-sessions` place when the bound passes never
/// start: they are counted as dropped, not lost from view. One place; the first session
/// holds it past the 1 s bound (two rounds of at least 600 ms each), so the other five
/// wait until the bound, whatever the machine's speed.
#[test]
fn sessions_waiting_for_a_place_at_the_bound_are_counted_as_dropped() {
    let dir = temp_dir("tracelab-dropped");
    let trace = csv(6, 3, |_| 1.0);
    let extra = ["--duration", "1", "--max-active-sessions", "1"];
    let (rows, summary, table) = replay_at(&dir, "dropped", &trace, &extra, 600_000_000);
    let s = &summary["sessions"];
    assert_eq!(s["started"], 1, "{table}");
    assert_eq!(s["dropped"], 5, "{s}");
    assert!(
        rows.iter().all(|r| r["session_id"] == "agent-0"),
        "{rows:?}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("Sessions dropped, no place by bound:")
                && l.trim_end().ends_with(" 5")),
        "{table}"
    );
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("dropped/run.json")).unwrap())
            .unwrap();
    assert_eq!(run["schedule"]["sessions_dropped"], 5);
    // Sent and cut still add up to the plan (the dropped sessions' turns are cut).
    assert_eq!(
        run["schedule"]["records"].as_u64(),
        Some(rows.len() as u64 + run["schedule"]["turns_cut"].as_u64().unwrap())
    );
}

#[test]
fn session_options_that_cannot_hold_are_usage_errors() {
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/formats/tracelab_sample.csv"
    );
    let tokenizer = common::tokenizer("qwen3");
    let cases: [(&[&str], &str); 3] = [
        (&["--max-active-sessions", "0"], "--max-active-sessions 0"),
        (
            &["--session-mode", "timestamp", "--max-active-sessions", "2"],
            "needs --session-mode after-parent",
        ),
        (&["--block-size", "64"], "a TraceLab trace has no hash ids"),
    ];
    for (extra, expected) in cases {
        let out = common::bin()
            .args([
                "replay",
                "--mock",
                "--quiet",
                "--trace",
                sample,
                "--tokenizer",
            ])
            .arg(&tokenizer)
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert!(err.contains(expected), "{extra:?}: {err}");
    }
}

/// A session's first round has no round before it whose context it could find cached: its
/// `prefix_len` (here 40 tokens) plans no hit, so the first round's planned share is not the
/// 0 % it observes against a plan it cannot meet.
#[test]
fn a_first_round_plans_no_hit() {
    let dir = temp_dir("tracelab-round0");
    let mut trace = String::from(
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n",
    );
    for s in 0..3 {
        trace.push_str(&format!("agent-{s},{},0,40,64,{OUTPUT},5\n", s * 5));
        trace.push_str(&format!("agent-{s},{},1,120,32,{OUTPUT},0\n", s * 5));
    }
    let (rows, summary, table) = replay(&dir, "round0", &trace, &[]);
    assert_eq!(rows.len(), 6, "{table}");
    for r in &rows {
        match r["turn"].as_u64() {
            Some(1) => assert!(r["planned_cached_tokens"].is_null(), "{r}"),
            _ => assert!(r["planned_cached_tokens"].is_u64(), "{r}"),
        }
    }
    let rounds = summary["sessions"]["rounds"].as_array().unwrap();
    assert!(
        rounds
            .iter()
            .all(|r| r["turn"] != 1 || r["planned_hit_share"].is_null()),
        "{rounds:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
