//! The expected prefix-cache hits (each record's `expected_cached_tokens`) against a mock
//! whose cache holds the prompts' real token ids (`mock --tokenizer --cache-blocks`): the
//! chat template's head, partial blocks, whole repeats and the last token always computed,
//! for chat and completions, token by token and in 16-token blocks.

use crate::common;

use common::{path, read_jsonl, temp_dir, tokenizer, MockProcess};
use serde_json::Value;

/// 90 records 10 ms apart in 16-token blocks: every prompt opens with the same two blocks,
/// five groups share longer chains, lengths end mid-block, every 9th record repeats an
/// earlier one whole, and some are shorter than the shared opening.
fn trace(dir: &std::path::Path) -> std::path::PathBuf {
    let mut lines = Vec::new();
    let mut records: Vec<(u64, Vec<u64>)> = Vec::new();
    for i in 0..90u64 {
        let (len, ids) = if i % 9 == 8 {
            records[(i as usize * 7) % records.len()].clone()
        } else {
            let group = i % 5;
            let len = 20 + (i * 37) % 150;
            let mut ids = vec![1, 2];
            let mut k = 0;
            while (ids.len() as u64) * 16 < len {
                // The group's chain, then (for every other record) blocks of its own.
                ids.push(if i % 2 == 0 || k < 2 {
                    100 * (group + 1) + k
                } else {
                    10_000 + i * 10 + k
                });
                k += 1;
            }
            (len, ids)
        };
        lines.push(format!(
            r#"{{"timestamp": {}, "input_length": {len}, "output_length": 2, "hash_ids": {ids:?}}}"#,
            i * 10
        ));
        records.push((len, ids));
    }
    let file = dir.join("t.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    file
}

fn replay(url: &str, trace: &std::path::Path, out: &std::path::Path, extra: &[&str]) {
    let status = common::bin()
        .args(["replay", "--quiet", "--model", "m", "--endpoint", url])
        .args(["--trace", path(trace), "--output", path(out)])
        .args([
            "--tokenizer",
            path(&tokenizer("qwen3")),
            "--block-size",
            "16",
        ])
        // The mock holds a stream's usage event until its counting threads have counted the
        // prompt: on a starved machine that silence can pass the default 60 s stall timeout.
        .args(["--stall-timeout", "3600"])
        .args(extra)
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn expected_hits_equal_a_token_level_cache_for_chat_and_completions() {
    let dir = temp_dir("expected-token-cache");
    let trace = trace(&dir);
    for block in ["1", "16"] {
        let mock = MockProcess::start(&[
            "--tokenizer",
            path(&tokenizer("qwen3")),
            "--cache-blocks",
            "1000000",
            "--cache-block-size",
            block,
            "--ttft-ms",
            "1",
            "--itl-ms",
            "1",
        ]);
        for api in ["openai-chat", "openai-completions"] {
            let out = dir.join(format!("{api}-{block}"));
            replay(
                &mock.url(),
                &trace,
                &out,
                &["--api", api, "--server-block-size", block],
            );
            let rows = read_jsonl(&out.join("requests.jsonl"));
            assert_eq!(rows.len(), 90);
            let mut head_only = 0;
            for r in &rows {
                let observed = r["cached_tokens"].as_u64().expect("the mock reports hits");
                let expected = r["expected_cached_tokens"].as_u64().expect("predicted");
                assert_eq!(observed, expected, "{api}, blocks of {block}: {r}");
                head_only += u64::from(expected > 0 && expected < 16);
            }
            if api == "openai-chat" && block == "1" {
                // Records shorter than the shared opening still share the template's head.
                assert!(head_only > 0, "no record hit the head alone");
            }
            let summary: Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                    .unwrap();
            let cache = &summary["prefix_cache"];
            let (e, o) = (
                cache["expected_hit_share"].as_f64().unwrap(),
                cache["observed_hit_share"].as_f64().unwrap(),
            );
            assert!(e > 0.3, "the trace's reuse: {cache}");
            assert!((e - o).abs() <= 0.005, "{api}, blocks of {block}: {cache}");
        }
        // The completions run meets the chat run's prompts in the mock's cache, but they
        // start with the template, so no completions prompt shares a token with them.
        drop(mock);
    }
}

/// `--session-mode timestamp`: the expected hits follow the schedule, not the server's speed.
/// A turn sent while its parent is still in prefill (the mock's TTFT is 300 ms) expects the
/// parent's blocks as one sent long after it does, and the mock, which caches at arrival, has
/// them. (The model cannot know when a real server ends a prefill; so every host of a sharded
/// run can model the schedule alike.)
#[test]
fn in_timestamp_mode_the_expected_hits_follow_the_schedule() {
    let dir = temp_dir("expected-timestamp");
    let file = dir.join("t.jsonl");
    let lines = [
        r#"{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1, 2, 3, 4, 5, 6, 7]}"#,
        r#"{"timestamp": 5, "input_length": 116, "output_length": 2, "hash_ids": [1, 2, 3, 4, 5, 6, 8, 9]}"#,
        r#"{"timestamp": 900, "input_length": 116, "output_length": 2, "hash_ids": [1, 2, 3, 4, 5, 6, 10, 11]}"#,
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let mock = MockProcess::start(&[
        "--tokenizer",
        path(&tokenizer("qwen3")),
        "--cache-blocks",
        "100000",
        "--cache-block-size",
        "1",
        "--ttft-ms",
        "300",
        "--itl-ms",
        "1",
    ]);
    let out = dir.join("run");
    replay(&mock.url(), &file, &out, &["--session-mode", "timestamp"]);
    let mut rows = read_jsonl(&out.join("requests.jsonl"));
    rows.sort_by_key(|r| r["index"].as_u64().unwrap());
    let expected = |r: &Value| r["expected_cached_tokens"].as_u64().unwrap();
    let (parent, early, late) = (&rows[0], &rows[1], &rows[2]);
    assert_eq!(expected(parent), 0);
    // (Whether the early turn really left during the prefill is up to the machine's load;
    // the expectation does not depend on it, which is the point.)
    for turn in [early, late] {
        assert!(
            expected(turn) > 5 * 16,
            "most of the six shared blocks: {turn}"
        );
        assert_eq!(
            expected(turn),
            turn["cached_tokens"].as_u64().unwrap(),
            "{turn}"
        );
    }
}

/// The token cache sees prompts in arrival order though the counting threads finish out of
/// order; with no background thread at all, every count is hurried by the request it holds,
/// and the earlier arrivals are counted with it: the hits are still exact, and nothing
/// waits.
#[test]
fn the_token_cache_keeps_arrival_order_when_every_count_is_hurried() {
    let dir = temp_dir("expected-hurried");
    let trace = trace(&dir);
    let (tok, file) = llmreplay::prompt::load_tokenizer(&tokenizer("qwen3")).unwrap();
    let counter = llmreplay::prompt::PromptCounter::new(tok, &file, None).unwrap();
    let cfg = llmreplay::mock::MockConfig {
        counting: llmreplay::mock::PromptCounting::Tokenizer(std::sync::Arc::new(counter)),
        count_threads: 0,
        prefix_cache: Some((1_000_000, 1)),
        ttft_ns: 1_000_000,
        itl_ns: 1_000_000,
        ..Default::default()
    };
    let mock = llmreplay::mock::MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let out = dir.join("run");
    replay(&format!("http://{}", mock.addr()), &trace, &out, &[]);
    let rows = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(rows.len(), 90);
    for r in &rows {
        assert_eq!(r["cached_tokens"], r["expected_cached_tokens"], "{r}");
    }
    mock.stop().unwrap();
}
