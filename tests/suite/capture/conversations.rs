//! `llmreplay capture`'s conversations: a turn comes back as the child of the request it
//! continues (a Bailian-style trace, an agent's DAG), the capture replays them turn after turn
//! and is compared with its replay; `--sample` keeps conversations whole; `--rotate-records`
//! writes parts that join into the capture.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{lengths, ran, replay_through, CaptureProcess};
use crate::common::*;

/// Each captured line's source record, found by its lengths (the server's prompt count and
/// the tokens it generated, distinct in the source), and its `chat_id` → that record.
fn by_lengths<'a>(
    lines: &[Value],
    source: &'a [Value],
    key: impl Fn(&Value) -> (u64, u64),
) -> HashMap<i64, &'a Value> {
    let index: HashMap<(u64, u64), &Value> = source.iter().map(|r| (key(r), r)).collect();
    assert_eq!(
        index.len(),
        source.len(),
        "the source's lengths name its records"
    );
    lines
        .iter()
        .map(|l| {
            let r = index
                .get(&lengths(l))
                .unwrap_or_else(|| panic!("no source record of the lengths of {l}"));
            (l["chat_id"].as_i64().unwrap(), *r)
        })
        .collect()
}

/// A Qwen-Bailian-style trace of `conversations` conversations of `turns` turns, each turn's
/// ids extending its parent's, every output length distinct.
fn bailian_conversations(dir: &Path, conversations: i64, turns: i64) -> (PathBuf, Vec<Value>) {
    let mut records = Vec::new();
    for turn in 0..turns {
        for conv in 0..conversations {
            let chat_id = 100 * conv + turn;
            let input = 40 + 100 * turn + conv;
            records.push(serde_json::json!({
                "chat_id": chat_id,
                "parent_chat_id": if turn == 0 { -1 } else { chat_id - 1 },
                "timestamp": 0.01 * conv as f64 + 0.2 * turn as f64,
                "input_length": input,
                "output_length": 5 + records.len(),
                "type": "text",
                "turn": turn + 1,
                "hash_ids": (0..(input + 15) / 16).map(|k| 1000 * conv + k).collect::<Vec<_>>(),
            }));
        }
    }
    let path = dir.join("bailian.jsonl");
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (path, records)
}

/// A Qwen3 mock, a capture before it with `args`, and `trace` replayed through the capture in
/// chat (its turns carried) at --time-scale 10 into `dir/run`; what the capture said as it
/// ended by itself.
fn capture_chat_replay(dir: &Path, trace: &Path, captured: &Path, args: &[&str]) -> String {
    let mock = MockProcess::start(&["--tokenizer", path(&tokenizer("qwen3")), "--itl-ms", "0"]);
    let capture = CaptureProcess::start(&mock.url(), captured, args);
    ran(replay_through(&capture, "openai-chat")
        .args(["--tokenizer", path(&tokenizer("qwen3"))])
        .args(["--time-scale", "10", "--trace"])
        .arg(trace)
        .arg("--output")
        .arg(dir.join("run")));
    let (status, said) = capture.finish();
    assert!(status.success(), "{said}");
    said
}

#[test]
fn conversations_come_back_with_the_parents_of_their_source() {
    let dir = temp_dir("capture-conversations");
    let (source, records) = bailian_conversations(&dir, 6, 3);
    let captured = dir.join("captured.jsonl");
    // Chat turns carry their parent's messages and answer (--carry-forward auto).
    capture_chat_replay(&dir, &source, &captured, &["--max-requests", "18"]);
    let lines = read_jsonl(&captured);
    assert_eq!(lines.len(), 18);
    let source_of = by_lengths(&lines, &records, lengths);
    for l in &lines {
        let parent = l["parent_chat_id"].as_i64().unwrap();
        let source = source_of[&l["chat_id"].as_i64().unwrap()];
        let source_parent = match parent {
            -1 => Value::from(-1),
            p => source_of[&p]["chat_id"].clone(),
        };
        assert_eq!(source_parent, source["parent_chat_id"], "{l}");
        assert_eq!(l["turn"], source["turn"], "{l}");
        // A turn's think time is what the proxy saw between its parent's end and itself.
        assert_eq!(l.get("delay").is_some(), parent >= 0, "{l}");
    }
    // Replayed, the capture's turns wait for their parents as the source's did.
    ran(replay_mock(&captured, &dir.join("again")).args([
        "--time-scale",
        "10",
        "--tokenizer",
        path(&tokenizer("qwen3")),
    ]));
    let replayed = read_jsonl(&dir.join("again/requests.jsonl"));
    let children = replayed
        .iter()
        .filter(|r| r["parent_index"].is_u64())
        .count();
    assert_eq!(children, 12, "{replayed:?}");
    // Side by side: what the proxy saw (A) and the replay of it (B), metric by metric.
    let report = bin()
        .arg("report")
        .arg(&captured)
        .arg(dir.join("again"))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&report.stdout);
    assert_eq!(
        report.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let row = |metric: &str| -> Vec<String> {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(metric))
            .unwrap_or_else(|| panic!("no {metric} row in\n{table}"));
        line.split_whitespace().skip(1).map(String::from).collect()
    };
    assert_eq!(row("requests_ok")[..2], ["18", "18"], "{table}");
    assert_eq!(row("input_tokens")[0], row("input_tokens")[1], "{table}");
    for metric in ["ttft_ms.median", "tpot_ms.median", "e2el_ms.max"] {
        let cells = row(metric);
        assert!(
            cells[..2].iter().all(|c| c.parse::<f64>().is_ok()),
            "{metric}: {table}"
        );
    }
    assert!(dir.join("again/compare.html").is_file());
}

#[test]
fn an_agents_turns_come_back_with_the_parents_they_continue() {
    let dir = temp_dir("capture-agentic");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic/dag_sample.jsonl");
    // Sub-agents the sample spawns start fresh (no history): their first turns start
    // conversations of their own; forks and later turns continue one.
    let spawned: Vec<String> = std::fs::read_to_string(&sample)
        .unwrap()
        .lines()
        .flat_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let turns = v["turns"].as_array().unwrap().clone();
            turns.into_iter().flat_map(|t| {
                let spawns = t["spawns"].as_array().cloned().unwrap_or_default();
                spawns.into_iter().flat_map(|s| {
                    let children = s["children"].as_array().cloned().unwrap_or_default();
                    children
                        .into_iter()
                        .map(|c| c.as_str().unwrap().to_string())
                })
            })
        })
        .collect();
    assert_eq!(spawned.len(), 2, "the sample spawns two explorers");
    let captured = dir.join("captured.jsonl");
    capture_chat_replay(&dir, &sample, &captured, &["--max-requests", "10"]);
    let lines = read_jsonl(&captured);
    let sent = read_jsonl(&dir.join("run/requests.jsonl"));
    assert_eq!(lines.len(), sent.len());
    let server_lengths = |r: &Value| {
        (
            r["prompt_tokens"].as_u64().unwrap(),
            r["output_tokens"].as_u64().unwrap(),
        )
    };
    let record_of = by_lengths(&lines, &sent, server_lengths);
    let by_index: HashMap<u64, &Value> = sent
        .iter()
        .map(|r| (r["index"].as_u64().unwrap(), r))
        .collect();
    let mut continued = 0;
    for l in &lines {
        let record = record_of[&l["chat_id"].as_i64().unwrap()];
        let replay_parent = record["parent_index"].as_u64();
        let fresh = replay_parent.is_some_and(|p| {
            let branch = record["branch"].as_str().unwrap();
            by_index[&p]["branch"] != branch && spawned.iter().any(|s| s == branch)
        });
        let expected = replay_parent.filter(|_| !fresh);
        let captured_parent = match l["parent_chat_id"].as_i64().unwrap() {
            -1 => None,
            p => record_of[&p]["index"].as_u64(),
        };
        assert_eq!(captured_parent, expected, "{l}\n{record}");
        continued += usize::from(expected.is_some());
    }
    assert!(continued >= 6, "{continued} turns continue a conversation");
}

#[test]
fn a_sample_keeps_whole_conversations() {
    let dir = temp_dir("capture-sample");
    let (source, _) = bailian_conversations(&dir, 40, 2);
    let captured = dir.join("captured.jsonl");
    let said = capture_chat_replay(
        &dir,
        &source,
        &captured,
        &["--max-requests", "80", "--sample", "0.5"],
    );
    let lines = read_jsonl(&captured);
    // Every turn kept has its parent kept, and every conversation kept has both turns.
    let ids: std::collections::HashSet<i64> = lines
        .iter()
        .map(|l| l["chat_id"].as_i64().unwrap())
        .collect();
    let roots = lines.iter().filter(|l| l["parent_chat_id"] == -1).count();
    for l in &lines {
        let parent = l["parent_chat_id"].as_i64().unwrap();
        assert!(parent == -1 || ids.contains(&parent), "{l}");
    }
    assert_eq!(lines.len(), 2 * roots, "{lines:?}");
    // About half of the 40 (all or none would be a 1-in-2^39 draw).
    assert!((1..40).contains(&roots), "{roots} conversations kept");
    let left_out = 80 - lines.len();
    assert!(
        said.contains(&format!("{left_out} left out by --sample")),
        "{said}"
    );
}

#[test]
fn a_rotating_capture_writes_whole_parts_that_join_into_the_capture() {
    let dir = temp_dir("capture-rotate");
    let (source, _) = bailian_conversations(&dir, 6, 3);
    let captured = dir.join("monday.jsonl");
    let said = capture_chat_replay(
        &dir,
        &source,
        &captured,
        &["--max-requests", "18", "--rotate-records", "7"],
    );
    assert!(said.contains("18 requests in 3 parts"), "{said}");
    assert!(!captured.exists(), "the parts are numbered");
    let parts: Vec<Vec<Value>> = (0..3)
        .map(|n| read_jsonl(&dir.join(format!("monday.{n}.jsonl"))))
        .collect();
    assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), [7, 7, 4]);
    // Joined, they run on: ids and times in order, every parent earlier.
    let joined: Vec<&Value> = parts.iter().flatten().collect();
    let ids: Vec<i64> = joined
        .iter()
        .map(|l| l["chat_id"].as_i64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let times: Vec<f64> = joined
        .iter()
        .map(|l| l["timestamp"].as_f64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // A part replays alone: turns whose parents are in an earlier part start conversations.
    ran(
        replay_mock(dir.join("monday.1.jsonl"), &dir.join("alone")).args([
            "--time-scale",
            "10",
            "--tokenizer",
            path(&tokenizer("qwen3")),
        ]),
    );
    assert_eq!(read_jsonl(&dir.join("alone/requests.jsonl")).len(), 7);
}
