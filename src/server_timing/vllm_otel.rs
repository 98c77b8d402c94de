//! vLLM's OpenTelemetry spans (`--otlp-traces-endpoint`), as an OTLP JSON export holds them
//! (one document, or one per line as the Collector's file exporter writes): a request's
//! `llm_request` span sits in the trace its `traceparent` named, with its phases as
//! attributes in seconds: `gen_ai.latency.time_in_queue`, `gen_ai.latency.time_in_model_prefill`
//! and `gen_ai.latency.time_in_model_decode` (SGLang writes the same names). Spans without
//! any of them are not a request's.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{duration, JoinKey, ServerPhases, Source};

pub const SOURCE: Source = Source {
    name: "vllm-otel",
    key: JoinKey::TraceId,
    read,
};

const QUEUE: &str = "gen_ai.latency.time_in_queue";
const PREFILL: &str = "gen_ai.latency.time_in_model_prefill";
const DECODE: &str = "gen_ai.latency.time_in_model_decode";

/// Each trace's phases, by trace id (32 lowercase hex digits).
fn read(path: &Path) -> Result<HashMap<String, ServerPhases>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let docs: Vec<Value> = match serde_json::from_str::<Value>(&text) {
        Ok(doc) => vec![doc],
        // The Collector's file exporter: one export a line.
        Err(_) => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(n, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", n + 1)))
            .collect::<Result<_, _>>()?,
    };
    let mut phases = HashMap::new();
    for doc in &docs {
        let resources = doc["resourceSpans"]
            .as_array()
            .ok_or("not an OTLP JSON export: no field `resourceSpans`")?;
        let spans = resources
            .iter()
            .flat_map(|r| r["scopeSpans"].as_array().into_iter().flatten())
            .flat_map(|s| s["spans"].as_array().into_iter().flatten());
        for span in spans {
            if let Some((trace, p)) = request_phases(span) {
                phases.insert(trace, p);
            }
        }
    }
    Ok(phases)
}

/// A request span's trace id and phases.
fn request_phases(span: &Value) -> Option<(String, ServerPhases)> {
    let ms = |key: &str| seconds(span, key).map(|s| s * 1e3);
    let p = ServerPhases {
        queue_ms: ms(QUEUE),
        prefill_ms: ms(PREFILL),
        kv_transfer_ms: None,
        decode_ms: ms(DECODE),
    };
    if p == ServerPhases::default() {
        return None;
    }
    let trace = span["traceId"].as_str()?.to_ascii_lowercase();
    (trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit())).then_some((trace, p))
}

/// An attribute's value in seconds (a `doubleValue`; OTLP JSON may write it as a string).
fn seconds(span: &Value, key: &str) -> Option<f64> {
    let value = &span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["doubleValue"];
    duration(value.as_f64().or_else(|| value.as_str()?.parse().ok())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_spans_give_their_phases_by_trace() {
        let dir = std::env::temp_dir().join(format!("vllm-otel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("spans.jsonl");
        let span = |trace: &str, queue: f64| {
            serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [
                {"traceId": trace, "spanId": "00f067aa0ba902b7", "name": "llm_request",
                 "attributes": [
                    {"key": QUEUE, "value": {"doubleValue": queue}},
                    {"key": PREFILL, "value": {"doubleValue": 0.25}},
                    {"key": DECODE, "value": {"doubleValue": "1.5"}},
                    {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "12"}}]},
                {"traceId": trace, "spanId": "00f067aa0ba902b8", "name": "http", "attributes": []}
            ]}]}]})
            .to_string()
        };
        let text = [
            span("4BF92F3577B34DA6A3CE929D0E0E4736", 0.01),
            span("00000000000000000000000000000001", -1.0),
        ]
        .join("\n");
        std::fs::write(&path, text).unwrap();
        let got = read(&path).unwrap();
        assert_eq!(got.len(), 2);
        let p = &got["4bf92f3577b34da6a3ce929d0e0e4736"];
        assert_eq!(
            (p.queue_ms, p.prefill_ms, p.decode_ms),
            (Some(10.0), Some(250.0), Some(1500.0))
        );
        assert_eq!(p.ttft_ms(), Some(260.0));
        assert_eq!(
            got["00000000000000000000000000000001"].queue_ms, None,
            "a negative time is none"
        );
        std::fs::write(&path, "{\"spans\": []}").unwrap();
        assert!(read(&path).unwrap_err().contains("resourceSpans"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
