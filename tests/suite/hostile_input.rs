//! Hostile traces: every bad line is a clear error naming file and line, or a counted skip
//! with --skip-invalid; timestamps that go backwards are sorted, or refused with --strict.

use std::io::Write;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common;
use common::{bin, read_jsonl, replay_mock, temp_dir};

fn good(ts: u64) -> String {
    format!(r#"{{"timestamp": {ts}, "text_input": "a b c", "output_length": 2}}"#)
}

/// Lines 1, 4 and 8 are valid (timestamps 100, 300, 50: the last goes backwards); the others
/// are each broken in a different way, one of them longer than the 64 MiB line limit.
fn write_hostile_trace(path: &Path) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(f, "{}", good(100)).unwrap(); // 1
    writeln!(f, "{{not json").unwrap(); // 2
    writeln!(
        f,
        r#"{{"timestamp": "soon", "text_input": "x", "output_length": 2}}"#
    )
    .unwrap(); // 3
    writeln!(f, "{}", good(300)).unwrap(); // 4
    f.write_all(b"{\"timestamp\": 1, \"text_input\": \"\xff\xfe\", \"output_length\": 2}\n")
        .unwrap(); // 5
                   // 6: a line of 64 MiB + 10 bytes.
    f.write_all(b"{\"timestamp\": 1, \"text_input\": \"")
        .unwrap();
    f.write_all(&vec![b'a'; (64 << 20) + 10]).unwrap();
    f.write_all(b"\", \"output_length\": 2}\n").unwrap();
    writeln!(
        f,
        r#"{{"timestamp": 1e999, "text_input": "x", "output_length": 2}}"#
    )
    .unwrap(); // 7
    writeln!(f, "{}", good(50)).unwrap(); // 8
}

fn replay(trace: &Path, out: &Path, extra: &[&str]) -> Output {
    replay_mock(trace, out).args(extra).output().unwrap()
}

#[test]
fn bad_lines_are_errors_or_counted_skips_and_backward_timestamps_are_sorted() {
    let dir = temp_dir("hostile");
    let trace = dir.join("hostile.jsonl");
    write_hostile_trace(&trace);

    let out = replay(&trace, &dir.join("strictless"), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("hostile.jsonl:2: invalid JSON"), "{stderr}");

    let out = replay(&trace, &dir.join("run"), &["--skip-invalid"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("skipped 5 invalid lines") && stderr.contains("hostile.jsonl:2:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 records have a timestamp earlier") && stderr.contains("line 8"),
        "{stderr}"
    );
    let mut records = read_jsonl(&dir.join("run/requests.jsonl"));
    records.sort_by(|a, b| {
        a["scheduled_ms"]
            .as_f64()
            .partial_cmp(&b["scheduled_ms"].as_f64())
            .unwrap()
    });
    // Valid records are numbered 0, 1, 2 in the file; sorted by time: 2 (50), 0 (100), 1 (300).
    let order: Vec<(u64, f64)> = records
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["scheduled_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(order, vec![(2, 0.0), (0, 50.0), (1, 250.0)]);
    assert!(records.iter().all(|r| r["error"].is_null()));

    let out = replay(&trace, &dir.join("strict"), &["--skip-invalid", "--strict"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("hostile.jsonl:8: field `timestamp`: 50 ms is earlier than the previous record's 300 ms"),
        "{stderr}"
    );

    let out = bin()
        .args(["inspect", "--skip-invalid", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["records"], 3);
    assert_eq!(stats["skipped"]["lines"], 5);
    assert_eq!(stats["order"]["out_of_order"], 1);
    assert_eq!(stats["first_timestamp_ms"], 50.0);
    assert_eq!(stats["span_ms"], 250.0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A descriptor limit too low for the connection pools is refused up front with the fix.
#[test]
fn too_low_ulimit_is_refused_before_the_run() {
    let dir = temp_dir("ulimit");
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, good(0)).unwrap();
    let script = format!(
        "ulimit -n 60 && exec '{}' replay --mock --quiet --trace '{}' --output '{}'",
        env!("CARGO_BIN_EXE_llmreplay"),
        trace.display(),
        dir.join("run").display()
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ulimit -n is 60") && stderr.contains("raise it"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An output directory that cannot be created is an error naming it, before anything is sent.
#[test]
fn unwritable_output_is_refused_before_the_run() {
    let dir = temp_dir("unwritable");
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, good(0)).unwrap();
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let out = replay(&trace, &blocker.join("run"), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("a-file/run"), "{stderr}");
    assert!(out.stdout.is_empty(), "no run took place, so no summary");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Valid inputs whose schedule or waits would pass 2^63 ns (they were sent at once, then
/// aborted the summary with a 147 GB allocation): each ends with an error naming the record
/// or the file, line and column, with status 1, before a byte is sent.
#[test]
fn schedules_past_the_bound_are_refused_before_anything_is_sent() {
    let dir = temp_dir("hostile-bound");
    let tracelab =
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms";
    let cases = [
        (
            "huge.jsonl",
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n\
             {\"timestamp\": 1e13, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [2]}\n"
                .to_string(),
            "record 2 of the trace (timestamp 1e13 ms)",
        ),
        (
            "huge-bailian.jsonl",
            "{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [1]}\n\
             {\"chat_id\": 2, \"parent_chat_id\": -1, \"timestamp\": 1e10, \"input_length\": 10, \"output_length\": 2, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [2]}\n"
                .to_string(),
            "2^63 ns",
        ),
        (
            "arrival.csv",
            format!("{tracelab}\na,1e17,0,0,10,2,0\n"),
            "arrival.csv:2: column `arrival_time`: 1e17 is out of range",
        ),
        (
            "wait.csv",
            format!("{tracelab}\na,0,0,0,10,2,1e17\na,0,1,12,10,2,0\n"),
            "wait.csv:2: column `tool_wait_after_ms`: 1e17 is out of range",
        ),
    ];
    // Waits in the agentic formats, bounded as their traces are read.
    let agentic = |name: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/agentic")
                .join(name),
        )
        .unwrap()
    };
    let u = r#"[{"role":"user","content":"hi"}]"#;
    let waits = [
        (
            "weka.json",
            agentic("weka_sample.json").replacen(r#""t": 1.6"#, r#""t": 1e300"#, 1),
            "waits 1e303 ms after the turn before it",
        ),
        (
            "atif.json",
            agentic("atif_sample.json").replacen("2026-10-05T12:00:05", "9999-10-05T12:00:05", 1),
            "ms after the turn before it (its delay, think time or timestamps)",
        ),
        (
            "dag.jsonl",
            format!(
                r#"{{"session_id":"a","turns":[{{"messages":{u}}},{{"messages":{u},"delay":1e300}}]}}"#
            ),
            "dag.jsonl:1: conversation \"a\" turn 1: field `delay`: 1e300 ms",
        ),
    ];
    for (name, text, said) in cases.into_iter().chain(waits) {
        let trace = dir.join(name);
        std::fs::write(&trace, text).unwrap();
        let out = dir.join(format!("run-{name}"));
        // Nothing listens there: an error that came after the start would say so.
        let o = bin()
            .args([
                "replay",
                "--quiet",
                "--model",
                "m",
                "--endpoint",
                "http://127.0.0.1:9",
            ])
            .args(["--time-scale", "1e-6", "--tokenizer"])
            .arg(common::tokenizer("qwen3"))
            .arg("--trace")
            .arg(&trace)
            .arg("--output")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains(said), "{name}: {stderr}");
        assert!(
            !out.join("requests.jsonl").exists(),
            "{name}: nothing was sent"
        );
    }
}

/// A think time no run can wait is refused before anything is sent (1e300 s aborted the run
/// after its first turn).
#[test]
fn a_think_time_past_the_bound_is_a_usage_error() {
    let dir = temp_dir("hostile-think");
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agentic/dag_sample.jsonl");
    let o = replay_mock(&trace, &dir.join("run"))
        .args(["--think-time", "1e300"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--think-time 1e300: give a number of seconds, 0 to 1e7"),
        "{stderr}"
    );
}

/// A rate too low for any schedule is named as the rate, not blamed on a timestamp; a loop
/// of 2^32 passes is refused rather than previewed for hours.
#[test]
fn a_rate_too_low_for_a_schedule_is_named_as_the_rate() {
    let dir = temp_dir("hostile-rate");
    let trace = common::text_trace(&dir, 3, 1, 2);
    let o = replay_mock(&trace, &dir.join("run"))
        .args(["--rate", "1e-300", "--dry-run"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        error.contains("at --rate 1e-300") && !error.contains("timestamp"),
        "{stderr}"
    );
    let o = replay_mock(&trace, &dir.join("loop"))
        .args(["--loop", "4294967296", "--dry-run"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--loop 4294967296: at most 1000000 passes"),
        "{stderr}"
    );
}

/// Out of file descriptors mid-run (400 requests in flight at once against a slow server,
/// ulimit -n 200): the client's limit is named and the endpoint is not put into backoff, so
/// every request still gets a connection another frees and succeeds; the verdict says the
/// load was capped by the client.
#[test]
fn running_out_of_descriptors_is_the_clients_limit_not_the_endpoints() {
    let dir = temp_dir("emfile");
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = (0..400)
        .map(|i| {
            format!(
                r#"{{"timestamp": {}, "text_input": "a b c", "input_length": 3, "output_length": 1}}"#,
                f64::from(i) * 0.5
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let mock = common::MockProcess::start(&["--ttft-ms", "2000"]);
    let out = dir.join("run");
    let script = format!(
        "ulimit -n 200 && exec '{}' replay --quiet --model m --endpoint {} --trace '{}' --output '{}'",
        env!("CARGO_BIN_EXE_llmreplay"),
        mock.url(),
        trace.display(),
        out.display()
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("out of file descriptors"), "{stderr}");
    assert!(!stderr.contains("is down"), "{stderr}");
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(records.len(), 400);
    let failed: Vec<&Value> = records.iter().filter(|r| !r["error"].is_null()).collect();
    assert!(failed.is_empty(), "{:?}", failed.first());
    let summary = common::read_json(&out.join("summary.json"));
    let reasons = summary["verdict"]["reasons"].as_array().unwrap();
    assert!(
        reasons.iter().any(|r| r["key"] == "descriptors"),
        "{reasons:?}"
    );
    // Those that waited for a freed connection say so, each and in the summary.
    let waited = records
        .iter()
        .filter(|r| r["connection_wait_ms"].as_f64().is_some())
        .count();
    assert!(waited > 0, "{:?}", records.last());
    assert_eq!(
        summary["connection_wait_ms"]["count"].as_u64(),
        Some(waited as u64),
        "{}",
        summary["connection_wait_ms"]
    );
}

/// Files read whole are regular files of a bounded size: `--ca-cert /dev/zero` and a FIFO
/// (no writer) as `--ca-cert` or as a run's run.json end at once with an error naming the
/// file, instead of filling memory or hanging.
#[test]
fn devices_and_fifos_named_as_small_files_are_refused_at_once() {
    let dir = temp_dir("hostile-small-files");
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let trace = common::text_trace(&dir, 2, 1, 4);
    for (case, ca) in [("device", Path::new("/dev/zero")), ("fifo", fifo.as_path())] {
        let o = bin()
            .args(["replay", "--quiet", "--model", "m"])
            .args(["--endpoint", "https://127.0.0.1:9", "--ca-cert"])
            .arg(ca)
            .arg("--trace")
            .arg(&trace)
            .arg("--output")
            .arg(dir.join(case))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{case}: {stderr}");
        let what = if case == "fifo" { "a FIFO" } else { "a device" };
        assert!(
            stderr.contains(ca.to_str().unwrap()) && stderr.contains(what),
            "{case}: {stderr}"
        );
    }
    // A run directory whose run.json is a FIFO: report says so rather than wait for a writer.
    let run = dir.join("run");
    let o = replay_mock(&trace, &run).output().unwrap();
    assert!(o.status.success());
    std::fs::remove_file(run.join("run.json")).unwrap();
    std::fs::rename(&fifo, run.join("run.json")).unwrap();
    let o = bin().args(["report"]).arg(&run).output().unwrap();
    assert!(o.status.code().is_some(), "report ended");
}
