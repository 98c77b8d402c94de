//! The Requests sheet: one row per request, in index order (the schedule's order, not the
//! order the answers ended in), one column per field of requests.jsonl.
//!
//! The records are read in completion order, so the book keeps only each record's index and
//! where its line starts (the lowest [`MAX_ROWS`] indices, in a bounded heap), then reads the
//! lines back in index order: memory stays small on a long run and the sheet streams to its
//! temporary file row by row.

use std::collections::BinaryHeap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use rust_xlsxwriter::{Format, Worksheet};
use serde_json::Value;

use super::{text, xerr};
use crate::error::{Error, Result};
use crate::record::RecordFormat;

/// Rows a worksheet can hold besides its header.
pub const MAX_ROWS: usize = 1_048_575;

/// How a column's cells are shown.
#[derive(Clone, Copy)]
enum Kind {
    /// Milliseconds, three decimals.
    Ms,
    /// A count or an id.
    Int,
    /// A share of 1, shown as a percentage.
    Share,
    Text,
    Bool,
}

/// Every field of a record (CONTRACT §5) but the per-chunk arrays, in reading order: the
/// request, its timing, its tokens, its conversation. `error` is split in two.
const COLUMNS: [(&str, Kind, f64); 54] = [
    ("index", Kind::Int, 8.0),
    ("warmup", Kind::Bool, 8.0),
    ("endpoint", Kind::Text, 26.0),
    ("status", Kind::Int, 7.0),
    ("error_kind", Kind::Text, 14.0),
    ("error_message", Kind::Text, 40.0),
    ("trace_id", Kind::Text, 34.0),
    ("scheduled_ms", Kind::Ms, 13.0),
    ("sent_ms", Kind::Ms, 13.0),
    ("drift_ms", Kind::Ms, 10.0),
    ("queue_ms", Kind::Ms, 10.0),
    ("connection_wait_ms", Kind::Ms, 12.0),
    ("resent_ms", Kind::Ms, 11.0),
    ("first_token_ms", Kind::Ms, 14.0),
    ("end_ms", Kind::Ms, 13.0),
    ("ttft_ms", Kind::Ms, 10.0),
    ("ttft_from_schedule_ms", Kind::Ms, 12.0),
    ("server_ttft_ms", Kind::Ms, 12.0),
    ("ttft_outside_server_ms", Kind::Ms, 12.0),
    ("server_queue_ms", Kind::Ms, 12.0),
    ("server_prefill_ms", Kind::Ms, 12.0),
    ("server_kv_transfer_ms", Kind::Ms, 12.0),
    ("server_decode_ms", Kind::Ms, 12.0),
    ("first_answer_ms", Kind::Ms, 14.0),
    ("ttfo_ms", Kind::Ms, 10.0),
    ("tpot_ms", Kind::Ms, 10.0),
    ("e2el_ms", Kind::Ms, 11.0),
    ("input_tokens", Kind::Int, 10.0),
    ("prompt_tokens", Kind::Int, 10.0),
    ("cached_tokens", Kind::Int, 10.0),
    ("expected_cached_tokens", Kind::Int, 12.0),
    ("output_tokens_target", Kind::Int, 12.0),
    ("output_tokens", Kind::Int, 10.0),
    ("chunks", Kind::Int, 8.0),
    ("reasoning_tokens", Kind::Int, 10.0),
    ("tool_calls", Kind::Int, 8.0),
    ("session_id", Kind::Text, 14.0),
    ("branch", Kind::Text, 16.0),
    ("chat_id", Kind::Int, 10.0),
    ("parent_chat_id", Kind::Int, 10.0),
    ("turn", Kind::Int, 6.0),
    ("parent_index", Kind::Int, 10.0),
    ("wait_for", Kind::Text, 10.0),
    ("released_ms", Kind::Ms, 13.0),
    ("session_delay_ms", Kind::Ms, 12.0),
    ("session_wait_ms", Kind::Ms, 12.0),
    ("last_turn", Kind::Bool, 8.0),
    ("parent_failed", Kind::Bool, 8.0),
    ("carried_tokens", Kind::Int, 10.0),
    ("carry_note", Kind::Text, 30.0),
    ("planned_cached_tokens", Kind::Int, 12.0),
    ("planned_hit_share", Kind::Share, 10.0),
    ("observed_hit_share", Kind::Share, 10.0),
    ("hit_share_diff", Kind::Share, 10.0),
];

/// Record fields with no column: the per-chunk arrays stay in requests.jsonl (a cell holds
/// at most 32,767 characters); `error` is `error_kind` and `error_message`.
#[cfg(test)]
const NOT_COLUMNS: [&str; 3] = ["chunk_times_ms", "chunk_tokens", "error"];

/// Where each record's line is, kept for the rows to write.
#[derive(Default)]
pub struct RowIndex {
    /// (index, byte offset) of the lowest indices seen; a max-heap, so the highest is evicted.
    kept: BinaryHeap<(u64, u64)>,
    pub seen: u64,
}

impl RowIndex {
    pub fn add(&mut self, index: u64, offset: u64) {
        self.seen += 1;
        if self.kept.len() < MAX_ROWS {
            self.kept.push((index, offset));
        } else if self.kept.peek().is_some_and(|&(top, _)| index < top) {
            self.kept.pop();
            self.kept.push((index, offset));
        }
    }

    /// Requests that did not fit the sheet.
    pub fn dropped(&self) -> u64 {
        self.seen - self.kept.len() as u64
    }

    /// Writes the header and the rows, in index order, reading each line back from
    /// `requests`.
    pub fn write(self, sheet: &mut Worksheet, requests: &Path) -> Result<()> {
        let header = Format::new().set_bold().set_text_wrap();
        let formats: Vec<Format> = COLUMNS
            .iter()
            .map(|(_, kind, _)| match kind {
                Kind::Ms => Format::new().set_num_format("0.000"),
                Kind::Int => Format::new().set_num_format("0"),
                Kind::Share => Format::new().set_num_format("0.0%"),
                Kind::Text | Kind::Bool => Format::new(),
            })
            .collect();
        for (c, (name, _, width)) in COLUMNS.iter().enumerate() {
            let c = c as u16;
            sheet.set_column_width(c, *width).map_err(xerr)?;
            sheet
                .write_string_with_format(0, c, *name, &header)
                .map_err(xerr)?;
        }
        sheet.set_freeze_panes(1, 1).map_err(xerr)?;
        let open = |e| Error::io(requests, e);
        let mut input = BufReader::new(std::fs::File::open(requests).map_err(open)?);
        let mut line = Vec::new();
        let rows = self.kept.into_sorted_vec();
        // Where the reader stands: the lines come nearly in order (answers end roughly in
        // schedule order), so a relative seek mostly stays inside the buffer.
        let mut at = 0u64;
        for (row, &(_, offset)) in rows.iter().enumerate() {
            input
                .seek_relative(offset as i64 - at as i64)
                .map_err(open)?;
            line.clear();
            at = offset + input.read_until(b'\n', &mut line).map_err(open)? as u64;
            let value: Value = serde_json::from_slice(&line)
                .map_err(|e| Error::Run(format!("{}: {e}", requests.display())))?;
            let record = RecordFormat::read_any(&value, row as u64).map_err(Error::Run)?;
            write_row(sheet, row as u32 + 1, &record.to_json(), &formats)?;
        }
        if !rows.is_empty() {
            sheet
                .autofilter(0, 0, rows.len() as u32, COLUMNS.len() as u16 - 1)
                .map_err(xerr)?;
        }
        Ok(())
    }
}

fn write_row(sheet: &mut Worksheet, row: u32, record: &Value, formats: &[Format]) -> Result<()> {
    for (c, ((name, kind, _), format)) in COLUMNS.iter().zip(formats).enumerate() {
        let c = c as u16;
        let value = match *name {
            "error_kind" => &record["error"]["kind"],
            "error_message" => &record["error"]["message"],
            "warmup" => record.get("warmup").unwrap_or(&Value::Bool(false)),
            name => &record[name],
        };
        match (kind, value) {
            (_, Value::Null) => {}
            (Kind::Bool, Value::Bool(b)) => {
                sheet.write_boolean(row, c, *b).map_err(xerr)?;
            }
            (_, Value::Number(n)) => {
                let n = n.as_f64().unwrap_or(f64::NAN);
                sheet
                    .write_number_with_format(row, c, n, format)
                    .map_err(xerr)?;
            }
            (_, Value::String(s)) => {
                text(sheet, row, c, s)?;
            }
            (_, other) => {
                text(sheet, row, c, other.to_string())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ErrorKind, RequestError, RequestRecord, TurnRecord};
    use crate::trace::TraceIds;

    /// A record with every field set has a column for each, or is named as left out: a
    /// field added to requests.jsonl without a column fails here.
    #[test]
    fn every_record_field_has_a_column() {
        let record = RequestRecord {
            index: 3,
            endpoint: "http://e".into(),
            status: Some(500),
            error: Some(RequestError {
                kind: ErrorKind::Http,
                message: "boom".into(),
            }),
            scheduled_ns: 1,
            sent_ns: Some(2),
            first_token_ns: Some(3),
            end_ns: Some(4),
            input_tokens: Some(5),
            prompt_tokens: Some(5),
            cached_tokens: Some(1),
            expected_cached_tokens: Some(1),
            output_tokens_target: Some(2),
            output_tokens: Some(2),
            chunks: 2,
            first_answer_ns: Some(3),
            reasoning_tokens: Some(1),
            tool_calls: Some(1),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            server: Some(crate::server_timing::ServerPhases {
                queue_ms: Some(1.0),
                prefill_ms: Some(1.0),
                kv_transfer_ms: Some(0.5),
                decode_ms: Some(2.0),
            }),
            chunk_times_ns: Some(vec![3, 4]),
            chunk_tokens: Some(vec![1, 1]),
            ids: TraceIds {
                session_id: Some("s".into()),
                chat_id: Some(7),
                parent_chat_id: Some(6),
                delay_ms: None,
                prefix_tokens: None,
                wait_after_ms: None,
                dag: None,
                delta: false,
            },
            session: Some(TurnRecord {
                root: "s".into(),
                turn: 1,
                parent_index: Some(2),
                joins: vec![1],
                branch: Some("s::sa:1".into()),
                released_ns: Some(1),
                delay_ns: 0,
                parent_failed: false,
                carried_tokens: Some(3),
                carry_note: Some("why".into()),
                planned_cached_tokens: Some(1),
                session_wait_ns: Some(5),
                last: Some(true),
            }),
            queue_ns: Some(1),
            connection_wait_ns: Some(2),
            resent_ns: Some(3),
            warmup: true,
            sent_prompt: None,
        };
        let json = record.to_json();
        for key in json.as_object().unwrap().keys() {
            assert!(
                COLUMNS.iter().any(|(c, _, _)| c == key) || NOT_COLUMNS.contains(&key.as_str()),
                "no column for record field {key}"
            );
        }
    }

    #[test]
    fn the_lowest_indices_are_kept() {
        let mut rows = RowIndex::default();
        for (i, index) in [5u64, 1, 9, 0, 3].into_iter().enumerate() {
            rows.add(index, i as u64 * 10);
        }
        let order: Vec<u64> = rows.kept.into_sorted_vec().iter().map(|r| r.0).collect();
        assert_eq!(order, [0, 1, 3, 5, 9]);
    }
}
