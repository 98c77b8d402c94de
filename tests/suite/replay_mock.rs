//! End-to-end: replays real Mooncake records against the built-in mock, in-process and
//! through the binary, and checks records, summary and exit codes.

use clap::Parser;
use serde_json::Value;

use crate::common;
use common::{bin, mooncake, read_jsonl, temp_dir, tokenizer};

#[test]
fn replays_500_mooncake_records_against_the_mock() {
    let dir = temp_dir("500");
    let out = dir.join("run");
    let trace = mooncake("conversation_trace.jsonl");
    let mock_ttft_ms = 20.0;
    let cli = llmreplay::cli::Cli::parse_from([
        "llmreplay",
        "replay",
        "--mock",
        "--quiet",
        "--trace",
        trace.to_str().unwrap(),
        "--tokenizer",
        tokenizer("qwen3").to_str().unwrap(),
        "--max-requests",
        "500",
        "--time-scale",
        "20",
        "--mock-ttft-ms",
        "20",
        "--mock-itl-ms",
        "2",
        "--output",
        out.to_str().unwrap(),
    ]);
    let llmreplay::cli::Command::Replay(args) = cli.command else {
        panic!("replay")
    };
    let outcome =
        llmreplay::commands::replay::run(&llmreplay::plan::ReplayPlan::from_args(&args).unwrap())
            .unwrap();
    assert_eq!(outcome.summary.ok, 500);
    // The mock honours min_tokens and ignore_eos: every output has its trace length.
    let out_match = outcome.summary.output_length_match;
    assert_eq!((out_match.checked, out_match.exact), (500, 500));
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.len(), 500);
    let mut seen = vec![false; 500];
    for r in &records {
        seen[r["index"].as_u64().unwrap() as usize] = true;
    }
    assert!(seen.iter().all(|s| *s), "one record per index");

    // The trace, read independently: timestamps (ms) and output lengths.
    let trace_lines: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .take(500)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let t0 = trace_lines[0]["timestamp"].as_f64().unwrap();
    for r in &records {
        let i = r["index"].as_u64().unwrap() as usize;
        let t = &trace_lines[i];
        assert_eq!(r["status"], 200, "record {i}: {r}");
        assert!(r["error"].is_null());
        assert_eq!(r["output_tokens"], t["output_length"], "record {i}");
        assert_eq!(r["output_tokens_target"], t["output_length"]);
        assert_eq!(r["input_tokens"], t["input_length"]);
        let expected_ms = (t["timestamp"].as_f64().unwrap() - t0) / 20.0;
        assert!(
            (r["scheduled_ms"].as_f64().unwrap() - expected_ms).abs() < 1e-3,
            "record {i} scheduled"
        );
        assert!(
            r["ttft_ms"].as_f64().unwrap() >= mock_ttft_ms,
            "record {i}: TTFT below the mock's"
        );
        let drift = r["drift_ms"].as_f64().unwrap();
        assert!(drift >= 0.0, "never sent early");
        assert!(
            (r["sent_ms"].as_f64().unwrap() - r["scheduled_ms"].as_f64().unwrap() - drift).abs()
                < 1e-6
        );
    }

    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for key in [
        "requests",
        "duration_s",
        "input_tokens",
        "output_tokens",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "input_length_match",
        "late_sends",
    ] {
        assert!(summary.get(key).is_some(), "summary.json lacks {key}");
    }
    for key in [
        "ttft_ms",
        "ttft_from_schedule_ms",
        "tpot_ms",
        "itl_ms",
        "token_itl_ms",
        "e2el_ms",
        "drift_ms",
    ] {
        let d = &summary[key];
        for stat in [
            "mean", "median", "std", "min", "max", "p25", "p50", "p75", "p90", "p99",
        ] {
            // A percentile too few samples hold is null and listed as such.
            let thin = d["too_few_samples"]
                .as_array()
                .is_some_and(|t| t.iter().any(|k| k == stat));
            assert!(
                d[stat].is_number() || (thin && d[stat].is_null()),
                "summary.json {key}.{stat}: {d}"
            );
        }
    }
    for key in ["total", "ok", "failed", "by_error_kind"] {
        assert!(summary["requests"].get(key).is_some());
    }
    assert_eq!(summary["requests"]["ok"], 500);
    let output_total: u64 = trace_lines
        .iter()
        .map(|t| t["output_length"].as_u64().unwrap())
        .sum();
    assert_eq!(summary["output_tokens"], output_total);
    assert!(out.join("summary.txt").exists() && out.join("run.json").exists());
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["time_scale"], 20.0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_trace_lines_exit_1_naming_file_and_line() {
    let dir = temp_dir("bad");
    let cases = [
        ("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{not json\n", 2, "invalid JSON"),
        ("{\"timestamp\": 0, \"output_length\": 1}\n", 1, "missing field `input_length`"),
        ("\n{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{\"timestamp\": 1, \"input_length\": -3, \"output_length\": 1}\n", 3, "field `input_length`"),
        ("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": -1}\n", 1, "field `output_length`"),
    ];
    for (i, (content, line, what)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.jsonl"));
        std::fs::write(&path, content).unwrap();
        for sub in [
            vec!["inspect", path.to_str().unwrap()],
            vec![
                "replay",
                "--mock",
                "--quiet",
                "--trace",
                path.to_str().unwrap(),
                "--output",
                dir.join(format!("o{i}")).to_str().unwrap(),
            ],
        ] {
            let out = bin().args(&sub).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{sub:?}: {stderr}");
            assert!(
                stderr.contains(&format!("bad{i}.jsonl:{line}:")),
                "{sub:?}: {stderr}"
            );
            assert!(stderr.contains(what), "{sub:?}: {stderr}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unreachable_endpoint_exits_2() {
    let dir = temp_dir("unreachable");
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"text_input\": \"hi\", \"output_length\": 1}\n",
    )
    .unwrap();
    let out = bin()
        .args([
            "replay",
            "--quiet",
            "--model",
            "m",
            "--trace",
            trace.to_str().unwrap(),
            "--endpoint",
            &format!("http://127.0.0.1:{port}"),
            "--output",
            dir.join("o").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_help_documents_every_option() {
    let out = bin().args(["replay", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--trace",
        "--dataset-path",
        "--format",
        "--dataset",
        "--endpoint",
        "--mock",
        "--api",
        "--model",
        "--model-name",
        "--stream",
        "--no-stream",
        "--tokenizer",
        "--tokenizer-config",
        "--input-length-of",
        "--prompt-mode",
        "--block-cache-mb",
        "--save-prompts",
        "--block-size",
        "--seed",
        "--time-scale",
        "--scale-factor",
        "--duration",
        "--time-in-secs",
        "--max-requests",
        "--num-producer",
        "--num-sender",
        "--channel-capacity",
        "--pin-cores",
        "--output",
        "--output-path",
        "--force",
        "--quiet",
        "--request-timeout",
    ] {
        assert!(help.contains(opt), "replay --help lacks {opt}");
    }
}

#[test]
fn mock_subcommand_prints_its_address_and_serves() {
    use std::io::{Read, Write};
    let mock = common::MockProcess::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let mut s = std::net::TcpStream::connect(&mock.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let body = r#"{"model":"m","prompt":"a b c","max_tokens":4,"min_tokens":4}"#;
    write!(s, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    drop(mock);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains("\"completion_tokens\":4") && response.contains("\"prompt_tokens\":3"),
        "{response}"
    );
}

/// `calibrate` replays each rate for real: every request of every step is sent and answered,
/// and the table has one row per rate (no timing is asserted: this machine is shared).
#[test]
fn calibrate_reports_one_step_per_rate() {
    let out = bin()
        .args([
            "calibrate",
            "--rates",
            "40,80",
            "--seconds",
            "0.5",
            "--tokens",
            "5",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = c["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    for (step, rate) in steps.iter().zip([40.0, 80.0]) {
        assert_eq!(step["target_rps"], rate);
        assert_eq!(step["failed"], 0);
        assert!(step["achieved_rps"].as_f64().unwrap() > 0.0);
        assert!(step["output_tokens_per_s"].as_f64().unwrap() > 0.0);
        assert!(step["drift_p99_ms"].is_number());
    }
    let trusted = c["max_trusted_rps"].as_f64();
    assert!(trusted.is_none() || [40.0, 80.0].contains(&trusted.unwrap()));
}

#[test]
fn read_coalescing_gathers_several_tokens_per_read_and_loses_none() {
    let dir = temp_dir("coalesce");
    let trace = dir.join("trace.jsonl");
    let (streams, tokens) = (8u64, 400u64);
    let lines: String = (0..streams)
        .map(|i| {
            format!(
                "{{\"timestamp\": {i}, \"text_input\": \"a b c\", \"output_length\": {tokens}}}\n"
            )
        })
        .collect();
    std::fs::write(&trace, lines).unwrap();
    let cli = llmreplay::cli::Cli::parse_from([
        "llmreplay",
        "replay",
        "--mock",
        "--quiet",
        "--trace",
        trace.to_str().unwrap(),
        "--mock-ttft-ms",
        "1",
        "--mock-itl-ms",
        "0.2",
        "--read-coalesce-us",
        "5000",
        "--output",
        dir.join("run").to_str().unwrap(),
    ]);
    let llmreplay::cli::Command::Replay(args) = cli.command else {
        panic!("replay")
    };
    let outcome =
        llmreplay::commands::replay::run(&llmreplay::plan::ReplayPlan::from_args(&args).unwrap())
            .unwrap();
    assert_eq!(outcome.summary.ok, streams);
    let records = read_jsonl(&dir.join("run/requests.jsonl"));
    let streamed: u64 = records.iter().map(|r| r["chunks"].as_u64().unwrap()).sum();
    assert_eq!(streamed, streams * tokens, "every token event counted");
    // A token every 0.2 ms and a 5 ms pause between reads: each read finds many tokens
    // queued (a slower machine only queues more). Without the pause a read finds about one.
    assert!(
        outcome.sender_reads * 4 < streamed,
        "{} reads for {streamed} tokens",
        outcome.sender_reads
    );
}

/// The mock's arrival log stamps a request when its first bytes arrive, not when its body is
/// complete: request B starts before request A but ends well after A has been answered, and
/// still arrives first. (B also says `Connection: close`, which once closed it unanswered
/// while its body was still arriving.)
#[test]
fn mock_arrival_log_stamps_the_first_bytes_of_a_request() {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};

    let dir = temp_dir("arrivals");
    let log = dir.join("arrivals.jsonl");
    let cfg = llmreplay::mock::MockConfig {
        ttft_ns: 1_000_000,
        itl_ns: 1_000_000,
        arrival_log: Some(log.clone()),
        ..Default::default()
    };
    let server =
        llmreplay::mock::MockServer::start(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).unwrap();
    let request = |index: u32| {
        let body = r#"{"model":"mock","prompt":"a b c","max_tokens":2}"#;
        format!(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Llmreplay-Index: {index}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let b = request(1);
    let (b_start, b_rest) = b.split_at(b.len() - 10);
    let mut conn_b = TcpStream::connect(server.addr()).unwrap();
    conn_b.write_all(b_start.as_bytes()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut conn_a = TcpStream::connect(server.addr()).unwrap();
    conn_a.write_all(request(0).as_bytes()).unwrap();
    let mut answer = String::new();
    conn_a.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    conn_b.write_all(b_rest.as_bytes()).unwrap();
    answer.clear();
    conn_b.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "B answered: {answer:?}");
    server.stop().unwrap();

    let arrival = |index: u64| {
        read_jsonl(&log)
            .iter()
            .find(|l| l["index"] == index)
            .and_then(|l| l["arrival_ns"].as_u64())
            .unwrap_or_else(|| panic!("no arrival for request {index}"))
    };
    assert!(arrival(1) < arrival(0), "B's first bytes came first");
}

/// A trace that opens with a burst gets its connections before the clock starts: 300
/// requests due at once find 300 open connections, and none is opened during the run.
#[test]
fn connections_for_the_opening_burst_are_open_before_the_start() {
    let dir = temp_dir("burst");
    let trace = dir.join("trace.jsonl");
    let burst = 300;
    let lines: Vec<String> = (0..burst)
        .map(|_| {
            r#"{"timestamp": 0, "text_input": "a b c", "input_length": 3, "output_length": 4}"#
                .to_string()
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let server = llmreplay::mock::MockServer::start(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        llmreplay::mock::MockConfig {
            ttft_ns: 50_000_000,
            itl_ns: 1_000_000,
            ..Default::default()
        },
    )
    .unwrap();
    let url = format!("http://{}", server.addr());
    let cli = llmreplay::cli::Cli::parse_from([
        "llmreplay",
        "replay",
        "--quiet",
        "--endpoint",
        &url,
        "--model",
        "mock",
        "--num-sender",
        "1",
        "--connections",
        "2",
        "--trace",
        trace.to_str().unwrap(),
        "--output",
        dir.join("run").to_str().unwrap(),
    ]);
    let llmreplay::cli::Command::Replay(args) = cli.command else {
        panic!("replay")
    };
    let outcome =
        llmreplay::commands::replay::run(&llmreplay::plan::ReplayPlan::from_args(&args).unwrap())
            .unwrap();
    let stats = server.stop().unwrap();
    assert_eq!(outcome.summary.ok, burst);
    assert_eq!(outcome.connections_at_start, burst as usize + 2);
    // The pools plus the reachability probe: none opened after the start.
    assert_eq!(
        stats.connections,
        burst + 2 + 1,
        "connections opened after the start"
    );
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/run.json")).unwrap()).unwrap();
    assert_eq!(run["connections_at_start"], burst + 2);
}

/// The plan is said before anything is sent; trace-replayer's `--scale-factor 1000` on a
/// millisecond trace is warned about with the replay span it gives; `--dry-run` stops there.
#[test]
fn dry_run_says_the_plan_and_warns_about_a_millisecond_scale_factor() {
    let out = bin()
        .args(["replay", "--dry-run", "--scale-factor", "1000", "--trace"])
        .arg(mooncake("conversation_trace.jsonl"))
        .args(["--endpoint", "http://127.0.0.1:9"]) // nothing listens: nothing is sent
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    // 3537 s of trace (the last record is at 3,537,000 ms) in 3.54 s.
    assert!(
        text.contains("plan: 12031 records over 3.5 s at the trace's timing"),
        "{text}"
    );
    assert!(text.contains("3537 s of trace are replayed"), "{text}");
    assert!(
        text.contains("replayed in 3.54 s") && text.contains("trace-replayer"),
        "{text}"
    );
    assert!(text.contains("busiest second"), "{text}");
}

/// `--time-in-secs` is wall time, as in trace-replayer; `--duration` is trace time.
#[test]
fn time_in_secs_stops_at_wall_time_and_duration_at_trace_time() {
    let dir = temp_dir("wall-limit");
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"timestamp": {}, "text_input": "a b", "input_length": 2, "output_length": 2}}"#,
                i * 100
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let count = |limit: &str| {
        let out = dir.join(limit.replace(' ', "_"));
        let status = bin()
            .args([
                "replay",
                "--mock",
                "--quiet",
                "--time-scale",
                "2",
                "--trace",
            ])
            .arg(&trace)
            .args(limit.split(' '))
            .arg("--output")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        read_jsonl(&out.join("requests.jsonl")).len()
    };
    // At 2x, 1 s of wall time is 2 s of trace: records at 0, 100, ..., 2000 ms.
    assert_eq!(count("--time-in-secs 1"), 21);
    // --duration 1 is 1 s of trace: records at 0, ..., 1000 ms.
    assert_eq!(count("--duration 1"), 11);
}

/// `--null-sink` (the producer benchmark's): every record of every pass is built, over a
/// trace with conversations carried forward, by each producer count, and none is sent or
/// recorded.
#[test]
fn the_null_sink_takes_every_request_the_producers_build() {
    let dir = temp_dir("null-sink");
    let trace = dir.join("chains.jsonl");
    let lines: Vec<String> = common::by_timestamp(common::bailian_chains(40, 0.01, 0.5, 4))
        .iter()
        .map(Value::to_string)
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    for producers in ["1", "3"] {
        let out = dir.join(format!("p{producers}"));
        let run = bin()
            .args(["replay", "--quiet", "--mock", "--null-sink", "--loop", "2"])
            .args(["--num-producer", producers, "--tokenizer"])
            .arg(tokenizer("qwen3"))
            .arg("--trace")
            .arg(&trace)
            .arg("--output")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(
            run.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let text = String::from_utf8_lossy(&run.stdout);
        let said = format!("null sink: 240 requests from {producers} producers in");
        assert!(text.contains(&said), "{text}");
        assert!(text.contains("serial share"), "{text}");
        assert!(
            read_jsonl(&out.join("requests.jsonl")).is_empty(),
            "nothing recorded"
        );
    }
}
