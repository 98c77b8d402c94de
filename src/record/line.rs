//! A record's JSON line (CONTRACT §5), as one serde type: [`Line`] borrows from a
//! [`RequestRecord`] to write it (no JSON tree is built per record) and reads one back.
//! Fields are in name order, the order lines have always been written in; nanoseconds are
//! written as milliseconds (the shortest f64 that reads back exactly), and the derived
//! metrics (drift, TTFT, E2EL, TPOT, hit shares) are written beside what they come from and
//! ignored on reading. A new field of the record is a field here and its line in each `From`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{ms, ErrorKind, RequestError, RequestRecord, TurnRecord};
use crate::server_timing::ServerPhases;
use crate::trace::TraceIds;

/// `Some(None)` writes `null`; `None` leaves the key out.
type Present<T> = Option<Option<T>>;

#[derive(Debug, Serialize, Deserialize)]
pub struct Line<'a> {
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<Cow<'a, str>>,
    pub cached_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carried_tokens: Option<u64>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub carry_note: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_times_ms: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_tokens: Option<Cow<'a, [u32]>>,
    #[serde(default)]
    pub chunks: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_wait_ms: Option<f64>,
    #[serde(skip_deserializing)]
    pub drift_ms: Option<f64>,
    #[serde(skip_deserializing)]
    pub e2el_ms: Option<f64>,
    pub end_ms: Option<f64>,
    #[serde(borrow, default)]
    pub endpoint: Cow<'a, str>,
    #[serde(borrow)]
    pub error: Option<ErrorLine<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_cached_tokens: Option<u64>,
    /// Written for answers that reasoned (for the others it is `first_token_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_answer_ms: Present<f64>,
    pub first_token_ms: Option<f64>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub hit_share_diff: Present<f64>,
    /// Required: a line without it is refused.
    pub index: u64,
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<bool>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub observed_hit_share: Present<f64>,
    pub output_tokens: Option<u64>,
    pub output_tokens_target: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_chat_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_failed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_index: Present<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_cached_tokens: Option<u64>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub planned_hit_share: Present<f64>,
    pub prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_ms: Present<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resent_ms: Option<f64>,
    /// Required: a line without it is refused.
    pub scheduled_ms: f64,
    pub sent_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_decode_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_kv_transfer_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_prefill_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_queue_ms: Option<f64>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub server_ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_delay_ms: Option<f64>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_wait_ms: Option<f64>,
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    #[serde(skip_deserializing)]
    pub tpot_ms: Option<f64>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<Cow<'a, str>>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub ttfo_ms: Present<f64>,
    #[serde(skip_deserializing)]
    pub ttft_from_schedule_ms: Option<f64>,
    #[serde(skip_deserializing)]
    pub ttft_ms: Option<f64>,
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub ttft_outside_server_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait_for: Vec<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorLine<'a> {
    #[serde(borrow, default)]
    pub kind: Cow<'a, str>,
    #[serde(borrow, default)]
    pub message: Cow<'a, str>,
}

fn ns(ms: f64) -> u64 {
    (ms * 1e6).round().max(0.0) as u64
}

impl<'a> From<&'a RequestRecord> for Line<'a> {
    fn from(r: &'a RequestRecord) -> Line<'a> {
        let turn = r.session.as_ref();
        let planned = turn.and_then(|t| t.planned_cached_tokens.map(|_| t));
        let planned_share = planned.map(|t| t.planned_hit_share(r.input_tokens));
        let observed_share = planned.map(|_| r.observed_hit_share());
        Line {
            branch: turn.and_then(|t| t.branch.as_deref()).map(Cow::Borrowed),
            cached_tokens: r.cached_tokens,
            carried_tokens: turn.and_then(|t| t.carried_tokens),
            carry_note: turn.and_then(|t| t.carry_note.as_deref().map(Cow::Borrowed)),
            chat_id: r.ids.chat_id,
            chunk_times_ms: r
                .chunk_times_ns
                .as_ref()
                .map(|t| t.iter().map(|&t| ms(t)).collect()),
            chunk_tokens: r.chunk_tokens.as_deref().map(Cow::Borrowed),
            chunks: r.chunks,
            connection_wait_ms: r.connection_wait_ms(),
            drift_ms: r.drift_ms(),
            e2el_ms: r.e2el_ms(),
            end_ms: r.end_ns.map(ms),
            endpoint: Cow::Borrowed(&r.endpoint),
            error: r.error.as_ref().map(|e| ErrorLine {
                kind: Cow::Borrowed(e.kind.as_str()),
                message: Cow::Borrowed(&e.message),
            }),
            expected_cached_tokens: r.expected_cached_tokens,
            first_answer_ms: r.reasoning_tokens.map(|_| r.first_answer_ns.map(ms)),
            first_token_ms: r.first_token_ns.map(ms),
            hit_share_diff: planned_share
                .zip(observed_share)
                .map(|(p, o)| p.zip(o).map(|(p, o)| o - p)),
            index: r.index,
            input_tokens: r.input_tokens,
            last_turn: turn.and_then(|t| t.last),
            observed_hit_share: observed_share,
            output_tokens: r.output_tokens,
            output_tokens_target: r.output_tokens_target,
            parent_chat_id: r.ids.parent_chat_id,
            parent_failed: turn.map(|t| t.parent_failed),
            parent_index: turn.map(|t| t.parent_index),
            planned_cached_tokens: turn.and_then(|t| t.planned_cached_tokens),
            planned_hit_share: planned_share,
            prompt_tokens: r.prompt_tokens,
            queue_ms: r.queue_ns.map(ms),
            reasoning_tokens: r.reasoning_tokens,
            released_ms: turn.map(|t| t.released_ns.map(ms)),
            resent_ms: r.resent_ns.map(ms),
            scheduled_ms: ms(r.scheduled_ns),
            sent_ms: r.sent_ns.map(ms),
            server_decode_ms: r.server.as_ref().and_then(|s| s.decode_ms),
            server_kv_transfer_ms: r.server.as_ref().and_then(|s| s.kv_transfer_ms),
            server_prefill_ms: r.server.as_ref().and_then(|s| s.prefill_ms),
            server_queue_ms: r.server.as_ref().and_then(|s| s.queue_ms),
            server_ttft_ms: r.server_ttft_ms(),
            session_delay_ms: turn.map(|t| ms(t.delay_ns)),
            // A turn's conversation is its root; a record outside one keeps the trace's id.
            session_id: match turn {
                Some(t) => Some(Cow::Borrowed(&t.root)),
                None => r.ids.session_id.as_deref().map(Cow::Borrowed),
            },
            session_wait_ms: turn.and_then(|t| t.session_wait_ns.map(ms)),
            status: r.status,
            tool_calls: r.tool_calls,
            tpot_ms: r.tpot_ms(),
            ttft_from_schedule_ms: r.ttft_from_schedule_ms(),
            ttft_ms: r.ttft_ms(),
            ttft_outside_server_ms: r.ttft_outside_server_ms(),
            ttfo_ms: r.reasoning_tokens.map(|_| r.ttfo_ms()),
            trace_id: r.trace_id.as_deref().map(Cow::Borrowed),
            turn: turn.map(|t| t.turn),
            wait_for: turn.map(|t| t.joins.clone()).unwrap_or_default(),
            warmup: r.warmup,
        }
    }
}

impl From<Line<'_>> for RequestRecord {
    fn from(l: Line<'_>) -> RequestRecord {
        let session_id = l.session_id.map(Cow::into_owned);
        RequestRecord {
            index: l.index,
            endpoint: l.endpoint.into_owned(),
            status: l.status,
            error: l.error.map(|e| RequestError {
                kind: ErrorKind::parse(&e.kind),
                message: e.message.into_owned(),
            }),
            scheduled_ns: ns(l.scheduled_ms),
            sent_ns: l.sent_ms.map(ns),
            server: [
                l.server_queue_ms,
                l.server_prefill_ms,
                l.server_kv_transfer_ms,
                l.server_decode_ms,
            ]
            .iter()
            .any(Option::is_some)
            .then_some(ServerPhases {
                queue_ms: l.server_queue_ms,
                prefill_ms: l.server_prefill_ms,
                kv_transfer_ms: l.server_kv_transfer_ms,
                decode_ms: l.server_decode_ms,
            }),
            first_token_ns: l.first_token_ms.map(ns),
            first_answer_ns: l.first_answer_ms.flatten().map(ns),
            reasoning_tokens: l.reasoning_tokens,
            tool_calls: l.tool_calls,
            trace_id: l.trace_id.map(Cow::into_owned),
            end_ns: l.end_ms.map(ns),
            input_tokens: l.input_tokens,
            prompt_tokens: l.prompt_tokens,
            cached_tokens: l.cached_tokens,
            expected_cached_tokens: l.expected_cached_tokens,
            output_tokens_target: l.output_tokens_target,
            output_tokens: l.output_tokens,
            chunks: l.chunks,
            chunk_times_ns: l.chunk_times_ms.map(|t| t.into_iter().map(ns).collect()),
            chunk_tokens: l.chunk_tokens.map(Cow::into_owned),
            ids: TraceIds {
                session_id: session_id.clone(),
                chat_id: l.chat_id,
                parent_chat_id: l.parent_chat_id,
                ..TraceIds::default()
            },
            queue_ns: l.queue_ms.map(ns),
            connection_wait_ns: l.connection_wait_ms.map(ns),
            resent_ns: l.resent_ms.map(ns),
            warmup: l.warmup,
            sent_prompt: None,
            session: l.turn.map(|turn| TurnRecord {
                root: session_id.unwrap_or_default(),
                turn,
                parent_index: l.parent_index.flatten(),
                joins: l.wait_for,
                branch: l.branch.map(Cow::into_owned),
                released_ns: l.released_ms.flatten().map(ns),
                delay_ns: l.session_delay_ms.map_or(0, ns),
                parent_failed: l.parent_failed.unwrap_or(false),
                carried_tokens: l.carried_tokens,
                carry_note: l.carry_note.map(Cow::into_owned),
                planned_cached_tokens: l.planned_cached_tokens,
                session_wait_ns: l.session_wait_ms.map(ns),
                last: l.last_turn,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn_record() -> RequestRecord {
        RequestRecord {
            index: 7,
            endpoint: "http://h:1".into(),
            status: Some(503),
            error: Some(RequestError {
                kind: ErrorKind::Http,
                message: "HTTP 503: \"busy\"".into(),
            }),
            scheduled_ns: 1_234_567,
            sent_ns: Some(1_300_001),
            first_token_ns: Some(9_000_000),
            end_ns: Some(19_000_003),
            input_tokens: Some(900),
            prompt_tokens: Some(910),
            cached_tokens: Some(512),
            expected_cached_tokens: Some(496),
            output_tokens_target: Some(4),
            output_tokens: Some(4),
            chunks: 3,
            first_answer_ns: Some(12_000_001),
            reasoning_tokens: Some(1),
            tool_calls: Some(2),
            trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
            server: Some(ServerPhases {
                queue_ms: None,
                prefill_ms: Some(4.5),
                kv_transfer_ms: Some(0.25),
                decode_ms: Some(9.0),
            }),
            chunk_times_ns: Some(vec![9_000_000, 12_000_001, 19_000_003]),
            chunk_tokens: Some(vec![1, 2, 1]),
            ids: TraceIds {
                session_id: Some("s1".into()),
                chat_id: Some(4),
                parent_chat_id: Some(2),
                ..TraceIds::default()
            },
            session: Some(TurnRecord {
                root: "s1".into(),
                turn: 2,
                parent_index: Some(3),
                joins: vec![1, 2],
                branch: Some("s1::sa:a".into()),
                released_ns: None,
                delay_ns: 250_000,
                parent_failed: true,
                carried_tokens: Some(600),
                carry_note: Some("parent failed".into()),
                planned_cached_tokens: Some(480),
                session_wait_ns: Some(5_000_000),
                last: Some(false),
            }),
            queue_ns: Some(42),
            connection_wait_ns: Some(7_000),
            resent_ns: Some(9_000),
            warmup: true,
            sent_prompt: None,
        }
    }

    #[test]
    fn every_field_reads_back_as_it_was_written() {
        let r = turn_record();
        let text = serde_json::to_string(&Line::from(&r)).unwrap();
        let back = RequestRecord::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, r);
        // Present as null, left out, and derived beside what they come from.
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v["released_ms"].is_null() && v.get("released_ms").is_some());
        assert_eq!(v["session_id"], "s1");
        // The server's TTFT is its phases before the first token; the rest is outside it.
        assert_eq!(v["server_ttft_ms"], 4.75);
        let ttft = v["ttft_ms"].as_f64().unwrap();
        assert_eq!(v["ttft_outside_server_ms"], ttft - 4.75);
        assert_eq!(v["drift_ms"], 0.065434);
        let planned = 480.0 / 900.0;
        let observed = 512.0 / 910.0;
        assert_eq!(v["planned_hit_share"], planned);
        assert_eq!(v["hit_share_diff"], observed - planned);
        let plain = RequestRecord {
            index: 1,
            ..RequestRecord::default()
        };
        let v = plain.to_json();
        for absent in [
            "turn",
            "released_ms",
            "warmup",
            "queue_ms",
            "connection_wait_ms",
            "resent_ms",
            "session_id",
            "chunk_times_ms",
            "trace_id",
            "server_prefill_ms",
            "server_ttft_ms",
            "ttft_outside_server_ms",
        ] {
            assert!(
                v.get(absent).is_none(),
                "{absent} written for a plain record"
            );
        }
        for null in ["status", "error", "sent_ms", "ttft_ms", "cached_tokens"] {
            assert!(v[null].is_null() && v.get(null).is_some(), "{null}");
        }
    }

    #[test]
    fn keys_are_written_in_name_order() {
        let text = serde_json::to_string(&Line::from(&turn_record())).unwrap();
        let v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
        let mut at = Vec::new();
        for key in v.keys() {
            at.push((text.find(&format!("\"{key}\":")).unwrap(), key.clone()));
        }
        let written: Vec<String> = {
            at.sort();
            at.into_iter().map(|(_, k)| k).collect()
        };
        let mut sorted = written.clone();
        sorted.sort();
        assert_eq!(written, sorted);
    }

    #[test]
    fn a_line_without_its_index_or_schedule_is_refused() {
        for bad in [r#"{"scheduled_ms":1}"#, r#"{"index":1}"#] {
            let err = RequestRecord::from_json(&serde_json::from_str(bad).unwrap()).unwrap_err();
            assert!(err.contains("missing field"), "{err}");
        }
    }
}
