//! The verdict against runs whose truth is known, with its default bounds: healthy runs are
//! VALID (a small run says which tails it cannot give; it is not INVALID for it), and each
//! planted distortion is INVALID with the reason that names it and its cause.
//!
//! The timing reasons (`schedule`, `late-sends`, `stall`, `sender-saturated`,
//! `producers-behind`) judge how busy this machine was, which no test controls: a healthy
//! row may carry one, and then only one whose figures the records show (the starved row
//! plants them on purpose). Every other reason must be absent from a healthy row.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common;
use common::{
    path, read_json, replay_against, replay_mock, temp_dir, tokenizer, verdict, MockProcess,
};

/// A healthy run: VALID, but for timing reasons this machine's load may have earned.
fn healthy(row: &str, out: &Path) {
    let design = common::design_reasons(out);
    assert!(
        design.is_empty(),
        "{row}: a healthy run judged INVALID for {design:?}"
    );
    let summary = read_json(&out.join("summary.json"));
    // Nothing it prints is a percentile too few samples hold.
    for (key, d) in summary.as_object().unwrap() {
        if let Some(thin) = d.get("too_few_samples").and_then(Value::as_array) {
            for p in thin {
                assert!(d[p.as_str().unwrap()].is_null(), "{row}: {key}.{p}");
            }
        }
    }
}

/// A planted distortion: INVALID with `key`, its text holding each of `says`.
fn distorted(row: &str, out: &Path, key: &str, says: &[&str]) {
    let (word, keys, summary) = verdict(out);
    assert_eq!(word, "INVALID", "{row}: {}", summary["verdict"]);
    let reason = summary["verdict"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("{row}: no {key} among {keys:?}"));
    let text = reason["text"].as_str().unwrap();
    for s in says {
        assert!(text.contains(s), "{row}: {key} does not say {s:?}: {text}");
    }
}

fn ok(row: &str, o: &std::process::Output) {
    assert!(
        o.status.code().is_some_and(|c| c == 0 || c == 3),
        "{row}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn lines(dir: &Path, name: &str, records: &[Value]) -> PathBuf {
    let file = dir.join(name);
    let text: Vec<String> = records.iter().map(Value::to_string).collect();
    std::fs::write(&file, text.join("\n")).unwrap();
    file
}

/// Healthy runs with default bounds: a 50-request Mooncake run, each agentic sample, a
/// carry-forward chain against a caching mock, a loop whose passes are fresh.
#[test]
fn healthy_runs_are_valid_by_default() {
    let dir = temp_dir("matrix-healthy");
    let qwen3 = tokenizer("qwen3");
    let mooncake = common::mooncake("conversation_trace.jsonl");
    let text = std::fs::read_to_string(&mooncake).unwrap();
    let fifty: Vec<Value> = text
        .lines()
        .take(50)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fifty = lines(&dir, "fifty.jsonl", &fifty);
    let run = |row: &str, trace: &Path, extra: &[&str]| {
        let out = dir.join(row);
        let o = replay_mock(trace, &out)
            .args(["--tokenizer", path(&qwen3), "--time-scale", "50"])
            .args(extra)
            .output()
            .unwrap();
        ok(row, &o);
        healthy(row, &out);
        out
    };
    let out = run("mooncake-50", &fifty, &[]);
    let (_, _, summary) = verdict(&out);
    assert!(summary["ttft_ms"]["p99"].is_null() && summary["ttft_ms"]["p50"].is_number());
    assert_eq!(summary["verdict"]["notes"][0]["key"], "few-samples");
    // A loop's passes are fresh: against a caching mock, no pass finds another's blocks.
    run(
        "loop-fresh",
        &fifty,
        &["--loop", "2", "--mock-cache-blocks", "100000"],
    );
    let agentic = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic");
    for (row, sample, extra) in [
        (
            "weka",
            "weka_sample.json",
            &["--max-active-sessions", "1"][..],
        ),
        ("dag", "dag_sample.jsonl", &["--api", "openai-chat"][..]),
        ("atif", "atif_sample.json", &["--api", "openai-chat"][..]),
        ("otel", "otel_sample.json", &[][..]),
        ("toolagent", "mooncake_toolagent_sample.jsonl", &[][..]),
    ] {
        run(row, &agentic.join(sample), extra);
    }
    // Carry-forward against a mock whose cache keeps prompts and answers as vLLM's does:
    // the observed hits are the expected ones, neither warm nor cold.
    let chains = common::by_timestamp(common::bailian_chains(8, 0.2, 0.05, 16));
    let chains = lines(&dir, "chains.jsonl", &chains);
    let caching = MockProcess::start(&["--cache-blocks", "100000", "--cache-block-size", "16"]);
    let out = dir.join("carried");
    let o = replay_against(&caching, &chains, &out)
        .args(["--tokenizer", path(&qwen3), "--api", "openai-completions"])
        .args(["--server-block-size", "16"])
        .output()
        .unwrap();
    ok("carried", &o);
    healthy("carried", &out);
    let (_, _, summary) = verdict(&out);
    assert_eq!(
        summary["sessions"]["carried_forward"], 16,
        "{}",
        summary["sessions"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each planted distortion is INVALID with its reason, and the reason says its cause.
#[test]
fn each_planted_distortion_names_itself() {
    let dir = temp_dir("matrix-distorted");
    let qwen3 = tokenizer("qwen3");
    let tok = path(&qwen3).to_string();
    let text = std::fs::read_to_string(common::mooncake("conversation_trace.jsonl")).unwrap();
    let records: Vec<Value> = text
        .lines()
        .take(60)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let trace = lines(&dir, "t.jsonl", &records);

    // A loop that repeats its first pass's prompts measures a cache it warmed itself.
    let out = dir.join("loop-repeat");
    let o = replay_mock(&trace, &out)
        .args(["--tokenizer", &tok, "--time-scale", "50", "--loop", "2"])
        .args(["--loop-prompts", "repeat", "--mock-cache-blocks", "100000"])
        .output()
        .unwrap();
    ok("loop-repeat", &o);
    distorted("loop-repeat", &out, "warm-cache", &["--loop-prompts fresh"]);

    // A message trace replayed twice on one caching server: the second run is warm.
    let dag = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic/dag_sample.jsonl");
    let caching = MockProcess::start(&[
        "--cache-blocks",
        "100000",
        "--cache-block-size",
        "16",
        "--tokenizer",
        &tok,
    ]);
    for run in ["first", "again"] {
        let o = replay_against(&caching, &dag, &dir.join(run))
            .args(["--api", "openai-chat"])
            .output()
            .unwrap();
        ok(run, &o);
    }
    healthy("messages first", &dir.join("first"));
    distorted(
        "messages again",
        &dir.join("again"),
        "warm-cache",
        &["--fresh-prompts"],
    );
    // ... and with --fresh-prompts the third run is cold again.
    let o = replay_against(&caching, &dag, &dir.join("fresh"))
        .args(["--api", "openai-chat", "--fresh-prompts"])
        .output()
        .unwrap();
    ok("fresh", &o);
    healthy("messages fresh", &dir.join("fresh"));

    // A server that caches nothing, against a trace of conversations that reuse.
    let chains = common::by_timestamp(common::bailian_chains(8, 0.2, 0.05, 16));
    let chains = lines(&dir, "chains.jsonl", &chains);
    let uncached = MockProcess::start(&["--cache-blocks", "0", "--cache-block-size", "16"]);
    let out = dir.join("cache-off");
    let o = replay_against(&uncached, &chains, &out)
        .args(["--tokenizer", &tok, "--api", "openai-completions"])
        .args(["--server-block-size", "16"])
        .output()
        .unwrap();
    ok("cache-off", &o);
    distorted("cache-off", &out, "cold-cache", &["caching off"]);

    // A stream that stalls: its requests fail, and the reason names the commonest error.
    let stalling = MockProcess::start(&["--fault", "stall:0.3", "--seed", "3"]);
    let out = dir.join("stalled");
    let o = replay_against(&stalling, &trace, &out)
        .args([
            "--tokenizer",
            &tok,
            "--time-scale",
            "50",
            "--stall-timeout",
            "0.5",
        ])
        .args(["--first-token-timeout", "0.5"])
        .output()
        .unwrap();
    ok("stalled", &o);
    distorted("stalled", &out, "failed", &["most were timeout"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client whose producers cannot keep up: each request takes 5 ms to build on one producer
/// while the trace wants one a millisecond. The verdict says the producers were behind (with
/// nothing built behind the late ones) and that the schedule slipped.
#[test]
fn a_starved_client_is_named_as_such() {
    let dir = temp_dir("matrix-starved");
    let trace = common::text_trace(&dir, 300, 1, 1);
    let out = dir.join("run");
    let mut args: Vec<String> = ["--mock", "--mock-ttft-ms", "1", "--num-producer", "1"]
        .map(String::from)
        .into();
    args.extend(["--trace", path(&trace), "--output", path(&out)].map(String::from));
    let mut plan = common::replay_plan(&args);
    plan.slow_build = Some(std::time::Duration::from_millis(5));
    llmreplay::commands::replay::run(&plan).unwrap();
    distorted(
        "starved",
        &out,
        "producers-behind",
        &["nothing built behind them", "--num-producer"],
    );
    distorted("starved", &out, "schedule", &["likely cause:", "fix:"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A burst of requests at one instant, larger than what the senders hold ahead: the late
/// ones were built in time and waited in the channel, so the producers are not blamed
/// (`senders.queued_late` counts them) and the schedule reason says why.
#[test]
fn a_burst_beyond_the_lookahead_is_not_blamed_on_the_producers() {
    let dir = temp_dir("matrix-burst");
    let burst: Vec<Value> = (0..3000)
        .map(|_| json!({"timestamp": 0, "text_input": "a b c", "input_length": 3, "output_length": 1}))
        .collect();
    let trace = lines(&dir, "burst.jsonl", &burst);
    let out = dir.join("run");
    let o = replay_mock(&trace, &out)
        .args(["--channel-capacity", "64", "--num-sender", "1"])
        .output()
        .unwrap();
    ok("burst", &o);
    let run = read_json(&out.join("run.json"));
    let (queued, late) = (
        run["senders"]["queued_late"].as_u64().unwrap(),
        run["senders"]["arrived_late"].as_u64().unwrap(),
    );
    assert!(queued > 1000, "{}", run["senders"]);
    let (_, keys, summary) = verdict(&out);
    assert!(
        !keys.iter().any(|k| k == "producers-behind") || late * 20 > 3000,
        "{}",
        summary["verdict"]
    );
    // Drift p99 past its bound, or many late sends, or both (how late the last of 3,000
    // sends is depends on the machine): either names the burst.
    let named = summary["verdict"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["key"] == "schedule" || r["key"] == "late-sends")
        .any(|r| {
            r["text"]
                .as_str()
                .unwrap()
                .contains("waited behind a burst")
        });
    assert!(named, "{}", summary["verdict"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sweep's steps are runs of a few dozen requests each: every one VALID by default (each
/// says which tails it cannot give), and its table prints n/a where a step's p99 does not
/// hold, never a p99 of two requests.
#[test]
fn a_sweeps_small_steps_are_valid() {
    let dir = temp_dir("matrix-sweep");
    let trace = common::text_trace(&dir, 40, 50, 4);
    let out = dir.join("sweep");
    let o = common::bin()
        .args([
            "sweep",
            "--mock",
            "--mock-ttft-ms",
            "5",
            "--goodput",
            "ttft:5000",
        ])
        .args(["--start-scale", "1", "--max-steps", "2", "--bisect", "0"])
        .args(["--trace", path(&trace), "--output", path(&out)])
        .output()
        .unwrap();
    ok("sweep", &o);
    let sweep = read_json(&out.join("sweep.json"));
    let steps = sweep["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "{sweep}");
    for s in steps {
        let step = PathBuf::from(s["dir"].as_str().unwrap());
        healthy(&format!("step {}", s["scale"]), &step);
        assert!(
            s["ttft_p99_ms"].is_null() && s["ttft_p50_ms"].is_number(),
            "{s}"
        );
    }
    let table = std::fs::read_to_string(out.join("sweep.txt")).unwrap();
    assert!(table.contains("p99      n/a"), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}
