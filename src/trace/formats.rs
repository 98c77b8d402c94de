//! The trace formats as one table ([`FORMATS`]): everything the rest of llmreplay asks of a
//! format, in its row. A new format is a reader module and a row here; nothing else matches
//! on [`Format`] with a catch-all that would hand it another format's columns or reader.

use super::{otel, tracelab, weka, Format};

/// How a format's records lie in its file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// One JSON object a line (Mooncake, Bailian).
    Lines,
    /// A header line, then one record a line.
    Csv(Columns),
    /// JSON documents, each expanding into many records (task graphs).
    Documents,
}

/// A CSV format's columns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Columns {
    /// Three named columns: timestamp, input tokens, output tokens; maybe a session column.
    Fixed(FixedColumns),
    /// TraceLab's rounds ([`tracelab::REQUIRED`], and `session_id` or `id`).
    Tracelab,
}

/// Azure's and BurstGPT's columns, by name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FixedColumns {
    /// Timestamp, input tokens, output tokens.
    pub names: [&'static str; 3],
    pub session: Option<&'static str>,
    pub time: CsvTime,
}

/// How a CSV format writes its timestamps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CsvTime {
    /// A date-time (`2023-11-16 18:15:46.6805900`).
    DateTime,
    /// Seconds.
    Seconds,
}

/// One format's row.
pub struct Spec {
    pub format: Format,
    pub layout: Layout,
    /// Tokens per hash id when `--block-size` is not given.
    pub block_size: u32,
    /// Multiplier from the trace's timestamp unit to milliseconds (CSV readers convert their
    /// own).
    pub ms_per_time_unit: f64,
    /// Its records are agents' turns linked into task graphs: no arrival times of their own.
    pub task_graph: bool,
    /// `--format auto`: the keys of a JSON object (the first record) that make it this
    /// format; tried in the table's order.
    pub keys: &'static [&'static str],
    /// `--format auto`: bytes that make a pretty-printed document (a lone `{` on its first
    /// line) this format, looked for in its next lines.
    pub sniff: &'static [&'static str],
    /// What `--format auto` saw to take a trace for it (the plan line says it).
    pub recognised_by: &'static str,
    /// Its block size is not the user's to choose, and why (followed by the size in tokens).
    pub fixed_block_size: Option<&'static str>,
}

/// Every format but `auto`, in the order `--format auto` tries their keys (Mooncake, with
/// none, last: any other JSON object).
pub const FORMATS: [Spec; 9] = [
    Spec {
        format: Format::Weka,
        layout: Layout::Documents,
        block_size: weka::BLOCK_TOKENS,
        ms_per_time_unit: 1.0,
        task_graph: true,
        keys: &["requests"],
        sniff: &["\"requests\"", "\"block_size\"", "\"hash_id_scope\""],
        recognised_by: "the first object has `requests`: WEKA sessions, each a task graph run \
                        closed-loop",
        fixed_block_size: Some("a WEKA session's hash ids stand for blocks of"),
    },
    Spec {
        format: Format::Atif,
        layout: Layout::Documents,
        block_size: 512,
        ms_per_time_unit: 1.0,
        task_graph: true,
        keys: &["steps"],
        sniff: &["\"steps\"", "\"ATIF-v"],
        recognised_by: "the first object has `steps`: ATIF trajectories, each model call a \
                        turn, run closed-loop",
        fixed_block_size: None,
    },
    Spec {
        format: Format::Otel,
        layout: Layout::Documents,
        block_size: otel::BLOCK_TOKENS as u32,
        ms_per_time_unit: 1.0,
        task_graph: true,
        keys: &["resourceSpans"],
        sniff: &["\"resourceSpans\""],
        recognised_by: "the first object has `resourceSpans`: OpenTelemetry traces, each a \
                        task run closed-loop",
        fixed_block_size: Some(
            "an OpenTelemetry trace has no hash ids; llmreplay makes its own, one per",
        ),
    },
    Spec {
        format: Format::Dag,
        layout: Layout::Documents,
        block_size: 512,
        ms_per_time_unit: 1.0,
        task_graph: true,
        keys: &["turns"],
        sniff: &[],
        recognised_by: "the first line has `turns`: DAG conversations, each task run \
                        closed-loop",
        fixed_block_size: None,
    },
    Spec {
        format: Format::Bailian,
        layout: Layout::Lines,
        block_size: 16,
        ms_per_time_unit: 1000.0,
        task_graph: false,
        keys: &["chat_id", "parent_chat_id"],
        sniff: &[],
        recognised_by: "the first record has chat_id; timestamps in s",
        fixed_block_size: None,
    },
    Spec {
        format: Format::Mooncake,
        layout: Layout::Lines,
        block_size: 512,
        ms_per_time_unit: 1.0,
        task_graph: false,
        keys: &[],
        sniff: &[],
        recognised_by: "the first record has no chat_id; timestamps in ms",
        fixed_block_size: None,
    },
    Spec {
        format: Format::Tracelab,
        layout: Layout::Csv(Columns::Tracelab),
        block_size: tracelab::BLOCK_TOKENS as u32,
        ms_per_time_unit: 1.0,
        task_graph: false,
        keys: &[],
        sniff: &[],
        recognised_by: "a CSV header with session_id, round_idx, prefix_len, input_len, \
                        output_len, tool_wait_after_ms",
        fixed_block_size: Some(
            "a TraceLab trace has no hash ids; llmreplay makes its own, one per",
        ),
    },
    Spec {
        format: Format::Azure,
        layout: Layout::Csv(Columns::Fixed(FixedColumns {
            names: ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
            session: None,
            time: CsvTime::DateTime,
        })),
        block_size: 512,
        ms_per_time_unit: 1.0,
        task_graph: false,
        keys: &[],
        sniff: &[],
        recognised_by: "a CSV header with TIMESTAMP, ContextTokens, GeneratedTokens",
        fixed_block_size: None,
    },
    Spec {
        format: Format::Burstgpt,
        layout: Layout::Csv(Columns::Fixed(FixedColumns {
            names: ["Timestamp", "Request tokens", "Response tokens"],
            session: Some("Session ID"),
            time: CsvTime::Seconds,
        })),
        block_size: 512,
        ms_per_time_unit: 1.0,
        task_graph: false,
        keys: &[],
        sniff: &[],
        recognised_by: "a CSV header with Timestamp, Request tokens, Response tokens",
        fixed_block_size: None,
    },
];

impl Format {
    /// This format's row of [`FORMATS`].
    /// `auto` is resolved before any record is read; until then it reads as Mooncake.
    pub fn spec(self) -> &'static Spec {
        let this = if self == Format::Auto {
            Format::Mooncake
        } else {
            self
        };
        FORMATS
            .iter()
            .find(|s| s.format == this)
            .expect("every format but auto has a row (tested)")
    }

    pub fn recognised_by(self) -> &'static str {
        self.spec().recognised_by
    }

    pub fn default_block_size(self) -> u32 {
        self.spec().block_size
    }

    pub fn is_task_graph(self) -> bool {
        self.spec().task_graph
    }

    pub fn is_csv(self) -> bool {
        matches!(self.spec().layout, Layout::Csv(_))
    }

    pub fn ms_per_time_unit(self) -> f64 {
        self.spec().ms_per_time_unit
    }

    /// The format a JSON object is (`has` tells whether it has a key), by the table's keys;
    /// Mooncake when none matches.
    pub fn of_object(has: impl Fn(&str) -> bool) -> Format {
        FORMATS
            .iter()
            .find(|s| s.keys.iter().any(|k| has(k)))
            .map_or(Format::Mooncake, |s| s.format)
    }

    /// The format a line of a pretty-printed document says it is, by the table's sniffs.
    pub fn of_document_line(line: &[u8]) -> Option<Format> {
        FORMATS
            .iter()
            .find(|s| {
                s.sniff
                    .iter()
                    .any(|b| memchr::memmem::find(line, b.as_bytes()).is_some())
            })
            .map(|s| s.format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every format has one row, `auto` none; each key identifies its format alone, and a
    /// sniff only a document format.
    #[test]
    fn every_format_has_one_row() {
        for (f, ..) in <Format as crate::choice::Choice>::ALL {
            let rows = FORMATS.iter().filter(|s| s.format == *f).count();
            assert_eq!(rows, usize::from(*f != Format::Auto), "{f}");
            let row = if *f == Format::Auto {
                Format::Mooncake
            } else {
                *f
            };
            assert_eq!(f.spec().format, row);
        }
        for s in &FORMATS {
            for key in s.keys {
                assert_eq!(Format::of_object(|k| k == *key), s.format, "{key}");
            }
        }
        assert_eq!(Format::of_object(|k| k == "timestamp"), Format::Mooncake);
        for s in FORMATS.iter().filter(|s| !s.sniff.is_empty()) {
            assert_eq!(s.layout, Layout::Documents, "{}", s.format);
        }
    }

    /// A pretty-printed document's format, from the bytes of one of its first lines.
    #[test]
    fn a_documents_lines_are_sniffed() {
        assert_eq!(
            Format::of_document_line(br#"  "requests": ["#),
            Some(Format::Weka)
        );
        assert_eq!(
            Format::of_document_line(br#""schema_version": "ATIF-v1.6","#),
            Some(Format::Atif)
        );
        assert_eq!(
            Format::of_document_line(br#"  "resourceSpans": []"#),
            Some(Format::Otel)
        );
        assert_eq!(Format::of_document_line(br#"  "turns": []"#), None);
    }
}
