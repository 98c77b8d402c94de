//! A trace is read once, from anything: a file, `-` (stdin), a pipe, a FIFO, a process
//! substitution; plain, gzip or zstd (told by the bytes, not the name). Endless input ends at
//! the line cap, and a signal ends a run still reading its trace.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use common::{bin, read_jsonl, replay_mock, temp_dir};

fn lines(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!("{{\"timestamp\": {i}, \"text_input\": \"a b c\", \"output_length\": 2}}\n")
        })
        .collect()
}

/// The records of a run that must have succeeded: their indices.
fn replayed(output: &Output, out: &Path) -> Vec<u64> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let mut idx: Vec<u64> = read_jsonl(&out.join("requests.jsonl"))
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    idx.sort();
    idx
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn stdin_and_a_process_substitution_are_read_once_and_whole() {
    let dir = temp_dir("input-pipes");
    let out = dir.join("stdin");
    let mut child = replay_mock("-", &out)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines(10).as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(replayed(&output, &out), (0..10).collect::<Vec<_>>());

    // `<(zcat t.jsonl.gz)`, as users write it.
    let gz = dir.join("t.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(lines(12).as_bytes()).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    let out = dir.join("subst");
    let script = format!(
        "exec {} replay --mock --quiet --mock-ttft-ms 1 --trace <(gzip -dc {}) --output {}",
        env!("CARGO_BIN_EXE_llmreplay"),
        gz.display(),
        out.display()
    );
    let output = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert_eq!(replayed(&output, &out), (0..12).collect::<Vec<_>>());
    // `inspect` of the same.
    let script = format!(
        "exec {} inspect <(gzip -dc {})",
        env!("CARGO_BIN_EXE_llmreplay"),
        gz.display()
    );
    let output = Command::new("bash").args(["-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let records = stdout.lines().find(|l| l.starts_with("Records:"));
    assert!(
        output.status.success() && records.is_some_and(|l| l.trim_end().ends_with(" 12")),
        "{stdout}"
    );
}

/// A FIFO whose writer writes the trace again each time it is opened: a replay of a
/// 10-record trace sends 10 requests.
#[test]
fn a_fifo_is_opened_once() {
    let dir = temp_dir("input-fifo");
    let fifo = dir.join("trace.fifo");
    mkfifo(&fifo);
    let writer_fifo = fifo.clone();
    std::thread::spawn(move || loop {
        // Blocks until a reader opens it; ends with the test process.
        let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&writer_fifo) else {
            return;
        };
        let _ = f.write_all(lines(10).as_bytes());
        drop(f);
        // Serve the next open only: wait until this reader has closed (a non-blocking open
        // for writing fails with ENXIO when no reader has the FIFO open).
        use std::os::unix::fs::OpenOptionsExt;
        while std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&writer_fifo)
            .is_ok()
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let out = dir.join("run");
    let output = replay_mock(fifo.to_str().unwrap(), &out).output().unwrap();
    assert_eq!(replayed(&output, &out), (0..10).collect::<Vec<_>>());
}

/// A FIFO nobody writes: the run waits in open(2); SIGTERM ends it at once.
#[test]
fn a_signal_ends_a_run_waiting_for_its_trace() {
    let dir = temp_dir("input-fifo-silent");
    let fifo = dir.join("silent.fifo");
    mkfifo(&fifo);
    let mut child = replay_mock(fifo.to_str().unwrap(), &dir.join("run"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("SIGTERM did not end a run waiting for its trace");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Stopped by its handler (130), or by the default action if it came before the handler.
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.code() == Some(llmreplay::STOPPED_EXIT_CODE) || status.signal() == Some(15),
        "{status:?}"
    );
}

#[test]
fn endless_input_ends_at_the_line_cap() {
    for cmd in [
        vec!["inspect", "/dev/zero"],
        vec!["replay", "--mock", "--trace", "/dev/zero"],
    ] {
        let output = bin().args(&cmd).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{cmd:?}: {stderr}");
        assert!(
            stderr.contains("/dev/zero:1: line longer than 67108864 bytes"),
            "{cmd:?}: {stderr}"
        );
    }
}

/// An endless producer of valid lines ends at --max-requests.
#[test]
fn an_endless_pipe_ends_at_max_requests() {
    let dir = temp_dir("input-endless");
    let out = dir.join("run");
    let script = format!(
        "exec {} replay --mock --quiet --mock-ttft-ms 1 --max-requests 7 --time-scale 1000 \
         --trace <(yes '{{\"timestamp\": 0, \"text_input\": \"a\", \"output_length\": 1}}') --output {}",
        env!("CARGO_BIN_EXE_llmreplay"),
        out.display()
    );
    let output = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert_eq!(replayed(&output, &out), (0..7).collect::<Vec<_>>());
}

/// Compression is told by the bytes: zstd and gzip, named so or not; a BOM is no error.
#[test]
fn compressed_and_bom_traces_are_read_by_their_bytes() {
    let dir = temp_dir("input-compressed");
    let zst = dir.join("t.jsonl.zst");
    std::fs::write(&zst, zstd::encode_all(lines(9).as_bytes(), 3).unwrap()).unwrap();
    let gz_unnamed = dir.join("gzipped.jsonl");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(lines(8).as_bytes()).unwrap();
    std::fs::write(&gz_unnamed, enc.finish().unwrap()).unwrap();
    let bom = dir.join("bom.jsonl");
    std::fs::write(&bom, format!("\u{feff}{}", lines(6))).unwrap();
    for (trace, n) in [(zst, 9), (gz_unnamed, 8), (bom, 6)] {
        let out: PathBuf = dir.join(format!("run-{n}"));
        let output = replay_mock(trace.to_str().unwrap(), &out).output().unwrap();
        assert_eq!(
            replayed(&output, &out),
            (0..n).collect::<Vec<_>>(),
            "{trace:?}"
        );
    }
}

#[test]
fn lines_that_are_not_records_say_what_they_are() {
    let dir = temp_dir("input-messages");
    let cases = [
        (
            "\"hello there\"\n".to_string(),
            "t.jsonl:2: expected a JSON object, got a string \"hello there\"",
        ),
        (
            "{\"timestamp\": 1, \"messages\": [\"hi\"], \"output_length\": 2}\n".into(),
            "t.jsonl:2: field `messages`: expected an array of message objects",
        ),
        ("\u{1f}\u{8b}\u{8}\n".into(), "t.jsonl:2: invalid JSON"),
    ];
    for (second, expected) in cases {
        let trace = dir.join("t.jsonl");
        std::fs::write(&trace, format!("{}{second}", lines(1))).unwrap();
        let output = bin()
            .args(["replay", "--mock", "--trace", trace.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
    // Bytes that are not UTF-8 say why.
    let trace = dir.join("binary.jsonl");
    std::fs::write(&trace, b"\xff\xfe\x00garbage\n").unwrap();
    let output = bin()
        .args(["inspect", trace.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is the file compressed or binary?"),
        "{stderr}"
    );
}

/// `--skip-invalid` skips an invalid first line under `--format auto` too.
#[test]
fn skip_invalid_skips_a_bad_first_line_under_auto() {
    let dir = temp_dir("input-skip-first");
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, format!("{{oops\n{}", lines(4))).unwrap();
    let out = dir.join("run");
    let output = replay_mock(trace.to_str().unwrap(), &out)
        .arg("--skip-invalid")
        .output()
        .unwrap();
    assert_eq!(replayed(&output, &out), (0..4).collect::<Vec<_>>());
    assert!(String::from_utf8_lossy(&output.stderr).contains("skipped 1 invalid line"));
}
