//! Agentic task graphs (WEKA / AgentX sessions with sub-agents) replayed closed-loop against
//! the mock: every turn leaves after all the turns it waits for and its recorded wait,
//! sub-agents spawned together run together, a join waits for every branch, a background
//! sub-agent is waited for by nobody, carry-forward follows each branch (the server's hits
//! are the planned ones), and the summary reports each task. Judged from the records' own
//! times and the mock's cache, never from a wall-clock margin.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common;
use common::{path, read_json, read_jsonl, temp_dir};
use llmreplay::mock::{MockConfig, StreamFixture};

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic/weka_sample.json")
}

/// Replays `trace` against a mock with a 16-token prefix cache: the records and summary.
fn replay(dir: &Path, name: &str, trace: &Path, extra: &[&str]) -> (Vec<Value>, Value, String) {
    replay_with(dir, name, trace, "openai-completions", extra)
}

fn replay_with(
    dir: &Path,
    name: &str,
    trace: &Path,
    api: &str,
    extra: &[&str],
) -> (Vec<Value>, Value, String) {
    let cfg = MockConfig {
        ttft_ns: 2_000_000,
        itl_ns: 100_000,
        prefix_cache: Some((100_000, 16)),
        ..MockConfig::default()
    };
    let out = dir.join(name);
    let tokenizer = common::tokenizer("qwen3");
    let mut args = vec!["--tokenizer", path(&tokenizer), "--api", api];
    args.extend(["--server-block-size", "16", "--time-scale", "10"]);
    args.extend(extra);
    common::replay_against_mock(cfg, trace, &out, &args);
    let table = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    (
        read_jsonl(&out.join("requests.jsonl")),
        read_json(&out.join("summary.json")),
        table,
    )
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
    // A turn that reached the sender parked behind its parent (or released late by the cap)
    // was not due yet: the producers were not behind.
    let run = read_json(&dir.join("capped").join("run.json"));
    assert_eq!(run["senders"]["arrived_late"], 0, "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `messages` session (OpenAI-style, as traces record them) against a mock that answers
/// every request with the stream `fixture` (a streamed tool call) in `api`: the bodies the
/// mock received, and the records.
fn threaded_in(
    dir: &Path,
    name: &str,
    api: &str,
    fixture: &str,
    extra: &[&str],
) -> (Vec<Value>, Vec<Value>) {
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let user = json!({"role": "user", "content": "Weather in Paris?"});
    let lines = [
        // Whole form: each turn's messages hold the conversation as recorded.
        json!({"timestamp": 0, "session_id": "s", "output_length": 28, "tools": tools,
               "messages": [user]}),
        json!({"timestamp": 10, "session_id": "s", "output_length": 28, "tools": tools,
               "messages": [user,
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "rec_1",
                   "type": "function", "function": {"name": "get_weather",
                   "arguments": "{\"city\": \"Lyon\"}"}}]},
                 {"role": "tool", "tool_call_id": "rec_1", "content": "18C"},
                 {"role": "user", "content": "And tomorrow?"}]}),
        // Delta form: only what is new.
        json!({"timestamp": 20, "session_id": "s", "output_length": 28, "tools": tools,
               "messages": [{"role": "tool", "tool_call_id": "rec_2", "content": "20C"}]}),
    ];
    let trace = dir.join(format!("{name}.jsonl"));
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&trace, text.join("\n")).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(fixture);
    let cfg = MockConfig {
        replay_stream: Some(std::sync::Arc::new(
            StreamFixture::load(&fixture, 1_000_000, 100_000).unwrap(),
        )),
        keep_bodies: 10,
        ..MockConfig::default()
    };
    let out = dir.join(name);
    let mut args = vec!["--api", api, "--time-scale", "10"];
    // Recorded messages without AIPerf's message_mode are its history mode (verbatim, at
    // their own times) unless carry-forward is asked for.
    if !extra.contains(&"--carry-forward") {
        args.extend(["--carry-forward", "on"]);
    }
    args.extend(extra);
    let stats = common::replay_against_mock(cfg, &trace, &out, &args);
    (
        common::mock_bodies(&stats),
        read_jsonl(&out.join("requests.jsonl")),
    )
}

fn threaded(dir: &Path, name: &str, extra: &[&str]) -> (Vec<Value>, Vec<Value>) {
    let vllm = "tests/fixtures/streams/vllm-tool-calls.sse";
    threaded_in(dir, name, "openai-chat", vllm, extra)
}

/// The same session in Anthropic Messages: the recorded OpenAI-style calls and results go as
/// `tool_use` and `tool_result` blocks, and the streamed `tool_use` block (its input from
/// `input_json_delta` pieces) is threaded into the next turn, its result pointed at it.
#[test]
fn an_anthropic_tool_use_block_is_threaded_into_the_next_turn_and_its_result_follows_it() {
    let dir = temp_dir("threaded-anthropic");
    let stream = "tests/fixtures/anthropic/stream.sse";
    let (bodies, rows) = threaded_in(&dir, "live", "anthropic-messages", stream, &[]);
    assert_eq!(bodies.len(), 3);
    assert!(rows.iter().all(|r| r["status"] == 200), "{rows:?}");
    // The fixture's answer: thinking (not sent back), text, then a call of `lookup`.
    let live = json!({"role": "assistant", "content": [
        {"type": "text", "text": "Paris is the capital."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}}]});
    let second = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(second.len(), 4, "{second:?}");
    assert_eq!(second[0]["content"], "Weather in Paris?");
    assert_eq!(second[1], live, "the live answer, not the recorded one");
    assert_eq!(
        second[2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]})
    );
    assert_eq!(second[3]["content"], "And tomorrow?");
    assert_eq!(
        bodies[1]["tools"][0]["name"], "get_weather",
        "Anthropic's tools"
    );
    let third = bodies[2]["messages"].as_array().unwrap();
    assert_eq!(third[..4], second[..]);
    assert_eq!(third[4], live);
    assert_eq!(third[5]["content"][0]["tool_use_id"], "toolu_1");
    assert_eq!(third[5]["content"][0]["content"], "20C");
    let by_turn = |t: u64| rows.iter().find(|r| r["turn"] == t).unwrap();
    assert_eq!(by_turn(2)["carried_tokens"], 8, "{}", by_turn(2));
    assert!(by_turn(2).get("carry_note").is_none());

    // --carry-forward off: as recorded, in Anthropic's form.
    let (recorded, _) = threaded_in(
        &dir,
        "recorded",
        "anthropic-messages",
        stream,
        &["--carry-forward", "off"],
    );
    let m = &recorded[1]["messages"];
    assert_eq!(m[1]["content"][0]["id"], "rec_1");
    assert_eq!(m[2]["content"][0]["tool_use_id"], "rec_1");
    assert_eq!(recorded[2]["messages"].as_array().unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_streamed_tool_call_is_threaded_into_the_next_turn_and_its_result_follows_it() {
    let dir = temp_dir("threaded");
    let (bodies, rows) = threaded(&dir, "live", &[]);
    assert_eq!(bodies.len(), 3);
    assert!(rows.iter().all(|r| r["status"] == 200), "{rows:?}");
    // vLLM's stream called get_weather with these arguments, under this id.
    let live = json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": "chatcmpl-tool-5c1b", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]});
    let second = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(second.len(), 4, "{second:?}");
    assert_eq!(second[0]["content"], "Weather in Paris?");
    assert_eq!(second[1], live, "the live answer, not the recorded one");
    assert_eq!(
        second[2],
        json!({"role": "tool", "tool_call_id": "chatcmpl-tool-5c1b", "content": "18C"})
    );
    assert_eq!(second[3]["content"], "And tomorrow?");
    assert!(bodies[1]["tools"].is_array(), "the tools stay");
    // The delta turn: everything sent before, the live answer again, then its tool result.
    let third = bodies[2]["messages"].as_array().unwrap();
    assert_eq!(third[..4], second[..]);
    assert_eq!(third[4], live);
    assert_eq!(third[5]["tool_call_id"], "chatcmpl-tool-5c1b");
    assert_eq!(third[5]["content"], "20C");
    // The records say what was carried: the answers' tokens (vLLM's count).
    let by_turn = |t: u64| rows.iter().find(|r| r["turn"] == t).unwrap();
    assert_eq!(by_turn(2)["carried_tokens"], 28, "{}", by_turn(2));
    assert_eq!(by_turn(3)["carried_tokens"], 28);
    assert!(by_turn(2).get("carry_note").is_none());

    // --carry-forward off: every turn is sent as recorded.
    let (recorded, _) = threaded(&dir, "recorded", &["--carry-forward", "off"]);
    assert_eq!(recorded[1]["messages"][1]["tool_calls"][0]["id"], "rec_1");
    assert_eq!(recorded[2]["messages"].as_array().unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dag_conversations_fork_with_their_history_spawn_fresh_and_join() {
    let dir = temp_dir("dag");
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic/dag_sample.jsonl");
    let cfg = MockConfig {
        ttft_ns: 1_000_000,
        itl_ns: 100_000,
        keep_bodies: 20,
        ..MockConfig::default()
    };
    let out = dir.join("dag");
    let stats = common::replay_against_mock(cfg, &trace, &out, &["--api", "openai-chat"]);
    let bodies = common::mock_bodies(&stats);
    let rows = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!((rows.len(), bodies.len()), (10, 10));
    assert!(rows.iter().all(|r| r["status"] == 200), "{rows:?}");
    check_order(&rows);
    // Each body by the text of its last message (all differ in the sample).
    let sent = |last: &str| -> Vec<Value> {
        let b = bodies
            .iter()
            .find(|b| b["messages"].as_array().unwrap().last().unwrap()["content"] == last)
            .unwrap_or_else(|| panic!("no body ends with {last:?}"));
        b["messages"].as_array().unwrap().clone()
    };
    let first = sent("Fix the failing test in parser.rs and explain the cause.");
    assert_eq!(first.len(), 2);
    // A turn continues its conversation: what it sent, the live answer, then its own.
    let second = sent("While the explorers run, list what you already know.");
    assert_eq!(second[..2], first[..]);
    assert_eq!(second[2]["role"], "assistant");
    assert_eq!(second.len(), 4);
    let fix = sent("The explorers are back: write the fix.");
    assert_eq!(fix[..4], second[..]);
    // The fork carries the planner's whole history and its answer to the fix.
    let review = sent("Review the fix above for regressions.");
    assert_eq!(review[..fix.len()], fix[..]);
    assert_eq!(review[fix.len()]["role"], "assistant");
    assert_eq!(review.len(), fix.len() + 2);
    // A spawned explorer starts from its own messages only, and threads its own turns.
    assert_eq!(sent("Which test fails, and on what input?").len(), 2);
    let src = sent("Read that function and report its edge cases.");
    assert_eq!(
        (src.len(), src[0]["content"].as_str()),
        (4, Some("You explore source files."))
    );
    // The fix waited for both explorers: its record names their last turns.
    let by_branch = |b: &str| -> Vec<&Value> { rows.iter().filter(|r| r["branch"] == b).collect() };
    let fix_row = by_branch("plan")
        .into_iter()
        .find(|r| r["wait_for"].as_array().is_some_and(|w| w.len() == 2))
        .expect("a join");
    let last = |b: &str| by_branch(b).iter().map(|r| index(r)).max().unwrap();
    let mut joined: Vec<u64> = waited_for(fix_row)[1..].to_vec();
    joined.sort();
    let mut expected = vec![last("explore-src"), last("explore-tests")];
    expected.sort();
    assert_eq!(joined, expected);
    let t = &read_json(&out.join("summary.json"))["sessions"]["tasks"];
    assert_eq!(
        (t["tasks"].as_u64(), t["agents_per_task"]["max"].as_f64()),
        (Some(2), Some(4.0)),
        "{t}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A turn released with no wait goes out right after its parent's answer, on the same
/// keep-alive connection: llama-server closes some of those unread. With the mock doing so to
/// every reused connection (`drop-reused`), each dropped turn is resent on a fresh
/// connection: the DAG runs as without the fault, in the same order, with the same messages.
#[test]
fn task_graph_turns_a_reused_connection_drops_are_resent_and_keep_their_history() {
    let dir = temp_dir("dag-resent");
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic/dag_sample.jsonl");
    let run = |name: &str, faults: &[String]| {
        let log = dir.join(format!("{name}.faults"));
        let cfg = MockConfig {
            ttft_ns: 1_000_000,
            itl_ns: 100_000,
            keep_bodies: 20,
            faults: llmreplay::mock::FaultPlan::parse(faults, 1).unwrap(),
            fault_log: Some(log.clone()),
            ..MockConfig::default()
        };
        let out = dir.join(name);
        let stats = common::replay_against_mock(cfg, &trace, &out, &["--api", "openai-chat"]);
        let rows = read_jsonl(&out.join("requests.jsonl"));
        assert!(rows.iter().all(|r| r["status"] == 200), "{name}: {rows:?}");
        check_order(&rows);
        // Each body's shape: its messages' roles, and its own last message.
        let mut shapes: Vec<String> = common::mock_bodies(&stats)
            .iter()
            .map(|b| {
                let m = b["messages"].as_array().unwrap();
                let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
                format!("{roles:?} {}", m.last().unwrap()["content"])
            })
            .collect();
        shapes.sort();
        let dropped: Vec<u64> = match log.exists() {
            true => read_jsonl(&log)
                .iter()
                .map(|f| f["index"].as_u64().unwrap())
                .collect(),
            false => Vec::new(),
        };
        (rows, shapes, dropped)
    };
    let (_, clean, none) = run("clean", &[]);
    assert!(none.is_empty());
    let (rows, shapes, mut dropped) = run("dropped", &["drop-reused:1".to_string()]);
    assert_eq!(shapes, clean, "the same messages, history and all");
    let mut resent: Vec<u64> = rows
        .iter()
        .filter(|r| r.get("resent_ms").is_some())
        .map(index)
        .collect();
    resent.sort();
    dropped.sort();
    assert!(!dropped.is_empty(), "turns went on reused connections");
    assert_eq!(resent, dropped);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_agentic_format_sample_runs_as_its_graph_says() {
    let dir = temp_dir("agentic-formats");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic");
    // (sample, API, turns, tasks, joins)
    let samples = [
        ("weka_sample.json", "openai-completions", 12, 2, 1),
        ("otel_sample.json", "openai-completions", 4, 1, 1),
        ("dag_sample.jsonl", "openai-chat", 10, 2, 1),
        ("atif_sample.json", "openai-chat", 4, 1, 1),
    ];
    for (file, api, turns, tasks, joins) in samples {
        let (rows, summary, table) = replay_with(&dir, file, &data.join(file), api, &[]);
        assert_eq!(rows.len(), turns, "{file}: {table}");
        assert!(rows.iter().all(|r| r["status"] == 200), "{file}: {table}");
        // Every turn after all it waits for, and its recorded wait after the last of them.
        check_order(&rows);
        let joined = rows.iter().filter(|r| r.get("wait_for").is_some()).count();
        assert_eq!(joined, joins, "{file}");
        // Where the prompt is built from hash ids, each branch hits what it planned.
        for r in &rows {
            if let (Some(planned), "openai-completions") =
                (r["planned_cached_tokens"].as_u64(), api)
            {
                assert_eq!(r["cached_tokens"].as_u64(), Some(planned), "{file}: {r}");
            }
        }
        assert_eq!(summary["sessions"]["tasks"]["tasks"], tasks, "{file}");
        // A sub-agent: a turn whose parent is another agent's.
        let by: HashMap<u64, &Value> = rows.iter().map(|r| (index(r), r)).collect();
        let spawned = rows.iter().filter(|r| {
            r["parent_index"]
                .as_u64()
                .is_some_and(|p| by[&p]["branch"] != r["branch"])
        });
        assert!(spawned.count() >= 1, "{file}: no sub-agent");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_task_graph_in_timestamp_mode_is_refused_not_sent_all_at_once() {
    let dir = temp_dir("graph-timestamp");
    let out = common::bin()
        .args(["replay", "--mock", "--trace", path(&sample())])
        .args(["--tokenizer", path(&common::tokenizer("qwen3"))])
        .args([
            "--session-mode",
            "timestamp",
            "--output",
            path(&dir.join("r")),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--session-mode timestamp: a weka trace's turns have no arrival times"),
        "{err}"
    );
    assert!(!dir.join("r").join("requests.jsonl").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sent as chat, every prompt opens with the template's head, which a spawned sub-agent's
/// first call shares with its task as it shares its system prompt: its plan counts both, and
/// a server counting real tokens (the tokenizer mock) hits exactly that.
#[test]
fn a_sub_agents_plan_counts_the_template_head_it_shares() {
    let dir = temp_dir("task-graphs-head");
    // SmolLM2's template opens every prompt with a default system prompt (about 20 tokens).
    let smol = common::tokenizer("smollm2");
    let mock = common::MockProcess::start(&[
        "--tokenizer",
        path(&smol),
        "--cache-blocks",
        "100000",
        "--cache-block-size",
        "1",
    ]);
    let out = dir.join("chat");
    let o = common::replay_against(&mock, &sample(), &out)
        .args(["--tokenizer", path(&smol), "--api", "openai-chat"])
        .args(["--server-block-size", "1", "--time-scale", "10"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = read_jsonl(&out.join("requests.jsonl"));
    let first_of = |name: &str| {
        rows.iter()
            .filter(|r| r["branch"] == name)
            .min_by_key(|r| index(r))
            .unwrap()
    };
    let sub = first_of("demo-1::sa:agent_001");
    let planned = sub["planned_cached_tokens"].as_u64().unwrap();
    assert!(planned > 80, "64 shared tokens and the head: {sub}");
    assert_eq!(sub["cached_tokens"].as_u64(), Some(planned), "{sub}");
    let _ = std::fs::remove_dir_all(&dir);
}
