//! `llmreplay sweep` against a mock that serves at most 2 requests at once: the knee it finds
//! is where the arrival rate passes the mock's capacity.

use crate::common;

use common::{bin, path, temp_dir, text_trace, MockProcess};
use serde_json::Value;

/// 60 requests 100 ms apart (10 req/s at scale 1), 9 tokens each: 20 ms to the first token
/// and 5 ms a token after it make 60 ms a request, so 2 places serve 33.3 req/s: scale 3.33.
/// With a TTFT SLO of 50 ms (30 ms of queueing) and 90 % to meet it, deterministic arrivals
/// pass up to 33.96 req/s (the 54th request's wait reaches 30 ms there): scale 3.40.
#[test]
fn sweep_finds_the_knee_of_a_mock_with_max_running() {
    let dir = temp_dir("sweep");
    let trace = text_trace(&dir, 60, 100, 9);
    let mock = MockProcess::start(&["--max-running", "2", "--ttft-ms", "20", "--itl-ms", "5"]);
    let out = dir.join("sweep");
    let status = bin()
        .args([
            "sweep",
            "--start-scale",
            "2",
            "--bisect",
            "3",
            "--goodput",
            "ttft:50",
        ])
        .args(["--model", "m", "--endpoint", &mock.url(), "--scrape-server"])
        .args(["--scrape-interval", "0.2", "--trace"])
        .arg(&trace)
        .arg("--output")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let sweep: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap();
    let passed = sweep["passed_scale"].as_f64().unwrap();
    let failed = sweep["failed_scale"].as_f64().unwrap();
    // Within one step: the last bisection's bracket (2^(1/8) wide) holds the knee.
    assert!(failed / passed <= 2f64.powf(1.0 / 8.0) + 1e-9, "{sweep}");
    assert!(passed <= 3.40 * 1.03 && failed >= 3.33 * 0.97, "{sweep}");
    let steps = sweep["steps"].as_array().unwrap();
    assert_eq!(
        steps.len(),
        2 + 3,
        "2 growing steps, then 3 bisections: {sweep}"
    );
    let table = std::fs::read_to_string(out.join("sweep.txt")).unwrap();
    for s in steps {
        let dir = std::path::PathBuf::from(s["dir"].as_str().unwrap());
        assert!(dir.join("summary.json").is_file() && dir.join("server_metrics.jsonl").is_file());
        // Each step's verdict, as its own summary has it, is in its row.
        let own = common::read_json(&dir.join("summary.json"))["verdict"].clone();
        assert_eq!(s["verdict"], own["result"], "{s}");
        let keys: Vec<&Value> = own["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["key"])
            .collect();
        assert_eq!(
            s["verdict_reasons"]
                .as_array()
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            keys
        );
        let row = format!("x{:<8.3}", s["scale"].as_f64().unwrap());
        let line = table.lines().find(|l| l.starts_with(&row)).unwrap();
        assert!(line.contains(own["result"].as_str().unwrap()), "{line}");
    }
    let page = std::fs::read_to_string(out.join("sweep.html")).unwrap();
    assert!(page.contains("<svg") && page.contains("highest scale meeting every SLO"));
}

#[test]
fn sweep_needs_slos_and_a_time_scale_that_matters() {
    let dir = temp_dir("sweep-usage");
    let trace = text_trace(&dir, 3, 100, 2);
    for (extra, says) in [
        (&[][..], "--goodput"),
        (
            &["--goodput", "ttft:50", "--time-scale", "2"][..],
            "--start-scale",
        ),
        // A closed loop has no time to scale: every step would be the same run.
        (
            &["--goodput", "ttft:50", "--concurrency", "4"][..],
            "closed loop",
        ),
        // Over sessions, each step sets the cap, and every turn follows its parent.
        (
            &[
                "--goodput",
                "ttft:50",
                "--over",
                "sessions",
                "--max-active-sessions",
                "4",
            ][..],
            "--start-sessions",
        ),
        (
            &[
                "--goodput",
                "ttft:50",
                "--over",
                "sessions",
                "--session-mode",
                "timestamp",
            ][..],
            "after-parent",
        ),
        (
            &[
                "--goodput",
                "ttft:50",
                "--over",
                "sessions",
                "--start-scale",
                "2",
            ][..],
            "--start-scale is the first step of --over scale",
        ),
        (
            &["--goodput", "ttft:50", "--start-sessions", "2"][..],
            "--over sessions",
        ),
    ] {
        let out = bin()
            .args(["sweep", "--mock", "--trace"])
            .arg(&trace)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
}

/// `n` records `every_ms` apart of `blocks` blocks of 16 tokens; with `shared`, every record
/// starts with the same 2 blocks (reuse within the trace), the rest unique.
fn hash_id_trace(
    dir: &std::path::Path,
    n: u64,
    every_ms: u64,
    blocks: u64,
    shared: bool,
) -> std::path::PathBuf {
    let trace = dir.join("hash.jsonl");
    let mut unique = 1000u64;
    let lines: Vec<String> = (0..n)
        .map(|i| {
            let mut ids: Vec<u64> = if shared { vec![1, 2] } else { Vec::new() };
            while (ids.len() as u64) < blocks {
                unique += 1;
                ids.push(unique);
            }
            format!(
                r#"{{"timestamp": {}, "input_length": {}, "output_length": 5, "hash_ids": {ids:?}}}"#,
                i * every_ms,
                blocks * 16
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    trace
}

/// A fast mock with a prefix cache larger than any test trace, in the trace's 16-token blocks.
fn cache_mock() -> MockProcess {
    MockProcess::start(&[
        "--cache-blocks",
        "100000",
        "--cache-block-size",
        "16",
        "--ttft-ms",
        "1",
        "--itl-ms",
        "1",
    ])
}

fn sweep(
    mock: &MockProcess,
    trace: &std::path::Path,
    out: &std::path::Path,
    extra: &[&str],
) -> Value {
    let status = bin()
        .arg("sweep")
        .args(extra)
        .args([
            "--model",
            "m",
            "--endpoint",
            &mock.url(),
            "--block-size",
            "16",
            // The mock caches whole 16-word blocks of the messages' text (no template).
            "--server-block-size",
            "16",
            "--tokenizer",
        ])
        .arg(common::tokenizer("qwen3"))
        .arg("--trace")
        .arg(trace)
        .arg("--output")
        .arg(out)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.code().is_some_and(|c| c == 0 || c == 3), "{status}");
    serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap()
}

/// A step whose observed prefix share is its expected one within 0.5 points, with no cache
/// warning: (expected, observed).
fn shares_agree(s: &Value) -> (f64, f64) {
    let (e, o) = (
        s["prefix_expected_share"].as_f64().unwrap(),
        s["prefix_observed_share"].as_f64().unwrap(),
    );
    assert!(
        (o - e).abs() <= 0.005,
        "observed {o} against expected {e}: {s}"
    );
    assert!(s["cache_warning"].is_null(), "{s}");
    (e, o)
}

/// Each step's prompts are new to the servers: against a cache larger than the trace, every
/// step's observed prefix share is its expected one (the trace's own reuse), so a server
/// with a cache does the same prefill work at each step as it would the first time, and the
/// knee cannot move with the cache. With `--warm-cache` the later steps hit everything (the
/// prefill a knee depends on skipped), and the sweep says so. (Judged by the servers' counts
/// of cached tokens: where a TTFT crosses an SLO depends on the machine's load.)
#[test]
fn sweep_steps_measure_their_own_reuse_not_the_cache_before_them() {
    let dir = temp_dir("sweep-cache");
    let trace = hash_id_trace(&dir, 40, 20, 6, true);
    let mock = cache_mock();
    let args = [
        "--start-scale",
        "4",
        "--max-steps",
        "3",
        "--bisect",
        "0",
        "--goodput",
        "ttft:10000",
    ];
    let fresh = sweep(&mock, &trace, &dir.join("fresh"), &args);
    let steps = fresh["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "{fresh}");
    for s in steps {
        let (e, _) = shares_agree(s);
        assert!(e > 0.2, "the trace's own reuse is expected: {s}");
    }
    let text = std::fs::read_to_string(dir.join("fresh/sweep.txt")).unwrap();
    assert!(
        text.contains("prompts: new to the servers at each step"),
        "{text}"
    );

    let warm = sweep(
        &mock,
        &trace,
        &dir.join("warm"),
        &[&args[..], &["--warm-cache"]].concat(),
    );
    let later = &warm["steps"].as_array().unwrap()[1..];
    for s in later {
        let (e, o) = (
            s["prefix_expected_share"].as_f64().unwrap(),
            s["prefix_observed_share"].as_f64().unwrap(),
        );
        // Every whole block was cached by the steps before (a prompt's last, partial block
        // never is).
        assert!(o > e + 0.3, "observed {o} against expected {e}: {s}");
        assert!(
            s["cache_warning"]
                .as_str()
                .unwrap()
                .contains("--warm-cache"),
            "{s}"
        );
    }
    let text = std::fs::read_to_string(dir.join("warm/sweep.txt")).unwrap();
    assert!(
        text.contains("--warm-cache") && text.contains("warning: step 2"),
        "{text}"
    );
    let page = std::fs::read_to_string(dir.join("warm/sweep.html")).unwrap();
    assert!(page.contains("TTFT SLO") && page.contains("prompts: the same at every step"));
}

/// `--prime` in a sweep against a cache larger than the trace: each step is measured after
/// one unmeasured pass of its own prompts, so every step's observed share holds every whole
/// block (far above the trace's own reuse), as its expected share does (one model of the
/// servers' caches runs through both passes), with no warning (the configuration says why);
/// each step's priming pass is kept in its `prime/` directory.
#[test]
fn a_primed_sweep_measures_every_step_with_its_own_prompts_cached() {
    let dir = temp_dir("sweep-prime");
    let trace = hash_id_trace(&dir, 40, 20, 6, true);
    let mock = cache_mock();
    let out = dir.join("primed");
    let primed = sweep(
        &mock,
        &trace,
        &out,
        &[
            "--start-scale",
            "4",
            "--max-steps",
            "2",
            "--bisect",
            "0",
            "--goodput",
            "ttft:10000",
            "--prime",
        ],
    );
    let steps = primed["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{primed}");
    for s in steps {
        // The expected hits know what the priming pass sent: every whole block.
        let (_, o) = shares_agree(s);
        assert!(o > 0.8, "observed {o}: {s}");
    }
    let text = std::fs::read_to_string(out.join("sweep.txt")).unwrap();
    assert!(text.contains("each step is primed (--prime)"), "{text}");
    let mut step_dirs: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    step_dirs.sort();
    assert_eq!(step_dirs.len(), 2);
    for d in step_dirs {
        let primed_records = common::read_jsonl(&d.join("prime/requests.jsonl"));
        assert_eq!(primed_records.len(), 40, "{}", d.display());
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["primed"], true);
    }
}

/// A priming pass that fills nothing (every request refused) stops the run before anything
/// is measured, with an error naming it: a cold run is not passed off as a primed one.
#[test]
fn a_priming_pass_without_success_measures_nothing() {
    let dir = temp_dir("prime-fails");
    let trace = text_trace(&dir, 5, 10, 2);
    let mock = MockProcess::start(&["--fault", "status:503:1"]);
    let out = dir.join("run");
    let output = common::replay_against(&mock, &trace, &out)
        .arg("--prime")
        .output()
        .unwrap();
    // 2: the run could not be carried out (the README's table).
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("--prime: the priming pass did not fill the caches")
            && err.contains("nothing was measured"),
        "{err}"
    );
    assert_eq!(
        common::read_jsonl(&out.join("prime/requests.jsonl")).len(),
        5
    );
    assert!(!out.join("summary.json").exists());
}

/// `sweep --over sessions` on agent tasks (DAG conversations of 3 turns each, every turn
/// released at its parent's end) against a mock that serves 2 requests at once: up to 2
/// tasks at once no turn queues (20 ms to the first token, within 50 ms); from 3 on one turn
/// of three waits for a place (a 60 ms answer), so most tasks have a turn past the SLO. The
/// knee is 2 sessions at once, and each step says its good tasks per second.
#[test]
fn sweep_over_sessions_finds_how_many_tasks_a_server_serves_at_once() {
    let dir = temp_dir("sweep-sessions");
    let trace = dir.join("tasks.jsonl");
    let lines: Vec<String> = (0..8)
        .map(|i| {
            let turn = |t: u32| {
                serde_json::json!({"messages": [{"role": "user", "content": format!("task {i} turn {t}")}], "max_tokens": 9})
            };
            serde_json::json!({"session_id": format!("t{i}"), "turns": [turn(0), turn(1), turn(2)]}).to_string()
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let mock = MockProcess::start(&["--max-running", "2", "--ttft-ms", "20", "--itl-ms", "5"]);
    // A sweep over sessions of the trace as it is then; its sweep.json and sweep.txt.
    let sweep_over = |name: &str| {
        let out = dir.join(name);
        let status = bin()
            .args([
                "sweep",
                "--over",
                "sessions",
                "--goodput",
                "ttft:50",
                "--quiet",
            ])
            .args(["--model", "m", "--api", "openai-chat"])
            .args(["--endpoint", &mock.url(), "--trace", path(&trace)])
            .args(["--output", path(&out)])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let table = std::fs::read_to_string(out.join("sweep.txt")).unwrap();
        (common::read_json(&out.join("sweep.json")), table, out)
    };
    let (sweep, table, out) = sweep_over("sweep");
    assert_eq!(sweep["over"], "sessions");
    assert_eq!(
        (
            sweep["passed_sessions"].as_f64(),
            sweep["failed_sessions"].as_f64()
        ),
        (Some(2.0), Some(3.0)),
        "{sweep}"
    );
    // 1, 2 and 4 sessions, then the one whole number between 2 and 4.
    let steps = sweep["steps"].as_array().unwrap();
    let levels: Vec<u64> = steps
        .iter()
        .map(|s| s["max_active_sessions"].as_u64().unwrap())
        .collect();
    assert_eq!(levels, [1, 2, 4, 3], "{sweep}");
    for s in steps {
        // Each step ran every task with its cap: its own run says so.
        let dir = std::path::PathBuf::from(s["dir"].as_str().unwrap());
        let run = common::read_json(&dir.join("run.json"));
        assert_eq!(
            run["max_active_sessions"].as_u64(),
            s["max_active_sessions"].as_u64(),
            "{run}"
        );
        let own = common::read_json(&dir.join("summary.json"))["sessions"]["tasks"].clone();
        assert_eq!(
            (s["tasks"].as_u64(), own["tasks"].as_u64()),
            (Some(8), Some(8))
        );
        assert_eq!(s["good_tasks"], own["good_tasks"]);
        assert_eq!(s["good_tasks_per_s"], own["good_tasks_per_s"]);
        let good = s["good_tasks"].as_u64().unwrap();
        assert_eq!(s["passed"], good as f64 / 8.0 >= 0.9, "{s}");
    }
    assert!(
        table
            .contains("most sessions at once meeting every SLO: 2 (the knee lies between 2 and 3)"),
        "{table}"
    );
    assert!(table.contains("good tasks 8/8"), "{table}");
    let page = std::fs::read_to_string(out.join("sweep.html")).unwrap();
    assert!(page.contains("Good tasks per second"));

    // Two tasks: at 2 sessions none waits for a place, so no larger cap could differ and the
    // sweep stops there, saying so.
    std::fs::write(&trace, lines[..2].join("\n")).unwrap();
    let (sweep, table, _) = sweep_over("small");
    assert_eq!(sweep["steps"].as_array().unwrap().len(), 2, "{sweep}");
    assert_eq!(
        (sweep["passed_sessions"].as_f64(), &sweep["all_at_once"]),
        (Some(2.0), &Value::Bool(true))
    );
    assert!(
        table.contains("every session of the trace ran at once"),
        "{table}"
    );
}
