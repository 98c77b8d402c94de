//! `llmreplay sweep` against a mock that serves at most 2 requests at once: the knee it finds
//! is where the arrival rate passes the mock's capacity.

mod common;

use common::{bin, temp_dir, text_trace, MockProcess};
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
    for s in steps {
        let dir = std::path::PathBuf::from(s["dir"].as_str().unwrap());
        assert!(dir.join("summary.json").is_file() && dir.join("server_metrics.jsonl").is_file());
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
