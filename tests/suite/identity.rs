//! Every request names itself on the wire (`X-Request-Id`, `traceparent`, `--session-header`):
//! the same names from every shard of a run as from one process, through carry-forward's
//! rebuilt turns, and in each record (`trace_id`).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{path, read_jsonl, replay_against, temp_dir, tokenizer, MockProcess};
use serde_json::{json, Value};

/// 60 Mooncake records, 5 ms apart: conversations of 3 turns (`session_id`, each turn's hash
/// ids its history plus a block, so carry-forward rebuilds turns 2 and 3) and every fourth a
/// lone record.
fn trace(dir: &Path) -> PathBuf {
    let lines: Vec<String> = (0..60u64)
        .map(|i| {
            let mut r = json!({"timestamp": i * 5, "output_length": 3});
            if i % 4 == 3 {
                r["input_length"] = json!(20);
                r["hash_ids"] = json!([9000 + i]);
            } else {
                let (session, turn) = (i / 12 * 3 + i % 4, i % 12 / 4);
                let history: Vec<u64> = (0..turn + 2).map(|b| session * 10 + b).collect();
                r["input_length"] = json!(history.len() as u64 * 16 - 3);
                r["hash_ids"] = json!(history);
                r["session_id"] = json!(format!("s {session}"));
            }
            r.to_string()
        })
        .collect();
    let trace = dir.join("conversations.jsonl");
    std::fs::write(&trace, lines.join("\n")).unwrap();
    trace
}

/// The headers each record's request arrived with, by index, from a mock's arrival log.
fn arrived(log: &Path) -> BTreeMap<u64, Value> {
    read_jsonl(log)
        .into_iter()
        .filter_map(|a| Some((a["index"].as_u64()?, a["headers"].clone())))
        .collect()
}

/// Replays `trace` against a fresh mock with `args`, as each of `shards` (none: one
/// process); the headers the mock saw, and the records.
fn run(
    trace: &Path,
    dir: &Path,
    shards: &[&str],
    args: &[&str],
) -> (BTreeMap<u64, Value>, Vec<Value>) {
    let log = dir.join("arrivals.jsonl");
    let mock = MockProcess::start(&["--arrival-log", path(&log)]);
    let mut records = Vec::new();
    let runs: Vec<Option<&str>> = match shards {
        [] => vec![None],
        s => s.iter().copied().map(Some).collect(),
    };
    for (i, shard) in runs.into_iter().enumerate() {
        let out = dir.join(format!("run{i}"));
        let mut cmd = replay_against(&mock, trace, &out);
        cmd.args([
            "--tokenizer",
            path(&tokenizer("qwen3")),
            "--time-scale",
            "5",
        ])
        .args(args);
        if let Some(spec) = shard {
            cmd.args(["--shard", spec]);
        }
        let done = cmd.output().unwrap();
        assert!(
            done.status.success(),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
        records.extend(read_jsonl(&out.join("requests.jsonl")));
    }
    drop(mock);
    (arrived(&log), records)
}

#[test]
fn every_request_names_itself_alike_from_one_process_and_from_its_shards() {
    let dir = temp_dir("identity-shards");
    let trace = trace(&dir);
    let args = ["--run-id", "nightly-7", "--session-header", "affinity"];
    let one = dir.join("one");
    let sharded = dir.join("sharded");
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&sharded).unwrap();
    let (alone, records) = run(&trace, &one, &[], &args);
    let (shards, shard_records) = run(&trace, &sharded, &["0/2", "1/2"], &args);
    assert_eq!(alone.len(), 60, "every record arrived once");
    assert_eq!(alone, shards, "the shards sent what one process sent");
    assert_eq!(shard_records.len(), 60);
    let carried = records
        .iter()
        .filter(|r| r["carried_tokens"].is_number())
        .count();
    assert!(
        carried >= 20,
        "turns were rebuilt around their parents: {carried}"
    );
    for r in records.iter().chain(&shard_records) {
        let index = r["index"].as_u64().unwrap();
        let headers = &alone[&index];
        assert_eq!(headers["x-request-id"], format!("nightly-7-{index}"));
        let parent = headers["traceparent"].as_str().unwrap();
        let trace_id = r["trace_id"].as_str().unwrap();
        assert_eq!(
            parent,
            format!("00-{trace_id}-{}-01", &parent[36..52]),
            "{r}"
        );
        // The session header names the conversation (escaped), and only a conversation's.
        match r["session_id"].as_str() {
            Some(session) => {
                assert_eq!(headers["x-session-affinity"], session.replace(' ', "%20"))
            }
            None => assert!(headers.get("x-session-affinity").is_none(), "{headers}"),
        }
    }
    let ids: std::collections::BTreeSet<&str> = records
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 60, "a trace per record");
}

#[test]
fn ids_can_be_renamed_or_left_out() {
    let dir = temp_dir("identity-off");
    let trace = trace(&dir);
    let (off, records) = run(
        &trace,
        &dir,
        &[],
        &["--request-id-header", "none", "--no-traceparent"],
    );
    assert_eq!(off.len(), 60);
    assert!(off.values().all(|h| h == &json!({})), "{off:?}");
    assert!(records.iter().all(|r| r.get("trace_id").is_none()));
    // Renamed, and a shard with neither --run-id nor an agreed start names its requests
    // after the trace, as its fellows do.
    let renamed = dir.join("renamed");
    std::fs::create_dir_all(&renamed).unwrap();
    let (seen, _) = run(
        &trace,
        &renamed,
        &["1/2"],
        &["--request-id-header", "X-Correlation-Id"],
    );
    let first = seen.values().next().unwrap()["x-correlation-id"]
        .as_str()
        .unwrap();
    assert!(first.starts_with("trace-"), "{first}");
    assert!(seen.values().all(|h| h.get("x-request-id").is_none()));
}

#[test]
fn a_priming_pass_names_its_requests_apart_from_the_measured_runs() {
    let dir = temp_dir("identity-prime");
    let trace = trace(&dir);
    let (seen, records) = run(&trace, &dir, &[], &["--run-id", "r9", "--prime"]);
    assert_eq!(records.len(), 60);
    let log = read_jsonl(&dir.join("arrivals.jsonl"));
    let ids: Vec<&str> = log
        .iter()
        .filter_map(|a| a["headers"]["x-request-id"].as_str())
        .collect();
    assert_eq!(ids.len(), 120, "both passes sent every record");
    assert!(
        ids[..60].iter().all(|id| id.starts_with("r9-prime-")),
        "{ids:?}"
    );
    assert!(ids[60..]
        .iter()
        .all(|id| id.starts_with("r9-") && !id.contains("prime")));
    // The measured pass's headers are the ones by index (the later arrival of each).
    assert!(seen
        .values()
        .all(|h| !h["x-request-id"].as_str().unwrap().contains("prime")));
}
