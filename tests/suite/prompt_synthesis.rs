//! Prompt synthesis against the real tokenizers: exact lengths (with and without chat
//! templates), equal token blocks under equal hash-id prefixes, determinism across processes,
//! server-side exactness through `mock --tokenizer`, bounded memory, and tokenizer families.
//!
//! The exactness test re-encodes prompts with the Hugging Face tokenizer, which runs at
//! ~0.2M tokens/s: all ~800M tokens of both traces x both tokenizers x both APIs take ~40
//! core-minutes. It checks every 97th record by default (all records are still built) and
//! every record with `LLMREPLAY_VERIFY_EVERY=1` (or `scripts/verify-prompts.sh`).

use std::path::Path;

use clap::Parser;
use serde_json::{json, Value};

use llmreplay::cli::{Cli, Command};
use llmreplay::commands::prompts::PromptsReport;

use crate::common;
use common::{bin, mooncake, path, read_jsonl, temp_dir, tokenizer, MockProcess, TOKENIZERS};

pub(crate) fn prompts(args: &[&str]) -> PromptsReport {
    let cli = Cli::parse_from(["llmreplay", "prompts"].iter().chain(args));
    let Command::Prompts(args) = cli.command else {
        panic!("prompts")
    };
    llmreplay::commands::prompts::run(&llmreplay::plan::PromptsPlan::from_args(&args).unwrap())
        .unwrap()
}

fn verify_every() -> String {
    std::env::var("LLMREPLAY_VERIFY_EVERY").unwrap_or_else(|_| "97".into())
}

#[test]
fn every_prompt_of_both_traces_is_exact_with_every_tokenizer() {
    let every = verify_every();
    let mut prefix_pairs = 0;
    for trace in ["conversation_trace.jsonl", "synthetic_trace.jsonl"] {
        let trace = mooncake(trace);
        for family in TOKENIZERS {
            let tokenizer = tokenizer(family);
            for (api, mode) in [
                ("openai-chat", "text"),
                ("openai-completions", "text"),
                ("openai-completions", "token-ids"),
            ] {
                let report = prompts(&[
                    "--trace",
                    path(&trace),
                    "--tokenizer",
                    path(&tokenizer),
                    "--api",
                    api,
                    "--prompt-mode",
                    mode,
                    "--verify",
                    "--verify-every",
                    &every,
                ]);
                let what = format!("{} {} {api} {mode}", trace.display(), tokenizer.display());
                let v = report.verify.as_ref().unwrap();
                assert!(v.checked > 0, "{what}: {v:?}");
                assert_eq!(v.failed(), 0, "{what}: {:?}", v.examples);
                // Only records shorter than the template itself are not exact.
                assert!(
                    v.shorter_than_frame == 0 || report.overhead_tokens > 1,
                    "{what}: {v:?}"
                );
                assert_eq!(v.prefix_pairs_differing, 0, "{what}: {:?}", v.examples);
                prefix_pairs += v.prefix_pairs_checked;
                // The server-side overhead is real for chat (template) and completions with
                // a BOS-adding tokenizer, and zero for token ids.
                if api == "openai-chat" {
                    assert!(report.overhead_tokens > 0, "{what}");
                }
                if mode == "token-ids" {
                    assert_eq!(report.overhead_tokens, 0, "{what}");
                }
            }
        }
    }
    assert!(prefix_pairs > 0, "no two checked records shared a prefix");
}

/// A record shorter than the chat template cannot be exact: it is counted apart, with an
/// example, and is no failure of the synthesis; with `--input-length-of content` the content alone has `input_length` tokens
/// and the server sees the template on top.
#[test]
fn verification_reports_what_cannot_be_exact() {
    let dir = temp_dir("too-short");
    let short = dir.join("short.jsonl");
    std::fs::write(
        &short,
        r#"{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[1]}"#,
    )
    .unwrap();
    let qwen = tokenizer("qwen3");
    let v = prompts(&[
        "--trace",
        path(&short),
        "--tokenizer",
        path(&qwen),
        "--verify",
    ])
    .verify
    .unwrap();
    assert_eq!((v.checked, v.exact, v.shorter_than_frame), (1, 0, 1));
    assert!(
        v.examples[0].contains("input_length 5 is not above"),
        "{:?}",
        v.examples
    );

    let trace = mooncake("conversation_trace.jsonl");
    let base = [
        "--trace",
        path(&trace),
        "--tokenizer",
        path(&qwen),
        "--max-requests",
        "3",
        "--verify",
    ];
    let prompt = prompts(&base);
    let content = prompts(&[&base[..], &["--input-length-of", "content"]].concat());
    assert_eq!(prompt.verify.unwrap().exact, 3);
    assert_eq!(content.verify.unwrap().exact, 3);
    assert!(prompt.overhead_tokens > 0);
    assert_eq!(content.tokens, prompt.tokens + 3 * prompt.overhead_tokens);
}

/// The rendered templates equal what Hugging Face's `apply_chat_template` produces for one
/// user message with the generation prompt.
#[test]
fn chat_templates_render_as_hugging_face_does() {
    for (name, want) in [
        (
            "qwen3",
            "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n",
        ),
        ("mistral", "<s>[INST] hello there [/INST]"),
    ] {
        let (template, _) =
            llmreplay::prompt::ChatTemplate::load(&tokenizer(name).join("tokenizer_config.json"))
                .unwrap()
                .unwrap();
        let got = template
            .render(
                &json!([{"role": "user", "content": "hello there"}]),
                None,
                None,
            )
            .unwrap();
        assert_eq!(got, want, "{name}");
    }
}

/// Padding (fewer hash ids than the length needs) and truncation (more) are exact too, and
/// the records are counted.
#[test]
fn records_whose_hash_ids_disagree_with_their_length_are_padded_or_cut() {
    let dir = temp_dir("mismatch");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        [
            json!({"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2]}),
            json!({"timestamp": 1, "input_length": 100, "output_length": 1, "hash_ids": [1]}),
            json!({"timestamp": 2, "input_length": 20, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5]}),
            json!({"timestamp": 3, "input_length": 27, "output_length": 1}),
        ]
        .map(|v| v.to_string())
        .join("\n"),
    )
    .unwrap();
    for api in ["openai-chat", "openai-completions"] {
        let report = prompts(&[
            "--trace",
            path(&trace),
            "--tokenizer",
            path(&tokenizer("mistral")),
            "--block-size",
            "16",
            "--api",
            api,
            "--verify",
        ]);
        let v = report.verify.unwrap();
        assert_eq!((v.checked, v.exact), (4, 4), "{api}: {:?}", v.examples);
        assert_eq!(report.hash_length_mismatches, 3, "{api}");
    }
}

/// Two processes with the same seed write byte-identical prompts.jsonl (several producers
/// finish out of order; the file is still in record order); another seed changes it.
#[test]
fn two_processes_with_one_seed_write_identical_prompts() {
    let dir = temp_dir("determinism");
    let run = |name: &str, seed: &str| {
        let out = dir.join(name);
        let status = bin()
            .args([
                "replay",
                "--mock",
                "--quiet",
                "--trace",
                path(&mooncake("synthetic_trace.jsonl")),
                "--tokenizer",
                path(&tokenizer("qwen3")),
                "--max-requests",
                "60",
                "--time-scale",
                "1000",
                "--mock-ttft-ms",
                "1",
                "--mock-itl-ms",
                "0.01",
                "--num-producer",
                "3",
                "--seed",
                seed,
                "--save-prompts",
                "--output",
                path(&out),
            ])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::read(out.join("prompts.jsonl")).unwrap()
    };
    let a = run("a", "7");
    let b = run("b", "7");
    let c = run("c", "8");
    assert!(a == b, "same seed, different prompts.jsonl");
    assert!(a != c, "another seed should give other prompts");
    let lines: Vec<Value> = std::str::from_utf8(&a)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 60);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["index"], i as u64);
        assert!(l["prompt"].as_str().is_some_and(|p| p.starts_with(' ')));
    }
}

/// Through a real mock that counts with the tokenizer and chat template (on its counting
/// threads, while the answer streams): every request's `usage.prompt_tokens` equals the
/// trace's `input_length`, streamed (the usage event waits for the count) or not.
#[test]
fn mock_with_tokenizer_reports_exact_prompt_tokens_for_500_records() {
    let tokenizer = tokenizer("mistral");
    let mock = MockProcess::start(&[
        "--tokenizer",
        path(&tokenizer),
        "--ttft-ms",
        "1",
        "--itl-ms",
        "0.05",
    ]);
    let dir = temp_dir("mock-tokenizer");
    for (stream, requests) in [("--stream", "500"), ("--no-stream", "100")] {
        let out = dir.join(&stream[2..]);
        replay_conversations(&mock.url(), &tokenizer, stream, requests, &out);
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let m = &summary["input_length_match"];
        assert_eq!(
            m["checked"],
            requests.parse::<u64>().unwrap(),
            "{stream}: {m}"
        );
        assert_eq!(m["exact"], m["checked"], "{stream}: {m}");
        for r in read_jsonl(&out.join("requests.jsonl")) {
            assert_eq!(r["prompt_tokens"], r["input_tokens"], "{r}");
        }
    }
}

/// The bundled Mooncake conversation trace's first `requests` records, 100x faster, against
/// `url`, in process.
fn replay_conversations(
    url: &str,
    tokenizer: &Path,
    stream: &str,
    requests: &str,
    out: &Path,
) -> llmreplay::commands::replay::RunOutcome {
    let cli = Cli::parse_from([
        "llmreplay",
        "replay",
        "--quiet",
        stream,
        "--endpoint",
        url,
        "--trace",
        path(&mooncake("conversation_trace.jsonl")),
        "--tokenizer",
        path(tokenizer),
        "--max-requests",
        requests,
        "--time-scale",
        "100",
        // The mock holds a stream's usage event until its counting threads have counted the
        // prompt: on a starved machine that silence passed the default 60 s stall timeout.
        "--stall-timeout",
        "3600",
        "--output",
        path(out),
    ]);
    let Command::Replay(args) = cli.command else {
        panic!("replay")
    };
    llmreplay::commands::replay::run(&llmreplay::plan::ReplayPlan::from_args(&args).unwrap())
        .unwrap()
}

/// A busy machine leaves the mock's background counting threads (SCHED_IDLE) no core at all;
/// a request whose usage waits for its count is then counted at normal priority. With no
/// background thread, every count goes that way: streamed (usage after the last token) and
/// whole answers alike still report the exact prompt length.
#[test]
fn a_request_held_by_its_count_is_counted_without_the_background_threads() {
    let dir = tokenizer("qwen3");
    let (tok, file) = llmreplay::prompt::load_tokenizer(&dir).unwrap();
    let counter = llmreplay::prompt::PromptCounter::new(tok, &file, None).unwrap();
    let cfg = llmreplay::mock::MockConfig {
        counting: llmreplay::mock::PromptCounting::Tokenizer(std::sync::Arc::new(counter)),
        count_threads: 0,
        ..Default::default()
    };
    let mock = llmreplay::mock::MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let out_dir = temp_dir("mock-hurried-count");
    for stream in ["--stream", "--no-stream"] {
        let out = out_dir.join(&stream[2..]);
        let url = format!("http://{}", mock.addr());
        let outcome = replay_conversations(&url, &dir, stream, "20", &out);
        assert_eq!(outcome.summary.ok, 20, "{stream}");
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let m = &summary["input_length_match"];
        assert_eq!(
            (&m["checked"], &m["exact"]),
            (&json!(20), &json!(20)),
            "{stream}: {m}"
        );
    }
    mock.stop().unwrap();
}

/// A stand-alone mock without a tokenizer only estimates prompt tokens and says so: the run
/// reports the input length as not checked, not as a mismatch.
#[test]
fn mock_without_tokenizer_leaves_input_lengths_not_checked() {
    let mock = MockProcess::start(&["--ttft-ms", "1", "--itl-ms", "0.05"]);
    let dir = temp_dir("mock-approximate");
    let out = dir.join("run");
    let status = common::replay_against(&mock, &mooncake("conversation_trace.jsonl"), &out)
        .args(["--tokenizer", path(&tokenizer("qwen3"))])
        .args(["--max-requests", "20", "--time-scale", "100"])
        .status()
        .unwrap();
    assert!(status.success());
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let m = &summary["input_length_match"];
    assert_eq!(
        (m["checked"].as_u64(), m["not_checked"].as_u64()),
        (Some(0), Some(20)),
        "{m}"
    );
    let text = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(
        text.contains("not checked; 20 without an exact server count"),
        "{text}"
    );
    for r in read_jsonl(&out.join("requests.jsonl")) {
        assert!(r["prompt_tokens"].is_null(), "{r}");
        assert!(r["output_tokens"].as_u64().is_some_and(|n| n > 0), "{r}");
    }
}

/// 10M distinct hash ids through a 64 MiB block cache: the process grows by about the cache,
/// not by the ~600 MB the rendered blocks would take if kept.
#[test]
fn memory_stays_bounded_with_ten_million_distinct_hash_ids() {
    use std::io::Write;
    let dir = temp_dir("ten-million");
    let big = dir.join("big.jsonl");
    let small = dir.join("small.jsonl");
    let (records, per_record, block) = (100_000u64, 100u64, 8u64);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&big).unwrap());
    for r in 0..records {
        let ids: Vec<String> = (r * per_record..(r + 1) * per_record)
            .map(|h| h.to_string())
            .collect();
        writeln!(
            f,
            r#"{{"timestamp":{r},"input_length":{},"output_length":1,"hash_ids":[{}]}}"#,
            per_record * block,
            ids.join(",")
        )
        .unwrap();
    }
    f.flush().unwrap();
    std::fs::write(
        &small,
        r#"{"timestamp":0,"input_length":8,"output_length":1,"hash_ids":[1]}"#,
    )
    .unwrap();
    let peak = |trace: &Path| -> Value {
        let out = bin()
            .args([
                "prompts",
                "--json",
                "--trace",
                path(trace),
                "--tokenizer",
                path(&tokenizer("qwen3")),
                "--block-size",
                "8",
                "--block-cache-mb",
                "64",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let base = peak(&small);
    let run = peak(&big);
    let overhead = run["overhead_tokens"].as_u64().unwrap();
    assert_eq!(run["tokens"], records * (per_record * block - overhead));
    assert_eq!(run["block_cache_hits"], 0, "every hash id is new");
    let growth = run["peak_rss_mb"].as_f64().unwrap() - base["peak_rss_mb"].as_f64().unwrap();
    assert!(
        growth < 64.0 + 64.0,
        "grew by {growth:.0} MiB for a 64 MiB cache"
    );
}

/// A Metaspace (SentencePiece-style) tokenizer works too; one whose normaliser glues a space
/// onto every piece is refused with a message that says why.
#[test]
fn tokenizer_families_beyond_byte_level_bpe() {
    let dir = temp_dir("families");
    let words: Vec<String> = (0..1200u32)
        .map(|i| {
            let a = (b'a' + (i % 26) as u8) as char;
            let b = (b'a' + (i / 26 % 26) as u8) as char;
            let c = (b'a' + (i / 676) as u8) as char;
            format!("{c}{b}{a}")
        })
        .collect();
    let mut vocab = serde_json::Map::new();
    vocab.insert("<unk>".into(), json!(0));
    vocab.insert("\u{2581}a".into(), json!(1));
    for (i, w) in words.iter().enumerate() {
        vocab.insert(format!("\u{2581}{w}"), json!(i + 2));
    }
    let metaspace = json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": true});
    let tokenizer = |normalizer: Value, pre: Value| {
        json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
               "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": null,
               "decoder": metaspace,
               "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}})
    };
    let modern = dir.join("metaspace.json");
    std::fs::write(
        &modern,
        tokenizer(Value::Null, metaspace.clone()).to_string(),
    )
    .unwrap();
    let (tok, file) = llmreplay::prompt::load_tokenizer(&modern).unwrap();
    let vocab_table = llmreplay::prompt::SafeVocab::from_tokenizer(&tok, &file).unwrap();
    assert_eq!(
        vocab_table.len(),
        1200 + 1,
        "every word, and the anchor \u{2581}a"
    );

    let legacy = dir.join("legacy.json");
    let normalizer = json!({"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u{2581}"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}]});
    std::fs::write(&legacy, tokenizer(normalizer, Value::Null).to_string()).unwrap();
    let (tok, file) = llmreplay::prompt::load_tokenizer(&legacy).unwrap();
    let err = llmreplay::prompt::SafeVocab::from_tokenizer(&tok, &file)
        .err()
        .expect("a tokenizer that cannot be exact is refused")
        .to_string();
    assert!(
        err.contains("legacy.json") && err.contains("cannot"),
        "{err}"
    );
}

/// A file that is not a tokenizer says so, instead of a bare JSON syntax error.
#[test]
fn a_file_that_is_not_a_tokenizer_says_so() {
    let dir = temp_dir("not-a-tokenizer");
    for (name, text) in [
        ("config.json", r#"{"model_type": "llama"}"#),
        ("notes.txt", "hello"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let err = llmreplay::prompt::load_tokenizer(&path)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("not a tokenizer") && err.contains(name),
            "{err}"
        );
    }
}

/// `--prompt-source dataset` (UCM TraceReplay's benchmark mode): each record gets a dataset
/// prompt cut or extended to exactly its input_length, as the server counts it, for both
/// bundled tokenizer families and both wrappings (chat template, completion).
#[test]
fn dataset_prompts_hit_input_length_exactly_for_both_families() {
    let dir = temp_dir("dataset-prompts");
    let trace = dir.join("t.jsonl");
    // Lengths from just above the chat template (9 tokens for Mistral) to past the longest
    // sample entry: both cutting and extending run.
    let lengths = [12u64, 19, 40, 77, 150, 333, 700, 1200, 2600, 5000];
    let lines: Vec<String> = lengths
        .iter()
        .enumerate()
        .map(|(i, l)| format!(r#"{{"timestamp": {i}, "input_length": {l}, "output_length": 2, "hash_ids": [{i}]}}"#))
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let dataset =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/formats/sharegpt_sample.json");
    for family in ["qwen3", "mistral"] {
        let tok = tokenizer(family);
        let mock = MockProcess::start(&[
            "--tokenizer",
            path(&tok),
            "--ttft-ms",
            "1",
            "--itl-ms",
            "0.1",
        ]);
        for api in ["openai-chat", "openai-completions"] {
            let out = dir.join(format!("{family}-{api}"));
            let status = common::replay_against(&mock, &trace, &out)
                .args([
                    "--api",
                    api,
                    "--tokenizer",
                    path(&tok),
                    "--time-scale",
                    "10",
                    "--stall-timeout",
                    "3600",
                ])
                .args([
                    "--prompt-source",
                    "dataset",
                    "--prompt-dataset",
                    path(&dataset),
                ])
                .arg("--save-prompts")
                .status()
                .unwrap();
            assert!(status.success(), "{family} {api}");
            let summary: Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                    .unwrap();
            let m = &summary["input_length_match"];
            assert_eq!(
                (m["checked"].as_u64(), m["exact"].as_u64()),
                (Some(10), Some(10)),
                "{family} {api}: {m}"
            );
            // The text is the dataset's: most prompts begin with a sample's opening words.
            let from_dataset = read_jsonl(&out.join("prompts.jsonl"))
                .iter()
                .filter(|p| {
                    let t = p["prompt"].as_str().unwrap_or_default();
                    ["Explain", "I am reading", "Here is a log", "Write a long"]
                        .iter()
                        .any(|w| t.starts_with(&w[..t.len().min(w.len())]))
                })
                .count();
            assert_eq!(
                from_dataset, 10,
                "{family} {api}: {from_dataset} of 10 from the dataset"
            );
        }
    }
}

/// A mock with a prefix cache (`--cache-blocks`) reports `cached_tokens`; the records keep
/// them beside `expected_cached_tokens`, the leading blocks whose whole prefix an earlier
/// request already sent (checked here from the hash ids, in send order). With a cache larger
/// than the trace, observed equals expected, record by record and in summary.json's
/// `prefix_cache`; with a small cache, fewer hit, as `--expected-cache-blocks` of the same
/// size predicts exactly.
#[test]
fn a_prefix_cache_mock_reports_the_hits_the_hash_ids_predict() {
    let dir = temp_dir("prefix-cache");
    let trace = dir.join("t.jsonl");
    // 60 records of 6 blocks of 16: a shared first block, 3 groups for the second and
    // third, the rest unique.
    let mut unique = 1000u64;
    let lines: Vec<String> = (0..60u64)
        .map(|i| {
            let mut ids = vec![1, 10 + i % 3, 20 + i % 3];
            for _ in 0..3 {
                unique += 1;
                ids.push(unique);
            }
            format!(r#"{{"timestamp": {}, "input_length": 96, "output_length": 2, "hash_ids": {ids:?}}}"#, i * 5)
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let hash_ids: Vec<Vec<u64>> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        })
        .collect();
    let mut totals = Vec::new();
    // The mock's cache size, and the one the prediction assumes (none: never evicting).
    for (blocks, assumed) in [("100000", None), ("2", None), ("2", Some("2"))] {
        let mock = MockProcess::start(&["--cache-blocks", blocks, "--cache-block-size", "16"]);
        let out = dir.join(format!("run-{blocks}-{assumed:?}"));
        let mut replay = common::replay_against(&mock, &trace, &out);
        replay.args([
            "--tokenizer",
            path(&tokenizer("qwen3")),
            "--block-size",
            "16",
            // The mock caches whole 16-word blocks of the messages' text (no template).
            "--server-block-size",
            "16",
        ]);
        if let Some(n) = assumed {
            replay.args(["--expected-cache-blocks", n]);
        }
        let status = replay.status().unwrap();
        assert!(status.success());
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
        let overhead = run["fleet"][0]["prompt_overhead_tokens"].as_u64().unwrap();
        let full_blocks = ((96 - overhead) / 16) as usize;
        let mut rows = read_jsonl(&out.join("requests.jsonl"));
        rows.sort_by(|a, b| {
            a["sent_ms"]
                .as_f64()
                .partial_cmp(&b["sent_ms"].as_f64())
                .unwrap()
        });
        let mut seen = std::collections::HashSet::new();
        let (mut observed, mut expected) = (0, 0);
        for r in &rows {
            let ids = &hash_ids[r["index"].as_u64().unwrap() as usize][..full_blocks];
            let hits = (1..=ids.len())
                .take_while(|&k| seen.contains(&ids[..k]))
                .count();
            for k in 1..=ids.len() {
                seen.insert(ids[..k].to_vec());
            }
            let cached = r["cached_tokens"].as_u64().unwrap();
            let predicted = r["expected_cached_tokens"].as_u64().unwrap();
            if assumed.is_none() {
                assert_eq!(predicted, hits as u64 * 16, "the prediction: {r}");
            }
            if blocks == "100000" || assumed == Some(blocks) {
                assert_eq!(
                    cached, predicted,
                    "the same cache observed and predicted: {r}"
                );
            }
            observed += cached;
            expected += predicted;
        }
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let p = &summary["prefix_cache"];
        assert_eq!(
            (
                p["cached_tokens"].as_u64(),
                p["expected_cached_tokens"].as_u64()
            ),
            (Some(observed), Some(expected))
        );
        if blocks == "100000" || assumed == Some(blocks) {
            assert_eq!(p["observed_hit_share"], p["expected_hit_share"], "{p}");
        }
        totals.push((observed, expected));
    }
    assert!(totals[0].0 > 0 && totals[0].0 == totals[0].1, "{totals:?}");
    assert!(
        totals[1].0 < totals[1].1,
        "a 2-block cache hits less: {totals:?}"
    );
}
