//! Every run judges itself (README "Can I trust this run?"): a table of runs, each made to
//! break one check, whose verdict must name that reason, and a clean run that must be VALID.
//! `--strict` turns INVALID into exit status 4; `report DIR` judges a run again by the bounds
//! its run.json recorded.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common;
use common::{
    bin, path, read_json, replay_against, replay_mock, temp_dir, tokenizer, verdict, MockProcess,
};

/// Bounds that switch off the timing checks: a case that is not about the schedule must not
/// depend on how busy the machine is (the starved case proves those checks).
const NO_TIMING: [&str; 8] = [
    "--bound",
    "drift-p99-ms=1e9",
    "--bound",
    "late-share=1",
    "--bound",
    "stall-ms=1e9",
    "--bound",
    "sender-cpu=1",
];

fn mooncake_trace(dir: &Path, n: usize) -> PathBuf {
    let trace = dir.join("t.jsonl");
    let text = std::fs::read_to_string(common::mooncake("conversation_trace.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().take(n).collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    trace
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A small clean run is VALID: every figure it prints holds, and the tails too few samples
/// hold print "n/a (N samples)" in the table, null in summary.json (listed in
/// `too_few_samples`), and the verdict notes which it cannot give. `--strict` makes an
/// INVALID run exit 4, and summary.json's `ended.exit_code` says 4 too.
#[test]
fn a_small_clean_run_is_valid_and_says_which_tails_it_cannot_give() {
    let dir = temp_dir("verdict-clean");
    let trace = mooncake_trace(&dir, 120);
    let qwen3 = tokenizer("qwen3");
    // Against the in-process mock at 50x, --strict, timing checks off, with `extra`.
    let strict = |out: &Path, extra: &[&str]| {
        replay_mock(&trace, out)
            .args([
                "--tokenizer",
                path(&qwen3),
                "--time-scale",
                "50",
                "--strict",
            ])
            .args(NO_TIMING)
            .args(extra)
            .output()
            .unwrap()
    };
    let clean = dir.join("clean");
    let o = strict(&clean, &[]);
    ok(&o);
    let (word, keys, summary) = verdict(&clean);
    assert_eq!((word.as_str(), keys), ("VALID", vec![]));
    assert_eq!(summary["ended"]["exit_code"], 0);
    let note = summary["verdict"]["notes"][0]["text"].as_str().unwrap();
    assert!(
        note.contains("120 successful") && note.contains("p99 needs 500"),
        "{note}"
    );
    assert!(summary["ttft_ms"]["p99"].is_null() && summary["ttft_ms"]["p90"].is_number());
    assert_eq!(
        summary["ttft_ms"]["too_few_samples"],
        serde_json::json!(["p99"])
    );
    let table = std::fs::read_to_string(clean.join("summary.txt")).unwrap();
    assert!(table.starts_with("Verdict: VALID"), "{table}");
    let p99 = table.lines().find(|l| l.starts_with("P99 TTFT")).unwrap();
    assert!(p99.ends_with("n/a (120 samples)"), "{p99}");
    let html = std::fs::read_to_string(clean.join("report.html")).unwrap();
    assert!(html.contains("n/a (120 samples)"));

    // report DIR keeps the run's own bounds; with tail-samples=1 p99 holds (1.2 beyond it).
    let again = bin()
        .args(["report", path(&clean), "--bound", "tail-samples=1"])
        .args(["--output-format", "json"])
        .output()
        .unwrap();
    ok(&again);
    let printed: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(printed["verdict"]["result"], "VALID");
    assert!(
        printed["ttft_ms"]["p99"].is_number(),
        "{}",
        printed["ttft_ms"]
    );
    assert!(printed["verdict"]["notes"].as_array().unwrap().is_empty());

    // --strict: a completed run with an INVALID verdict (here every sender share of CPU is
    // over a 0 bound) ends with status 4, and its summary says the same status.
    let invalid = dir.join("invalid");
    let o = strict(&invalid, &["--bound", "sender-cpu=0"]);
    assert_eq!(o.status.code(), Some(llmreplay::ending::INVALID_EXIT_CODE));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.starts_with("Verdict: INVALID (1 reason)\n  - sender-saturated:"),
        "{stdout}"
    );
    let (_, _, summary) = verdict(&invalid);
    assert_eq!(summary["ended"]["exit_code"], 4, "{}", summary["ended"]);
    assert_eq!(summary["ended"]["how"], "completed");
}

/// Each case breaks one check; its verdict names that reason.
#[test]
fn each_broken_check_is_a_reason() {
    let dir = temp_dir("verdict-table");
    let trace = mooncake_trace(&dir, 40);
    let qwen3 = tokenizer("qwen3");
    let judged = |name: &str, mock: &MockProcess, extra: &[&str]| {
        let out = dir.join(name);
        let o = replay_against(mock, &trace, &out)
            .args(["--tokenizer", path(&qwen3), "--time-scale", "50"])
            .args(NO_TIMING)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            o.status.code().is_some_and(|c| c == 0 || c == 3),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        verdict(&out)
    };

    // The same replay twice against one caching server: the second meets a warm cache.
    let cache = MockProcess::start(&[
        "--cache-blocks",
        "100000",
        "--cache-block-size",
        "512",
        "--tokenizer",
        path(&qwen3),
    ]);
    let (first, keys, _) = judged("cold", &cache, &[]);
    assert_eq!((first.as_str(), keys), ("VALID", vec![]));
    let (_, keys, summary) = judged("warm", &cache, &[]);
    assert_eq!(keys, ["warm-cache"], "{}", summary["verdict"]);
    let text = summary["verdict"]["reasons"][0]["text"].as_str().unwrap();
    assert!(text.contains("--fresh-prompts"), "{text}");
    // A third time with --fresh-prompts: the run's own blocks, new to the cache.
    let (word, keys, summary) = judged("fresh", &cache, &["--fresh-prompts"]);
    assert_eq!(
        (word.as_str(), keys),
        ("VALID", vec![]),
        "{}",
        summary["verdict"]
    );
    let run = read_json(&dir.join("fresh").join("run.json"));
    assert!(run["prompt_salt"].is_u64(), "{}", run["prompt_salt"]);

    // Failures over 1 %; every request failing also ends the run without success.
    let failing = MockProcess::start(&["--fault", "status:503:1"]);
    let (_, keys, _) = judged("failing", &failing, &[]);
    assert_eq!(keys, ["ended", "failed"]);

    // A server counting with another family's tokenizer: the lengths are not the trace's.
    let mistral = MockProcess::start(&["--tokenizer", path(&tokenizer("mistral"))]);
    let (_, keys, _) = judged("inexact", &mistral, &[]);
    assert_eq!(keys, ["inexact-input"]);

    // Answers whose whole output was reasoning.
    let thinker =
        MockProcess::start(&["--reasoning-tokens", "100000", "--tokenizer", path(&qwen3)]);
    let (_, keys, _) = judged("thinking", &thinker, &[]);
    assert_eq!(keys, ["ended-in-thinking"]);
}

/// Producers that cannot build prompts as fast as they are due: each request takes 5 ms more
/// to build (the plan's test seam) on one producer, while the trace wants one every
/// millisecond. The senders get them late, drift passes 50 ms, and the verdict says why.
#[test]
fn starved_producers_break_the_schedule() {
    let dir = temp_dir("verdict-starved");
    let trace = common::text_trace(&dir, 300, 1, 1);
    let out = dir.join("run");
    let outcome = built_slowly(&trace, &out, &["--bound", "tail-samples=0"], 5);
    assert_eq!(outcome.summary.ok, 300);
    let (word, keys, summary) = verdict(&out);
    assert_eq!(word, "INVALID");
    for key in ["schedule", "producers-behind"] {
        assert!(
            keys.iter().any(|k| k == key),
            "{key}: {}",
            summary["verdict"]
        );
    }
    let run = read_json(&out.join("run.json"));
    assert!(
        run["senders"]["arrived_late"].as_u64().unwrap() > 15,
        "{}",
        run["senders"]
    );
}

/// Turns built slowly but long before they are due are not late: a turn reaches the sender
/// parked behind its parent, and once released it is due at the parent's end plus its wait;
/// a session's first turn held for a `--max-active-sessions` place is due when one frees.
/// (Judged against the trace's own time, 0 for every turn of a DAG, each of them counted as a
/// late arrival and the run came out producers-behind.)
#[test]
fn turns_built_before_their_release_are_not_producers_behind() {
    let dir = temp_dir("verdict-parked");
    let trace = dir.join("dag.jsonl");
    let turn = |t: u32| {
        serde_json::json!({"messages": [{"role": "user", "content": format!("turn {t}")}],
            "max_tokens": 2, "delay": 300})
    };
    // Three sessions of three turns; one at a time, so the second and third sessions' first
    // turns are built long before the first session ends.
    let lines: Vec<String> = ["a", "b", "c"]
        .map(|s| {
            serde_json::json!({"session_id": s, "turns": (0..3).map(turn).collect::<Vec<_>>()})
                .to_string()
        })
        .into();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let out = dir.join("run");
    // Each turn takes 20 ms to build; each waits 300 ms after its parent.
    let args = ["--api", "openai-chat", "--max-active-sessions", "1"];
    let outcome = built_slowly(&trace, &out, &args, 20);
    assert_eq!(outcome.summary.ok, 9);
    let run = read_json(&out.join("run.json"));
    // The first turn may be built after the start: it is due at once.
    assert!(
        run["senders"]["arrived_late"].as_u64().unwrap() <= 1,
        "{}",
        run["senders"]
    );
}

/// A run against the in-process mock whose one producer takes `build_ms` to build each
/// request.
fn built_slowly(
    trace: &Path,
    out: &Path,
    extra: &[&str],
    build_ms: u64,
) -> llmreplay::commands::replay::RunOutcome {
    let mut args: Vec<String> = ["--mock", "--mock-ttft-ms", "1", "--num-producer", "1"]
        .map(String::from)
        .into();
    args.extend(["--trace", path(trace), "--output", path(out)].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut plan = common::replay_plan(&args);
    plan.slow_build = Some(std::time::Duration::from_millis(build_ms));
    llmreplay::commands::replay::run(&plan).unwrap()
}

/// The README's table and `--help` name every bound with its default, as `BOUNDS` has them.
#[test]
fn every_bound_is_documented_with_its_default() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table = &readme[readme.find("## Can I trust this run?").unwrap()..];
    let help = bin().args(["replay", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for b in llmreplay::stats::verdict::BOUNDS {
        let shown = format!("`{}` ({})", b.name, b.default);
        assert!(table.contains(&shown), "README lacks {shown}");
        assert!(
            help.contains(&format!("{} ({})", b.name, b.default)),
            "--help lacks {}",
            b.name
        );
    }
    assert!(llmreplay::stats::Bounds::parse(&["drift-p99-ms=x".into()]).is_err());
    assert!(llmreplay::stats::Bounds::parse(&["nope=1".into()]).is_err());
    // A bound given to `report` replaces that one of the run's own, not the others: a run
    // judged with relaxed timing bounds is not judged again by the defaults.
    let own = llmreplay::stats::Bounds::parse(&["late-share=1".into()]).unwrap();
    let again = own.clone().with(&["tail-samples=7".into()]).unwrap();
    use llmreplay::stats::verdict::Bound;
    assert_eq!(again.get(Bound::LateShare), 1.0);
    assert_eq!(again.get(Bound::TailSamples), 7.0);
    assert_ne!(own.get(Bound::TailSamples), 7.0);
}

/// `--fresh-prompts` on shards needs the salt they share: refused without `--start-at`.
#[test]
fn fresh_prompts_on_shards_need_a_common_start() {
    let dir = temp_dir("verdict-fresh-shard");
    let trace = mooncake_trace(&dir, 4);
    let o = replay_mock(&trace, &dir.join("run"))
        .args(["--fresh-prompts", "--shard", "0/2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--fresh-prompts with --shard needs --start-at"),
        "{stderr}"
    );
}

/// Every shard models the whole schedule, so merged shards expect what one process expects,
/// record by record, on 3000 records of the Mooncake conversation trace. Shards that ran one
/// after another did not make one load: the merged verdict says `shard-clocks`; so it does
/// for shards whose clocks nobody compared on different hosts, and not for one host's.
#[test]
fn merged_shards_expect_what_one_process_expects() {
    let dir = temp_dir("verdict-merged");
    let trace = mooncake_trace(&dir, 3000);
    let qwen3 = tokenizer("qwen3");
    let run = |out: &Path, extra: &[&str]| {
        ok(&replay_mock(&trace, out)
            .args([
                "--time-scale",
                "1000",
                "--mock-itl-ms",
                "0",
                "--tokenizer",
                path(&qwen3),
            ])
            .args(NO_TIMING)
            .args(extra)
            .output()
            .unwrap())
    };
    let single = dir.join("single");
    run(&single, &[]);
    let shards: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("s{i}"))).collect();
    for (i, out) in shards.iter().enumerate() {
        run(out, &["--shard", &format!("{i}/3")]);
    }
    let merged = dir.join("merged");
    ok(&bin()
        .arg("merge")
        .arg(&merged)
        .args(&shards)
        .output()
        .unwrap());
    let expected = |d: &Path| -> std::collections::BTreeMap<u64, Value> {
        common::read_jsonl(&d.join("requests.jsonl"))
            .into_iter()
            .map(|r| {
                (
                    r["index"].as_u64().unwrap(),
                    r["expected_cached_tokens"].clone(),
                )
            })
            .collect()
    };
    let (one, all) = (expected(&single), expected(&merged));
    assert_eq!((one.len(), all.len()), (3000, 3000));
    let differ: Vec<_> = one.iter().filter(|(i, e)| all.get(i) != Some(e)).collect();
    assert!(
        differ.is_empty(),
        "{} records differ: {:?}",
        differ.len(),
        &differ[..differ.len().min(5)]
    );
    let hits = one.values().filter(|e| e.as_u64().unwrap() > 0).count();
    assert!(
        hits > 1000,
        "the trace's shared blocks are expected to hit: {hits}"
    );
    // Token- and block-weighted, the merged shares are one process's.
    let prefix = |d: &Path| read_json(&d.join("summary.json"))["prefix_cache"].clone();
    assert_eq!(prefix(&single), prefix(&merged));
    let block_share = prefix(&single)["expected_block_hit_share"].as_f64();
    assert!(block_share > Some(0.2), "{}", prefix(&single));

    // The shards ran one after another: each started a whole schedule (1 s) after the last.
    let (word, keys, summary) = verdict(&merged);
    assert_eq!(
        (word.as_str(), keys),
        ("INVALID", vec!["shard-clocks".to_string()])
    );
    let text = summary["verdict"]["reasons"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("1/3 by +") && text.contains("--start-at"),
        "{text}"
    );
    // Judged again with the skew bound out of the way: one host, clocks checked against the
    // mock's Date header, VALID ...
    let report = |bounds: &[&str]| {
        ok(&bin()
            .arg("report")
            .arg(&merged)
            .args(bounds)
            .output()
            .unwrap());
        verdict(&merged)
    };
    let (word, keys, _) = report(&["--bound", "shard-skew-ms=1e9"]);
    assert_eq!((word.as_str(), keys), ("VALID", vec![]));
    // ... but not when one shard ran elsewhere and no clock was checked.
    let run_json = merged.join("run.json");
    let mut m = read_json(&run_json);
    m["merged"]["shards"][1]["host"] = "elsewhere".into();
    for i in 0..3 {
        m["merged"]["shards"][i]["clock_offset_ms"] = Value::Null;
    }
    std::fs::write(&run_json, m.to_string()).unwrap();
    let (_, keys, summary) = report(&["--bound", "shard-skew-ms=1e9"]);
    assert_eq!(keys, ["shard-clocks"]);
    let text = summary["verdict"]["reasons"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("0/3, 1/3, 2/3 were not checked") && text.contains("--ntp"),
        "{text}"
    );
}
