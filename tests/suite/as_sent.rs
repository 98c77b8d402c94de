//! What is written is what was sent: each format's default follows its origin (AIPerf's
//! recorded `messages` go verbatim at their own times, its `message_mode: delta` and the
//! agentic formats are threaded with the live answers), `--carry-forward off` sends a delta
//! turn with its recorded history, prompts.jsonl holds the body a rebuilt turn was sent
//! with, a task graph's plan line says tasks and turns (no rate), and a turn's carry is
//! counted once.

use std::path::Path;

use serde_json::{json, Value};

use crate::common;
use common::{path, read_json, read_jsonl, temp_dir};
use llmreplay::mock::MockConfig;

fn lines(dir: &Path, name: &str, records: &[Value]) -> std::path::PathBuf {
    let file = dir.join(name);
    let text: Vec<String> = records.iter().map(Value::to_string).collect();
    std::fs::write(&file, text.join("\n")).unwrap();
    file
}

/// A mock that keeps the bodies it receives and answers after `ttft_ms`.
fn mock(ttft_ms: f64) -> MockConfig {
    MockConfig {
        keep_bodies: 20,
        ttft_ns: (ttft_ms * 1e6) as u64,
        ..MockConfig::default()
    }
}

/// AIPerf's pre-formatted `messages` session, whole history in every record: by default each
/// record is sent as recorded (its recorded answer kept) at its own time, not after the turn
/// before ends; with `message_mode: delta` the live answer is threaded in, the turn after
/// the one before.
#[test]
fn aiperf_messages_go_verbatim_at_their_times_and_delta_ones_live() {
    let dir = temp_dir("as-sent-aiperf");
    let hello = json!({"role": "user", "content": "Hello"});
    let whole = [
        json!({"session_id": "s", "messages": [hello], "output_length": 8, "timestamp": 0}),
        json!({"session_id": "s", "messages": [hello, {"role": "assistant", "content": "Hi!"},
               {"role": "user", "content": "How are you?"}], "output_length": 8, "timestamp": 50}),
    ];
    // The chat bodies the mock got (it answers after `ttft_ms`), and the run's directory.
    let replay = |name: &str, records: &[Value], ttft_ms: f64| {
        let trace = lines(&dir, &format!("{name}.jsonl"), records);
        let out = dir.join(name);
        let args = ["--api", "openai-chat", "--save-prompts"];
        let stats = common::replay_against_mock(mock(ttft_ms), &trace, &out, &args);
        (common::mock_bodies(&stats), out)
    };
    // Answers take 400 ms: a turn that waited for the one before would leave after it.
    let (sent, out) = replay("history", &whole, 400.0);
    assert_eq!(
        sent[1]["messages"], whole[1]["messages"],
        "verbatim, recorded answer kept"
    );
    let rows = read_jsonl(&out.join("requests.jsonl"));
    let turn2 = rows.iter().find(|r| r["index"] == 1).unwrap();
    let first_end = rows.iter().find(|r| r["index"] == 0).unwrap()["end_ms"]
        .as_f64()
        .unwrap();
    assert!(
        turn2["sent_ms"].as_f64().unwrap() < first_end,
        "at its own time, before the first answer ended: {turn2}"
    );
    assert_eq!(turn2["scheduled_ms"], 50.0);
    // Delta mode: the first record carries the opening, the next only what is new.
    let delta = [
        json!({"session_id": "s", "message_mode": "delta", "messages": [hello],
               "output_length": 4, "timestamp": 0}),
        json!({"session_id": "s", "message_mode": "delta",
               "messages": [{"role": "user", "content": "How are you?"}],
               "output_length": 4, "delay": 10}),
    ];
    let (sent, out) = replay("delta", &delta, 5.0);
    let m = sent[1]["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "{m:?}");
    assert_eq!((&m[0], &m[2]["content"]), (&hello, &json!("How are you?")));
    assert_eq!(m[1]["role"], "assistant");
    assert!(
        m[1]["content"].as_str().unwrap().contains("tok"),
        "the live answer"
    );
    // prompts.jsonl holds the body as sent: the threaded turn with the live answer.
    let saved = common::prompt_lines_by_index(&out.join("prompts.jsonl"));
    let line: Value = serde_json::from_str(&saved[1]).unwrap();
    assert_eq!(line["messages"], sent[1]["messages"]);
    // The plan line says which.
    let said = plan_line(&dir.join("history.jsonl"), &[]);
    assert!(said.contains("sent verbatim, at their own times"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `replay --mock --api openai-chat --dry-run` says of `trace`, with `extra`.
fn plan_line(trace: &Path, extra: &[&str]) -> String {
    let plan = common::bin()
        .args(["replay", "--mock", "--api", "openai-chat", "--dry-run"])
        .args(extra)
        .args(["--trace", path(trace)])
        .output()
        .unwrap();
    String::from_utf8_lossy(&plan.stdout).into_owned()
}

/// A DAG's delta turns: threaded live by default (the answers between them), and with
/// `--carry-forward off` sent with their recorded history (the turns before them, no
/// answers), never alone.
#[test]
fn a_delta_turn_sent_as_recorded_keeps_its_recorded_history() {
    let dir = temp_dir("as-sent-dag");
    let sys = json!({"role": "system", "content": "You are terse."});
    let u = |t: &str| json!({"role": "user", "content": t});
    let dag = json!({"session_id": "solo", "turns": [
        {"messages": [sys, u("one")], "max_tokens": 4},
        {"messages": [u("two")], "max_tokens": 4},
        {"messages": [u("three")], "max_tokens": 4}]});
    let trace = lines(&dir, "dag.jsonl", &[dag]);
    let off = common::replay_against_mock(
        mock(1.0),
        &trace,
        &dir.join("off"),
        &[
            "--api",
            "openai-chat",
            "--carry-forward",
            "off",
            "--save-prompts",
        ],
    );
    let sent = common::mock_bodies(&off);
    assert_eq!(
        sent[2]["messages"],
        json!([sys, u("one"), u("two"), u("three")])
    );
    let rows = read_jsonl(&dir.join("off").join("requests.jsonl"));
    assert!(rows.iter().all(|r| r["carried_tokens"].is_null()));
    let live = common::replay_against_mock(
        mock(1.0),
        &trace,
        &dir.join("live"),
        &["--api", "openai-chat", "--save-prompts"],
    );
    let sent = common::mock_bodies(&live);
    let m = sent[2]["messages"].as_array().unwrap();
    let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    let saved = common::prompt_lines_by_index(&dir.join("live").join("prompts.jsonl"));
    assert_eq!(saved.len(), 3);
    let line: Value = serde_json::from_str(&saved[2]).unwrap();
    assert_eq!(
        line["messages"], sent[2]["messages"],
        "prompts.jsonl is what was sent"
    );
    let summary = read_json(&dir.join("live").join("summary.json"));
    assert_eq!(summary["sessions"]["carried_forward"], 2);
    // The plan line of a task graph: tasks and turns over every pass, no rate.
    let said = plan_line(&trace, &["--loop", "3"]);
    assert!(
        said.contains("plan: 3 tasks of 9 turns, closed loop"),
        "{said}"
    );
    assert!(said.contains("6 turns wait for their parent"), "{said}");
    assert!(
        !said.contains("req/s") && !said.contains("busiest"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A carried chat turn's prompts.jsonl line is its conversation as sent: the parent's
/// messages, its answer, the turn's own tokens; and the count of carried turns is one per
/// turn.
#[test]
fn a_carried_turns_saved_prompt_is_its_conversation_as_sent() {
    let dir = temp_dir("as-sent-carried");
    let chains = common::by_timestamp(common::bailian_chains(2, 0.2, 0.05, 8));
    let trace = lines(&dir, "chains.jsonl", &chains);
    let qwen3 = common::tokenizer("qwen3");
    let out = dir.join("run");
    let stats = common::replay_against_mock(
        MockConfig {
            keep_bodies: 10,
            ..MockConfig::default()
        },
        &trace,
        &out,
        &[
            "--tokenizer",
            path(&qwen3),
            "--api",
            "openai-chat",
            "--save-prompts",
        ],
    );
    let sent = common::mock_bodies(&stats);
    let saved = common::prompt_lines_by_index(&out.join("prompts.jsonl"));
    assert_eq!(saved.len(), 6);
    let rows = read_jsonl(&out.join("requests.jsonl"));
    for r in rows.iter().filter(|r| !r["carried_tokens"].is_null()) {
        let i = r["index"].as_u64().unwrap() as usize;
        let line: Value = serde_json::from_str(&saved[i]).unwrap();
        let m = line["messages"]
            .as_array()
            .expect("a carried chat turn: its messages");
        assert!(m.len() >= 3, "{line}");
        assert!(
            sent.iter().any(|b| b["messages"] == line["messages"]),
            "the mock got exactly this conversation: {line}"
        );
    }
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["sessions"]["carried_forward"], 4);
    assert!(summary["sessions"]["not_carried_forward"]
        .as_object()
        .is_none_or(|m| m.is_empty()));
    let _ = std::fs::remove_dir_all(&dir);
}
