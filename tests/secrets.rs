//! Secrets never reach an output: the API key (from the environment) and header values are
//! sent to the server but appear in no file of the run directory and nowhere on the console.

use serde_json::json;

mod common;
use common::{bin, temp_dir, MockProcess};

#[test]
fn the_api_key_and_header_values_appear_in_no_output() {
    let dir = temp_dir("secrets");
    let trace = dir.join("t.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| json!({"timestamp": i, "text_input": "a b", "output_length": 2}).to_string())
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let key = "sk-llmreplay-test-7f3a9c1e55d2";
    let header_secret = "hdr-secret-0b8e44c1";
    let mock = MockProcess::start(&[]);
    let out = dir.join("run");
    let output = bin()
        .env("LLMREPLAY_TEST_KEY", key)
        .args(["replay", "--endpoint", &mock.url(), "--trace"])
        .arg(&trace)
        .args([
            "--api-key-env",
            "LLMREPLAY_TEST_KEY",
            "--save-prompts",
            "--record-itl",
        ])
        .args([
            "-H",
            &format!("X-Gateway-Token: {header_secret}"),
            "--output",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut checked = 0;
    for entry in std::fs::read_dir(&out).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        for secret in [key, header_secret] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "a secret in an output file"
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 7,
        "run.json, requests, summary, report, xlsx, prompts, itl"
    );
    for stream in [&output.stdout, &output.stderr] {
        let text = String::from_utf8_lossy(stream);
        assert!(
            !text.contains(key) && !text.contains(header_secret),
            "{text}"
        );
    }
    let run = std::fs::read_to_string(out.join("run.json")).unwrap();
    assert!(
        run.contains("LLMREPLAY_TEST_KEY") && run.contains("X-Gateway-Token"),
        "{run}"
    );
}
