//! NVIDIA Dynamo's request trace (`DYN_REQUEST_TRACE=1`: `dynamo.request.trace.v1` JSONL,
//! gzip segments too): one `request_end` record a request, whose `request` holds the
//! frontend's phase breakdown in ms and the caller's `x_request_id`, which is llmreplay's
//! `X-Request-Id`. `prefill_wait_time_ms` (receipt to dispatch: parsing, tokenizing, routing,
//! admission) is the queue; `prefill_time_ms` (dispatch to first token) holds the estimated
//! KV transfer of a disaggregated run (`kv_transfer_estimated_latency_ms`), which is kept
//! apart, so the phases still add up to the frontend's `ttft_ms`.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use super::{duration, JoinKey, ServerPhases, Source};
use crate::trace::TraceFile;

pub const SOURCE: Source = Source {
    name: "dynamo",
    key: JoinKey::RequestId,
    read,
};

/// Each request's phases, by its `x_request_id`.
fn read(path: &Path) -> Result<HashMap<String, ServerPhases>, String> {
    let input = TraceFile::plain(path).open().map_err(|e| e.to_string())?;
    let mut phases = HashMap::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", n + 1))?;
        if v["event_type"] != "request_end" {
            continue; // tool and payload records
        }
        let request = &v["request"];
        let Some(id) = request["x_request_id"].as_str() else {
            continue; // a request that did not come from llmreplay
        };
        let ms = |k: &str| request[k].as_f64().and_then(duration);
        let kv = ms("kv_transfer_estimated_latency_ms");
        let p = ServerPhases {
            queue_ms: ms("prefill_wait_time_ms"),
            prefill_ms: ms("prefill_time_ms").map(|p| p - kv.unwrap_or(0.0).min(p)),
            kv_transfer_ms: kv,
            decode_ms: ms("total_time_ms")
                .zip(ms("ttft_ms"))
                .map(|(total, ttft)| (total - ttft).max(0.0)),
        };
        phases.insert(id.to_string(), p);
    }
    Ok(phases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ends_give_phases_that_add_up_to_the_frontends_ttft() {
        let dir = std::env::temp_dir().join(format!("dynamo-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.jsonl");
        let lines = [
            r#"{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1777312801000,"request":{"request_id":"cmpl-1","x_request_id":"run-0","input_tokens":4096,"output_tokens":512,"cached_tokens":3584,"request_received_ms":1777312800000,"prefill_wait_time_ms":12.3,"prefill_time_ms":70.1,"ttft_ms":82.4,"total_time_ms":1000.1,"kv_transfer_estimated_latency_ms":3.2,"queue_depth":3}}"#,
            r#"{"schema":"dynamo.request.trace.v1","event_type":"tool","tool":{}}"#,
            r#"{"schema":"dynamo.request.trace.v1","event_type":"request_end","request":{"request_id":"cmpl-2"}}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let got = read(&path).unwrap();
        assert_eq!(got.len(), 1, "one request of llmreplay's");
        let p = &got["run-0"];
        assert_eq!(p.kv_transfer_ms, Some(3.2));
        assert!((p.ttft_ms().unwrap() - 82.4).abs() < 1e-9, "{p:?}");
        assert!((p.decode_ms.unwrap() - 917.7).abs() < 1e-9);
        std::fs::write(&path, "{not json").unwrap();
        assert!(read(&path).unwrap_err().starts_with("line 1:"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
