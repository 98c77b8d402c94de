//! The run is what the plan says: over random traces (with and without conversations) and
//! random combinations of the shaping options, the effective schedule announced before the
//! start (run.json's `schedule`, the numbers of the plan line) equals what requests.jsonl
//! shows: the record count, the first and last planned send, the busiest second.

mod common;

use proptest::prelude::*;
use serde_json::Value;

/// A trace of `gaps.len()` text records (no tokenizer needed); with `sessions`, records
/// belong to a few Mooncake conversations (`session_id`), so later turns wait for earlier.
fn write_trace(dir: &std::path::Path, gaps: &[u32], sessions: Option<u32>) -> std::path::PathBuf {
    let mut t = 0u64;
    let lines: Vec<String> = gaps
        .iter()
        .enumerate()
        .map(|(i, gap)| {
            t += u64::from(*gap);
            let session = sessions.map_or(String::new(), |k| {
                format!(r#", "session_id": "s{}""#, i as u32 % k)
            });
            format!(
                r#"{{"timestamp": {t}, "text_input": "a b c", "input_length": 3, "output_length": 2{session}}}"#
            )
        })
        .collect();
    let path = dir.join("trace.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn ns(v: &Value, key: &str) -> i64 {
    v[key].as_f64().map_or(0, |ms| (ms * 1e6).round() as i64)
}

/// The planned send of a record: its deadline less what a parent or a closed-loop slot added.
fn planned_ns(r: &Value) -> i64 {
    ns(r, "scheduled_ms") - ns(r, "session_delay_ms") - ns(r, "queue_ms")
}

fn busiest_second(sorted: &[i64]) -> u64 {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..sorted.len() {
        while sorted[hi] - sorted[lo] >= 1_000_000_000 {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u64
}

#[derive(Debug, Clone)]
struct Options {
    gaps: Vec<u32>,
    sessions: Option<u32>,
    start_offset_ms: Option<u32>,
    max_requests: Option<u64>,
    max_idle_gap_ms: Option<u32>,
    duration_ms: Option<u32>,
    time_in_ms: Option<u32>,
    passes: u64,
    warmup: u64,
    rate: Option<u32>,
}

fn options() -> impl Strategy<Value = Options> {
    (
        prop::collection::vec(0u32..4000, 3..30),
        prop::option::of(1u32..4),
        prop::option::of(0u32..20_000),
        prop::option::of(1u64..40),
        prop::option::of(1u32..2000),
        prop::option::of(1u32..40_000),
        prop::option::of(50u32..400),
        1u64..3,
        0u64..3,
        prop::option::weighted(0.25, 20u32..200),
    )
        .prop_map(
            |(gaps, sessions, offset, max, idle, duration, wall, passes, warmup, rate)| Options {
                gaps,
                sessions,
                start_offset_ms: offset,
                max_requests: max,
                max_idle_gap_ms: idle,
                duration_ms: duration,
                time_in_ms: wall,
                passes,
                warmup,
                rate,
            },
        )
}

fn secs(ms: u32) -> String {
    format!("{}", f64::from(ms) / 1000.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_plan_is_what_is_sent(o in options()) {
        let dir = common::temp_dir("schedule-prop");
        let trace = write_trace(&dir, &o.gaps, o.sessions);
        let span_ms: u32 = o.gaps.iter().sum();
        // Runs stay short: the whole trace plays in about 0.3 s.
        let scale = (f64::from(span_ms) * f64::from(o.passes as u32) / 300.0).max(1.0);
        let out = dir.join("run");
        let mut args: Vec<String> = vec![
            "--mock".into(), "--mock-ttft-ms".into(), "0".into(), "--mock-itl-ms".into(), "0".into(),
            "--trace".into(), trace.display().to_string(),
            "--output".into(), out.display().to_string(),
            "--time-scale".into(), scale.to_string(),
            "--loop".into(), o.passes.to_string(),
        ];
        let mut add = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                args.push(flag.into());
                args.push(v);
            }
        };
        add("--start-offset", o.start_offset_ms.map(secs));
        add("--max-requests", o.max_requests.map(|n| n.to_string()));
        add("--max-idle-gap", o.max_idle_gap_ms.map(secs));
        add("--duration", o.duration_ms.map(secs));
        add("--time-in-secs", o.time_in_ms.map(secs));
        add("--rate", o.rate.map(|r| r.to_string()));
        if o.warmup > 0 {
            add("--warmup-requests", Some(o.warmup.to_string()));
        }
        // A combination that sends or measures nothing is refused before the start, with
        // the reason; otherwise the run sends exactly the plan.
        use clap::Parser;
        let cli = llmreplay::cli::Cli::parse_from(
            ["llmreplay", "replay", "--quiet"].into_iter().map(String::from).chain(args.iter().cloned()),
        );
        let llmreplay::cli::Command::Replay(parsed) = cli.command else { panic!("replay") };
        let plan = llmreplay::plan::ReplayPlan::from_args(&parsed).unwrap();
        let outcome = match llmreplay::commands::replay::run(&plan) {
            Ok(outcome) => outcome,
            Err(e) => {
                let why = e.to_string();
                prop_assert!(
                    why.contains("nothing would be sent") || why.contains("leaves nothing to measure"),
                    "{why}"
                );
                prop_assert_eq!(e.exit_code(), 1);
                return Ok(());
            }
        };
        let run: Value = serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
        let plan = &run["schedule"];
        let records = common::read_jsonl(&outcome.requests_path);
        prop_assert_eq!(records.len() as u64, plan["records"].as_u64().unwrap(), "{}", plan);
        let warmup = records.iter().filter(|r| r["warmup"] == true).count() as u64;
        prop_assert_eq!(warmup, plan["warmup"].as_u64().unwrap());
        let mut planned: Vec<i64> = records.iter().map(planned_ns).collect();
        planned.sort_unstable();
        prop_assert_eq!(planned[0], ns(plan, "first_send_ms"), "{}", plan);
        prop_assert_eq!(*planned.last().unwrap(), ns(plan, "last_send_ms"), "{}", plan);
        prop_assert_eq!(busiest_second(&planned), plan["busiest_second"].as_u64().unwrap());
        // Indices are those of the records kept, each once.
        let mut idx: Vec<u64> = records.iter().map(|r| r["index"].as_u64().unwrap()).collect();
        idx.sort_unstable();
        idx.dedup();
        prop_assert_eq!(idx.len(), records.len());
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// The README's first load-mode example used to send nothing: `--max-requests` was applied
/// before `--start-offset`, so the 300 records kept all lay before the offset.
#[test]
fn start_offset_comes_before_max_requests() {
    let dir = common::temp_dir("schedule-offset");
    let gaps: Vec<u32> = vec![100; 50];
    let trace = write_trace(&dir, &gaps, None);
    let out = dir.join("run");
    let outcome = common::replay_in_process(&[
        "--mock".into(),
        "--trace".into(),
        trace.display().to_string(),
        "--output".into(),
        out.display().to_string(),
        "--start-offset".into(),
        "2".into(),
        "--max-requests".into(),
        "10".into(),
        "--time-scale".into(),
        "10".into(),
    ]);
    let records = common::read_jsonl(&outcome.requests_path);
    let mut idx: Vec<u64> = records
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    idx.sort_unstable();
    // Record i is at (i + 1) x 100 ms, trace time i x 100 ms: the offset of 2 s keeps
    // records 20 on.
    assert_eq!(idx, (20..30).collect::<Vec<u64>>());
    assert_eq!(outcome.summary.ok, 10);
    std::fs::remove_dir_all(&dir).ok();
}
