//! Shards that meet in a `--rendezvous` directory: the readiness barrier, the heartbeats that
//! stop the others when one is lost, `watch`, and each shard's clock checked against its
//! target's `Date` header. Judged by the files the shards wrote (their ready notes, run.json,
//! records) and by counts, never by how long anything took.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{
    self, bin, path, plain_trace, read_json, read_jsonl, replay_against, temp_dir, tokenizer,
    MockProcess,
};

/// Waits (bounded: a hang fails the test instead of the suite) for a child to exit.
fn wait(child: Child, what: &str) -> Output {
    let mut child = child;
    let until = Instant::now() + Duration::from_secs(240);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            child.kill().ok();
            panic!("{what} did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `llmreplay merge OUT DIRS...` (with `extra` options first).
fn merge(out: &Path, dirs: &[PathBuf], extra: &[&str]) -> Output {
    bin()
        .arg("merge")
        .args(extra)
        .arg(out)
        .args(dirs)
        .output()
        .unwrap()
}

/// Asserts that a command ended with `code` and said each of `needles`; returns its stderr.
fn ended_with(out: &Output, code: i32, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in: {err}");
    }
    err
}

/// Polls until `ready()` (bounded).
fn until(what: &str, ready: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(180);
    while !ready() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn shard_cmd(
    mock: &MockProcess,
    trace: &Path,
    out: &Path,
    i: usize,
    n: usize,
    rv: &Path,
) -> Command {
    let mut cmd = replay_against(mock, trace, out);
    cmd.args(["--tokenizer", path(&tokenizer("qwen3"))])
        .args(["--shard", &format!("{i}/{n}"), "--rendezvous"])
        .arg(rv)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

/// A run's scratch directory, trace, mock, meeting directory and shard outputs.
struct Setup {
    dir: PathBuf,
    trace: PathBuf,
    mock: MockProcess,
    rv: PathBuf,
    outs: Vec<PathBuf>,
}

fn setup(name: &str, records: u64, every_ms: u64, shards: usize) -> Setup {
    let dir = temp_dir(name);
    let trace = plain_trace(&dir, records, every_ms);
    let mock = MockProcess::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let rv = dir.join("meet");
    let outs = (0..shards)
        .map(|i| dir.join(format!("shard-{i}")))
        .collect();
    Setup {
        dir,
        trace,
        mock,
        rv,
        outs,
    }
}

#[test]
fn three_shards_start_at_one_instant_after_the_slowest_is_ready() {
    let Setup {
        dir,
        trace,
        mock,
        rv,
        outs,
    } = setup("rendezvous-barrier", 600, 5, 3);
    let mut children: Vec<Child> = (0..2)
        .map(|i| {
            shard_cmd(&mock, &trace, &outs[i], i, 3, &rv)
                .spawn()
                .unwrap()
        })
        .collect();
    // The slow shard: started only once the other two are waiting at the barrier, as watch
    // shows them.
    until("shards 0 and 1 ready", || {
        (0..2).all(|i| rv.join("ready").join(i.to_string()).exists())
    });
    until("watch shows them at the barrier", || {
        let o = bin().args(["watch", "--once"]).arg(&rv).output().unwrap();
        String::from_utf8_lossy(&o.stderr).contains("shards 0/3 running, 2 at the barrier")
    });
    children.push(
        shard_cmd(&mock, &trace, &outs[2], 2, 3, &rv)
            .spawn()
            .unwrap(),
    );
    for (i, c) in children.into_iter().enumerate() {
        let out = wait(c, &format!("shard {i}"));
        assert!(
            out.status.success(),
            "shard {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ready: Vec<u64> = (0..3)
        .map(|i| {
            read_json(&rv.join("ready").join(i.to_string()))["unix_ns"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(ready[2] > ready[0] && ready[2] > ready[1], "{ready:?}");
    // Every shard's time 0 is one instant: the slowest's readiness plus the 5-s lead.
    let instant_ms = (ready[2] + 5_000_000_000) / 1_000_000;
    for out in &outs {
        let run = read_json(&out.join("run.json"));
        assert_eq!(
            run["start"]["at_unix_ms"].as_f64().unwrap() as u64,
            instant_ms,
            "{}",
            run["start"]
        );
        assert_eq!(run["start"]["late_ms"], 0.0, "{}", run["start"]);
        assert_eq!(run["rendezvous"]["barrier"], true);
        assert_eq!(run["ended"]["how"], "completed");
        let beat = read_json(&rv.join("live").join(run["shard"]["index"].to_string()));
        assert_eq!(beat["state"], "done");
        assert_eq!(beat["sent"], run["shard"]["records"], "{beat}");
    }
    // watch: the heartbeats add up to every record of the run, and its figures are the
    // merged summary's (its percentiles within the histograms' 0.1 %).
    let watched = bin().args(["watch", "--once"]).arg(&rv).output().unwrap();
    let text = String::from_utf8_lossy(&watched.stderr).into_owned();
    assert!(watched.status.success(), "{text}");
    assert!(
        text.contains("shards 0/3 running, 3 ended, 0 lost | sent 600 fly 0"),
        "{text}"
    );
    let merged = dir.join("merged");
    ended_with(&merge(&merged, &outs, &[]), 0, &[]);
    let summary = read_json(&merged.join("summary.json"));
    let after = |label: &str| -> String {
        let at = text
            .find(label)
            .unwrap_or_else(|| panic!("{label} in {text}"))
            + label.len();
        text[at..].split_whitespace().next().unwrap().to_string()
    };
    assert_eq!(after(" late "), summary["late_sends"].to_string(), "{text}");
    for (label, key, p) in [
        ("drift p99 ", "drift_ms", "p99"),
        ("TTFT p50 ", "ttft_ms", "p50"),
        (", p99 ", "ttft_ms", "p99"),
    ] {
        let watched: f64 = after(label)
            .parse()
            .unwrap_or_else(|_| panic!("{label}: {text}"));
        let merged = summary[key][p].as_f64().unwrap();
        assert!(
            (watched - merged).abs() <= merged * 0.002 + 0.011,
            "{label}: watch {watched} vs merged {merged}: {text}"
        );
    }
    // The same directory cannot meet a second run.
    let again = shard_cmd(&mock, &trace, &dir.join("again"), 0, 3, &rv)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("from an earlier run"));
}

#[test]
fn a_shard_never_ready_calls_the_run_off() {
    let dir = temp_dir("rendezvous-alone");
    let trace = plain_trace(&dir, 10, 5);
    let mock = MockProcess::start(&[]);
    let rv = dir.join("meet");
    let out = shard_cmd(&mock, &trace, &dir.join("s0"), 0, 2, &rv)
        .args(["--ready-timeout", "0.5"])
        .output()
        .unwrap();
    ended_with(
        &out,
        2,
        &[
            "shard 1/2 not ready within 0.5 s (--ready-timeout)",
            "the run is off for every shard",
        ],
    );
    let beat = read_json(&rv.join("live").join("0"));
    assert_eq!(beat["state"], "failed", "{beat}");
    // Nothing was sent.
    assert_eq!(beat["sent"], 0);
}

#[test]
fn a_killed_shard_stops_the_others_and_merge_names_it() {
    // 2,000 records 40 ms apart: an 80-s schedule that no shard may finish.
    let Setup {
        dir,
        trace,
        mock,
        rv,
        outs,
    } = setup("rendezvous-killed", 2000, 40, 3);
    let mut children: Vec<Option<Child>> = (0..3)
        .map(|i| {
            Some(
                shard_cmd(&mock, &trace, &outs[i], i, 3, &rv)
                    .args(["--heartbeat-timeout", "2"])
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    // Shard 1 is killed once its heartbeat says it has sent requests.
    until("shard 1 sending", || {
        std::fs::read(rv.join("live").join("1"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|b| b["sent"].as_u64() >= Some(5))
    });
    let mut killed = children[1].take().unwrap();
    killed.kill().unwrap();
    killed.wait().unwrap();
    for i in [0, 2] {
        let out = wait(children[i].take().unwrap(), &format!("shard {i}"));
        ended_with(&out, 2, &["shard 1/3 no heartbeat for"]);
        let run = read_json(&outs[i].join("run.json"));
        assert_eq!(
            run["ended"]["how"], "stopped-by-shard-loss",
            "{}",
            run["ended"]
        );
        // It stopped long before its schedule's end.
        let sent = read_jsonl(&outs[i].join("requests.jsonl")).len() as u64;
        let planned = run["shard"]["records"].as_u64().unwrap();
        assert!(sent * 2 < planned, "shard {i}: {sent} of {planned} sent");
    }
    let merged = dir.join("merged");
    let out = merge(&merged, &outs, &[]);
    ended_with(&out, 2, &[]);
    let table = std::fs::read_to_string(merged.join("shards.txt")).unwrap();
    let row = table.lines().find(|l| l.starts_with("1/3")).unwrap();
    assert!(row.ends_with("lost"), "{table}");
    assert!(
        table.contains("shard 1/3 ended lost (last heartbeat 20"),
        "{table}"
    );
    let ended = &read_json(&merged.join("summary.json"))["ended"];
    assert_eq!(ended["how"], "stopped-by-shard-loss", "{ended}");
    assert!(
        ended["detail"]
            .as_str()
            .unwrap()
            .contains("shard 1/3 ended without a word"),
        "{ended}"
    );
    // Every record any shard wrote is in the merged run.
    let written: usize = outs
        .iter()
        .map(|o| read_jsonl(&o.join("requests.jsonl")).len())
        .sum();
    assert_eq!(read_jsonl(&merged.join("requests.jsonl")).len(), written);
    let watched = bin()
        .args(["watch", "--once", "--heartbeat-timeout", "2"])
        .arg(&rv)
        .output()
        .unwrap();
    ended_with(&watched, 2, &["2 ended, 1 lost"]);
}

#[test]
fn a_skewed_host_is_corrected_a_host_far_from_the_others_refused_and_a_server_off_told_apart() {
    let dir = temp_dir("rendezvous-dates");
    let trace = plain_trace(&dir, 60, 5);
    let rv = dir.join("meet");
    let shard = |i: usize, offset: &str, out: &Path, rv: &Path| {
        let mut cmd = bin();
        cmd.args([
            "replay",
            "--quiet",
            "--mock",
            "--mock-ttft-ms",
            "1",
            "--mock-itl-ms",
            "0",
        ])
        .args(["--tokenizer", path(&tokenizer("qwen3"))])
        .arg("--trace")
        .arg(&trace)
        .arg("--output")
        .arg(out)
        .args([
            "--shard",
            &format!("{i}/2"),
            "--mock-date-offset-ms",
            offset,
        ])
        .arg("--rendezvous")
        .arg(rv)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        cmd
    };
    let outs: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("s{i}"))).collect();
    let children: Vec<Child> = [("0", 0), ("500", 1)]
        .iter()
        .map(|(off, i)| shard(*i, off, &outs[*i], &rv).spawn().unwrap())
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let out = wait(c, &format!("shard {i}"));
        assert!(
            out.status.success(),
            "shard {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Shard 1's target is 500 ms ahead: its clock reads 500 ms behind, within what the
    // check itself says it is sure of.
    let run = |o: &Path| read_json(&o.join("run.json"));
    let mut starts = Vec::new();
    for (o, want) in outs.iter().zip([0.0, 500.0]) {
        let r = run(o);
        let c = &r["clock_check"]["start"];
        let (offset, within) = (
            c["offset_ms"].as_f64().unwrap(),
            c["uncertainty_ms"].as_f64().unwrap(),
        );
        assert!((offset - want).abs() <= within + 0.01, "{c}");
        assert_eq!(c["method"], "http-date");
        // A handful of questions, not one every few ms for a second and more.
        assert!(c["samples"].as_u64().unwrap() <= 12, "{c}");
        assert_eq!(r["start"]["late_ms"], 0.0, "{}", r["start"]);
        starts.push((
            r["start"]["actual_unix_ms"].as_f64().unwrap(),
            offset,
            within,
        ));
    }
    // Corrected: shard 1 started by its own clock as much earlier as its clock reads behind
    // (here one host's clock, so the two starts are compared on it directly).
    let ((a0, o0, u0), (a1, o1, u1)) = (starts[0], starts[1]);
    assert!(((a1 + o1) - (a0 + o0)).abs() <= u0 + u1 + 2.0, "{starts:?}");
    assert!((a0 - a1 - 500.0).abs() <= u0 + u1 + 2.0, "{starts:?}");
    let merged = dir.join("merged");
    let out = merge(&merged, &outs, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = std::fs::read_to_string(merged.join("shards.txt")).unwrap();
    let row = table.lines().find(|l| l.starts_with("1/2")).unwrap();
    assert!(row.contains("+50") || row.contains("+49"), "{table}");
    // The merged verdict agrees: the starts, corrected, are one instant.
    let summary = read_json(&merged.join("summary.json"));
    let reasons = summary["verdict"]["reasons"].to_string();
    assert!(!reasons.contains("shard-clocks"), "{reasons}");

    // One host 3 s from the other (its target's Date 3 s ahead, the other's not): every
    // shard refuses, naming the hosts, before anything is sent.
    let pair = |offsets: [&str; 2], name: &str| -> Vec<Output> {
        let rv = dir.join(format!("meet-{name}"));
        let children: Vec<Child> = (0..2)
            .map(|i| {
                let out = dir.join(format!("{name}-{i}"));
                shard(i, offsets[i], &out, &rv).spawn().unwrap()
            })
            .collect();
        children
            .into_iter()
            .enumerate()
            .map(|(i, c)| wait(c, &format!("{name} shard {i}")))
            .collect()
    };
    for out in pair(["0", "3000"], "apart") {
        ended_with(
            &out,
            2,
            &["the hosts' clocks disagree by more than --max-clock-offset-ms 1000"],
        );
    }
    // Both targets 3 s ahead: the server's clock is off, not the hosts'; the run goes on.
    for out in pair(["3000", "3000"], "server-off") {
        ended_with(
            &out,
            0,
            &["the server's clock", "is 3.0 s off every host's"],
        );
    }
}

#[test]
fn with_no_tmp_every_output_is_written_beside_the_results() {
    // A scratch image has no /tmp: nothing may need it (results.xlsx's writer did).
    let dir = temp_dir("no-tmp");
    let run = |args: &[&str]| {
        let out = bin()
            .env("TMPDIR", "/nonexistent/tmp")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let trace = common::mooncake("conversation_trace.jsonl");
    let out = dir.join("run");
    run(&[
        "replay",
        "--quiet",
        "--mock",
        "--trace",
        path(&trace),
        "--tokenizer",
        path(&tokenizer("qwen3")),
        "--max-requests",
        "30",
        "--time-scale",
        "100",
        "--output",
        path(&out),
    ]);
    assert!(out.join("results.xlsx").is_file());
    std::fs::remove_file(out.join("results.xlsx")).unwrap();
    run(&["report", path(&out)]);
    assert!(out.join("results.xlsx").is_file());
    // Nothing left beside the results.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, ["run"], "{left:?}");
}

#[test]
fn a_shard_that_fails_while_preparing_stops_the_run_and_merge_stops_waiting() {
    let Setup {
        dir,
        trace,
        mock,
        rv,
        outs,
    } = setup("rendezvous-failed", 2000, 40, 2);
    // A fixed instant (no barrier): shard 0 runs while shard 1 fails on its tokenizer.
    let at = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3000)
        .to_string();
    let first = shard_cmd(&mock, &trace, &outs[0], 0, 2, &rv)
        .args(["--start-at", &at])
        .spawn()
        .unwrap();
    let failed = replay_against(&mock, &trace, &outs[1])
        .args(["--tokenizer", "/nonexistent/tokenizer.json"])
        .args(["--shard", "1/2", "--start-at", &at, "--rendezvous"])
        .arg(&rv)
        .output()
        .unwrap();
    assert_ne!(failed.status.code(), Some(0));
    assert_eq!(read_json(&rv.join("live").join("1"))["state"], "failed");
    let out = wait(first, "shard 0");
    ended_with(&out, 2, &["shard 1/2 failed: "]);
    // merge does not wait out its --wait for a shard whose heartbeat says it failed.
    let merged = merge(&dir.join("merged"), &outs, &["--wait", "3600"]);
    ended_with(
        &merged,
        2,
        &["every shard of the run has ended: shard 1/2 failed: "],
    );
}

/// A heartbeat claiming more shards than a run has (4,294,967,295) is an error naming the
/// file, not an attempt to read them all.
#[test]
fn watch_refuses_a_heartbeat_claiming_absurdly_many_shards() {
    let dir = temp_dir("rendezvous-claims");
    std::fs::create_dir_all(dir.join("live")).unwrap();
    let beat = json!({"index": 0, "count": u32::MAX, "unix_ns": 0, "state": "running",
        "sent": 0, "done": 0, "failed": 0, "late": 0, "output_tokens": 0, "run_s": 0.0});
    std::fs::write(dir.join("live").join("0"), beat.to_string()).unwrap();
    let watched = bin().args(["watch", "--once"]).arg(&dir).output().unwrap();
    ended_with(&watched, 1, &["claiming 4294967295 shards"]);
}

/// Runs the shard commands at once and waits for each; returns their outputs.
fn run_all(cmds: Vec<Command>) -> Vec<Output> {
    let children: Vec<Child> = cmds.into_iter().map(|mut c| c.spawn().unwrap()).collect();
    children
        .into_iter()
        .enumerate()
        .map(|(i, c)| wait(c, &format!("shard {i}")))
        .collect()
}

/// A rerun in the directories of an earlier run (a Kubernetes Job applied again on the same
/// volume): every shard refuses to join, and merge says the run never started instead of
/// merging the earlier run's files as this one's, `--force` or not.
#[test]
fn a_rerun_over_an_earlier_run_is_refused_and_merge_does_not_pass_off_the_old_one() {
    let Setup {
        dir,
        trace,
        mock,
        rv,
        outs,
    } = setup("rendezvous-rerun", 20, 5, 2);
    let shards = || -> Vec<Command> {
        (0..2)
            .map(|i| {
                let mut c = shard_cmd(&mock, &trace, &outs[i], i, 2, &rv);
                c.args(["--run-id", "job-7f3a", "--force"]);
                c
            })
            .collect()
    };
    for out in run_all(shards()) {
        ended_with(&out, 0, &[]);
    }
    let first = dir.join("merged");
    ended_with(&merge(&first, &outs, &["--rendezvous", path(&rv)]), 0, &[]);
    assert_eq!(read_json(&first.join("run.json"))["run_id"], "job-7f3a");
    assert_eq!(read_json(&rv.join("live").join("1"))["run_id"], "job-7f3a");
    // The same commands again.
    for out in run_all(shards()) {
        ended_with(&out, 2, &["from an earlier run (run job-7f3a)"]);
    }
    let again = merge(
        &dir.join("merged-again"),
        &outs,
        &["--rendezvous", path(&rv), "--wait", "3600", "--force"],
    );
    ended_with(
        &again,
        2,
        &[
            "the run never started: shard 0/2 refused to join",
            "earlier run",
        ],
    );
    assert!(!dir.join("merged-again").join("summary.json").exists());
    // The earlier run's files are as they were: its merge still holds.
    let first_records = read_jsonl(&first.join("requests.jsonl")).len();
    assert_eq!(first_records, 20);
}

/// A run called off before its start (an endpoint unreachable, an output directory that
/// cannot be written, a shard that never came) leaves no run.json; merge reads the
/// heartbeats and ends at once, naming the shard and the reason, instead of waiting out
/// `--wait`.
#[test]
fn merge_ends_at_once_when_the_run_was_called_off_before_its_start() {
    for (case, broken, reason) in [
        (
            "unreachable",
            vec!["--endpoint", "http://127.0.0.1:1"],
            "shard 1/2 failed: ",
        ),
        (
            "unwritable",
            vec!["--output", "/proc/llmreplay-cannot-write-here"],
            "shard 1/2 failed: ",
        ),
        ("absent", vec![], "shard 1/2 never joined"),
    ] {
        let Setup {
            dir,
            trace,
            mock,
            rv,
            outs,
        } = setup(&format!("rendezvous-off-{case}"), 20, 5, 2);
        let mut cmds = vec![shard_cmd(&mock, &trace, &outs[0], 0, 2, &rv)];
        cmds[0].args(["--ready-timeout", "2"]);
        if !broken.is_empty() {
            // The same shard command, with the broken option in place of its own.
            let base = shard_cmd(&mock, &trace, &outs[1], 1, 2, &rv);
            let mut args: Vec<String> = base
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let at = args.iter().position(|a| a == broken[0]).unwrap();
            args[at + 1] = broken[1].to_string();
            let mut c = bin();
            c.args(&args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmds.push(c);
        }
        for out in run_all(cmds) {
            assert_eq!(out.status.code(), Some(2), "{case}");
        }
        assert!(!outs[0].join("run.json").exists(), "{case}");
        let merged = merge(
            &dir.join("merged"),
            &outs,
            &["--rendezvous", path(&rv), "--wait", "3600"],
        );
        ended_with(&merged, 2, &["every shard of the run has ended", reason]);
    }
}

/// A shard killed in the run's last seconds, its fellows done: merge, given no --wait, waits
/// for its heartbeat to go silent long enough to call it lost, then merges and names it
/// (exit 2), instead of refusing the run as "not finished".
#[test]
fn a_shard_killed_in_the_last_seconds_is_merged_as_lost() {
    let Setup {
        dir,
        trace,
        mock,
        rv,
        outs,
    } = setup("rendezvous-last-seconds", 200, 10, 2);
    let first = shard_cmd(&mock, &trace, &outs[0], 0, 2, &rv)
        .args(["--heartbeat-timeout", "4", "--on-shard-loss", "continue"])
        .spawn()
        .unwrap();
    let mut second = shard_cmd(&mock, &trace, &outs[1], 1, 2, &rv)
        .args(["--heartbeat-timeout", "4"])
        .spawn()
        .unwrap();
    let beat = |i: u32| -> Option<Value> {
        serde_json::from_slice(&std::fs::read(rv.join("live").join(i.to_string())).ok()?).ok()
    };
    until("shard 1 sending", || {
        beat(1).is_some_and(|b| b["sent"].as_u64() >= Some(5))
    });
    second.kill().unwrap();
    second.wait().unwrap();
    ended_with(&wait(first, "shard 0"), 0, &[]);
    // Its last heartbeat is more than two beats old (quiet), but not yet past the timeout
    // unless the machine was slow; either way merge must end with it named as lost.
    let now_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    until("shard 1 quiet", || {
        beat(1).is_some_and(|b| now_ns() - b["unix_ns"].as_u64().unwrap() > 2_500_000_000)
    });
    let merged = dir.join("merged");
    ended_with(&merge(&merged, &outs, &[]), 2, &[]);
    let table = std::fs::read_to_string(merged.join("shards.txt")).unwrap();
    assert!(table.contains("shard 1/2 ended lost"), "{table}");
    assert_eq!(
        read_json(&merged.join("summary.json"))["ended"]["how"],
        "stopped-by-shard-loss"
    );
}

/// merge waiting for shards ends on SIGTERM at once, exit 130 (as PID 1 in the image it
/// ignored SIGTERM, and every Job delete waited out the grace period).
#[test]
fn merge_ends_on_sigterm_while_it_waits() {
    let dir = temp_dir("merge-sigterm");
    let rv = dir.join("meet");
    std::fs::create_dir_all(rv.join("live")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    // A shard running, its heartbeat fresh: merge has every reason to keep waiting.
    let beat = json!({"index": 0, "count": 1, "unix_ns": now, "state": "running",
        "sent": 1, "done": 0, "failed": 0, "late": 0, "output_tokens": 0, "run_s": 1.0});
    std::fs::write(rv.join("live").join("0"), beat.to_string()).unwrap();
    let child = bin()
        .args(["merge", "--wait", "3600", "--rendezvous"])
        .arg(&rv)
        .arg(dir.join("merged"))
        .arg(dir.join("shard-0"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Once its handler is in place (the kernel's mask of caught signals says so).
    until("merge catches SIGTERM", || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                let mask = s.lines().find(|l| l.starts_with("SigCgt:"))?[7..]
                    .trim()
                    .to_string();
                u64::from_str_radix(&mask, 16).ok()
            })
            .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
    });
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let out = wait(child, "merge");
    ended_with(&out, 130, &["stopped by a signal"]);
}
