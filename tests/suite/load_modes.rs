//! Load modes through the same pipeline and records: a closed loop keeps exactly C in flight,
//! `--rate` paces records by its law, warmup records are recorded but in no statistic, and
//! `--start-offset` / `--max-idle-gap` reshape the trace's own timing.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common;
use common::{bin, read_jsonl, temp_dir, text_trace};

fn run(trace: &Path, out: &Path, mock_ms: (&str, &str), extra: &[&str]) -> Value {
    let status = bin()
        .args(["replay", "--mock", "--quiet", "--mock-ttft-ms", mock_ms.0])
        .args(["--mock-itl-ms", mock_ms.1])
        .arg("--trace")
        .arg(trace)
        .arg("--output")
        .arg(out)
        .args(extra)
        .status()
        .unwrap();
    assert!(status.success());
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

fn ms(r: &Value, k: &str) -> f64 {
    r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"))
}

/// Requests in flight at time t, from the records' [sent, end) intervals.
fn in_flight_at(rows: &[Value], t: f64) -> usize {
    rows.iter()
        .filter(|r| ms(r, "sent_ms") <= t && t < ms(r, "end_ms"))
        .count()
}

fn trace(dir: &Path, n: u64, every_ms: u64, output: u64) -> PathBuf {
    text_trace(dir, n, every_ms, output)
}

/// A closed loop of C: never more than C in flight (judged at each send, from the records'
/// own order: a sender stamps an end before it sends into the freed slot), C reached, and
/// the loop kept full between the first end and the last send: the time-weighted mean in
/// flight there is over C - 1, which a loop that kept one slot empty cannot reach, and from
/// which a correct loop falls only if every refill waited an eighth of the 110 ms a request
/// takes (no busy machine's scheduling does).
#[test]
fn a_closed_loop_keeps_exactly_c_in_flight() {
    const C: usize = 8;
    let dir = temp_dir("closed-loop");
    // Timestamps an hour apart: a closed loop ignores them.
    let t = trace(&dir, 120, 3_600_000, 10);
    let out = dir.join("run");
    let summary = run(
        &t,
        &out,
        ("100", "1"),
        &["--concurrency", &C.to_string(), "--num-sender", "2"],
    );
    assert_eq!(summary["requests"]["ok"], 120);
    let rows = read_jsonl(&out.join("requests.jsonl"));
    let first_end = rows
        .iter()
        .map(|r| ms(r, "end_ms"))
        .fold(f64::INFINITY, f64::min);
    let last_send = rows.iter().map(|r| ms(r, "sent_ms")).fold(0.0, f64::max);
    assert!(last_send < 60_000.0, "timestamps were not waited for");
    let at_sends: Vec<usize> = rows
        .iter()
        .map(|r| in_flight_at(&rows, ms(r, "sent_ms")))
        .collect();
    assert!(
        at_sends.iter().all(|&n| n <= C),
        "never more than C: {at_sends:?}"
    );
    assert_eq!(at_sends.iter().max(), Some(&C), "C reached");
    // In flight between the first end and the last send, weighted by time: the records'
    // sends and ends cut that stretch into pieces of constant count.
    let mut edges: Vec<f64> = rows
        .iter()
        .flat_map(|r| [ms(r, "sent_ms"), ms(r, "end_ms")])
        .filter(|&t| first_end < t && t < last_send)
        .collect();
    edges.extend([first_end, last_send]);
    edges.sort_by(f64::total_cmp);
    let weighted: f64 = edges
        .windows(2)
        .map(|w| (w[1] - w[0]) * in_flight_at(&rows, (w[0] + w[1]) / 2.0) as f64)
        .sum();
    let mean = weighted / (last_send - first_end);
    assert!(mean > (C - 1) as f64, "mean in flight {mean:.2} of {C}");
    for r in &rows {
        assert!(r["queue_ms"].as_f64().is_some(), "{r}");
        // Drift is from the free slot (the deadline), never from the trace's hours.
        assert!(ms(r, "scheduled_ms") < 60_000.0, "{r}");
        assert!(
            (ms(r, "drift_ms") - (ms(r, "sent_ms") - ms(r, "scheduled_ms"))).abs() < 1e-3,
            "{r}"
        );
    }
    assert!(
        summary["queue_ms"]["max"].as_f64().unwrap() > 100.0,
        "later ones queued"
    );
}

#[test]
fn a_rate_paces_records_in_order_by_its_law() {
    let dir = temp_dir("rate");
    let t = trace(&dir, 40, 3_600_000, 2);
    let out = dir.join("run");
    run(
        &t,
        &out,
        ("1", "1"),
        &["--rate", "100", "--arrival", "constant"],
    );
    let mut rows = read_jsonl(&out.join("requests.jsonl"));
    rows.sort_by_key(|r| r["index"].as_u64());
    for (i, r) in rows.iter().enumerate() {
        assert!(
            (ms(r, "scheduled_ms") - 10.0 * i as f64).abs() < 1e-6,
            "{r}"
        );
    }
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(run_json["load"]["mode"], "rate");
    assert_eq!(run_json["load"]["arrival"], "constant");
}

#[test]
fn warmup_records_are_recorded_but_in_no_statistic() {
    let dir = temp_dir("warmup");
    let t = trace(&dir, 30, 5, 2);
    let out = dir.join("run");
    let summary = run(&t, &out, ("1", "1"), &["--warmup-requests", "10"]);
    assert_eq!(summary["warmup_requests"], 10);
    assert_eq!(summary["requests"]["total"], 20);
    let rows = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(rows.len(), 30);
    let warm: Vec<u64> = rows
        .iter()
        .filter(|r| r["warmup"] == true)
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(warm.len(), 10);
    assert!(warm.iter().all(|&i| i < 10), "the first records: {warm:?}");
    assert_eq!(summary["ttft_ms"]["count"], 20);
}

#[test]
fn start_offset_and_max_idle_gap_reshape_the_trace() {
    let dir = temp_dir("shape");
    // 10 records 2 s apart: skip the first 5 s, cut the 2 s gaps to 0.1 s.
    let t = trace(&dir, 10, 2_000, 2);
    let out = dir.join("run");
    run(
        &t,
        &out,
        ("1", "1"),
        &["--start-offset", "5", "--max-idle-gap", "0.1"],
    );
    let mut rows = read_jsonl(&out.join("requests.jsonl"));
    rows.sort_by_key(|r| r["index"].as_u64());
    let indices: Vec<u64> = rows.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(
        indices,
        (3..10).collect::<Vec<_>>(),
        "records before 5 s skipped"
    );
    for (k, r) in rows.iter().enumerate() {
        assert!(
            (ms(r, "scheduled_ms") - 100.0 * (k as f64 + 1.0)).abs() < 1e-6,
            "{r}"
        );
    }
}

#[test]
fn conflicting_or_bad_load_options_are_usage_errors() {
    for (args, says) in [
        (vec!["--rate", "0"], "--rate"),
        (vec!["--concurrency", "0"], "--concurrency"),
        (vec!["--rate", "5", "--burstiness", "2"], "--arrival gamma"),
        (
            vec!["--rate", "5", "--concurrency", "3"],
            "cannot be used with",
        ),
        (vec!["--max-idle-gap=-1"], "--max-idle-gap"),
        (vec!["--prompt-source", "dataset"], "--prompt-dataset FILE"),
        (vec!["--loop", "0"], "--loop"),
    ] {
        let o = bin()
            .args([
                "replay",
                "--mock",
                "--quiet",
                "--dry-run",
                "--trace",
                "x.jsonl",
            ])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--synthetic`: generated records through the same pipeline, exact lengths, the shared
/// prefix repeated by every prompt, and the generated trace kept with the results.
#[test]
fn synthetic_load_without_a_trace() {
    let dir = temp_dir("synthetic");
    let out = dir.join("run");
    let status = bin()
        .args(["replay", "--mock", "--quiet", "--block-size", "16"])
        .args([
            "--synthetic",
            "input=128,output=4,input-stddev=20,prefix-share=0.5",
        ])
        .args(["--concurrency", "4", "--max-requests", "40"])
        .arg("--tokenizer")
        .arg(common::tokenizer("qwen3"))
        .arg("--output")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let rows = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(rows.len(), 40);
    assert!(rows.iter().all(|r| r["prompt_tokens"] == r["input_tokens"]));
    let lengths: std::collections::HashSet<u64> = rows
        .iter()
        .map(|r| r["input_tokens"].as_u64().unwrap())
        .collect();
    assert!(lengths.len() > 5, "lengths spread: {lengths:?}");
    let generated = read_jsonl(&out.join("synthetic_trace.jsonl"));
    assert_eq!(generated.len(), 40);
    for g in &generated {
        let ids = g["hash_ids"].as_array().unwrap();
        assert_eq!(
            ids[..3],
            [0, 1, 2].map(Value::from),
            "the shared prefix: {g}"
        );
    }
    // Refused without a pace.
    let o = bin()
        .args(["replay", "--mock", "--synthetic", "input=8,output=1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--rate R or --concurrency C"));
}

/// `--loop N`: the trace again and again, each pass one mean gap after the previous one's
/// end, indices going on, conversations new in each pass.
#[test]
fn loop_replays_the_trace_again_shifted_in_time() {
    let dir = temp_dir("loop");
    let t = trace(&dir, 5, 10, 2); // span 40 ms, mean gap 8 ms: passes 48 ms apart
    let out = dir.join("run");
    let summary = run(&t, &out, ("1", "1"), &["--loop", "3"]);
    assert_eq!(summary["requests"]["ok"], 15);
    let mut rows = read_jsonl(&out.join("requests.jsonl"));
    rows.sort_by_key(|r| r["index"].as_u64());
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["index"], i as u64);
        let (pass, k) = (i / 5, i % 5);
        let want = pass as f64 * 48.0 + k as f64 * 10.0;
        assert!((ms(r, "scheduled_ms") - want).abs() < 1e-6, "{r}");
    }
}
