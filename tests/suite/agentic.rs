//! Agentic replay rules: `--measure-from mid` (AgentX's measurement from mid-trajectory).
//! Judged from the records and run.json: which turns were measured, never from timing.

use std::collections::HashMap;
use std::path::Path;

use serde_json::json;

use crate::common::{self, path, read_json, read_jsonl, temp_dir, tokenizer};

/// 40 Mooncake conversations of 6 turns, 50 ms apart, each starting 20 ms after the last:
/// the trace, and each record's (conversation, turn) by index.
fn conversations(dir: &Path) -> (std::path::PathBuf, Vec<(String, u64)>) {
    let mut rows: Vec<(u64, String, u64)> = Vec::new();
    for s in 0..40u64 {
        for t in 0..6u64 {
            rows.push((s * 20 + t * 50, format!("s{s}"), t));
        }
    }
    rows.sort();
    let lines: Vec<String> = rows
        .iter()
        .map(|(ts, s, t)| {
            let base = 100 * s[1..].parse::<u64>().unwrap();
            let history: Vec<u64> = (0..=*t).map(|b| base + b).collect();
            json!({"timestamp": ts, "session_id": s, "input_length": 16 * (t + 1),
                   "output_length": 2, "hash_ids": history})
            .to_string()
        })
        .collect();
    let trace = dir.join("agents.jsonl");
    std::fs::write(&trace, lines.join("\n")).unwrap();
    (trace, rows.into_iter().map(|(_, s, t)| (s, t)).collect())
}

fn run(trace: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    common::replay_mock(trace, out)
        .args([
            "--mock-itl-ms",
            "0",
            "--time-scale",
            "5",
            "--block-size",
            "16",
        ])
        .args(["--tokenizer", path(&tokenizer("qwen3"))])
        .args(extra)
        .output()
        .unwrap()
}

fn ok(out: std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn measure_from_mid_measures_each_conversation_from_its_drawn_turn_only() {
    let dir = temp_dir("measure-mid");
    let (trace, of_index) = conversations(&dir);
    let out = dir.join("mid");
    ok(run(&trace, &out, &["--measure-from", "mid", "--seed", "7"]));
    let run_json = read_json(&out.join("run.json"));
    let m = &run_json["measure_from"];
    assert_eq!(
        (m["mode"].as_str(), m["conversations"].as_u64()),
        (Some("mid"), Some(40))
    );
    let from: HashMap<String, u64> = m["from_turn"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    // Each first measured turn lies between a quarter and three quarters of its
    // conversation's 6 (records number them from 1): turns 2 to 5.
    assert_eq!(from.len(), 40);
    assert!(from.values().all(|&t| (2..=5).contains(&t)), "{from:?}");
    assert!((2..=5).all(|t| from.values().any(|&f| f == t)), "{from:?}");
    // Exactly the turns from their conversation's drawn one on are measured.
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.len(), 240);
    let mut measured = 0;
    for r in &records {
        let (s, turn) = &of_index[r["index"].as_u64().unwrap() as usize];
        let warmup = r["warmup"] == true;
        assert_eq!(r["turn"].as_u64(), Some(turn + 1), "record {r}");
        assert_eq!(warmup, turn + 1 < from[s], "record {r}");
        measured += u64::from(!warmup);
    }
    assert!(
        measured > 40 && measured < 240,
        "{measured} of 240 measured"
    );
    // Warmup turns are in no statistic.
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["requests"]["total"], measured);
    assert_eq!(summary["warmup_requests"], 240 - measured);

    // The same seed draws the same turns; another seed others.
    let again = dir.join("again");
    ok(run(
        &trace,
        &again,
        &["--measure-from", "mid", "--seed", "7"],
    ));
    assert_eq!(read_json(&again.join("run.json"))["measure_from"], *m);
    let other = dir.join("other");
    ok(run(
        &trace,
        &other,
        &["--measure-from", "mid", "--seed", "8"],
    ));
    let drawn = read_json(&other.join("run.json"))["measure_from"]["from_turn"].clone();
    assert_ne!(drawn, m["from_turn"]);
    // Without it every turn is measured, and run.json says so.
    let all = dir.join("all");
    ok(run(&trace, &all, &[]));
    assert_eq!(
        read_json(&all.join("run.json"))["measure_from"],
        json!({"mode": "start"})
    );
    assert_eq!(
        read_json(&all.join("summary.json"))["requests"]["total"],
        240
    );
}

#[test]
fn measure_from_mid_is_refused_where_it_cannot_hold() {
    let dir = temp_dir("measure-mid-refused");
    let (trace, _) = conversations(&dir);
    let out = run(
        &trace,
        &dir.join("ts"),
        &["--measure-from", "mid", "--session-mode", "timestamp"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --session-mode after-parent"));
    let plain = common::text_trace(&dir, 10, 10, 2);
    let out = common::replay_mock(&plain, &dir.join("plain"))
        .args(["--measure-from", "mid"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("has none"), "{err}");
}

#[test]
fn a_scenario_fixes_its_options_says_so_and_refuses_one_given_again() {
    let dir = temp_dir("scenario");
    let trace =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/formats/tracelab_sample.csv");
    let replay = |out: &str, extra: &[&str]| {
        common::replay_mock(&trace, &dir.join(out))
            .args(["--tokenizer", path(&tokenizer("qwen3"))])
            .args(extra)
            .output()
            .unwrap()
    };
    ok(replay("followed", &["--scenario", "tracelab-agentic"]));
    let run = read_json(&dir.join("followed/run.json"));
    let scenario = &run["scenario"];
    assert_eq!(scenario["name"], "tracelab-agentic");
    assert_eq!(scenario["followed"], true);
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/scenarios/tracelab-agentic.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(scenario["options"], file["options"]);
    // Its options took effect.
    assert_eq!(run["format"], "tracelab");
    assert_eq!(run["measure_from"]["mode"], "mid");
    // An option the scenario fixes is refused, whatever its value; so is an unknown name.
    for (extra, said) in [
        (
            &["--carry-forward", "off"][..],
            "--carry-forward: the scenario tracelab-agentic fixes it",
        ),
        (
            &["--measure-from=mid"][..],
            "--measure-from: the scenario tracelab-agentic fixes it",
        ),
    ] {
        let mut args = vec!["--scenario", "tracelab-agentic"];
        args.extend(extra);
        let out = replay("refused", &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(said), "{err}");
    }
    let out = replay("unknown", &["--scenario", "agentx"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("there are: tracelab-agentic"));
}
