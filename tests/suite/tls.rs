//! https endpoints: the mock serves TLS with a certificate made here; the replay verifies it
//! with `--ca-cert`, refuses it with a certificate error without, and skips the check only
//! with `--insecure`.

use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::Value;

use crate::common;
use common::{read_jsonl, temp_dir, MockProcess};

const RECORDS: u64 = 40;
const OUTPUT_TOKENS: u64 = 30;

/// A self-signed certificate for 127.0.0.1 (an IP SAN: SNI is skipped, the name still
/// checked), as PEM files in `dir`.
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    write_pem(dir, "", &made.cert, &made.signing_key)
}

/// A certificate and its key as PEM files `{tag}cert.pem` and `{tag}key.pem` in `dir`.
fn write_pem(
    dir: &Path,
    tag: &str,
    cert: &rcgen::Certificate,
    key: &rcgen::KeyPair,
) -> (PathBuf, PathBuf) {
    let (c, k) = (
        dir.join(format!("{tag}cert.pem")),
        dir.join(format!("{tag}key.pem")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

/// A self-signed certificate made from `params`, as PEM files in `dir`.
fn self_signed(dir: &Path, tag: &str, params: rcgen::CertificateParams) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    write_pem(dir, tag, &cert, &key)
}

/// The error of a replay against a mock serving `cert`, trusted with --ca-cert.
fn refused_with_ca_cert(dir: &Path, cert: &Path, key: &Path) -> String {
    let mock = MockProcess::start(&["--tls-cert", s(cert), "--tls-key", s(key)]);
    let out = dir.join(format!(
        "refused-{}",
        cert.file_name().unwrap().to_string_lossy()
    ));
    replay(&[
        "--endpoint",
        &format!("https://{}", mock.addr),
        "--ca-cert",
        s(cert),
        "--model",
        "m",
        "--trace",
        s(&trace(dir)),
        "--output",
        s(&out),
    ])
    .err()
    .expect("the certificate is refused")
    .to_string()
}

fn trace(dir: &Path) -> PathBuf {
    let path = dir.join("trace.jsonl");
    let lines: Vec<String> = (0..RECORDS)
        .map(|i| {
            format!(
                r#"{{"timestamp": {}, "text_input": "a b c d", "output_length": {OUTPUT_TOKENS}}}"#,
                i * 5
            )
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn replay(args: &[&str]) -> llmreplay::Result<llmreplay::commands::replay::RunOutcome> {
    let cli =
        llmreplay::cli::Cli::parse_from(["llmreplay", "replay", "--quiet"].iter().chain(args));
    let llmreplay::cli::Command::Replay(args) = cli.command else {
        panic!("replay")
    };
    llmreplay::commands::replay::run(&llmreplay::plan::ReplayPlan::from_args(&args)?)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn https_is_verified_with_ca_cert_refused_without_and_skipped_with_insecure() {
    let dir = temp_dir("tls");
    let (cert, key) = certificate(&dir);
    let trace = trace(&dir);
    let mock = MockProcess::start(&[
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&key),
        "--ttft-ms",
        "5",
        "--itl-ms",
        "1",
    ]);
    let url = format!("https://{}", mock.addr);

    for (name, extra) in [
        ("verified", vec!["--ca-cert", s(&cert)]),
        (
            "verified-no-stream",
            vec!["--ca-cert", s(&cert), "--no-stream"],
        ),
        ("insecure", vec!["--insecure"]),
    ] {
        let out = dir.join(name);
        // No --model: discovery (GET /v1/models) goes over TLS too.
        let mut args = vec![
            "--endpoint",
            &url,
            "--trace",
            s(&trace),
            "--time-scale",
            "10",
        ];
        args.extend(["--output", s(&out)]);
        args.extend(extra);
        let outcome = replay(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(outcome.summary.ok as u64, RECORDS, "{name}");
        let records = read_jsonl(&out.join("requests.jsonl"));
        assert_eq!(records.len() as u64, RECORDS, "{name}");
        for r in &records {
            assert_eq!(r["status"], 200, "{name}: {r}");
            assert_eq!(r["output_tokens"], OUTPUT_TOKENS, "{name}: {r}");
            assert_eq!(r["endpoint"], url.as_str(), "{name}");
        }
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
        assert_eq!(
            run["tls"]["verify_certificates"],
            name != "insecure",
            "{name}: {run}"
        );
        // report.html opens with the configuration, and says when certificates went unchecked.
        let page = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(
            page.contains("Configuration") && page.contains(&url),
            "{name}"
        );
        assert_eq!(page.contains("NOT verified"), name == "insecure", "{name}");
    }

    // The bundled web roots do not trust a self-signed certificate: the run stops before
    // anything is sent, saying why and what to do.
    let err = replay(&[
        "--endpoint",
        &url,
        "--model",
        "mock-model",
        "--trace",
        s(&trace),
        "--output",
        s(&dir.join("refused")),
    ])
    .err()
    .expect("an untrusted certificate is refused");
    let message = err.to_string();
    assert!(
        message.contains("certificate") && message.contains("--ca-cert"),
        "{message}"
    );
    assert_eq!(err.exit_code(), 2);
}

/// A certificate for another name is refused even when its CA is trusted.
#[test]
fn a_certificate_for_another_host_is_refused() {
    let dir = temp_dir("tls-name");
    let made = rcgen::generate_simple_self_signed(vec!["example.test".to_string()]).unwrap();
    let (cert, key) = write_pem(&dir, "", &made.cert, &made.signing_key);
    let err = refused_with_ca_cert(&dir, &cert, &key);
    assert!(err.contains("does not name this host"), "{err}");
}

/// The usual self-signed certificate (`openssl req -x509 ... -addext subjectAltName=...`
/// sets CA:TRUE) given with `--ca-cert` is trusted when the server presents exactly it; the
/// same certificate for another name is still refused, with advice about the name, not
/// about --ca-cert.
#[test]
fn a_self_signed_ca_certificate_given_with_ca_cert_is_trusted() {
    let dir = temp_dir("tls-ca-true");
    let made = |name: &str, tag: &str| {
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        self_signed(&dir, tag, params)
    };
    let trace = trace(&dir);
    let (cert, key) = made("127.0.0.1", "right-");
    let mock = MockProcess::start(&["--tls-cert", s(&cert), "--tls-key", s(&key)]);
    let url = format!("https://{}", mock.addr);
    let out = dir.join("run");
    let outcome = replay(&[
        "--endpoint",
        &url,
        "--ca-cert",
        s(&cert),
        "--model",
        "m",
        "--time-scale",
        "10",
        "--trace",
        s(&trace),
        "--output",
        s(&out),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.summary.ok as u64, RECORDS);

    let (cert, key) = made("example.test", "wrong-");
    let message = refused_with_ca_cert(&dir, &cert, &key);
    assert!(message.contains("does not name this host"), "{message}");
    assert!(
        message.contains("subjectAltName") && !message.contains("--ca-cert"),
        "{message}"
    );
}

/// An expired certificate is refused for what it is, with advice that fits (not --ca-cert).
#[test]
fn an_expired_certificate_says_so() {
    let dir = temp_dir("tls-expired");
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let (cert, key) = self_signed(&dir, "", params);
    let message = refused_with_ca_cert(&dir, &cert, &key);
    assert!(
        message.contains("has expired") && message.contains("renew"),
        "{message}"
    );
    assert!(!message.contains("--ca-cert"), "{message}");
}

/// A reconnect resumes the TLS session instead of paying a full handshake: against a mock
/// that closes the connection after every response, nearly every handshake is resumed.
#[test]
fn reconnects_resume_their_tls_session() {
    use llmreplay::mock::{FaultPlan, MockConfig, MockServer};
    let dir = temp_dir("tls-resume");
    let (cert, key) = certificate(&dir);
    let cfg = MockConfig {
        ttft_ns: 1_000_000,
        itl_ns: 100_000,
        faults: FaultPlan::parse(&["close-after-response:1".to_string()], 0).unwrap(),
        tls: Some(llmreplay::transport::tls::server_config(&cert, &key).unwrap()),
        ..MockConfig::default()
    };
    let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let url = format!("https://{}", mock.addr());
    // One record in the first second (what is pre-opened before the start), then one every
    // 20 ms: later connections are opened once earlier ones have received session tickets.
    let trace = dir.join("spaced.jsonl");
    let lines: Vec<String> = (0..RECORDS)
        .map(|i| {
            let t = if i == 0 { 0 } else { 1000 + 20 * i };
            format!(r#"{{"timestamp": {t}, "text_input": "a b", "output_length": 3}}"#)
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let outcome = replay(&[
        "--endpoint",
        &url,
        "--ca-cert",
        s(&cert),
        "--model",
        "m",
        "--connections",
        "1",
        "--trace",
        s(&trace),
        "--output",
        s(&dir.join("out")),
    ])
    .unwrap();
    assert_eq!(outcome.summary.ok as u64, RECORDS);
    let stats = mock.stop().unwrap();
    // One connection per request (each is closed after its response), plus the probe's.
    assert!(stats.tls_handshakes > RECORDS, "{stats:?}");
    // Only the connections opened before any session ticket arrived pay a full handshake.
    assert!(stats.tls_handshakes - stats.tls_resumed <= 5, "{stats:?}");
}

/// The usual self-signed certificate (CA:TRUE, as `openssl req -x509` makes it) without
/// --ca-cert: the message says what it is and names --ca-cert, not webpki's
/// "CaUsedAsEndEntity".
#[test]
fn a_self_signed_ca_certificate_without_ca_cert_names_the_fix() {
    let dir = temp_dir("tls-ca-true-untrusted");
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let (cert, key) = self_signed(&dir, "", params);
    let mock = MockProcess::start(&["--tls-cert", s(&cert), "--tls-key", s(&key)]);
    let message = refused(&dir, &format!("https://{}", mock.addr));
    assert!(message.contains("self-signed CA certificate"), "{message}");
    assert!(message.contains("--ca-cert PATH"), "{message}");
    assert!(!message.contains("CaUsedAsEndEntity"), "{message}");
}

/// https:// to a server that takes the connection and never answers the handshake (a
/// plain-HTTP server waiting for its request): the message says so and names http://, not
/// "Resource temporarily unavailable (os error 11)".
#[test]
fn a_handshake_nobody_answers_names_the_cause() {
    let dir = temp_dir("tls-silent");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // It takes each connection and holds it, saying nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let message = refused(&dir, &format!("https://{addr}"));
    assert!(
        message.contains("no answer to the TLS handshake"),
        "{message}"
    );
    assert!(message.contains("use http://"), "{message}");
    assert!(!message.contains("os error 11"), "{message}");
}

/// The error of a replay against `url` with no TLS option.
fn refused(dir: &Path, url: &str) -> String {
    replay(&[
        "--endpoint",
        url,
        "--model",
        "m",
        "--trace",
        s(&trace(dir)),
        "--output",
        s(&dir.join("run")),
    ])
    .err()
    .expect("refused")
    .to_string()
}

/// `http://` to a TLS port: the server closes each plain-HTTP request's connection without a
/// byte, which the records can only call a reset. The run asks the port for a TLS handshake
/// afterwards and names the https:// URL to give; a plain server that closes connections the
/// same way gets no such advice.
#[test]
fn plain_http_to_a_tls_port_names_https() {
    let dir = temp_dir("tls-plain-http");
    let (cert, key) = certificate(&dir);
    let mock = MockProcess::start(&["--tls-cert", s(&cert), "--tls-key", s(&key)]);
    let ending = |url: &str, name: &str| {
        let out = dir.join(name);
        let outcome = replay(&[
            "--endpoint",
            url,
            "--model",
            "m",
            "--trace",
            s(&trace(&dir)),
            "--max-requests",
            "3",
            "--output",
            s(&out),
        ])
        .expect("the run completes, every request failed");
        let summary: Value =
            serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let detail = summary["ended"]["detail"].as_str().unwrap().to_string();
        assert_eq!(
            outcome.summary.by_error_kind.get("reset"),
            Some(&3),
            "{detail}"
        );
        (outcome.ending, detail)
    };

    let (tls_port, detail) = ending(&format!("http://{}", mock.addr), "to-tls");
    let llmreplay::ending::Ending::NoSuccess {
        hint: Some(hint), ..
    } = &tls_port
    else {
        panic!("no hint: {tls_port:?}")
    };
    let fix = format!("give https:// (https://{})", mock.addr);
    assert!(hint.contains("serves TLS") && hint.contains(&fix), "{hint}");
    assert!(detail.contains(&fix), "summary.json says it too: {detail}");

    let closer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closer.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in closer.incoming() {
            drop(conn);
        }
    });
    let (plain, detail) = ending(&format!("http://{addr}"), "to-closer");
    assert!(
        matches!(
            plain,
            llmreplay::ending::Ending::NoSuccess { hint: None, .. }
        ),
        "{plain:?}"
    );
    assert!(!detail.contains("TLS"), "{detail}");
}
