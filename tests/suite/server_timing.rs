//! Where TTFT goes: a server's own timing of each request, joined to the run's records —
//! vLLM's OpenTelemetry spans by the trace id each request's `traceparent` carried
//! (`report DIR --server-timings vllm-otel:FILE`).

use crate::common;

use common::{bin, path, read_json, read_jsonl, replay_against, temp_dir, MockProcess};

/// A fixture of tests/fixtures/server_timing/.
fn fixture(name: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/server_timing/");
    std::fs::read_to_string(format!("{dir}{name}"))
        .unwrap()
        .trim()
        .to_string()
}

/// A replay of `n` records against a fresh mock, as run `run_id`: its directory, and its
/// records.
fn traced_run(
    dir: &std::path::Path,
    run_id: &str,
    n: u64,
) -> (std::path::PathBuf, Vec<serde_json::Value>) {
    let trace = common::plain_trace(dir, n, 5);
    let mock = MockProcess::start(&[]);
    let run = dir.join("run");
    let tokenizer = common::tokenizer("qwen3");
    let out = replay_against(&mock, &trace, &run)
        .args(["--run-id", run_id, "--tokenizer", path(&tokenizer)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = read_jsonl(&run.join("requests.jsonl"));
    assert_eq!(records.len() as u64, n);
    (run, records)
}

/// `report RUN --server-timings SPEC`, which must join every one of `n` records.
fn joined(run: &std::path::Path, spec: String, n: usize) {
    let out = bin()
        .args(["report", path(run), "--server-timings", &spec])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("server timings: {n} of {n} records joined")),
        "{said}"
    );
}

/// The fixture's span for one request: its trace, queue and prefill (seconds).
fn span(trace: &str, queue: f64, prefill: f64) -> String {
    fixture("vllm-otel-span.json")
        .replace("TRACE", trace)
        .replace("QUEUE", &queue.to_string())
        .replace("PREFILL", &prefill.to_string())
}

#[test]
fn vllm_spans_join_every_traced_record_and_split_its_ttft() {
    let dir = temp_dir("server-timing-otel");
    let (run, records) = traced_run(&dir, "otel-1", 40);
    // The export, as the Collector's file exporter writes it: one line per batch, here one
    // per request (queue k ms, prefill 2k ms), and a span of another trace.
    let mut lines: Vec<String> = records
        .iter()
        .map(|r| {
            let k = r["index"].as_u64().unwrap() as f64 + 1.0;
            span(r["trace_id"].as_str().unwrap(), k / 1e3, 2.0 * k / 1e3)
        })
        .collect();
    lines.push(span("0123456789abcdef0123456789abcdef", 0.5, 0.5));
    let spans = dir.join("spans.jsonl");
    std::fs::write(&spans, lines.join("\n")).unwrap();
    joined(&run, format!("vllm-otel:{}", spans.display()), 40);
    for r in read_jsonl(&run.join("requests.jsonl")) {
        let k = r["index"].as_f64().unwrap() + 1.0;
        let close = |key: &str, want: f64| {
            let got = r[key].as_f64().unwrap_or_else(|| panic!("{key} in {r}"));
            assert!((got - want).abs() < 1e-9, "{key}: {got} against {want}");
        };
        close("server_queue_ms", k);
        close("server_prefill_ms", 2.0 * k);
        close("server_decode_ms", 870.8);
        // The phases before the first token are the server's TTFT; the rest is outside it.
        close("server_ttft_ms", 3.0 * k);
        close(
            "ttft_outside_server_ms",
            r["ttft_ms"].as_f64().unwrap() - 3.0 * k,
        );
        assert!(r["trace_id"].is_string() && r["status"] == 200, "{r}");
    }
    let summary = read_json(&run.join("summary.json"));
    assert_eq!(
        summary["server_ttft_ms"]["count"], 40,
        "{}",
        summary["server_ttft_ms"]
    );
    assert_eq!(summary["server_ttft_ms"]["max"], 120.0);
    // What cannot be joined is refused, naming it.
    let refused = |spec: String, want: &str| {
        let out = bin()
            .args(["report", path(&run), "--server-timings", &spec])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(said.contains(want), "{said}");
    };
    refused(
        format!("jaeger:{}", spans.display()),
        "no source \"jaeger\" (sources: vllm-otel, dynamo)",
    );
    let trace = dir.join("trace.jsonl");
    refused(path(&trace).to_string(), "give SOURCE:FILE");
    refused(format!("vllm-otel:{}", trace.display()), "resourceSpans");
}

/// The fixture's Dynamo record for one request: its id, wait and prefill (KV transfer 1 ms
/// of it), in ms.
fn request_end(id: &str, wait: f64, prefill: f64) -> String {
    fixture("dynamo-request-end.json")
        .replace("cmpl-REQUEST", &format!("cmpl-{id}"))
        .replace("REQUEST", id)
        .replace("WAIT", &wait.to_string())
        .replace("PREFILL", &prefill.to_string())
        .replace("TTFT", &(wait + prefill).to_string())
        .replace("KV", "1.0")
}

#[test]
fn dynamo_request_ends_join_by_request_id_and_add_up_to_its_ttft() {
    let dir = temp_dir("server-timing-dynamo");
    let (run, _) = traced_run(&dir, "dyn-2", 30);
    // Gzipped, as Dynamo's file sink writes its segments; and one request of another client.
    let mut lines: Vec<String> = (0..30)
        .map(|i| request_end(&format!("dyn-2-{i}"), 2.0 + i as f64, 10.0))
        .collect();
    lines.push(request_end("someone-else", 1.0, 1.0));
    let file = dir.join("trace.0.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, lines.join("\n").as_bytes()).unwrap();
    std::fs::write(&file, gz.finish().unwrap()).unwrap();
    joined(&run, format!("dynamo:{}", file.display()), 30);
    for r in read_jsonl(&run.join("requests.jsonl")) {
        let i = r["index"].as_f64().unwrap();
        // Queue, prefill less the KV transfer, and the transfer: Dynamo's TTFT.
        let parts = [
            "server_queue_ms",
            "server_prefill_ms",
            "server_kv_transfer_ms",
        ];
        let sum: f64 = parts.iter().map(|k| r[*k].as_f64().unwrap()).sum();
        assert!((sum - (12.0 + i)).abs() < 1e-9, "{r}");
        assert!((r["server_ttft_ms"].as_f64().unwrap() - (12.0 + i)).abs() < 1e-9);
        assert_eq!(r["server_kv_transfer_ms"], 1.0);
    }
}
