//! Every `llmreplay` command in the README's `sh` blocks runs, read from the README itself
//! (a new example is tested the day it is written), with these substitutions, which the
//! README states under "Every command here runs":
//!
//! - `cargo run --release --` is the built binary; `cargo test --release` is this suite.
//! - A server URL (`http://10.0.0.5:8000`, `https://gw.internal`, ...) is a mock started for
//!   it on 127.0.0.1 (TLS with a certificate made here for `https`), its path and `,key=`
//!   options kept; `ca.pem`, `cert.pem` and `key.pem` are that certificate and key.
//! - `trace.jsonl` is the bundled 500-record sample and `/models/Qwen3-8B` the bundled Qwen3
//!   tokenizer; replays of `trace.jsonl` get `--max-requests 40 --time-scale 100` (the
//!   sample lasts 165 s at its own pace).
//! - The local Hugging Face cache (`HF_HUB_CACHE`) is one made in the scratch directory, whose
//!   `Qwen/Qwen3-8B` snapshot holds the bundled Qwen3 tokenizer.
//! - `replay ...` is the replay command above it, with what follows added.
//! - `mock --listen ADDR` listens on a free port (its `--*-log` files go to the scratch
//!   directory); a mock line ending in `&` serves the
//!   commands after it (their `127.0.0.1:PORT` is its address), any other gets one short
//!   replay to show that it answers.
//! - A path under `/shared/` is one scratch directory for every command (the hosts' shared
//!   filesystem), so that shards run side by side meet there; `watch` runs after them.
//! - `calibrate --seconds 5` runs 0.2 s per rate; `report run2` reads a second run of the
//!   `run1` command; `report client.jsonl` reads a copy of run1's records.
//!
//! Each command must exit 0; a replay must have sent every request it planned, with some
//! answered, to every endpoint it names. Independent commands run side by side, each chain
//! in a directory of its own (see [`Step`]); `report` and `merge` run after all before them.

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{bin, read_jsonl, temp_dir, MockProcess};
use serde_json::Value;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// A command still running after this has hung: far from any command's time (the longest
/// takes 30 s alone, a few minutes on a busy machine beside the other chains).
const LIMIT: Duration = Duration::from_secs(600);

/// The commands of the README's `sh` blocks, continuation lines joined, comments dropped.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut current = String::new();
    for line in readme.lines() {
        match (in_block, line.trim_start().starts_with("```")) {
            (false, true) => in_block = line.trim() == "```sh",
            (true, true) => in_block = false,
            (true, false) if !line.trim().is_empty() && !line.starts_with('#') => {
                match line.strip_suffix('\\') {
                    Some(part) => current.push_str(part),
                    None => {
                        current.push_str(line);
                        commands.push(std::mem::take(&mut current));
                    }
                }
            }
            _ => {}
        }
    }
    commands
}

/// Splits a command line as sh would for these lines: words, with '...' quoting.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The mocks standing for the README's servers, by the URL's scheme and authority.
struct Servers {
    mocks: HashMap<String, MockProcess>,
    cert: (PathBuf, PathBuf),
    /// What `/shared/` stands for: one directory every command sees (the hosts' shared
    /// filesystem).
    shared: PathBuf,
}

impl Servers {
    /// `url` with its scheme and host replaced by a mock's (one per distinct host).
    fn substitute(&mut self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let cut = rest.find(['/', ',']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(cut);
        let key = format!("{scheme}://{authority}");
        let cert = &self.cert;
        let mock = self.mocks.entry(key).or_insert_with(|| match scheme {
            "https" => MockProcess::start(&[
                "--tls-cert",
                cert.0.to_str().unwrap(),
                "--tls-key",
                cert.1.to_str().unwrap(),
            ]),
            _ => MockProcess::start(&[]),
        });
        format!("{scheme}://{}{tail}", mock.addr)
    }
}

/// The README's words made runnable (the substitutions above).
fn substitute(w: &[String], servers: &mut Servers, previous_replay: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut replays_sample = false;
    for (i, word) in w.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| w[p].as_str());
        let word = word.as_str();
        match word {
            "..." => out.extend(previous_replay.iter().cloned()),
            "trace.jsonl" => {
                replays_sample = true;
                out.push(format!(
                    "{REPO}/assets/traces/mooncake_conversation_500.jsonl"
                ));
            }
            "/models/Qwen3-8B" => out.push(format!("{REPO}/assets/tokenizers/qwen3")),
            "ca.pem" | "cert.pem" => out.push(servers.cert.0.display().to_string()),
            "key.pem" => out.push(servers.cert.1.display().to_string()),
            "5" if prev == Some("--seconds") => out.push("0.2".into()),
            // Loopback URLs are the README's own mocks (a line with `&`).
            w if (w.starts_with("http://") || w.starts_with("https://"))
                && !w.contains("://127.0.0.1") =>
            {
                out.push(servers.substitute(w))
            }
            w if w.starts_with("/shared/") => out.push(
                servers
                    .shared
                    .join(&w["/shared/".len()..])
                    .display()
                    .to_string(),
            ),
            w if w.starts_with("assets/") || w.starts_with("tests/") => {
                out.push(format!("{REPO}/{w}"))
            }
            w => out.push(w.to_string()),
        }
    }
    if replays_sample && out.first().is_some_and(|c| c == "replay") {
        out.extend(["--max-requests", "40", "--time-scale", "100"].map(String::from));
    }
    out
}

/// Runs `args` in `cwd`, killed past [`LIMIT`]; returns the exit status and stderr.
fn run(cwd: &Path, hf: &Path, args: &[String]) -> (i32, String) {
    let mut child = bin()
        .args(args)
        .current_dir(cwd)
        .env("HF_HUB_CACHE", hf)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).ok();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > LIMIT {
            child.kill().ok();
            panic!("{args:?} ran past {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code().unwrap_or(-1), reader.join().unwrap())
}

/// The run directories in `cwd` (those holding requests.jsonl).
fn run_dirs(cwd: &Path) -> BTreeSet<PathBuf> {
    let mut dirs = BTreeSet::new();
    let mut stack = vec![cwd.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.join("requests.jsonl").is_file() {
                    dirs.insert(p.clone());
                }
                stack.push(p);
            }
        }
    }
    dirs
}

/// A replay's run: it sent what it planned, some were answered, and every endpoint it was
/// given got requests.
fn check_run(dir: &Path, args: &[String]) {
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let records = read_jsonl(&dir.join("requests.jsonl"));
    // A shard plans its own share of the schedule.
    let planned = run["shard"]["records"]
        .as_u64()
        .or(run["schedule"]["records"].as_u64())
        .unwrap();
    assert_eq!(
        records.len() as u64,
        planned,
        "{args:?}: every planned request was sent"
    );
    assert!(
        records.iter().any(|r| r["error"].is_null()),
        "{args:?}: none answered"
    );
    let hosts: BTreeSet<String> = records
        .iter()
        .filter_map(|r| r["endpoint"].as_str())
        .map(|e| e.split('/').take(3).collect::<Vec<_>>().join("/"))
        .collect();
    // Round-robin (the default) reaches every endpoint; session and least-inflight routing
    // may rightly keep a short run on fewer.
    if args.iter().any(|a| a == "--route") {
        return;
    }
    for (i, w) in args.iter().enumerate() {
        if i > 0 && args[i - 1] == "--endpoint" {
            let host = w
                .split([','])
                .next()
                .unwrap()
                .split('/')
                .take(3)
                .collect::<Vec<_>>()
                .join("/");
            assert!(
                hosts.contains(&host),
                "{args:?}: nothing sent to {host} ({hosts:?})"
            );
        }
    }
}

/// A README example is a healthy run: VALID by default but for what this machine's load may
/// earn, except against a mock that fails on purpose (`--fault`) or answers every request
/// with one recorded stream (`--replay-stream`: its usage is the recording's, not the
/// request's, and the verdict rightly says so).
fn verdict_holds(dir: &Path, line: &str) {
    if line.contains("--fault") || line.contains("--replay-stream") {
        return;
    }
    let design = common::design_reasons(dir);
    assert!(design.is_empty(), "{line}: INVALID for {design:?}");
}

/// One README command made runnable, and what its run must show.
struct Job {
    line: String,
    args: Vec<String>,
    /// A mock line's check: a short replay against it, written here.
    mock_check: Option<PathBuf>,
}

/// Runs one job in `cwd` (the README's relative paths resolve there).
fn run_job(cwd: &Path, hf: &Path, job: &Job) {
    let before = run_dirs(cwd);
    let started = Instant::now();
    let (code, err) = run(cwd, hf, &job.args);
    eprintln!("{:>6.1} s  {}", started.elapsed().as_secs_f64(), job.line);
    let line = &job.line;
    if let Some(out) = &job.mock_check {
        assert_eq!(code, 0, "{line}: a replay against it: {err}");
        check_run(out, &job.args);
        verdict_holds(out, line);
        return;
    }
    assert_eq!(code, 0, "{line}\n  ran as {:?}\n{err}", job.args);
    if job.args[0] == "replay" {
        let new: Vec<PathBuf> = run_dirs(cwd).difference(&before).cloned().collect();
        // run1 again (--output run1) is not new: then the run is run1.
        let dir = new.first().cloned().unwrap_or_else(|| cwd.join("run1"));
        check_run(&dir, &job.args);
        verdict_holds(&dir, line);
    }
}

/// What runs when: the commands fall into chains that run side by side, each in a
/// directory of its own (the README's commands mostly wait on timestamps, so running them
/// one after another takes minutes). A command stays in the chain it depends on: a `...`
/// replay in its replay's chain, a command against a `&` mock in that mock's. `report` and
/// `merge` (and `watch`) read what earlier commands wrote: they wait for every chain before
/// them and run in
/// a directory that links every chain's outputs.
enum Step {
    Chain(usize),
    AfterAll(Job),
}

/// At most this many chains run at once (each replay pins its threads to the cores: more
/// side by side only queue on the same two).
const CHAINS_AT_ONCE: usize = 3;

#[test]
fn every_readme_command_runs_against_the_mock() {
    let cwd = temp_dir("readme");
    let hf = cwd.join("hf-hub");
    let snapshot = hf.join("models--Qwen--Qwen3-8B/snapshots/c0ffee");
    std::fs::create_dir_all(&snapshot).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(
            Path::new(REPO).join("assets/tokenizers/qwen3").join(f),
            snapshot.join(f),
        )
        .unwrap();
    }
    std::fs::create_dir_all(hf.join("models--Qwen--Qwen3-8B/refs")).unwrap();
    std::fs::write(hf.join("models--Qwen--Qwen3-8B/refs/main"), "c0ffee").unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = (cwd.join("cert.pem"), cwd.join("key.pem"));
    std::fs::write(&cert.0, made.cert.pem()).unwrap();
    std::fs::write(&cert.1, made.signing_key.serialize_pem()).unwrap();
    let mut servers = Servers {
        mocks: HashMap::new(),
        cert,
        shared: cwd.join("hosts-shared-fs"),
    };
    // Mocks a README line started with `&`, by the port the README gave them, and the chain
    // of the commands against each.
    let mut background: HashMap<String, (MockProcess, usize)> = HashMap::new();
    let mut previous_replay: Vec<String> = Vec::new();
    let mut replay_chain = 0;
    let mut chains: Vec<Vec<Job>> = Vec::new();
    let mut steps: Vec<Step> = Vec::new();
    let new_chain = |chains: &mut Vec<Vec<Job>>, steps: &mut Vec<Step>| {
        chains.push(Vec::new());
        steps.push(Step::Chain(chains.len() - 1));
        chains.len() - 1
    };
    for line in readme_commands() {
        let line = line.trim().to_string();
        if line == "cargo test --release" {
            continue;
        }
        let line = line.replace("cargo run --release -- ", "llmreplay ");
        let mut w = words(&line);
        assert_eq!(w.remove(0), "llmreplay", "a README command: {line}");
        let is_background = w.last().is_some_and(|l| l == "&");
        if is_background {
            w.pop();
        }
        // A server of a mock line with `&` is that mock, by its README port.
        let mut args: Vec<String> = Vec::new();
        let mut against = None;
        for word in &w {
            let local = background
                .iter()
                .find(|(port, _)| word.contains(&format!("127.0.0.1:{port}")));
            match local {
                Some((port, (mock, chain))) => {
                    against = Some(*chain);
                    args.push(word.replace(&format!("127.0.0.1:{port}"), &mock.addr))
                }
                None => args.push(word.clone()),
            }
        }
        if args[0] == "mock" {
            // MockProcess listens on a free port: the README's `--listen ADDR` is dropped,
            // its port kept to find this mock by.
            let mut mock_args = args[1..].to_vec();
            let at = mock_args.iter().position(|x| x == "--listen").unwrap();
            let addr: Vec<String> = mock_args.drain(at..at + 2).collect();
            let port = addr[1].rsplit(':').next().unwrap().to_string();
            let mut mock_args = substitute(&mock_args, &mut servers, &[]);
            // The mock runs in the test's directory: its log files go to the scratch one.
            for i in 1..mock_args.len() {
                if mock_args[i - 1].ends_with("-log") {
                    mock_args[i] = cwd.join(&mock_args[i]).display().to_string();
                }
            }
            let refs: Vec<&str> = mock_args.iter().map(String::as_str).collect();
            let mock = MockProcess::start(&refs);
            let chain = new_chain(&mut chains, &mut steps);
            if is_background {
                background.insert(port, (mock, chain));
                continue;
            }
            // It answers: one short replay against it.
            let scheme = if refs.contains(&"--tls-cert") {
                "https"
            } else {
                "http"
            };
            let url = format!("{scheme}://{}", mock.addr);
            let out = cwd.join(format!("mock-check-{}", chains.len()));
            let mut check: Vec<String> = [
                "replay",
                "--quiet",
                "--model",
                "m",
                "--endpoint",
                &url,
                "--max-requests",
                "5",
                "--time-scale",
                "100",
                "--tokenizer",
            ]
            .map(String::from)
            .to_vec();
            check.push(format!("{REPO}/assets/tokenizers/qwen3"));
            check.extend([
                "--trace".into(),
                format!("{REPO}/assets/traces/mooncake_conversation_500.jsonl"),
            ]);
            check.extend(["--output".into(), out.display().to_string()]);
            if scheme == "https" {
                check.extend(["--ca-cert".into(), servers.cert.0.display().to_string()]);
            }
            // The mock lives as long as the test: it is kept with the README's servers.
            servers.mocks.insert(format!("mock line {chain}"), mock);
            chains[chain].push(Job {
                line,
                args: check,
                mock_check: Some(out),
            });
            continue;
        }
        let args = substitute(&args, &mut servers, &previous_replay);
        let job = Job {
            line,
            args,
            mock_check: None,
        };
        if matches!(job.args[0].as_str(), "report" | "merge" | "watch") {
            steps.push(Step::AfterAll(job));
            continue;
        }
        let chain = match (against, w.iter().any(|x| x == "...")) {
            (Some(chain), _) => chain,
            (None, true) => replay_chain,
            (None, false) => new_chain(&mut chains, &mut steps),
        };
        if job.args[0] == "replay" && !w.contains(&"...".to_string()) {
            // The command above, less its --output (a `...` line writes a run of its own).
            previous_replay = job.args[1..].to_vec();
            if let Some(i) = previous_replay.iter().position(|a| a == "--output") {
                previous_replay.drain(i..i + 2);
            }
            replay_chain = chain;
        }
        chains[chain].push(job);
    }
    let ran = chains.iter().map(Vec::len).sum::<usize>()
        + steps
            .iter()
            .filter(|s| matches!(s, Step::AfterAll(_)))
            .count();
    assert!(ran >= 30, "{ran} commands ran");

    let mut chains: Vec<Option<Vec<Job>>> = chains.into_iter().map(Some).collect();
    let mut running: std::collections::VecDeque<std::thread::JoinHandle<()>> = Default::default();
    let chain_dir = |i: usize| cwd.join(format!("chain-{i}"));
    let join = |h: std::thread::JoinHandle<()>| {
        if let Err(panic) = h.join() {
            std::panic::resume_unwind(panic);
        }
    };
    for (k, step) in steps.into_iter().enumerate() {
        match step {
            Step::Chain(i) => {
                let jobs = chains[i].take().unwrap();
                let (dir, hf) = (chain_dir(i), hf.clone());
                std::fs::create_dir_all(&dir).unwrap();
                if running.len() == CHAINS_AT_ONCE {
                    join(running.pop_front().unwrap());
                }
                running.push_back(std::thread::spawn(move || {
                    for job in &jobs {
                        run_job(&dir, &hf, job);
                    }
                }));
            }
            Step::AfterAll(job) => {
                running.drain(..).for_each(join);
                // Every chain's outputs, by name, in one directory.
                let view = cwd.join(format!("after-{k}"));
                std::fs::create_dir_all(&view).unwrap();
                for i in 0..chains.len() {
                    let Ok(entries) = std::fs::read_dir(chain_dir(i)) else {
                        continue;
                    };
                    for e in entries.flatten() {
                        let to = view.join(e.file_name());
                        if !to.exists() {
                            std::os::unix::fs::symlink(e.path(), to).unwrap();
                        }
                    }
                }
                // What `report` reads: a second run1, and a records file alone.
                if job.args.contains(&"run2".to_string()) {
                    std::fs::create_dir_all(view.join("run2")).unwrap();
                    for f in ["requests.jsonl", "run.json"] {
                        std::fs::copy(view.join("run1").join(f), view.join("run2").join(f))
                            .unwrap();
                    }
                }
                if job.args.contains(&"client.jsonl".to_string()) {
                    std::fs::copy(view.join("run1/requests.jsonl"), view.join("client.jsonl"))
                        .unwrap();
                }
                run_job(&view, &hf, &job);
            }
        }
    }
    running.drain(..).for_each(join);
    drop(background);
    std::fs::remove_dir_all(&cwd).ok();
}
