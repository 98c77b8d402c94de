//! Agentic task graphs (WEKA / AgentX sessions with sub-agents) replayed closed-loop against
//! the mock: every turn leaves after all the turns it waits for and its recorded wait,
//! sub-agents spawned together run together, a join waits for every branch, a background
//! sub-agent is waited for by nobody, carry-forward follows each branch (the server's hits
//! are the planned ones), and the summary reports each task. Judged from the records' own
//! times and the mock's cache, never from a wall-clock margin.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common;
use common::{read_jsonl, temp_dir};
use llmreplay::mock::{MockConfig, MockServer};

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic/weka_sample.json")
}

/// Replays `trace` against a mock with a 16-token prefix cache: the records and summary.
fn replay(dir: &Path, name: &str, trace: &Path, extra: &[&str]) -> (Vec<Value>, Value, String) {
    let cfg = MockConfig {
        ttft_ns: 2_000_000,
        itl_ns: 100_000,
        prefix_cache: Some((100_000, 16)),
        ..MockConfig::default()
    };
    let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let out = dir.join(name);
    let tokenizer = common::tokenizer("qwen3");
    let endpoint = format!("http://{}", mock.addr());
    let args: Vec<String> = [
        "--trace",
        trace.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--api",
        "openai-completions",
        "--model",
        "m",
        "--endpoint",
        &endpoint,
        "--server-block-size",
        "16",
        "--time-scale",
        "10",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    common::replay_in_process(&args);
    mock.stop().unwrap();
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

fn index(r: &Value) -> u64 {
    r["index"].as_u64().unwrap()
}

/// The turns a record waited for: its parent and its joins.
fn waited_for(r: &Value) -> Vec<u64> {
    let joins = r["wait_for"].as_array().cloned().unwrap_or_default();
    r["parent_index"]
        .as_u64()
        .into_iter()
        .chain(joins.iter().map(|j| j.as_u64().unwrap()))
        .collect()
}

/// Every turn left after the last end of all it waited for, released by exactly that end.
fn check_order(rows: &[Value]) {
    let by: HashMap<u64, &Value> = rows.iter().map(|r| (index(r), r)).collect();
    for r in rows {
        let parents = waited_for(r);
        if parents.is_empty() {
            continue;
        }
        let last_end = parents
            .iter()
            .map(|p| ms(by[p], "end_ms"))
            .fold(f64::MIN, f64::max);
        assert_eq!(ms(r, "released_ms"), last_end, "{r}");
        assert!(ms(r, "scheduled_ms") >= last_end, "{r}");
        assert!(ms(r, "sent_ms") >= ms(r, "scheduled_ms"), "{r}");
        for p in &parents {
            assert_eq!(by[p]["session_id"], r["session_id"], "one task: {r}");
        }
    }
}

#[test]
fn sub_agents_fork_and_join_and_each_branch_hits_as_planned() {
    let dir = temp_dir("task-graphs");
    let (rows, summary, table) = replay(&dir, "weka", &sample(), &[]);
    assert_eq!(rows.len(), 12, "{table}");
    assert!(rows.iter().all(|r| r["status"] == 200), "{table}");
    check_order(&rows);
    let branch = |name: &str| -> Vec<&Value> {
        let mut b: Vec<&Value> = rows.iter().filter(|r| r["branch"] == name).collect();
        b.sort_by_key(|r| index(r));
        b
    };
    let (main, a, b) = (
        branch("demo-1"),
        branch("demo-1::sa:agent_001"),
        branch("demo-1::sa:agent_002"),
    );
    assert_eq!((main.len(), a.len(), b.len()), (4, 2, 2), "{table}");
    // Both sub-agents were spawned by the main agent's second call, and ran together.
    assert_eq!(waited_for(a[0]), [index(main[1])]);
    assert_eq!(waited_for(b[0]), [index(main[1])]);
    assert!(ms(b[0], "sent_ms") < ms(a[1], "end_ms") && ms(a[0], "sent_ms") < ms(b[1], "end_ms"));
    // The main agent's third call joins both branches.
    assert_eq!(
        waited_for(main[2]),
        [index(main[1]), index(a[1]), index(b[1])]
    );
    // The background sub-agent is spawned by that call and waited for by nobody.
    let bg = branch("demo-1::sa:agent_003");
    assert_eq!(waited_for(bg[0]), [index(main[2])]);
    assert_eq!(waited_for(main[3]), [index(main[2])]);
    // Recorded waits, scaled by 10: the join leaves 50 ms after the last end of what it
    // waits for (recorded: 3.8 s less agent_001's end, 3.0 + 0.3).
    let wait = ms(main[2], "scheduled_ms") - ms(main[2], "released_ms");
    assert!((wait - 50.0).abs() < 1e-3, "{wait}");
    // Carry-forward follows each branch: where a turn continues its agent's context the
    // server hits exactly what was planned, and a sub-agent's first call hits the blocks it
    // shares with its task (the system prompt, block 1).
    for r in &rows {
        if let Some(planned) = r["planned_cached_tokens"].as_u64() {
            assert_eq!(r["cached_tokens"].as_u64(), Some(planned), "{r}");
        }
    }
    assert_eq!(a[0]["planned_cached_tokens"].as_u64(), Some(64));
    assert_eq!(main[2]["carried_tokens"].as_u64(), Some(336), "{}", main[2]);
    // The task summary: two tasks, the first of three agents beside its own.
    let t = &summary["sessions"]["tasks"];
    assert_eq!(t["tasks"], 2, "{t}");
    assert_eq!(t["good_tasks"], 2, "{t}");
    assert_eq!(t["agents_per_task"]["max"], 4.0, "{t}");
    assert_eq!(t["turns_per_task"]["max"], 9.0, "{t}");
    // demo-1's critical path: its 4 main calls and the 2 of whichever sub-agent ended last.
    assert_eq!(t["critical_path_turns"]["max"], 6.0, "{t}");
    let share = t["tool_wait_share"]["max"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{t}");
    assert!(
        table.contains("Tasks (good: all turns ok, within SLO):"),
        "{table}"
    );
    assert!(table.contains("Critical path turns p50 / p99:"), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tasks_under_a_cap_and_in_loops_keep_their_graphs() {
    let dir = temp_dir("task-graphs-cap");
    let (rows, summary, table) = replay(
        &dir,
        "capped",
        &sample(),
        &["--max-active-sessions", "1", "--loop", "2"],
    );
    assert_eq!(rows.len(), 24, "{table}");
    assert!(rows.iter().all(|r| r["status"] == 200), "{table}");
    check_order(&rows);
    // One task at a time: each task's turns all end before the next task's first send.
    let mut spans: HashMap<&str, (f64, f64)> = HashMap::new();
    for r in &rows {
        let s = spans
            .entry(r["session_id"].as_str().unwrap())
            .or_insert((f64::MAX, 0.0));
        s.0 = s.0.min(ms(r, "sent_ms"));
        s.1 = s.1.max(ms(r, "end_ms"));
    }
    let mut spans: Vec<(f64, f64)> = spans.into_values().collect();
    spans.sort_by(|x, y| x.0.total_cmp(&y.0));
    assert_eq!(spans.len(), 4, "two tasks a pass: {table}");
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "{spans:?}");
    }
    assert_eq!(summary["sessions"]["tasks"]["tasks"], 4);
    let _ = std::fs::remove_dir_all(&dir);
}
