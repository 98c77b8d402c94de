//! A capture keeps which prompts share which blocks: a chat prompt's blocks are counted from
//! past its template's opening (a default system prompt), which a replay puts back in front
//! of the blocks it builds, so a capture's replay shares what the captured run shared, on
//! every tokenizer family we bundle.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::{lengths, ran, replay_through, CaptureProcess};
use crate::common::*;

/// The hash ids of a trace line.
fn ids(r: &Value) -> Vec<u64> {
    r["hash_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// Each pair's source and captured line hold as many ids, and any two captured lines share
/// a block exactly where their sources do.
pub(super) fn share_as_their_sources(pairs: &[(&Value, &Value)]) {
    for (a_src, a_cap) in pairs {
        assert_eq!(ids(a_src).len(), ids(a_cap).len(), "{a_cap}");
        for (b_src, b_cap) in pairs {
            let (a, b, x, y) = (ids(a_src), ids(b_src), ids(a_cap), ids(b_cap));
            for k in 0..a.len().min(b.len()) {
                assert_eq!(
                    a[k] == b[k],
                    x[k] == y[k],
                    "block {k} of {a_cap} and {b_cap}"
                );
            }
        }
    }
}

/// 30 records of the bundled Mooncake sample made 32 times shorter in 16-token blocks (the
/// same blocks, so the same sharing), long enough for every chat template (100 tokens and
/// more); distinct in their lengths.
fn short_source(dir: &std::path::Path) -> (std::path::PathBuf, Vec<Value>) {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("assets/traces/mooncake_conversation_500.jsonl"),
    )
    .unwrap();
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["input_length"].as_u64().unwrap().div_ceil(32) >= 100)
        .take(30)
        .enumerate()
        .map(|(i, r)| {
            let input = r["input_length"].as_u64().unwrap().div_ceil(32);
            json!({"timestamp": i * 50, "input_length": input, "output_length": 2 + i,
                   "hash_ids": r["hash_ids"], "block_size": 16})
        })
        .collect();
    let path = dir.join("short.jsonl");
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (path, records)
}

#[test]
fn chat_prompts_come_back_sharing_what_their_sources_shared_on_every_tokenizer_family() {
    for family in ["qwen3", "smollm2", "gpt-oss", "deepseek-v3", "mistral"] {
        let dir = temp_dir(&format!("capture-chat-{family}"));
        let (source, records) = short_source(&dir);
        let mock = MockProcess::start(&["--tokenizer", path(&tokenizer(family)), "--itl-ms", "0"]);
        let captured = dir.join("captured.jsonl");
        let capture = CaptureProcess::start_for(
            family,
            &mock.url(),
            &captured,
            &["--max-requests", "30", "--block-size", "16"],
        );
        ran(replay_through(&capture, "openai-chat")
            .args(["--tokenizer", path(&tokenizer(family)), "--trace"])
            .arg(&source)
            .arg("--output")
            .arg(dir.join("run")));
        let (status, said) = capture.finish();
        assert!(status.success(), "{family}: {said}");
        let by_lengths: HashMap<(u64, u64), &Value> =
            records.iter().map(|r| (lengths(r), r)).collect();
        let lines = read_jsonl(&captured);
        assert_eq!(lines.len(), 30, "{family}");
        let pairs: Vec<(&Value, &Value)> = lines
            .iter()
            .map(|c| {
                (
                    *by_lengths
                        .get(&lengths(c))
                        .unwrap_or_else(|| panic!("{family}: {c}")),
                    c,
                )
            })
            .collect();
        share_as_their_sources(&pairs);
    }
}
