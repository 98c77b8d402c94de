//! Every number and header checked, and no secret leaves: framing headers are refused, one
//! `Authorization` is sent (an explicit -H wins; `user:pass@host` is Basic auth), numbers out
//! of range are refused, and a server that echoes the request head in a 401 body gets its
//! echo stored with `***` in place of every secret.

use std::path::Path;
use std::sync::Mutex;

use calamine::{open_workbook, Reader, Xlsx};

use crate::common;
use common::{bin, canned_server, temp_dir, text_trace};

/// Heads the recording server saw (one test uses it; tests run in threads).
static HEADS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record_head(request: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(request).into_owned();
    HEADS.lock().unwrap().push(text);
    let body = "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\ndata: [DONE]\n\n";
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A 401 whose body repeats the request head, as some gateways do.
fn echo_401(request: &[u8]) -> Vec<u8> {
    let head = String::from_utf8_lossy(request);
    let head = head.split("\r\n\r\n").next().unwrap_or_default();
    let body =
        serde_json::json!({"error": {"message": format!("unauthorized: {head}")}}).to_string();
    format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn framing_headers_are_refused_with_the_reason() {
    let dir = temp_dir("settings-framing");
    let trace = text_trace(&dir, 2, 10, 2);
    for header in [
        "Content-Length: 5",
        "transfer-encoding: chunked",
        "Host: elsewhere",
        "Connection: close",
    ] {
        let output = bin()
            .args(["replay", "--mock", "-H", header, "--trace"])
            .arg(&trace)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{header}: {stderr}");
        assert!(
            stderr.contains("frames each request itself"),
            "{header}: {stderr}"
        );
    }
}

#[test]
fn one_authorization_is_sent_and_url_credentials_are_basic_auth() {
    let dir = temp_dir("settings-auth");
    let trace = text_trace(&dir, 3, 10, 2);
    let url = canned_server(record_head);
    // The key in the environment and an explicit -H: the -H is the one sent.
    let output = bin()
        .env("LLMREPLAY_TEST_KEY", "sk-env-key-1234")
        .args([
            "replay",
            "--quiet",
            "--model",
            "m",
            "--api-key-env",
            "LLMREPLAY_TEST_KEY",
        ])
        .args([
            "-H",
            "Authorization: Bearer explicit-5678",
            "--endpoint",
            &url,
        ])
        .arg("--trace")
        .arg(&trace)
        .arg("--output")
        .arg(dir.join("explicit"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("-H Authorization is the one sent"),
        "{stderr}"
    );
    let heads = std::mem::take(&mut *HEADS.lock().unwrap());
    let heads: Vec<&String> = heads.iter().filter(|h| h.starts_with("POST ")).collect();
    assert_eq!(heads.len(), 3);
    for head in heads {
        let auth: Vec<&str> = head
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("authorization:"))
            .collect();
        assert_eq!(auth, ["Authorization: Bearer explicit-5678"], "{head}");
    }

    // user:pass@host: Basic auth, and the password is printed nowhere.
    let with_credentials = url.replace("http://", "http://alice:pw-9f8e7d@");
    let output = bin()
        .args(["replay", "--model", "m", "--endpoint", &with_credentials])
        .arg("--trace")
        .arg(&trace)
        .arg("--output")
        .arg(dir.join("basic"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let heads = std::mem::take(&mut *HEADS.lock().unwrap());
    assert!(heads
        .iter()
        .filter(|h| h.starts_with("POST "))
        .all(|h| h.contains("Authorization: Basic YWxpY2U6cHctOWY4ZTdk\r\n")));
    let printed = format!("{stderr}{}", String::from_utf8_lossy(&output.stdout));
    assert!(
        !printed.contains("pw-9f8e7d") && printed.contains(&url),
        "{printed}"
    );
    let saved = std::fs::read_to_string(dir.join("basic/run.json")).unwrap();
    assert!(!saved.contains("pw-9f8e7d"), "{saved}");
}

#[test]
fn numbers_out_of_range_are_refused_and_a_long_plan_is_warned_about() {
    let dir = temp_dir("settings-numbers");
    let trace = text_trace(&dir, 3, 500, 2);
    for (args, expected) in [
        (
            vec!["--time-scale", "1e-300"],
            "--time-scale must be between",
        ),
        (vec!["--time-scale", "inf"], "--time-scale must be between"),
        (vec!["--spin-us", "5000000"], "--spin-us must be at most"),
        (
            vec!["--read-coalesce-us", "99999999"],
            "--read-coalesce-us must be at most",
        ),
        (
            vec!["--request-timeout", "1e30"],
            "--request-timeout must be at most",
        ),
        (
            vec!["--stall-timeout", "0"],
            "--stall-timeout must be a positive number",
        ),
        (
            vec!["--max-requests", "0"],
            "--max-requests 0 sends nothing",
        ),
    ] {
        let output = bin()
            .args(["replay", "--mock", "--trace"])
            .arg(&trace)
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // 1 s of trace a million times slower: 11.6 days, planned only with a warning.
    let output = bin()
        .args([
            "replay",
            "--mock",
            "--dry-run",
            "--time-scale",
            "1e-6",
            "--trace",
        ])
        .arg(&trace)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: the plan's last send is 11.6 days after the start"),
        "{stderr}"
    );
}

/// Every text cell of every sheet of a workbook, joined.
fn xlsx_text(path: &Path) -> String {
    let mut book: Xlsx<_> = open_workbook(path).unwrap();
    let mut text = String::new();
    for name in book.sheet_names() {
        for row in book.worksheet_range(&name).unwrap().rows() {
            for cell in row {
                text.push_str(&cell.to_string());
                text.push('\t');
            }
        }
    }
    text
}

#[test]
fn secrets_echoed_by_a_server_are_stored_and_printed_as_stars() {
    let dir = temp_dir("settings-echo");
    let trace = text_trace(&dir, 4, 10, 2);
    let url = canned_server(echo_401);
    let (key, header, password) = ("sk-echo-key-31415", "hdr-echo-27182", "pw-echo-16180");
    let endpoint = url.replace("http://", &format!("http://bob:{password}@"));
    let out = dir.join("run");
    let output = bin()
        .env("LLMREPLAY_TEST_KEY", key)
        .args([
            "replay",
            "--model",
            "m",
            "--api-key-env",
            "LLMREPLAY_TEST_KEY",
        ])
        .args([
            "-H",
            &format!("X-Gateway-Token: {header}"),
            "--endpoint",
            &endpoint,
        ])
        .arg("--trace")
        .arg(&trace)
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(llmreplay::NO_SUCCESS_EXIT_CODE),
        "{stderr}"
    );
    // The echo is there, its secrets are not.
    let requests = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    assert!(requests.contains("X-Gateway-Token: ***"), "{requests}");
    let mut texts = vec![
        ("stdout".to_string(), stdout.into_owned()),
        ("stderr".to_string(), stderr.into_owned()),
        (
            "results.xlsx".to_string(),
            xlsx_text(&out.join("results.xlsx")),
        ),
    ];
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.extension().is_none_or(|e| e != "xlsx") {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            texts.push((path.display().to_string(), text));
        }
    }
    assert!(
        texts.len() >= 7,
        "{:?}",
        texts.iter().map(|t| &t.0).collect::<Vec<_>>()
    );
    assert!(
        texts[2].1.contains("X-Gateway-Token: ***"),
        "the echo reaches the workbook"
    );
    for (name, text) in &texts {
        // The Basic credentials travel base64-encoded: "bob:pw-echo-16180".
        for secret in [key, header, password, "Ym9iOnB3LWVjaG8tMTYxODA="] {
            assert!(!text.contains(secret), "{secret} in {name}");
        }
    }
}
