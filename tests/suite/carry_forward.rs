//! Generated tokens carried forward (`--carry-forward on`, the default): against a mock whose
//! prefix cache keeps generated tokens (as vLLM's does), each turn of a Bailian chain finds
//! its parent's prompt and answer cached, so the observed hits equal the planned ones; with
//! `--carry-forward off` they fall short by the parent's answer, and the summary says so.

use std::path::Path;

use serde_json::{json, Value};

use crate::common;
use common::{read_jsonl, temp_dir};
use llmreplay::mock::{MockConfig, MockServer};

const ANSWER: u64 = 32;

/// Chains of 3 turns as Bailian records them: a child's hash ids are its parent's, then
/// blocks for the parent's answer and for the new message (32 tokens each).
fn chains(n: i64) -> Vec<Value> {
    let mut records = Vec::new();
    let mut next = 0u64;
    for conv in 0..n {
        let mut ids: Vec<u64> = Vec::new();
        let mut parent = -1;
        for turn in 1..=3i64 {
            // The root's 64 tokens; then 2 blocks for the answer and 2 for the message.
            ids.extend(next..next + 4);
            next += 4;
            let chat = conv * 10 + turn;
            records.push(json!({
                "chat_id": chat, "parent_chat_id": parent,
                "timestamp": conv as f64 * 0.01 + turn as f64 * 0.05,
                "input_length": ids.len() * 16, "output_length": ANSWER,
                "type": "text", "turn": turn, "hash_ids": ids,
            }));
            parent = chat;
        }
    }
    common::by_timestamp(records)
}

/// The replay's arguments against one mock.
fn args(trace: &Path, out: &Path, mock: &MockServer, api: &str, extra: &[&str]) -> Vec<String> {
    let tokenizer = common::tokenizer("qwen3");
    let endpoint = format!("http://{}", mock.addr());
    let head = [
        "--trace",
        trace.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--api",
        api,
        "--model",
        "m",
        "--endpoint",
        &endpoint,
    ];
    head.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn run(dir: &Path, name: &str, carry: &str) -> (Vec<Value>, Value, String) {
    let trace = dir.join(format!("{name}.jsonl"));
    let lines: Vec<String> = chains(6).iter().map(Value::to_string).collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let cfg = MockConfig {
        ttft_ns: 5_000_000,
        itl_ns: 100_000,
        prefix_cache: Some((100_000, 16)),
        ..MockConfig::default()
    };
    let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let out = dir.join(name);
    let extra = ["--server-block-size", "16", "--carry-forward", carry];
    let args = args(&trace, &out, &mock, "openai-completions", &extra);
    let outcome = common::replay_in_process(&args);
    assert_eq!(outcome.summary.ok, 18, "every turn answered");
    mock.stop().unwrap();
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let table = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    (read_jsonl(&out.join("requests.jsonl")), summary, table)
}

fn rounds(summary: &Value) -> Vec<Value> {
    summary["sessions"]["rounds"].as_array().unwrap().clone()
}

#[test]
fn carried_answers_make_the_observed_hits_the_planned_ones() {
    let dir = temp_dir("carry-forward");
    let (rows, summary, table) = run(&dir, "on", "on");
    for r in rows.iter().filter(|r| r["turn"].as_u64() > Some(1)) {
        let input = r["input_tokens"].as_u64().unwrap();
        // The parent's prompt and its answer, then the turn's own 32 new tokens.
        assert_eq!(r["carried_tokens"].as_u64(), Some(input - 32), "{r}");
        assert_eq!(
            r["prompt_tokens"].as_u64(),
            Some(input),
            "length stays exact: {r}"
        );
        assert_eq!(r["planned_cached_tokens"].as_u64(), Some(input - 32), "{r}");
        assert_eq!(r["cached_tokens"], r["planned_cached_tokens"], "{r}");
        assert_eq!(
            r["expected_cached_tokens"], r["planned_cached_tokens"],
            "{r}"
        );
        assert_eq!(r["hit_share_diff"].as_f64(), Some(0.0), "{r}");
    }
    // Planned = expected = observed, record by record and in the summary; so the verdict
    // does not take the carried answers' hits for a warm cache.
    for r in &rows {
        assert_eq!(r["expected_cached_tokens"], r["cached_tokens"], "{r}");
    }
    let prefix = &summary["prefix_cache"];
    assert_eq!(
        prefix["expected_cached_tokens"], prefix["cached_tokens"],
        "{prefix}"
    );
    assert!(prefix["cached_tokens"].as_u64() > Some(0), "{prefix}");
    let reasons = summary["verdict"]["reasons"].as_array().unwrap();
    assert!(
        reasons.iter().all(|r| r["key"] != "warm-cache"),
        "{reasons:?}"
    );
    let on = rounds(&summary);
    assert_eq!(on.len(), 2, "{summary}");
    for round in &on {
        assert_eq!(round["requests"], 6);
        assert!(
            round["diff_points"].as_f64().unwrap().abs() <= 0.5,
            "{round}"
        );
    }
    assert_eq!(summary["sessions"]["carried_forward"], 12);
    assert_eq!(summary["sessions"]["conversations"], 6);
    assert!(
        table.contains("Round 2 prefix hits planned / observed:"),
        "{table}"
    );

    // Off: each turn misses its parent's answer (the blocks in its place are synthetic).
    let (rows, summary, table) = run(&dir, "off", "off");
    for r in rows.iter().filter(|r| r["turn"].as_u64() > Some(1)) {
        assert!(r.get("carried_tokens").is_none(), "{r}");
        let planned = r["planned_cached_tokens"].as_u64().unwrap();
        assert_eq!(r["cached_tokens"].as_u64(), Some(planned - ANSWER), "{r}");
    }
    for round in rounds(&summary) {
        let input = round["planned_cached_tokens"].as_f64().unwrap()
            / round["planned_hit_share"].as_f64().unwrap();
        let short = ANSWER as f64 * 6.0 / input * 100.0;
        assert!(
            (round["diff_points"].as_f64().unwrap() + short).abs() < 0.01,
            "{round}"
        );
    }
    assert!(
        table.contains("Round 2 prefix hits planned / observed:"),
        "{table}"
    );
}

/// `replay ARGS` in this process, its error kept.
fn replay(
    args: &[String],
) -> Result<llmreplay::commands::replay::RunOutcome, llmreplay::error::Error> {
    use clap::Parser;
    let all = ["llmreplay", "replay", "--quiet"]
        .into_iter()
        .map(String::from);
    let cli = llmreplay::cli::Cli::parse_from(all.chain(args.iter().cloned()));
    let llmreplay::cli::Command::Replay(args) = cli.command else {
        panic!("replay")
    };
    llmreplay::commands::replay::run(&llmreplay::plan::ReplayPlan::from_args(&args)?)
}

#[test]
fn require_cache_report_stops_before_the_run_when_the_server_reports_no_cached_tokens() {
    let dir = temp_dir("cache-report");
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = chains(2).iter().map(Value::to_string).collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    for (cache, api) in [
        (None, "openai-chat"),
        (Some((1000, 16)), "openai-completions"),
    ] {
        let cfg = MockConfig {
            prefix_cache: cache,
            ..MockConfig::default()
        };
        let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
        let out = dir.join(format!("run-{api}"));
        let args = args(&trace, &out, &mock, api, &["--require-cache-report"]);
        let result = replay(&args);
        let stats = mock.stop().unwrap();
        match cache {
            None => {
                let err = result
                    .err()
                    .expect("no cached tokens: the run must not start");
                let text = err.to_string();
                assert!(
                    text.contains("--require-cache-report: endpoint http://127.0.0.1:"),
                    "{text}"
                );
                assert!(text.contains("cached_tokens"), "{text}");
                assert_eq!(err.exit_code(), 2);
                assert_eq!(
                    stats.requests, 2,
                    "the probe pair, and nothing of the trace"
                );
                assert!(!out.join("requests.jsonl").exists());
            }
            Some(_) => {
                let outcome = result.expect("the cache reports: the run goes on");
                assert_eq!(outcome.summary.ok, 6);
                assert_eq!(stats.requests, 2 + 6);
            }
        }
    }
}

/// A reasoning answer's thinking is not carried (clients do not send it back), so its tokens
/// are not history either: against a server that reasons, every turn's prompt is as long as
/// against one that does not, in each chat dialect.
#[test]
fn a_reasoning_parent_carries_its_answer_and_the_turn_stays_exact() {
    let dir = temp_dir("carry-reasoning");
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = chains(3).iter().map(Value::to_string).collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    for api in ["openai-chat", "anthropic-messages"] {
        let run = |reasoning_tokens: u64| {
            let cfg = MockConfig {
                ttft_ns: 1_000_000,
                itl_ns: 100_000,
                reasoning_tokens,
                ..MockConfig::default()
            };
            let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
            let out = dir.join(format!("{api}-{reasoning_tokens}"));
            let args = args(&trace, &out, &mock, api, &["--carry-forward", "on"]);
            assert_eq!(common::replay_in_process(&args).summary.ok, 9);
            mock.stop().unwrap();
            // In index order: records are written as requests end, which a busy machine
            // may reorder between the two runs.
            let mut records = read_jsonl(&out.join("requests.jsonl"));
            records.sort_by_key(|r| r["index"].as_u64());
            records
        };
        let (plain, reasoned) = (run(0), run(10));
        for (p, r) in plain.iter().zip(&reasoned) {
            assert_eq!(p["index"], r["index"]);
            assert_eq!(r["reasoning_tokens"], 10, "{r}");
            assert_eq!(p["prompt_tokens"], r["prompt_tokens"], "{api}: {p}\n{r}");
            if r["turn"].as_u64() > Some(1) {
                // The parent's 32 output tokens held 10 of reasoning: 22 are carried.
                let carried = |x: &Value| x["carried_tokens"].as_u64().unwrap();
                assert_eq!(carried(p) - carried(r), 10, "{api}: {p}\n{r}");
            }
        }
    }
}

/// Answers as models write them, each a seam a re-tokenizer can trip on: a first word that
/// glues to the prompt's last one, punctuation and digits, newlines, a trailing space, a
/// contraction, text outside ASCII, escapes.
const HOSTILE_ANSWERS: [&str; 6] = [
    "Hello! Here are 42 things:\n\n1. first,\n2. second.",
    "okay",
    " spaced out answer with a trailing space ",
    "don't stop: it's 3.14159\t(tab) and \"quoted\"",
    "日本語のテキスト and émojis 🎉\n",
    "\n\n```rust\nfn main() {}\n```\n",
];

/// Every carried turn's prompt is exactly its `input_length` as the server counts it, over
/// three carried rounds, whatever its parent answered: the answer is counted in place with
/// the real tokenizer and template ([`llmreplay::carry::seam`]), not taken from the server's
/// `completion_tokens` (here deliberately wrong). Each bundled tokenizer family, completion
/// and chat prompts.
#[test]
fn carried_prompts_are_exactly_their_input_length_on_every_family() {
    use llmreplay::api::{Api, BodyOptions};
    use llmreplay::carry::{self, Seam};
    use llmreplay::pipeline::{BufferPool, RequestBuilder};
    use llmreplay::prompt::{prepare, LengthOf, SynthOptions, Wrapping};
    use llmreplay::trace::{Input, TraceIds, TraceRecord};
    use std::sync::Arc;
    for family in common::TOKENIZERS {
        for (api, wrapping) in [
            (Api::OpenaiCompletions, Wrapping::Completion),
            (Api::OpenaiChat, Wrapping::Chat),
        ] {
            let prepared = prepare(&SynthOptions {
                tokenizer: common::tokenizer(family),
                tokenizer_config: None,
                wrapping,
                length_of: LengthOf::Prompt,
                seed: 7,
                block_size: 16,
                thinking: None,
            })
            .unwrap();
            let counter = Arc::new(prepared.counter);
            let synth = prepared.synth;
            let overhead = match wrapping {
                Wrapping::Chat => counter.turn_overhead(synth.vocab()).unwrap(),
                _ => 0,
            };
            let seam = Seam::new(Arc::clone(&counter), wrapping, synth.vocab())
                .unwrap()
                .unwrap();
            let body = BodyOptions {
                model_json: "\"m\"".into(),
                stream: true,
                exact_output: true,
                extra_body: None,
            };
            let builder =
                RequestBuilder::uniform(api, body, Some(Arc::clone(&synth)), BufferPool::new(0));
            let mut caches = builder.new_caches();
            // The server's count of a prompt, as the mock and vLLM take it.
            let count = |payload: &[u8]| -> u64 {
                let text = std::str::from_utf8(payload).unwrap();
                let body = text.split_once("\r\n\r\n").unwrap().1;
                let v: Value = serde_json::from_str(body).unwrap();
                let ids = match wrapping {
                    Wrapping::Chat => counter.chat_ids(&v["messages"], None).unwrap(),
                    _ => counter
                        .completion_ids(v["prompt"].as_str().unwrap())
                        .unwrap(),
                };
                ids.len() as u64
            };
            let record = |index: u64, input_length: u64| TraceRecord {
                index,
                line: index + 1,
                timestamp_ms: Some(0.0),
                input: Input::Synthetic {
                    input_length,
                    hash_ids: (index * 100..index * 100 + 20).collect(),
                },
                output_length: Some(8),
                ids: TraceIds::default(),
                extra: None,
            };
            let content = |len: u64| synth.content_len(len);
            for start in 0..HOSTILE_ANSWERS.len() {
                let root = builder
                    .build(&record(0, 120), 0, 0, None, 0, &mut caches)
                    .unwrap();
                let mut payload = root.payload().to_vec();
                let mut slot = carry::locate(&payload, content(120), overhead).unwrap();
                let mut length = 120;
                for round in 1..=3u64 {
                    let answer = HOSTILE_ANSWERS[(start + round as usize - 1) % 6];
                    let escaped = serde_json::to_string(answer).unwrap();
                    let escaped = escaped.as_bytes()[1..escaped.len() - 1].to_vec();
                    // The server's completion_tokens, off on purpose.
                    let mut h = carry::history(&payload, &slot, escaped, 5);
                    h.seam_tokens = Some(seam.measure(&h).unwrap());
                    length += 150;
                    let child = builder
                        .build(&record(round, length), round, 0, None, 0, &mut caches)
                        .unwrap();
                    let cslot = carry::locate(child.payload(), content(length), overhead).unwrap();
                    let (bytes, nslot, _, note) =
                        carry::splice(child.payload(), &cslot, &h).unwrap();
                    assert!(note.is_none());
                    assert_eq!(
                        count(&bytes),
                        length,
                        "{family} {wrapping:?}, round {round} after {answer:?}"
                    );
                    (payload, slot) = (bytes, nslot);
                }
            }
        }
    }
}
