//! Memory does not grow with the trace: a 10-million-record trace (every record with a hash id
//! of its own) is validated and scanned in full, then its first seconds are replayed against
//! the mock, and the whole process's peak RSS, as the kernel counts it, stays under 200 MB
//! (the effective schedule, too, is computed by streaming the trace again).
//!
//! The one test kept out of the suite's binary (`tests/suite/`), on purpose: the kernel
//! starts an exec'd child's peak RSS at the peak of the process that spawned it (the spawner's
//! image is the "old mm" at exec), so a child of the big, busy suite process would read
//! hundreds of MB it never used. A small binary of its own keeps the figure the replay's.

use std::io::Write;
use std::process::Stdio;

#[path = "suite/common/mod.rs"]
#[allow(dead_code)] // this binary uses a few of the suite's helpers
mod common;
use common::{bin, read_jsonl, temp_dir, tokenizer};

const RECORDS: u64 = 10_000_000;

#[test]
fn ten_million_records_in_under_200_mb() {
    let dir = temp_dir("10m");
    // gzip keeps the file at a few MB instead of ~700 MB; the reader streams it either way.
    let trace = dir.join("big.jsonl.gz");
    let file = std::fs::File::create(&trace).unwrap();
    let mut gz = flate2::write::GzEncoder::new(
        std::io::BufWriter::with_capacity(1 << 20, file),
        flate2::Compression::fast(),
    );
    for i in 0..RECORDS {
        writeln!(
            gz,
            r#"{{"timestamp": {i}, "input_length": 600, "output_length": 2, "hash_ids": [{i}, {}]}}"#,
            i + RECORDS
        )
        .unwrap();
    }
    gz.finish().unwrap().flush().unwrap();

    let out = dir.join("run");
    // Reaped by wait4 below, which also gives the child's peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = bin()
        .args([
            "replay",
            "--mock",
            "--quiet",
            "--mock-ttft-ms",
            "1",
            "--mock-itl-ms",
            "1",
        ])
        .arg("--trace")
        .arg(&trace)
        .arg("--tokenizer")
        .arg(tokenizer("qwen3"))
        // 1 ms apart: 2 s of trace time is 2,000 requests, replayed in 0.2 s.
        .args(["--duration", "2", "--time-scale", "10"])
        .arg("--output")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status}"
    );
    let peak_mb = usage.ru_maxrss as f64 / 1024.0; // kilobytes on Linux
    eprintln!("peak RSS of the replay: {peak_mb:.1} MB");
    assert!(peak_mb < 200.0, "peak RSS {peak_mb:.1} MB");

    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    let stats = &run["trace_stats"];
    assert_eq!(stats["records"], RECORDS, "the whole trace was validated");
    assert_eq!(
        stats["hash_ids_capped"], true,
        "20M distinct ids exceed the tracked set"
    );
    let records = read_jsonl(&out.join("requests.jsonl"));
    assert!((2000..=2001).contains(&records.len()), "{}", records.len());
    // Too long to keep its timestamps, the trace was streamed again for the plan: the plan
    // still counts exactly what was sent.
    assert_eq!(run["schedule"]["records"], records.len() as u64);
    assert_eq!(run["schedule"]["cut_by"], "--duration");
    assert!(records.iter().all(|r| r["error"].is_null()));
    std::fs::remove_dir_all(&dir).unwrap();
}
