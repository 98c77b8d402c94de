//! Secrets never reach an output: the API key (from the environment) and header values are
//! sent to the server but appear in no file of the run directory and nowhere on the console.

use serde_json::json;

use crate::common;
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
    // Another host's metrics (another port here): it gets no key and no -H header.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_url = format!("http://{}/metrics", other.local_addr().unwrap());
    let other_heads = std::thread::spawn(move || {
        use std::io::{Read, Write};
        other.set_nonblocking(false).unwrap();
        let mut heads = String::new();
        // The baseline scrape and the last one.
        for _ in 0..2 {
            let (mut conn, _) = other.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap();
            heads.push_str(&String::from_utf8_lossy(&buf[..n]));
            let body = "# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n";
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(reply.as_bytes()).unwrap();
        }
        heads
    });
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
            "--scrape-server",
            "--scrape-interval",
            "30",
            "--server-metrics",
            &other_url,
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
    let heads = other_heads.join().unwrap();
    assert!(heads.starts_with("GET /metrics"), "{heads}");
    assert!(
        !heads.contains(key) && !heads.contains(header_secret),
        "{heads}"
    );
    let mut files = Vec::new();
    let mut dirs = vec![out.clone()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => dirs.push(path),
                false => files.push(path),
            }
        }
    }
    let mut checked = 0;
    for path in files {
        let bytes = std::fs::read(path).unwrap();
        for secret in [key, header_secret] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "a secret in an output file"
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 10,
        "run.json, requests, summary, report, xlsx, prompts, itl, server metrics and raw"
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

/// `k8s-job` writes no credential into the manifest: a literal credential header or a URL's
/// password is refused (the value never echoed), a header referring to a Secret through
/// `--secret-env` becomes the pods' `secretKeyRef`, and an API key set here but not passed is
/// warned of.
#[test]
fn k8s_job_writes_no_credential_into_the_manifest() {
    let job = |before: &[&str], after: &[&str]| {
        bin()
            .args(["k8s-job", "--shards", "2"])
            .args(before)
            .args(["--", "--trace", "/assets/t.jsonl", "--model", "m"])
            .args(after)
            .env("OPENAI_API_KEY", "sk-here-not-there-1234")
            .output()
            .unwrap()
    };
    for (after, said) in [
        (
            &[
                "--endpoint",
                "http://llm:8000",
                "-H",
                "Authorization: Bearer sk-clear-9f2e",
            ][..],
            "-H 'Authorization: ***'",
        ),
        (
            &[
                "--endpoint",
                "http://llm:8000",
                "-H",
                "x-api-key: sk-clear-9f2e",
            ][..],
            "-H 'x-api-key: ***'",
        ),
        (
            &["--endpoint", "http://user:sk-clear-9f2e@llm:8000"][..],
            "a user and password",
        ),
    ] {
        let o = job(&[], after);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(said) && err.contains("--secret-env"), "{err}");
        assert!(
            !out.contains("sk-clear") && !err.contains("sk-clear"),
            "{err}"
        );
    }
    let o = job(
        &["--secret-env", "AUTH=llm-auth:token"],
        &[
            "--endpoint",
            "http://llm:8000",
            "-H",
            "Authorization: Bearer $(AUTH)",
            "-H",
            "anthropic-version: 2023-06-01",
        ],
    );
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("secretKeyRef") && out.contains("llm-auth"),
        "{out}"
    );
    assert!(out.contains("Bearer $(AUTH)") && out.contains("anthropic-version"));
    assert!(
        !out.contains("sk-here-not-there"),
        "the local API key stays here"
    );
    assert!(
        err.contains("OPENAI_API_KEY is set here, but the pods will not have it"),
        "{err}"
    );
    let o = job(
        &["--secret-env", "not a spec"],
        &["--endpoint", "http://llm:8000"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("give VAR=SECRET:KEY"));
}
