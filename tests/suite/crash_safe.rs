//! Crash-safe results: a requests.jsonl line is whole or absent, a write error (the disk full)
//! stops the run with a summary of what was written, `report` skips a last line cut short,
//! and a summary exists from the stop request on, so a kill during the drain leaves one.

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::{bin, read_jsonl, replay_mock, temp_dir, text_trace, MockProcess};

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_kill_during_the_drain_leaves_a_summary() {
    let dir = temp_dir("crash-drain");
    let trace = text_trace(&dir, 6, 0, 2);
    // Answers that take a minute: the drain would wait for them.
    let mock = MockProcess::start(&["--ttft-ms", "60000"]);
    let out = dir.join("run");
    let mut child = bin()
        .args([
            "replay",
            "--quiet",
            "--model",
            "m",
            "--drain-timeout",
            "600",
        ])
        .args(["--endpoint", &mock.url(), "--trace"])
        .arg(&trace)
        .arg("--output")
        .arg(&out)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // run.json is written once the run has started.
    wait_for("the run to start", || out.join("run.json").exists());
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    wait_for("the summary before the drain", || {
        out.join("summary.json").exists()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary["requests"]["total"], 0,
        "nothing had ended: {summary}"
    );
}

/// A file-size limit (`ulimit -f`) makes writes past it fail as a full disk does.
#[test]
fn a_write_error_stops_the_run_with_whole_lines_and_a_summary() {
    let dir = temp_dir("crash-full");
    let trace = text_trace(&dir, 3000, 1, 2);
    let out = dir.join("run");
    let mut cmd = replay_mock(&trace, &out);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: 300 << 10,
                rlim_max: 300 << 10,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            Ok(())
        });
    }
    let output = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot write") && stderr.contains("requests.jsonl"),
        "{stderr}"
    );
    let bytes = std::fs::read(out.join("requests.jsonl")).unwrap();
    assert_eq!(bytes.last(), Some(&b'\n'), "the last line is whole");
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert!(
        records.len() > 100 && records.len() < 3000,
        "{}",
        records.len()
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"]["total"], records.len(), "{summary}");
    assert_eq!(
        summary["ended"]["how"], "stopped-by-write-error",
        "{summary}"
    );
}

#[test]
fn report_skips_a_last_line_cut_short() {
    let dir = temp_dir("crash-report");
    let trace = text_trace(&dir, 5, 1, 2);
    let out = dir.join("run");
    let status = replay_mock(&trace, &out).status().unwrap();
    assert!(status.success());
    let path = out.join("requests.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"index": 5, "endpoint": "http://x", "stat"#);
    std::fs::write(&path, bytes).unwrap();
    let output = bin().arg("report").arg(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("requests.jsonl:6: the last line is cut short"),
        "{stderr}"
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"]["total"], 5);
}
