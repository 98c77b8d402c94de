//! Ctrl-C keeps what was measured: SIGINT to the real binary mid-run stops scheduling, lets
//! short requests finish, records long ones as `cancelled`, and writes every output.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::{read_jsonl, replay_against, temp_dir, MockProcess};

/// 600 requests 10 ms apart (6 s of schedule): even ones stream 5 tokens, odd ones 2,000
/// (40 s at 20 ms a token), so at any moment some requests are done and some in flight.
fn write_trace(dir: &Path) -> std::path::PathBuf {
    let trace = dir.join("trace.jsonl");
    let lines: Vec<String> = (0..600)
        .map(|i| {
            let out = if i % 2 == 0 { 5 } else { 2000 };
            format!(
                r#"{{"timestamp": {}, "text_input": "a b c", "input_length": 3, "output_length": {out}}}"#,
                i * 10
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    trace
}

fn start_replay(mock: &MockProcess, trace: &Path, out: &Path, drain_s: &str) -> Child {
    replay_against(mock, trace, out)
        .args(["--drain-timeout", drain_s])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// A replay against a slow mock (the mock returned, to outlive the run), interrupted once 20
/// records are in: its run directory and the child.
fn interrupted(name: &str, drain_s: &str) -> (MockProcess, std::path::PathBuf, Child) {
    let dir = temp_dir(name);
    let trace = write_trace(&dir);
    let mock = MockProcess::start(&["--ttft-ms", "10", "--itl-ms", "20"]);
    let out = dir.join("run");
    let child = start_replay(&mock, &trace, &out, drain_s);
    wait_for_records(&out.join("requests.jsonl"), 20);
    interrupt(&child);
    (mock, out, child)
}

fn interrupt(child: &Child) {
    // SAFETY: plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
}

/// Waits for the child, killing it if it outlives `limit` (so the test always ends).
fn wait_bounded(child: &mut Child, limit: Duration) -> (ExitStatus, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, start.elapsed());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("replay did not exit within {limit:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until requests.jsonl has at least `n` lines (bounded).
fn wait_for_records(path: &Path, n: usize) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        let lines = std::fs::read_to_string(path).map_or(0, |t| t.lines().count());
        if lines >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} never reached {n} records", path.display());
}

fn kind(r: &Value) -> Option<&str> {
    r["error"]["kind"].as_str()
}

#[test]
fn first_sigint_drains_cancels_and_writes_everything() {
    let (_mock, out, mut child) = interrupted("sigint", "0.3");
    let (status, took) = wait_bounded(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(130), "a stopped run exits 130");
    assert!(
        took < Duration::from_secs(10),
        "drain of 0.3 s took {took:?}"
    );

    let records = read_jsonl(&out.join("requests.jsonl"));
    let n = records.len();
    assert!((20..600).contains(&n), "{n} records: the stop came mid-run");
    // Deadlines are in index order, so the recorded requests are exactly 0..n, each once.
    let mut indices: Vec<u64> = records
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..n as u64).collect::<Vec<_>>());
    let cancelled: Vec<&Value> = records
        .iter()
        .filter(|r| kind(r) == Some("cancelled"))
        .collect();
    assert!(
        !cancelled.is_empty(),
        "long streams in flight are cancelled"
    );
    for r in &cancelled {
        assert_eq!(
            r["index"].as_u64().unwrap() % 2,
            1,
            "only long streams: {r}"
        );
        assert!(r["sent_ms"].is_number(), "what was measured is kept: {r}");
        assert!(r["end_ms"].is_number(), "{r}");
    }
    let ok = records.iter().filter(|r| r["error"].is_null()).count();
    assert!(ok >= 10, "short requests finished: {ok}");
    assert!(
        records
            .iter()
            .all(|r| r["error"].is_null() || kind(r) == Some("cancelled")),
        "no other failures"
    );

    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"]["total"], n as u64);
    assert_eq!(summary["requests"]["ok"], ok as u64);
    assert_eq!(
        summary["requests"]["by_error_kind"]["cancelled"],
        cancelled.len() as u64
    );
    for file in ["run.json", "report.html", "results.xlsx", "itl.json"] {
        assert!(out.join(file).is_file(), "{file} written");
    }
    // The stop is said in all three outputs, with the exit status it gave.
    assert_eq!(summary["ended"]["how"], "stopped-by-signal");
    assert_eq!(summary["ended"]["exit_code"], 130);
    let text = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(
        text.contains("Ended:") && text.contains("stopped by a signal"),
        "{text}"
    );
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("stopped by a signal"));
}

#[test]
fn second_sigint_exits_at_once_with_whole_lines() {
    let dir = temp_dir("sigint2");
    let trace = write_trace(&dir);
    let mock = MockProcess::start(&["--ttft-ms", "10", "--itl-ms", "20"]);
    let out = dir.join("run");
    // A drain of 60 s: only the second signal can end the run quickly.
    let mut child = start_replay(&mock, &trace, &out, "60");
    wait_for_records(&out.join("requests.jsonl"), 20);
    interrupt(&child);
    // A second signal within a second of the first is the same stop (see the next test).
    std::thread::sleep(Duration::from_millis(1200));
    interrupt(&child);
    let (status, took) = wait_bounded(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(130));
    assert!(
        took < Duration::from_secs(5),
        "exited at once, not after the drain: {took:?}"
    );
    let text = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    assert!(text.ends_with('\n'), "the last line is whole");
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(records.len() >= 20);
}

/// Two signals microseconds apart (`timeout -s INT`, Ctrl-C under `timeout --foreground`)
/// are one stop: the run drains and writes every output instead of exiting hard.
#[test]
fn two_signals_within_a_second_drain_as_one() {
    let dir = temp_dir("sigint-double");
    let trace = write_trace(&dir);
    let mock = MockProcess::start(&["--ttft-ms", "10", "--itl-ms", "20"]);
    let out = dir.join("run");
    let mut child = start_replay(&mock, &trace, &out, "1");
    wait_for_records(&out.join("requests.jsonl"), 20);
    interrupt(&child);
    interrupt(&child);
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    for file in ["summary.json", "report.html", "results.xlsx", "run.json"] {
        assert!(out.join(file).is_file(), "{file} written: the run drained");
    }
    let records = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    assert!(
        records.contains("\"cancelled\""),
        "requests in flight were cancelled after the drain"
    );
}

/// Draining ends when nothing is in flight, not when the drain timeout runs out: a stop
/// between two far-apart requests exits at once, with a 60 s drain timeout.
#[test]
fn a_stop_with_nothing_in_flight_does_not_wait_for_the_drain_timeout() {
    let dir = temp_dir("sigint-idle");
    let trace = common::text_trace(&dir, 3, 60_000, 2);
    let mock = MockProcess::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let out = dir.join("run");
    let mut child = start_replay(&mock, &trace, &out, "60");
    wait_for_records(&out.join("requests.jsonl"), 1);
    interrupt(&child);
    let (status, took) = wait_bounded(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    assert!(took < Duration::from_secs(10), "idle drain took {took:?}");
    assert_eq!(read_jsonl(&out.join("requests.jsonl")).len(), 1);
    assert!(out.join("summary.json").is_file());
}

/// SIGINT, then SIGKILL during the drain: the summary left behind is the one written at the
/// stop, and it says so (`ended.how: stopping`) instead of passing for a finished run's.
#[test]
fn a_kill_during_the_drain_leaves_a_summary_that_says_stopping() {
    let (_mock, out, mut child) = interrupted("sigkill-drain", "60");
    // The stop's summary is written before the drain starts waiting.
    let summary = out.join("summary.json");
    let start = Instant::now();
    while !summary.is_file() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["ended"]["how"], "stopping", "{}", s["ended"]);
    assert_eq!(s["verdict"]["result"], "INVALID");
    assert_eq!(s["verdict"]["reasons"][0]["key"], "ended");
}

/// A replay against a slow mock whose SIGHUP starts as `hangup` (`SIG_DFL`: as a terminal
/// delivers it, even where the tests run under nohup; `SIG_IGN`: under nohup), its output
/// piped; returned once 20 records are in.
fn with_hangup(name: &str, hangup: libc::sighandler_t) -> (MockProcess, PathBuf, Child) {
    let dir = temp_dir(name);
    let trace = write_trace(&dir);
    let mock = MockProcess::start(&["--ttft-ms", "10", "--itl-ms", "20"]);
    let out = dir.join("run");
    let mut cmd = replay_against(&mock, &trace, &out);
    cmd.args(["--drain-timeout", "0.3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: signal(2) is async-signal-safe, as a pre_exec hook must be.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            libc::signal(libc::SIGHUP, hangup);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    wait_for_records(&out.join("requests.jsonl"), 20);
    (mock, out, child)
}

fn hang_up(child: &Child) {
    // SAFETY: plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGHUP) }, 0);
}

/// A hangup (the terminal or ssh session closed) drains and writes everything as SIGTERM does,
/// though nobody reads the output any more: writes to the closed pipes would fail.
#[test]
fn a_hangup_drains_and_writes_everything_though_nobody_reads_the_output() {
    let (_mock, out, mut child) = with_hangup("sighup", libc::SIG_DFL);
    // The session is gone: its pipes close, then the hangup comes.
    drop((child.stdout.take(), child.stderr.take()));
    hang_up(&child);
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(130), "a stopped run exits 130");
    let summary = common::read_json(&out.join("summary.json"));
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert!((20..600).contains(&records.len()), "the stop came mid-run");
    assert_eq!(summary["requests"]["total"], records.len(), "{summary}");
    assert!(records.iter().any(|r| kind(r) == Some("cancelled")));
}

/// Under `nohup` (SIGHUP ignored when the run starts) a hangup stays ignored: the run goes
/// on sending, and stops only when asked with SIGINT.
#[test]
fn under_nohup_a_hangup_is_ignored() {
    let (_mock, out, mut child) = with_hangup("sighup-nohup", libc::SIG_IGN);
    let records = out.join("requests.jsonl");
    hang_up(&child);
    let at_hangup = read_jsonl(&records).len();
    // It keeps recording after the hangup: more records than there were, still running.
    wait_for_records(&records, at_hangup + 20);
    assert!(child.try_wait().unwrap().is_none(), "the hangup stopped it");
    interrupt(&child);
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(130));
}
