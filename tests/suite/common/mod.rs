//! Helpers shared by the integration tests: paths to the bundled data, scratch directories,
//! the built binary, and a mock server in a child process. Tests read nothing outside the
//! repository (`tests/data/` and `assets/`, each with its SOURCE.md).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// The bundled tokenizer families: byte-level BPE (Qwen3), SentencePiece/Metaspace BPE
/// (Mistral v1), GPT-2-style BPE with split digits (SmolLM2, as llama.cpp serves it) and
/// o200k harmony (GPT-OSS), and DeepSeek-V3's byte-level BPE with full-width special tokens.
/// Each directory holds its chat template.
pub const TOKENIZERS: [&str; 5] = ["qwen3", "mistral", "smollm2", "gpt-oss", "deepseek-v3"];

/// Chat templates bundled without a tokenizer of their own (`tests/data/templates/NAME/`,
/// given as `--tokenizer-config` beside the Qwen3 tokenizer): the behaviours of families
/// whose files cannot be bundled, and DeepSeek-R1's.
pub const TEMPLATES: [&str; 3] = ["llama3-style", "gemma-style", "deepseek-r1"];

/// The `tokenizer_config.json` of a bundled template (one of [`TEMPLATES`]).
pub fn template_config(name: &str) -> PathBuf {
    repo("tests/data/templates")
        .join(name)
        .join("tokenizer_config.json")
}

/// A Mooncake FAST'25 trace bundled in `tests/data/mooncake/`.
pub fn mooncake(name: &str) -> PathBuf {
    repo("tests/data/mooncake").join(name)
}

/// The directory of a bundled tokenizer family (one of [`TOKENIZERS`]).
pub fn tokenizer(family: &str) -> PathBuf {
    match family {
        "qwen3" => repo("assets/tokenizers/qwen3"),
        "mistral" | "smollm2" | "gpt-oss" | "deepseek-v3" => {
            repo("tests/data/tokenizers").join(family)
        }
        other => panic!("no bundled tokenizer {other:?}"),
    }
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A trace of `n` text records (`"a b c"`, 3 tokens) `every_ms` apart, each asking for
/// `output` tokens, written into `dir`.
pub fn text_trace(dir: &Path, n: u64, every_ms: u64, output: u64) -> PathBuf {
    let path = dir.join("t.jsonl");
    let lines: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"timestamp": {}, "text_input": "a b c", "input_length": 3, "output_length": {output}}}"#,
                i * every_ms
            )
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// Bailian-style conversations of 3 turns: conversation c's turn t (1-based) is chat
/// `c * 10 + t`, answering the turn before, at `c * conv_every_s + t * turn_every_s`; each
/// turn's hash ids hold the history (its parent's blocks, then two new ones). Unsorted.
pub fn bailian_chains(n: i64, conv_every_s: f64, turn_every_s: f64, output: u64) -> Vec<Value> {
    let mut records = Vec::new();
    let mut next_block = 0u64;
    for conv in 0..n {
        let mut parent = -1i64;
        let mut history: Vec<u64> = Vec::new();
        for turn in 1..=3i64 {
            let chat = conv * 10 + turn;
            history.extend(next_block..next_block + 2);
            next_block += 2;
            records.push(serde_json::json!({
                "chat_id": chat, "parent_chat_id": parent,
                "timestamp": conv as f64 * conv_every_s + turn as f64 * turn_every_s,
                "input_length": history.len() * 16, "output_length": output,
                "type": "text", "turn": turn, "hash_ids": history,
            }));
            parent = chat;
        }
    }
    records
}

/// Records in timestamp order, as a trace file holds them.
pub fn by_timestamp(mut records: Vec<Value>) -> Vec<Value> {
    records.sort_by(|a, b| {
        a["timestamp"]
            .as_f64()
            .partial_cmp(&b["timestamp"].as_f64())
            .unwrap()
    });
    records
}

/// The plan of `llmreplay replay --quiet ARGS`.
pub fn replay_plan(args: &[String]) -> llmreplay::plan::ReplayPlan {
    use clap::Parser;
    let cli = llmreplay::cli::Cli::parse_from(
        ["llmreplay", "replay", "--quiet"]
            .into_iter()
            .map(String::from)
            .chain(args.iter().cloned()),
    );
    let llmreplay::cli::Command::Replay(args) = cli.command else {
        panic!("replay")
    };
    llmreplay::plan::ReplayPlan::from_args(&args).unwrap()
}

/// `llmreplay replay --quiet ARGS` run in this process (the library, no child process).
pub fn replay_in_process(args: &[String]) -> llmreplay::commands::replay::RunOutcome {
    llmreplay::commands::replay::run(&replay_plan(args)).unwrap()
}

/// A replay of `trace` into `out` (model `m`) against an in-process mock started with `cfg`
/// on port 0, with `args` added: what the mock saw.
pub fn replay_against_mock(
    cfg: llmreplay::mock::MockConfig,
    trace: &Path,
    out: &Path,
    args: &[&str],
) -> llmreplay::mock::MockStats {
    let mock = llmreplay::mock::MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let endpoint = format!("http://{}", mock.addr());
    let mut line: Vec<String> = [
        "--trace",
        path(trace),
        "--output",
        path(out),
        "--model",
        "m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    line.extend(["--endpoint".to_string(), endpoint]);
    line.extend(args.iter().map(|s| s.to_string()));
    replay_in_process(&line);
    mock.stop().unwrap()
}

/// A fresh, empty scratch directory, never another call's (tests of one binary run side by
/// side, and a test may ask for the same name again).
pub fn temp_dir(name: &str) -> PathBuf {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "llmreplay-test-{name}-{}-{call}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A JSON file (summary.json, run.json).
pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The built `llmreplay` binary.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_llmreplay"))
}

/// `llmreplay replay --mock --quiet` (a 1 ms time to first token) of `trace` into the run
/// directory `out` (add options with `.args`).
pub fn replay_mock(trace: impl AsRef<std::ffi::OsStr>, out: &Path) -> Command {
    let mut cmd = bin();
    cmd.args([
        "replay",
        "--mock",
        "--quiet",
        "--mock-ttft-ms",
        "1",
        "--trace",
    ])
    .arg(trace)
    .arg("--output")
    .arg(out);
    cmd
}

/// `llmreplay replay --quiet` of `trace` against `mock` into the run directory `out` (add
/// options with `.args`).
/// A path as an argument.
pub fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

pub fn replay_against(mock: &MockProcess, trace: &Path, out: &Path) -> Command {
    let mut cmd = bin();
    cmd.args([
        "replay",
        "--quiet",
        "--model",
        "m",
        "--endpoint",
        &mock.url(),
    ])
    .arg("--trace")
    .arg(trace)
    .arg("--output")
    .arg(out);
    cmd
}

/// Spawns a command whose first stdout line is `PREFIX ADDR` (the mock's, the capture's):
/// the child, and the address.
pub fn spawn_listening(cmd: &mut Command, prefix: &str) -> (Child, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("first line {first:?}, not {prefix:?}ADDR"))
        .to_string();
    (child, addr)
}

/// `llmreplay mock` in a child process on a free loopback port; killed when dropped.
pub struct MockProcess {
    child: Child,
    pub addr: String,
}

impl MockProcess {
    pub fn start(args: &[&str]) -> MockProcess {
        let mut mock = bin();
        mock.args(["mock", "--listen", "127.0.0.1:0"]).args(args);
        let (child, addr) = spawn_listening(&mut mock, "listening on ");
        MockProcess { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for MockProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback HTTP server that answers every request with `answer(request head and body)`
/// and closes the connection: for servers that misbehave in ways the mock does not. Its
/// thread lives as long as the test process.
pub fn canned_server(answer: fn(&[u8]) -> Vec<u8>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 8192];
            // The head, then as many body bytes as it announces.
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            let _ = conn.write_all(&answer(&request));
        }
    });
    format!("http://{addr}")
}

/// A run's prompts.jsonl lines in index order (a turn rebuilt around its parent's answer is
/// written when it is sent, so the file itself is in that order only mostly).
pub fn prompt_lines_by_index(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<(u64, &str)> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["index"].as_u64().unwrap(), l)
        })
        .collect();
    lines.sort_by_key(|(i, _)| *i);
    lines.into_iter().map(|(_, l)| l.to_string()).collect()
}

/// A run's verdict (summary.json): its word, its reasons' keys, and the summary.
pub fn verdict(out: &Path) -> (String, Vec<String>, Value) {
    let summary = read_json(&out.join("summary.json"));
    let v = &summary["verdict"];
    let keys = v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    (v["result"].as_str().unwrap().to_string(), keys, summary)
}

/// The verdict's reasons that judge this machine's load (which a test on a busy machine
/// cannot promise), not the run's design.
pub const TIMING_REASONS: [&str; 5] = [
    "schedule",
    "late-sends",
    "stall",
    "sender-saturated",
    "producers-behind",
];

/// A run's reasons other than [`TIMING_REASONS`]: what a healthy run must not have.
pub fn design_reasons(out: &Path) -> Vec<Value> {
    let summary = read_json(&out.join("summary.json"));
    summary["verdict"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !TIMING_REASONS.contains(&r["key"].as_str().unwrap()))
        .cloned()
        .collect()
}

/// The bodies a mock kept (`keep_bodies`), in arrival order.
pub fn mock_bodies(stats: &llmreplay::mock::MockStats) -> Vec<Value> {
    stats
        .bodies
        .iter()
        .map(|(_, b)| serde_json::from_str(b).unwrap())
        .collect()
}

/// Mooncake records `every_ms` apart, each its own conversation-less prompt.
pub fn plain_trace(dir: &Path, n: u64, every_ms: u64) -> PathBuf {
    let lines: Vec<String> = (0..n)
        .map(|i| {
            serde_json::json!({"timestamp": i * every_ms, "input_length": 40, "output_length": 4,
                   "hash_ids": [i * 3, i * 3 + 1, i * 3 + 2]})
            .to_string()
        })
        .collect();
    let trace = dir.join("trace.jsonl");
    std::fs::write(&trace, lines.join("\n")).unwrap();
    trace
}
