//! Parsing and validating one trace line.
//!
//! The fast path deserialises into a typed struct. When that fails, the line is parsed again
//! as a generic JSON value only to say which field is wrong: errors are rare, messages matter.

use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Format, Input, RawLine, TraceIds, TraceRecord};
use crate::error::{Error, Result};

/// Largest `input_length` / `output_length` accepted: above any model's context, and small
/// enough that one synthesised prompt stays a bounded allocation.
pub const MAX_LENGTH: u64 = 10_000_000;
/// Largest timestamp accepted, in ms (~31,000 years; epoch milliseconds fit easily).
pub const MAX_TIMESTAMP_MS: f64 = 1e15;
/// Longest wait a trace or the user can put between a turn and the one before it (a think
/// time, a tool's run, a DAG `delay`), in ms: 1e10 (about 116 days), so that waits added up
/// at run time stay far inside a schedule.
pub const MAX_WAIT_MS: f64 = 1e10;

#[derive(Deserialize)]
struct RawRecord {
    timestamp: Option<f64>,
    input_length: Option<u64>,
    output_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    text_input: Option<String>,
    messages: Option<Vec<Value>>,
    tools: Option<Value>,
    session_id: Option<Value>,
    chat_id: Option<i64>,
    parent_chat_id: Option<i64>,
    delay: Option<f64>,
    message_mode: Option<String>,
    extra: Option<Map<String, Value>>,
}

/// Parses one line of a trace in the given (resolved) format.
pub fn parse_record(raw: &RawLine, format: Format, file: &Path) -> Result<TraceRecord> {
    let fail = |message: String| Error::Trace {
        file: file.to_path_buf(),
        line: raw.line,
        message,
    };
    let mut rec: RawRecord =
        serde_json::from_slice(&raw.bytes).map_err(|e| fail(diagnose(&raw.bytes, e)))?;

    fits(format, &rec).map_err(fail)?;
    let timestamp_ms = timestamp_ms(rec.timestamp, format).map_err(fail)?;
    let input = input(&mut rec).map_err(fail)?;
    lengths(&rec, &input).map_err(fail)?;
    let session_id = rec.session_id.map(|v| match v {
        Value::String(s) => s,
        other => other.to_string(),
    });
    let delta = message_mode(rec.message_mode.as_deref(), &input).map_err(fail)?;
    Ok(TraceRecord {
        index: raw.index,
        line: raw.line,
        timestamp_ms,
        input,
        output_length: rec.output_length,
        ids: TraceIds {
            session_id,
            chat_id: rec.chat_id,
            parent_chat_id: rec.parent_chat_id,
            delay_ms: rec.delay,
            prefix_tokens: None,
            wait_after_ms: None,
            dag: None,
            delta,
        },
        extra: rec.extra,
    })
}

/// A format forced on the other kind of trace reads its timestamps 1000x off (ms as seconds
/// or the reverse): the record's own fields say which it is.
fn fits(format: Format, rec: &RawRecord) -> std::result::Result<(), String> {
    match (
        format,
        rec.chat_id.is_some() || rec.parent_chat_id.is_some(),
    ) {
        (Format::Bailian, false) => Err(
            "missing field `chat_id`: --format bailian is for Qwen-Bailian traces (chat_id, \
             parent_chat_id, timestamps in seconds); this record is not one. Use --format \
             mooncake (timestamps in ms) or auto"
                .into(),
        ),
        (Format::Mooncake, true) => Err(
            "field `chat_id`: this is a Qwen-Bailian record (timestamps in seconds), but \
             --format mooncake reads timestamps as milliseconds (a replay 1000x too fast). \
             Use --format bailian or auto"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// The record's timestamp in ms (the format says its unit), checked.
fn timestamp_ms(
    timestamp: Option<f64>,
    format: Format,
) -> std::result::Result<Option<f64>, String> {
    let ms = format.ms_per_time_unit();
    match timestamp {
        Some(t) if t < 0.0 => Err(format!("field `timestamp`: must not be negative, got {t}")),
        Some(t) if t * ms > MAX_TIMESTAMP_MS => Err(format!(
            "field `timestamp`: {t:e} is out of range (at most {MAX_TIMESTAMP_MS:e} ms)"
        )),
        Some(t) => Ok(Some(t * ms)),
        None if format == Format::Bailian => Err("missing field `timestamp` (seconds)".into()),
        None => Ok(None),
    }
}

/// What the record asks to send: messages, a text, or a synthetic prompt of a length (one
/// of them).
fn input(rec: &mut RawRecord) -> std::result::Result<Input, String> {
    match (rec.messages.take(), rec.text_input.take(), rec.input_length) {
        (Some(_), _, Some(_)) | (Some(_), Some(_), _) => Err(
            "field `messages` excludes `input_length` and `text_input`: give one of them".into(),
        ),
        (Some(messages), None, None) => {
            if messages.is_empty() {
                return Err("field `messages`: must not be empty".into());
            }
            if let Some((i, m)) = messages
                .iter()
                .enumerate()
                .find(|(_, m)| !m.get("role").is_some_and(Value::is_string))
            {
                return Err(format!(
                    "field `messages`: expected an array of message objects, each with a string \
                     `role`; message {i} is {}",
                    shown(m)
                ));
            }
            let tools = rec.tools.take();
            Ok(Input::Messages { messages, tools })
        }
        (None, Some(text), input_length) => Ok(Input::Text { text, input_length }),
        (None, None, Some(0)) => Err("field `input_length`: must be at least 1".into()),
        (None, None, Some(input_length)) => Ok(Input::Synthetic {
            input_length,
            hash_ids: rec.hash_ids.take().unwrap_or_default(),
        }),
        (None, None, None) => {
            Err("missing field `input_length` (or `text_input`, or `messages`)".into())
        }
    }
}

/// The lengths asked for, and the delay, are in range.
fn lengths(rec: &RawRecord, input: &Input) -> std::result::Result<(), String> {
    for (field, value) in [
        ("input_length", rec.input_length),
        ("output_length", rec.output_length),
    ] {
        if let Some(v) = value.filter(|&v| v > MAX_LENGTH) {
            return Err(format!(
                "field `{field}`: {v} tokens is more than the {MAX_LENGTH} supported"
            ));
        }
    }
    if matches!(input, Input::Synthetic { .. }) && rec.output_length.is_none() {
        return Err("missing field `output_length`".into());
    }
    if rec.output_length == Some(0) {
        return Err("field `output_length`: must be at least 1".into());
    }
    match rec.delay.filter(|d| !(*d >= 0.0 && d.is_finite())) {
        Some(d) => Err(format!("field `delay`: milliseconds, 0 or more; got {d}")),
        None => Ok(()),
    }
}

/// AIPerf's `message_mode`: history (its default, sent verbatim) or delta (new messages only,
/// the live answers threaded between them); true for delta.
fn message_mode(mode: Option<&str>, input: &Input) -> std::result::Result<bool, String> {
    match mode {
        None | Some("history") => Ok(false),
        Some("delta") if matches!(input, Input::Messages { .. }) => Ok(true),
        Some("delta") => Err(
            "field `message_mode`: \"delta\" is for `messages` records (their new messages \
             only)"
                .into(),
        ),
        Some(other) => Err(format!(
            "field `message_mode`: expected \"history\" or \"delta\", got {other:?}"
        )),
    }
}

/// Explains why the typed parse failed, naming the field where possible.
fn diagnose(bytes: &[u8], typed_error: serde_json::Error) -> String {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return not_a_record(bytes, Some(e)),
    };
    let Value::Object(map) = value else {
        return not_a_record(bytes, None);
    };
    type Check = (&'static str, fn(&Value) -> bool, &'static str);
    let checks: [Check; 10] = [
        ("timestamp", |v| v.is_number(), "a number"),
        ("input_length", |v| v.is_u64(), "a non-negative integer"),
        ("output_length", |v| v.is_u64(), "a non-negative integer"),
        (
            "hash_ids",
            |v| v.as_array().is_some_and(|a| a.iter().all(Value::is_u64)),
            "an array of non-negative integers",
        ),
        ("text_input", |v| v.is_string(), "a string"),
        (
            "messages",
            |v| {
                v.as_array().is_some_and(|a| {
                    a.iter()
                        .all(|m| m.get("role").is_some_and(Value::is_string))
                })
            },
            "an array of message objects, each with a string `role`",
        ),
        ("chat_id", |v| v.is_i64(), "an integer"),
        ("parent_chat_id", |v| v.is_i64(), "an integer"),
        ("extra", |v| v.is_object(), "an object"),
        (
            "session_id",
            |v| v.is_string() || v.is_number(),
            "a string or integer",
        ),
    ];
    for (field, ok, expected) in checks {
        match map.get(field) {
            Some(Value::Null) | None => {}
            Some(v) if !ok(v) => {
                return format!("field `{field}`: expected {expected}, got {}", shown(v))
            }
            Some(_) => {}
        }
    }
    format!("invalid record: {typed_error}")
}

/// Why a line is not a record: it is not JSON (`json_error`), or JSON but not an object.
pub fn not_a_record(bytes: &[u8], json_error: Option<serde_json::Error>) -> String {
    match json_error {
        Some(e) if std::str::from_utf8(bytes).is_err() => {
            format!("invalid UTF-8 ({e}): is the file compressed or binary?")
        }
        Some(e) => format!("invalid JSON: {e}"),
        None => match serde_json::from_slice::<Value>(bytes) {
            Ok(v) => {
                let value = shown(&v);
                match value.starts_with(kind(&v)) {
                    true => format!("expected a JSON object, got {value}"),
                    false => format!("expected a JSON object, got {} {value}", kind(&v)),
                }
            }
            Err(e) => format!("invalid JSON: {e}"),
        },
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn shown(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 40 {
        format!(
            "{} ({}...)",
            kind(v),
            &text[..text.char_indices().nth(37).map_or(text.len(), |(i, _)| i)]
        )
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str, format: Format) -> Result<TraceRecord> {
        let raw = RawLine {
            line: 7,
            index: 3,
            bytes: line.as_bytes().to_vec(),
        };
        parse_record(&raw, format, Path::new("t.jsonl"))
    }

    fn error(line: &str) -> String {
        parse(line, Format::Mooncake).unwrap_err().to_string()
    }

    #[test]
    fn mooncake_record() {
        let r = parse(r#"{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}"#, Format::Mooncake).unwrap();
        assert_eq!(r.index, 3);
        assert_eq!(r.timestamp_ms, Some(27482.0));
        assert_eq!(r.output_length, Some(52));
        assert_eq!(
            r.input,
            Input::Synthetic {
                input_length: 6955,
                hash_ids: vec![46, 47]
            }
        );
    }

    #[test]
    fn bailian_record_in_seconds() {
        let r = parse(r#"{"chat_id": 159, "parent_chat_id": 55, "timestamp": 61.114, "input_length": 521, "output_length": 132, "type": "text", "turn": 2, "hash_ids": [1089, 1090]}"#, Format::Bailian).unwrap();
        assert_eq!(r.timestamp_ms, Some(61114.0));
        assert_eq!(r.ids.chat_id, Some(159));
        assert_eq!(r.ids.parent_chat_id, Some(55));
    }

    #[test]
    fn verbatim_inputs() {
        let r = parse(
            r#"{"timestamp": 1, "text_input": "hello", "output_length": 3}"#,
            Format::Mooncake,
        )
        .unwrap();
        assert!(matches!(r.input, Input::Text { ref text, .. } if text == "hello"));
        let r = parse(
            r#"{"messages": [{"role":"user","content":"hi"}], "tools": [], "session_id": 12}"#,
            Format::Mooncake,
        )
        .unwrap();
        assert!(matches!(r.input, Input::Messages { .. }));
        assert_eq!(r.ids.session_id.as_deref(), Some("12"));
        assert_eq!(r.timestamp_ms, None);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = error(r#"{"timestamp": 0, "input_length": -5, "output_length": 1}"#);
        assert!(e.starts_with("t.jsonl:7: field `input_length`"), "{e}");
        assert!(e.contains("-5"), "{e}");
        let e = error(r#"{"timestamp": 0, "input_length": 5}"#);
        assert_eq!(e, "t.jsonl:7: missing field `output_length`");
        let e = error(r#"{"timestamp": 0, "output_length": 5}"#);
        assert!(e.contains("missing field `input_length`"), "{e}");
        let e = error(r#"{"timestamp": 0, "input_length": 5, "output_length": "x"}"#);
        assert!(
            e.contains("field `output_length`: expected a non-negative integer, got \"x\""),
            "{e}"
        );
        let e = error(r#"{"timestamp": 0, "input_length": 5"#);
        assert!(e.starts_with("t.jsonl:7: invalid JSON"), "{e}");
        let e = error(r#"[1, 2]"#);
        assert!(e.contains("expected a JSON object, got an array"), "{e}");
        let e = error(r#"{"timestamp": -1, "input_length": 5, "output_length": 1}"#);
        assert!(e.contains("field `timestamp`: must not be negative"), "{e}");
        let e = error(r#"{"input_length": 5, "output_length": 1, "hash_ids": [1, -2]}"#);
        assert!(e.contains("field `hash_ids`"), "{e}");
        let e = error(r#"{"messages": [{"role":"user"}], "input_length": 5}"#);
        assert!(e.contains("excludes"), "{e}");
        let e = parse(
            r#"{"chat_id": 1, "input_length": 5, "output_length": 1}"#,
            Format::Bailian,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("missing field `timestamp`"), "{e}");
    }

    #[test]
    fn hostile_values_are_clear_errors() {
        let cases: [(&[u8], &str); 9] = [
            (
                br#"{"timestamp": 1e400, "input_length": 5, "output_length": 1}"#,
                "invalid JSON",
            ),
            (
                br#"{"timestamp": NaN, "input_length": 5, "output_length": 1}"#,
                "invalid JSON",
            ),
            (
                br#"{"timestamp": 1e300, "input_length": 5, "output_length": 1}"#,
                "field `timestamp`: 1e300 is out of range",
            ),
            (
                br#"{"timestamp": "12", "input_length": 5, "output_length": 1}"#,
                "field `timestamp`: expected a number",
            ),
            (
                br#"{"timestamp": 0, "input_length": 18446744073709551616, "output_length": 1}"#,
                "field `input_length`: expected a non-negative integer",
            ),
            (
                br#"{"timestamp": 0, "input_length": 5.5, "output_length": 1}"#,
                "field `input_length`: expected a non-negative integer",
            ),
            (
                br#"{"timestamp": 0, "input_length": 99999999999, "output_length": 1}"#,
                "field `input_length`: 99999999999 tokens is more than",
            ),
            (
                br#"{"timestamp": 0, "input_length": 5, "output_length": 20000000}"#,
                "field `output_length`: 20000000 tokens",
            ),
            (
                b"{\"timestamp\": 0, \"text_input\": \"\xff\xfe\", \"output_length\": 1}",
                "invalid UTF-8",
            ),
        ];
        for (line, expected) in cases {
            let raw = RawLine {
                line: 2,
                index: 0,
                bytes: line.to_vec(),
            };
            let e = parse_record(&raw, Format::Mooncake, Path::new("t.jsonl"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("t.jsonl:2: "), "{e}");
            assert!(e.contains(expected), "{e} (expected {expected:?})");
        }
        // Invalid UTF-8 in a field llmreplay does not read is not looked at (the README says so).
        let raw = RawLine {
            line: 2,
            index: 0,
            bytes:
                b"{\"timestamp\": 0, \"note\": \"\xff\", \"input_length\": 5, \"output_length\": 1}"
                    .to_vec(),
        };
        assert!(parse_record(&raw, Format::Mooncake, Path::new("t.jsonl")).is_ok());
    }
}
