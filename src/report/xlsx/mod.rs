//! `results.xlsx`, for a team that reads results in a spreadsheet: "Summary" (headline
//! figures and one row per distribution), "Requests" (one row per request, in index order,
//! every field with its number format), "Per-endpoint", "Server metrics" (when scraped) and
//! "Configuration" (run.json, one setting a row).

mod requests;
mod sheets;

use std::path::Path;

use rust_xlsxwriter::{Workbook, Worksheet, XlsxError};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::stats::Summary;
use requests::RowIndex;

/// A workbook being filled: the Requests rows are noted as the records are read (where each
/// line is) and written, in index order, when the book is finished.
pub struct ResultsBook {
    rows: RowIndex,
}

thread_local! {
    /// This thread is inside a workbook call whose panic is caught and reported.
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, turning a panic inside it into an error, without the panic hook's message.
fn caught<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(|c| c.get()) {
                previous(info);
            }
        }));
    });
    CATCHING.with(|c| c.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(false));
    result.unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the workbook writer failed".into());
        Err(Error::Run(format!("results.xlsx: {why}")))
    })
}

fn xerr(e: XlsxError) -> Error {
    Error::Run(format!("results.xlsx: {e}"))
}

/// The most characters a spreadsheet cell holds.
const CELL_CHARS: usize = 32_767;

/// Writes `value` into a cell; a text longer than a cell holds (a join over 100,000
/// sub-agents, a megabyte model name) is cut, with a note of how much was left out, rather
/// than failing the book.
fn text(sheet: &mut Worksheet, row: u32, col: u16, value: impl AsRef<str>) -> Result<()> {
    let value = value.as_ref();
    if value.len() <= CELL_CHARS || value.chars().count() <= CELL_CHARS {
        return sheet.write_string(row, col, value).map(drop).map_err(xerr);
    }
    let chars = value.chars().count();
    let note = format!(" ... (cut: {chars} characters in all, see the JSON outputs)");
    let kept: String = value
        .chars()
        .take(CELL_CHARS - note.chars().count())
        .collect();
    sheet
        .write_string(row, col, kept + &note)
        .map(drop)
        .map_err(xerr)
}

impl ResultsBook {
    pub fn new() -> ResultsBook {
        ResultsBook {
            rows: RowIndex::default(),
        }
    }

    /// Notes the record of `index` whose line starts at byte `offset` of requests.jsonl.
    pub fn add(&mut self, index: u64, offset: u64) {
        self.rows.add(index, offset);
    }

    /// Writes the file (through a temporary name): the rows read back from `requests`.
    pub fn finish(
        self,
        summary: &Summary,
        run: Option<&Value>,
        requests: &Path,
        path: &Path,
    ) -> Result<()> {
        // rust_xlsxwriter panics when its temporary file cannot be written (a full disk).
        caught(move || {
            let f = sheets::Formats::new();
            let mut book = Workbook::new();
            let dropped = self.rows.dropped();
            let sheet = book.add_worksheet().set_name("Summary").map_err(xerr)?;
            sheets::summary(sheet, &f, summary, dropped)?;
            // Rows go to a temporary file as they are written: memory stays flat on long runs.
            let sheet = book.add_worksheet_with_constant_memory();
            sheet.set_name("Requests").map_err(xerr)?;
            self.rows.write(sheet, requests)?;
            let sheet = book
                .add_worksheet()
                .set_name("Per-endpoint")
                .map_err(xerr)?;
            sheets::per_endpoint(sheet, &f, summary)?;
            if summary.server.as_ref().is_some_and(|s| !s.is_empty()) {
                let sheet = book
                    .add_worksheet()
                    .set_name("Server metrics")
                    .map_err(xerr)?;
                sheets::server_metrics(sheet, &f, summary)?;
            }
            if let Some(run) = run {
                let sheet = book
                    .add_worksheet()
                    .set_name("Configuration")
                    .map_err(xerr)?;
                sheets::configuration(sheet, &f, run)?;
            }
            let bytes = book.save_to_buffer().map_err(xerr)?;
            super::write_atomic(path, &bytes)
        })
    }
}

impl Default for ResultsBook {
    fn default() -> Self {
        ResultsBook::new()
    }
}
