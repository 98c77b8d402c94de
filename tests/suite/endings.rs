//! Honest endings: the README's exit-status table is the program's (`ending::EXIT_CODES`),
//! and each status comes from the run that the table says gives it, with summary.json saying
//! how the run ended. (130, a signal, is in tests/graceful_stop.rs.)

use crate::common;
use common::{bin, replay_against, temp_dir, text_trace, MockProcess};

use llmreplay::ending::EXIT_CODES;
use serde_json::Value;

/// The rows of the README's exit-status table: (status, meaning).
fn readme_exit_table() -> Vec<(i32, String)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme
        .find("| status | meaning |")
        .expect("the README has an exit-status table");
    readme[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].parse().expect("a status"), cells[2].to_string())
        })
        .collect()
}

fn ended(dir: &std::path::Path) -> Value {
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    summary["ended"].clone()
}

#[test]
fn the_readme_exit_table_is_the_programs() {
    let readme: Vec<i32> = readme_exit_table().iter().map(|(c, _)| *c).collect();
    let program: Vec<i32> = EXIT_CODES.iter().map(|(c, _)| *c).collect();
    assert_eq!(readme, program);
}

#[test]
fn each_exit_status_comes_from_its_case() {
    let dir = temp_dir("exit-codes");
    let trace = text_trace(&dir, 20, 5, 2);
    let status = |cmd: &mut std::process::Command| {
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };

    // 0: completed.
    let run = dir.join("ok");
    let (code, err) = status(
        bin()
            .args(["replay", "--mock", "--quiet", "--trace"])
            .arg(&trace)
            .arg("--output")
            .arg(&run),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(ended(&run)["how"], "completed");

    // 1: a trace that cannot be opened is an input error; so is a plan that measures nothing.
    let (code, err) = status(bin().args(["replay", "--mock", "--trace", "no/such/trace.jsonl"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot open the trace no/such/trace.jsonl"),
        "{err}"
    );
    let (code, err) = status(
        bin()
            .args(["replay", "--mock", "--warmup-requests", "20", "--trace"])
            .arg(&trace),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("leaves nothing to measure"), "{err}");

    // 2: no endpoint reachable (a port just closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, err) = status(
        bin()
            .args(["replay", "--quiet", "--model", "m", "--endpoint"])
            .arg(format!("http://127.0.0.1:{port}"))
            .arg("--trace")
            .arg(&trace),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no endpoint is reachable"), "{err}");

    // 3: every request failed.
    let mock = MockProcess::start(&["--fault", "status:503:1"]);
    let run = dir.join("none");
    let (code, err) = status(&mut replay_against(&mock, &trace, &run));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("no request succeeded (20 failed)"), "{err}");
    assert_eq!(ended(&run)["how"], "no-success");
    assert_eq!(ended(&run)["exit_code"], 3);
    std::fs::remove_dir_all(&dir).ok();
}
