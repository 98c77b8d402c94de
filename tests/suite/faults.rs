//! Nothing lost under faults: every fault of the mock at 5 % each, and each request still ends
//! with exactly one record whose error kind matches what the mock injected.

use std::collections::HashMap;

use serde_json::Value;

use crate::common;
use common::{bin, read_jsonl, replay_against, temp_dir, text_trace, MockProcess};

const FAULTS: [&str; 11] = [
    "refuse",
    "reset-mid-stream",
    "status:429",
    "status:500",
    "status:503",
    "stall",
    "slow-head",
    "malformed-sse",
    "truncated-chunk",
    "close-after-response",
    "huge-head",
];

/// The error kinds a request with this fault may end with (`ok` = success).
fn expected(fault: &str) -> &'static [&'static str] {
    match fault {
        "reset-mid-stream" => &["reset"],
        "stall" => &["timeout"],
        "malformed-sse" | "huge-head" => &["protocol"],
        "truncated-chunk" => &["reset", "protocol"],
        "slow-head" | "close-after-response" => &["ok"],
        f if f.starts_with("status:") => &["http"],
        other => panic!("unexpected fault {other}"),
    }
}

#[test]
fn fault_matrix_2000_requests_every_fault_at_5_percent() {
    let n = 2000;
    let dir = temp_dir("faults");
    let trace = dir.join("trace.jsonl");
    let lines: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"timestamp": {}, "text_input": "a b c", "input_length": 3, "output_length": 8}}"#,
                i * 2
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let log = dir.join("faults.jsonl");
    let mut args = vec![
        "--ttft-ms".to_string(),
        "5".into(),
        "--itl-ms".into(),
        "1".into(),
        "--seed".into(),
        "11".into(),
        "--fault-log".into(),
        log.to_str().unwrap().into(),
    ];
    for f in FAULTS {
        args.push("--fault".into());
        args.push(format!("{f}:0.05"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mock = MockProcess::start(&args);
    let out = dir.join("run");
    let status = bin()
        .args([
            "replay",
            "--quiet",
            "--endpoint",
            &mock.url(),
            "--trace",
            trace.to_str().unwrap(),
            "--request-timeout",
            "1",
            "--output",
            out.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    drop(mock);
    assert!(status.success(), "the run completes despite the faults");

    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.len(), n);
    let mut by_index: HashMap<u64, Value> = HashMap::new();
    for r in records {
        assert!(by_index.insert(r["index"].as_u64().unwrap(), r).is_none());
    }
    assert_eq!(by_index.len(), n, "one record per index");

    let mut injected: HashMap<u64, String> = HashMap::new();
    let mut refused = 0;
    let mut seen: HashMap<String, u64> = HashMap::new();
    for f in read_jsonl(&log) {
        let fault = f["fault"].as_str().unwrap().to_string();
        *seen.entry(fault.clone()).or_default() += 1;
        match f["index"].as_u64() {
            Some(i) => {
                injected.insert(i, fault);
            }
            None => refused += 1,
        }
    }
    for f in FAULTS {
        assert!(
            seen.get(f).is_some_and(|&c| c > 0),
            "{f} was never injected: {seen:?}"
        );
    }
    let mut unexplained = 0;
    for (i, r) in &by_index {
        let kind = r["error"]["kind"].as_str().unwrap_or("ok");
        match injected.get(i) {
            Some(fault) => {
                assert!(
                    expected(fault).contains(&kind),
                    "record {i}: fault {fault} ended as {kind}: {r}"
                );
                if let Some(code) = fault.strip_prefix("status:") {
                    assert_eq!(r["status"].to_string(), code, "record {i}");
                }
            }
            None if kind == "ok" => {}
            None => {
                // A request written onto a connection the mock refused just then.
                assert!(
                    ["reset", "connect"].contains(&kind),
                    "record {i} failed with {kind}: {r}"
                );
                unexplained += 1;
            }
        }
    }
    assert!(
        unexplained <= refused,
        "{unexplained} failures without an injected fault, {refused} refused connections"
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"]["total"], n as u64);
}

/// `--first-token-timeout` ends a stream that has not started in time, long before the
/// request timeout, and leaves streams that did start alone.
#[test]
fn first_token_timeout_fails_only_slow_starts() {
    let dir = temp_dir("first-token");
    let trace = text_trace(&dir, 6, 5, 40);
    let run = |ttft_ms: &str, name: &str, exit: i32| {
        let out = dir.join(name);
        let status = bin()
            .args(["replay", "--mock", "--quiet", "--mock-itl-ms", "20"])
            .args(["--mock-ttft-ms", ttft_ms, "--first-token-timeout", "0.3"])
            .arg("--trace")
            .arg(&trace)
            .arg("--output-path")
            .arg(&out)
            .arg("--output")
            .arg(dir.join(format!("{name}.d")))
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(exit));
        read_jsonl(&out)
    };
    // 40 tokens at 20 ms take 0.8 s after a 50 ms first token: longer than the limit, but
    // the limit is on the first token only.
    for r in run("50", "fast.jsonl", 0) {
        assert!(r["error"].is_null(), "{r}");
    }
    // Every request fails: the run completed, but nothing succeeded (exit 3).
    let slow = run("3000", "slow.jsonl", 3);
    assert_eq!(slow.len(), 6);
    for r in slow {
        assert_eq!(r["error"]["kind"], "timeout", "{r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains("first token"), "{message}");
        let waited = r["end_ms"].as_f64().unwrap() - r["sent_ms"].as_f64().unwrap();
        assert!(
            waited < 2500.0,
            "ended by the 0.3 s limit, not the 3 s TTFT: {waited} ms"
        );
    }
}

/// A run in which every request failed exits 3, says the first error, and keeps it in
/// summary.json; its duration spans the failures (a server that refuses every request still
/// took the trace's 1.9 s, not zero).
#[test]
fn a_run_where_nothing_succeeded_exits_3_with_the_first_error() {
    let dir = temp_dir("all-failed");
    let trace = text_trace(&dir, 20, 100, 4);
    let mock = MockProcess::start(&["--fault", "status:503:1"]);
    let out = dir.join("run");
    let output = replay_against(&mock, &trace, &out).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no request succeeded (20 failed)"),
        "{stderr}"
    );
    assert!(stderr.contains("first http error"), "{stderr}");
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("first:"), "{table}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"]["failed"], 20);
    let first = summary["requests"]["first_error_by_kind"]["http"]
        .as_str()
        .unwrap();
    assert!(first.contains("503"), "{first}");
    let duration = summary["duration_s"].as_f64().unwrap();
    assert!(
        duration >= 1.8,
        "the failures span the 1.9 s trace: {duration} s"
    );
}

/// A stream that stops mid-way (the server died without closing it) ends at --stall-timeout
/// as a `timeout` that keeps what was received, not at the 600 s request timeout.
#[test]
fn a_stream_stalled_mid_way_ends_at_the_stall_timeout() {
    let dir = temp_dir("stall");
    let trace = text_trace(&dir, 5, 10, 40);
    let mock = MockProcess::start(&["--fault", "stall:1", "--ttft-ms", "5", "--itl-ms", "5"]);
    let out = dir.join("run.jsonl");
    let started = std::time::Instant::now();
    let status = replay_against(&mock, &trace, &dir.join("run"))
        .args(["--stall-timeout", "0.5", "--output-path"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3), "nothing succeeded");
    assert!(
        started.elapsed().as_secs() < 30,
        "ended by the stall timeout"
    );
    let records = read_jsonl(&out);
    assert_eq!(records.len(), 5);
    for r in records {
        assert_eq!(r["error"]["kind"], "timeout", "{r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains("stalled"),
            "{r}"
        );
        assert!(
            r["chunks"].as_u64().unwrap() > 0,
            "what was received is kept: {r}"
        );
        let e2el = r["e2el_ms"].as_f64().unwrap();
        assert!(
            (400.0..3000.0).contains(&e2el),
            "ended ~0.5 s after the last byte: {e2el}"
        );
    }
}

/// `--max-error-rate`: once more than that share of the recorded requests failed, the run
/// stops sending, drains, says why in summary.json and report.html, and exits 3.
#[test]
fn max_error_rate_stops_the_run_and_says_so() {
    let dir = temp_dir("max-error-rate");
    let trace = text_trace(&dir, 300, 20, 2);
    let mock = MockProcess::start(&["--fault", "status:503:0.5", "--ttft-ms", "1"]);
    let out = dir.join("run");
    let output = replay_against(&mock, &trace, &out)
        .args(["--max-error-rate", "0.2"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--max-error-rate 0.2"), "{stderr}");
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert!(
        records.len() < 150,
        "stopped early: {} of 300 sent",
        records.len()
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["ended"]["how"], "stopped-by-max-error-rate");
    assert_eq!(summary["ended"]["exit_code"], 3);
    assert!(
        summary["ended"]["detail"]
            .as_str()
            .unwrap()
            .contains("max-error-rate"),
        "{summary}"
    );
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("Ended") && page.contains("--max-error-rate 0.2"));
}

/// `--max-error-rate` judges requests in schedule order: fast 503s do not count before the
/// slower successes scheduled earlier. At a 20 % failure share a limit of 0.5 never stops a
/// run (10 seeds of 10); at 60 % it does.
#[test]
fn max_error_rate_is_judged_in_schedule_order() {
    let dir = temp_dir("max-error-rate-order");
    // 200 requests 4 ms apart; a success streams 20 tokens 10 ms apart (~0.25 s), a failure
    // is answered at once.
    let trace = text_trace(&dir, 200, 4, 20);
    let run = |rate: &str, seed: u64| {
        let fault = format!("status:503:{rate}");
        let seed = seed.to_string();
        let mock = MockProcess::start(&[
            "--fault",
            &fault,
            "--seed",
            &seed,
            "--ttft-ms",
            "50",
            "--itl-ms",
            "10",
        ]);
        let out = dir.join(format!("run-{rate}-{seed}"));
        let status = replay_against(&mock, &trace, &out)
            .args(["--max-error-rate", "0.5"])
            .output()
            .unwrap();
        let records = read_jsonl(&out.join("requests.jsonl"));
        let failed = records.iter().filter(|r| !r["error"].is_null()).count();
        (status.status.code(), records.len(), failed)
    };
    for seed in 1..=10 {
        let (code, n, failed) = run("0.2", seed);
        assert_eq!(
            (code, n),
            (Some(0), 200),
            "seed {seed}: {failed} of {n} failed, and the run was stopped"
        );
    }
    let (code, n, _) = run("0.6", 1);
    assert_eq!(code, Some(3));
    assert!(n < 200, "stopped early: {n} sent");
}
