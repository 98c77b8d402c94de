//! `--record-format trace-replayer`: records with the field names of trace-replayer
//! (github.com/blitz-serving/trace-replayer, `src/requester.rs` and `src/apis/openai_api.rs`,
//! read at commit 19a852be), for scripts written against its output: one JSON object of
//! strings per request.
//!
//! | field | trace-replayer | here |
//! |---|---|---|
//! | `status` | HTTP status, or `timeout` | the same; other failures (which it does not record) give their error kind, with `error` holding the message |
//! | `s_time`, `e_time` | ms since the run start, 3 decimals | the same (send start, last byte) |
//! | `s_time_drift` | `s_time` minus the scheduled ms | the same, against the exact schedule |
//! | `span_time` | `e_time - s_time` | the same |
//! | `input_length`, `output_length` | the trace's lengths | the same |
//! | `first_token_time` | whole ms from the response head to the first token | whole ms from the send (our TTFT) |
//! | `total_time` | whole ms from the first to the last token | whole ms from the first token to the end |
//! | `*_time_between_tokens` | whole ms between content events | the same, from `--record-itl` chunk times (absent without) |
//!
//! `index` is added (the record's trace index), so that records can be joined with the trace.

use serde_json::{Map, Value};

use super::{ErrorKind, RequestError, RequestRecord};

const NS_PER_MS: f64 = 1e6;

fn ms3(ns: f64) -> String {
    format!("{:.3}", ns / NS_PER_MS)
}

fn whole_ms(ns: u64) -> String {
    (ns / 1_000_000).to_string()
}

/// The record with trace-replayer's field names (every value a string, as it writes them).
pub fn to_json(r: &RequestRecord) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.into(), Value::String(v));
    };
    put("index", r.index.to_string());
    let status = match (&r.error, r.status) {
        (Some(e), _) if e.kind == ErrorKind::Timeout => "timeout".to_string(),
        (None, Some(code))
        | (
            Some(RequestError {
                kind: ErrorKind::Http,
                ..
            }),
            Some(code),
        ) => code.to_string(),
        (Some(e), _) => e.kind.as_str().to_string(),
        (None, None) => "unknown".to_string(),
    };
    put("status", status);
    if let Some(e) = &r.error {
        put("error", e.message.clone());
    }
    if let Some(sent) = r.sent_ns {
        put("s_time", ms3(sent as f64));
        put("s_time_drift", ms3(sent as f64 - r.scheduled_ns as f64));
        if let Some(end) = r.end_ns {
            put("e_time", ms3(end as f64));
            put("span_time", ms3(end.saturating_sub(sent) as f64));
        }
        if let Some(first) = r.first_token_ns {
            put("first_token_time", whole_ms(first.saturating_sub(sent)));
            if let Some(end) = r.end_ns {
                put("total_time", whole_ms(end.saturating_sub(first)));
            }
        }
    }
    if let Some(n) = r.input_tokens {
        put("input_length", n.to_string());
    }
    if let Some(n) = r.output_tokens_target.or(r.output_tokens) {
        put("output_length", n.to_string());
    }
    if let Some(times) = r.chunk_times_ns.as_ref().filter(|t| t.len() > 1) {
        let mut gaps: Vec<u64> = times
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]) / 1_000_000)
            .collect();
        let max = |g: &[u64]| g.iter().max().copied().unwrap_or(0).to_string();
        if gaps.len() > 1 {
            put("max_time_between_tokens_except_first", max(&gaps[1..]));
        }
        put("max_time_between_tokens", max(&gaps));
        let avg = gaps.iter().sum::<u64>() / gaps.len() as u64;
        put("avg_time_between_tokens", avg.to_string());
        gaps.sort_unstable();
        for (name, q) in [("p90", 0.9), ("p95", 0.95), ("p99", 0.99)] {
            // Its index rule: ceil(len * q) - 1.
            let at = ((gaps.len() as f64 * q).ceil() as usize).saturating_sub(1);
            put(
                &format!("{name}_time_between_tokens"),
                gaps[at.min(gaps.len() - 1)].to_string(),
            );
        }
    }
    Value::Object(m)
}

/// A line in trace-replayer's format: it has `s_time` (its own records all do).
pub fn is_trace_replayer(v: &Value) -> bool {
    v.get("s_time").is_some()
}

/// Reads a trace-replayer record (its own, or one written by [`to_json`]); `line_index` is
/// the record's index when it has none. Its values are strings; numbers are taken too.
pub fn from_json(v: &Value, line_index: u64) -> Result<RequestRecord, String> {
    let obj = v.as_object().ok_or("not a JSON object")?;
    let text = |k: &str| match obj.get(k) {
        Some(Value::String(s)) => Some(s.trim().to_string()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let num = |k: &str| -> Result<Option<f64>, String> {
        text(k)
            .map(|s| {
                s.parse::<f64>()
                    .map_err(|_| format!("field `{k}`: not a number: {s:?}"))
            })
            .transpose()
    };
    let ns = |ms: f64| (ms * NS_PER_MS).round().max(0.0) as u64;
    let s_time = num("s_time")?.ok_or("missing field `s_time`")?;
    let drift = num("s_time_drift")?.unwrap_or(0.0);
    let sent_ns = ns(s_time);
    let end_ns = num("e_time")?.map(ns);
    let status_text = text("status").unwrap_or_default();
    let status = status_text.parse::<u16>().ok();
    let message = text("error").unwrap_or_default();
    let error = match status {
        Some(code) if (200..300).contains(&code) => None,
        Some(code) => Some(RequestError {
            kind: ErrorKind::Http,
            message: if message.is_empty() {
                format!("HTTP status {code}")
            } else {
                message
            },
        }),
        None => Some(RequestError {
            kind: ErrorKind::parse(&status_text),
            message,
        }),
    };
    let uint =
        |k: &str| -> Result<Option<u64>, String> { Ok(num(k)?.map(|v| v.max(0.0).round() as u64)) };
    let output_length = uint("output_length")?;
    let ok = error.is_none();
    Ok(RequestRecord {
        index: uint("index")?.unwrap_or(line_index),
        status,
        error,
        scheduled_ns: ns((s_time - drift).max(0.0)),
        sent_ns: Some(sent_ns),
        first_token_ns: num("first_token_time")?.map(|ms| sent_ns + ns(ms)),
        end_ns,
        input_tokens: uint("input_length")?,
        output_tokens_target: output_length,
        // trace-replayer asks for exactly output_length tokens and counts them so.
        output_tokens: output_length.filter(|_| ok),
        ..RequestRecord::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RequestRecord {
        RequestRecord {
            index: 7,
            endpoint: "http://h".into(),
            status: Some(200),
            scheduled_ns: 1_000_000_000,
            sent_ns: Some(1_000_250_000),
            first_token_ns: Some(1_030_250_000),
            end_ns: Some(1_530_250_000),
            input_tokens: Some(1000),
            output_tokens_target: Some(100),
            output_tokens: Some(100),
            chunks: 3,
            chunk_times_ns: Some(vec![1_030_250_000, 1_040_250_000, 1_070_250_000]),
            chunk_tokens: Some(vec![1, 1, 1]),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn writes_its_field_names_as_strings() {
        let v = to_json(&record());
        let f = |k: &str| {
            v[k].as_str()
                .unwrap_or_else(|| panic!("{k} in {v}"))
                .to_string()
        };
        assert_eq!(f("status"), "200");
        assert_eq!(f("s_time"), "1000.250");
        assert_eq!(f("s_time_drift"), "0.250");
        assert_eq!(f("e_time"), "1530.250");
        assert_eq!(f("span_time"), "530.000");
        assert_eq!(f("first_token_time"), "30");
        assert_eq!(f("total_time"), "500");
        assert_eq!(
            (f("input_length"), f("output_length")),
            ("1000".into(), "100".into())
        );
        assert_eq!(f("max_time_between_tokens"), "30");
        assert_eq!(f("max_time_between_tokens_except_first"), "30");
        assert_eq!(f("avg_time_between_tokens"), "20");
        assert_eq!(f("p90_time_between_tokens"), "30");
    }

    #[test]
    fn reads_back_what_it_wrote_and_failures() {
        let r = record();
        let back = from_json(&to_json(&r), 0).unwrap();
        assert_eq!(back.index, 7);
        assert_eq!(back.sent_ns, r.sent_ns);
        assert_eq!(back.scheduled_ns, r.scheduled_ns);
        assert_eq!(back.end_ns, r.end_ns);
        assert_eq!(back.ttft_ms(), Some(30.0));
        assert!(back.ok());
        let timeout = RequestRecord {
            error: Some(RequestError {
                kind: ErrorKind::Timeout,
                message: "no first token".into(),
            }),
            status: Some(200),
            ..record()
        };
        let v = to_json(&timeout);
        assert_eq!(v["status"], "timeout");
        let back = from_json(&v, 0).unwrap();
        assert_eq!(back.error.map(|e| e.kind), Some(ErrorKind::Timeout));
        // trace-replayer's own line: no index, a 503.
        let theirs = serde_json::json!({"status": "503", "s_time": "5.000", "s_time_drift": "1.000",
                                        "e_time": "9.000", "span_time": "4.000",
                                        "input_length": "10", "output_length": "2"});
        let back = from_json(&theirs, 41).unwrap();
        assert_eq!((back.index, back.status), (41, Some(503)));
        assert_eq!(back.error.map(|e| e.kind), Some(ErrorKind::Http));
        assert_eq!(back.scheduled_ns, 4_000_000);
        assert!(from_json(&serde_json::json!({"s_time": "x"}), 0).is_err());
    }
}
