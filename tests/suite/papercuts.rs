//! What a newcomer trips on, one test an item: each message names the cause and the fix, and
//! each text says what the program does. (The mock that survives a client leaving with hundreds
//! of queued connections is in `connections`.)

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::{bin, path, read_jsonl, replay_mock, temp_dir, tokenizer};

/// `replay --mock` of `trace` into `out` with the Qwen3 tokenizer (add options with `.args`).
fn replay_qwen3(trace: &Path, out: &Path) -> Command {
    let mut cmd = replay_mock(trace, out);
    cmd.args(["--tokenizer", path(&tokenizer("qwen3"))]);
    cmd
}

/// A `--tokenizer-config` without a chat template (the tokenizer.json given by mistake) is
/// named as given, not answered with "give --tokenizer-config".
#[test]
fn a_tokenizer_config_without_a_template_is_named_with_the_fix() {
    let qwen3 = tokenizer("qwen3");
    let wrong = qwen3.join("tokenizer.json");
    let out = bin()
        .args([
            "prompts",
            "--api",
            "openai-chat",
            "--max-requests",
            "2",
            "--trace",
        ])
        .arg(crate::common::mooncake("conversation_trace.jsonl"))
        .args([
            "--tokenizer",
            path(&qwen3),
            "--tokenizer-config",
            path(&wrong),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = format!(
        "--tokenizer-config {} holds no chat template",
        wrong.display()
    );
    assert!(stderr.contains(&said), "{stderr}");
    assert!(
        stderr.contains("tokenizer_config.json that does"),
        "{stderr}"
    );
    assert!(!stderr.contains("(give --tokenizer-config)"), "{stderr}");
}

/// `llmreplay --help` says the mock speaks every dialect it serves.
#[test]
fn the_mock_is_described_with_every_dialect() {
    let out = bin().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .find(|l| l.trim_start().starts_with("mock"))
        .unwrap();
    for dialect in ["OpenAI chat", "completions", "TGI", "Anthropic Messages"] {
        assert!(line.contains(dialect), "{line}");
    }
}

/// Settings that cannot work are refused, naming the fix: `--channel-mb 0` (it was taken as 1)
/// and `--rate inf` (vLLM's "all at once"), each with exit status 1 (a usage error).
#[test]
fn settings_that_cannot_work_are_refused_with_the_fix() {
    let dir = crate::common::temp_dir("papercut-settings");
    let trace = crate::common::mooncake("conversation_trace.jsonl");
    for (flags, said) in [
        (
            ["--channel-mb", "0"],
            "--channel-mb 0 would hold no prepared request",
        ),
        (["--rate", "inf"], "--time-scale 1e6"),
    ] {
        let out = replay_qwen3(&trace, &dir.join("run"))
            .args(["--max-requests", "2"])
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {stderr}");
        assert!(stderr.contains(said), "{flags:?}: {stderr}");
    }
}

/// Input errors exit 1 before anything is loaded or written, as the README's table says: a
/// `--tokenizer-config` that is not there, and an `--output-path` whose directory is not (it
/// was status 2, after the tokenizer analysis, with an empty requests.jsonl left behind).
#[test]
fn missing_input_and_output_paths_are_input_errors_before_the_run() {
    let dir = crate::common::temp_dir("papercut-paths");
    let run = dir.join("run");
    let missing = dir.join("nowhere");
    for (flag, file, said) in [
        (
            "--tokenizer-config",
            missing.join("tc.json"),
            "no such file",
        ),
        ("--output-path", missing.join("x.jsonl"), "does not exist"),
    ] {
        let out = replay_qwen3(&crate::common::mooncake("conversation_trace.jsonl"), &run)
            .args(["--max-requests", "2"])
            .arg(flag)
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag} {}", file.display())),
            "{stderr}"
        );
        assert!(stderr.contains(said), "{stderr}");
        assert!(!run.exists(), "{flag}: nothing is written");
    }
}

/// Every row of the peer table (`src/cli/peers.rs`): the peer's literal option or subcommand
/// gets its hint, not clap's guess by spelling, and every option the hint names is one of ours.
#[test]
fn every_peer_name_points_at_ours() {
    use llmreplay::cli::peers::{OPTIONS, SUBCOMMANDS};
    let help = |args: &[&str]| {
        let out = bin().args(args).arg("--help").output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ours = help(&["replay"]) + &help(&["sweep"]);
    let top = help(&[]);
    for (rows, kind) in [(OPTIONS, "option"), (SUBCOMMANDS, "subcommand")] {
        for p in rows {
            let args: Vec<&str> = match kind {
                "option" => vec!["replay", "--mock", p.theirs, "x"],
                _ => vec![p.theirs, "--model", "m"],
            };
            let out = bin().args(&args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{}: {stderr}", p.theirs);
            let hint = format!(
                "hint: {} is {} {kind}; here use {}",
                p.theirs, p.tool, p.ours
            );
            assert!(stderr.contains(&hint), "{stderr}");
            assert!(
                !stderr.contains("tip:"),
                "clap's guess is left out: {stderr}"
            );
            for word in p.ours.split([' ', ',', '(', ')', ';']) {
                if word.starts_with("--") {
                    let known = ours
                        .split_whitespace()
                        .any(|t| t.trim_matches(|c| c == ',' || c == ']') == word);
                    assert!(known, "{}: {word} is not an option of ours", p.theirs);
                }
            }
            if let Some(sub) = p.ours.strip_prefix("llmreplay ") {
                let sub = sub.split([' ', ',']).next().unwrap();
                assert!(top.contains(&format!("  {sub} ")), "{sub} is a subcommand");
            }
        }
    }
}

/// A CSV trace whose header misses one of its format's columns is named as that format with
/// the column missing, without --format, not read as "invalid JSON at line 1 column 1".
#[test]
fn a_csv_header_missing_a_column_names_it() {
    let dir = crate::common::temp_dir("papercut-csv");
    for (name, header, row, missing) in [
        (
            "tracelab.csv",
            "session_id,arrival_time,round_idx,prefix_len,input_len,tool_wait_after_ms",
            "a,0,0,0,900,120",
            "missing column `output_len`: a TraceLab trace's header",
        ),
        (
            "azure.csv",
            "TIMESTAMP,ContextTokens",
            "2023-11-16 18:15:46.6805900,374",
            "missing column `GeneratedTokens`: the header of a --format azure trace",
        ),
    ] {
        let trace = dir.join(name);
        std::fs::write(&trace, format!("{header}\n{row}\n")).unwrap();
        let out = replay_qwen3(&trace, &dir.join(format!("run-{name}")))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("{}:1: {missing}", trace.display())),
            "{stderr}"
        );
        assert!(!stderr.contains("invalid JSON"), "{stderr}");
    }
}

/// `merge` of a shard whose run.json is damaged says so, naming the file and line, instead of
/// "not finished" (and waiting would not help).
#[test]
fn a_damaged_shard_run_json_is_named_as_damaged() {
    let dir = crate::common::temp_dir("papercut-merge");
    let shard = dir.join("shard-0");
    std::fs::create_dir_all(&shard).unwrap();
    std::fs::write(shard.join("run.json"), "{\n  \"ended\": {\"how\": \"comp").unwrap();
    let out = bin()
        .arg("merge")
        .arg(dir.join("merged"))
        .arg(&shard)
        .args(["--wait", "5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let file = shard.join("run.json");
    assert!(
        stderr.contains(&format!("{}:2: not valid JSON", file.display())),
        "{stderr}"
    );
    assert!(stderr.contains("damaged"), "{stderr}");
    assert!(!stderr.contains("not finished"), "{stderr}");
}

/// `calibrate` against a failing server says why its requests failed, the server's words
/// with control characters escaped, not only "failed 5".
#[test]
fn calibrate_says_why_requests_failed() {
    let mock = crate::common::MockProcess::start(&["--fault", "status:500:1"]);
    let out = bin()
        .args(["calibrate", "--rates", "5", "--seconds", "1", "--endpoint"])
        .arg(mock.url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("5 req/s: 5 failed; first http: HTTP 500: ")
            && stdout.contains("injected fault"),
        "{stdout}"
    );
}

/// `report A B` of runs of different traces says they are not the same experiment.
#[test]
fn comparing_runs_of_different_traces_warns() {
    let dir = crate::common::temp_dir("papercut-compare");
    let traces = ["azure_sample.csv", "burstgpt_sample.csv"];
    let runs: Vec<_> = traces
        .iter()
        .map(|t| {
            let out = dir.join(t);
            let trace = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/formats")
                .join(t);
            let status = replay_qwen3(&trace, &out)
                .args(["--max-requests", "3"])
                .args(["--session-mode", "timestamp", "--rate", "1000"])
                .status()
                .unwrap();
            assert!(status.success());
            out
        })
        .collect();
    let out = bin().arg("report").args(&runs).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: A and B are not the same experiment: trace "),
        "{stderr}"
    );
    assert!(stderr.contains("burstgpt_sample.csv"), "{stderr}");
}

/// A Bailian record's `turn` (counted from 1) comes back under the same name with the same
/// number, not one less.
#[test]
fn a_bailian_turn_keeps_its_number_in_the_records() {
    let dir = temp_dir("papercut-turn");
    let records = crate::common::by_timestamp(crate::common::bailian_chains(3, 0.001, 0.01, 2));
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let out = dir.join("run");
    let status = replay_qwen3(&trace, &out).status().unwrap();
    assert!(status.success());
    let rows = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(rows.len(), records.len());
    for row in &rows {
        let planned = records
            .iter()
            .find(|r| r["chat_id"] == row["chat_id"])
            .unwrap();
        assert_eq!(row["turn"], planned["turn"], "{row}");
    }
    assert!(rows.iter().any(|r| r["turn"] == 3));
}

/// `mock --tokenizer`: a prompt too long to count before its answer's last event is due holds
/// that event, so the answer ends later than the mock's configured timing. The mock counts it
/// as late and says so (TPOT measured against it is not its --itl-ms), instead of passing its
/// lateness off as the server's TPOT.
#[test]
fn a_mock_that_cannot_keep_its_timing_says_so() {
    use clap::Parser;
    use std::io::{Read, Write};
    let qwen3 = tokenizer("qwen3");
    let cli = llmreplay::cli::Cli::parse_from([
        "llmreplay",
        "mock",
        "--listen",
        "127.0.0.1:0",
        "--tokenizer",
        path(&qwen3),
        "--ttft-ms",
        "1",
        "--itl-ms",
        "1",
    ]);
    let llmreplay::cli::Command::Mock(args) = cli.command else {
        panic!("mock")
    };
    let cfg = llmreplay::plan::mock_config(&args).unwrap();
    let mock = llmreplay::mock::MockServer::start(args.listen, cfg).unwrap();
    // 200k words: counting them takes far longer than the 5 ms the answer is given (the
    // tokenizer counts some 0.2M tokens a second a thread), on any machine.
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hello ".repeat(200_000)}],
        "max_tokens": 4,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string();
    let mut conn = std::net::TcpStream::connect(mock.addr()).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.contains("data: [DONE]"), "{answer}");
    let stats = mock.stop().unwrap();
    assert_eq!((stats.lateness.answers, stats.lateness.late), (1, 1));
    let said = stats.lateness.summary(true).unwrap();
    assert!(said.contains("1 of 1 answers"), "{said}");
    assert!(
        said.contains("--tokenizer") && said.contains("TPOT"),
        "{said}"
    );
}

/// `replay --mock --require-cache-report` is refused with the option that gives the in-process
/// mock a prefix cache (not vLLM's advice); with `--mock-cache-blocks` the probe passes, the
/// run reports the mock's hits, and run.json records the cache.
#[test]
fn the_in_process_mock_gets_a_prefix_cache_on_request() {
    let dir = temp_dir("papercut-mock-cache");
    let trace = crate::common::mooncake("conversation_trace.jsonl");
    let refused = replay_qwen3(&trace, &dir.join("refused"))
        .args(["--require-cache-report", "--max-requests", "5"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--mock-cache-blocks N"), "{stderr}");
    assert!(!stderr.contains("vLLM"), "{stderr}");

    let out = dir.join("cached");
    let run = replay_qwen3(&trace, &out)
        .args(["--require-cache-report", "--max-requests", "40"])
        .args(["--mock-cache-blocks", "100000"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rows = read_jsonl(&out.join("requests.jsonl"));
    let hits: u64 = rows
        .iter()
        .filter_map(|r| r["cached_tokens"].as_u64())
        .sum();
    assert!(hits > 0, "the mock's cache answered no hit");
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        run_json["mock"]["cache_blocks"], 100_000,
        "{}",
        run_json["mock"]
    );
}
