//! `results.xlsx`: a "Summary" sheet (headline figures and one row per distribution) and a
//! "Requests" sheet (one row per request, filled as records are read).

use std::path::Path;

use rust_xlsxwriter::{Format, Workbook, Worksheet, XlsxError};

use crate::error::{Error, Result};
use crate::record::RequestRecord;
use crate::stats::{percentile_key, Summary};

/// Rows a worksheet can hold besides its header.
const MAX_ROWS: u32 = 1_048_575;

const COLUMNS: [&str; 17] = [
    "index",
    "endpoint",
    "status",
    "error_kind",
    "error_message",
    "scheduled_ms",
    "sent_ms",
    "drift_ms",
    "ttft_ms",
    "ttft_from_schedule_ms",
    "tpot_ms",
    "e2el_ms",
    "input_tokens",
    "prompt_tokens",
    "output_tokens_target",
    "output_tokens",
    "chunks",
];

/// A workbook being filled.
pub struct ResultsBook {
    book: Workbook,
    row: u32,
    /// Requests beyond the sheet's row limit (counted, noted in the Summary sheet).
    dropped: u64,
    /// Why rows could no longer be written (rust_xlsxwriter panics when its temporary
    /// file cannot be written, the disk full): the book is given up, the error kept.
    broken: Option<String>,
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

impl ResultsBook {
    pub fn new() -> Result<ResultsBook> {
        let mut book = Workbook::new();
        book.add_worksheet().set_name("Summary").map_err(xerr)?;
        let bold = Format::new().set_bold();
        // Rows go to a temporary file as they are written: memory stays flat on long runs.
        let sheet = book.add_worksheet_with_constant_memory();
        sheet.set_name("Requests").map_err(xerr)?;
        for (c, name) in COLUMNS.iter().enumerate() {
            sheet
                .write_string_with_format(0, c as u16, *name, &bold)
                .map_err(xerr)?;
        }
        sheet.set_freeze_panes(1, 0).map_err(xerr)?;
        Ok(ResultsBook {
            book,
            row: 0,
            dropped: 0,
            broken: None,
        })
    }

    /// Adds a request's row; a failure to write it gives up the book (reported by
    /// [`ResultsBook::finish`]), not the summary being read.
    pub fn add(&mut self, r: &RequestRecord) -> Result<()> {
        if self.broken.is_some() {
            return Ok(());
        }
        if let Err(e) = caught(|| self.add_row(r)) {
            self.broken = Some(e.to_string());
        }
        Ok(())
    }

    fn add_row(&mut self, r: &RequestRecord) -> Result<()> {
        if self.row >= MAX_ROWS {
            self.dropped += 1;
            return Ok(());
        }
        self.row += 1;
        let row = self.row;
        let sheet = self.book.worksheet_from_index(1).map_err(xerr)?;
        let num = |sheet: &mut Worksheet, c: u16, v: Option<f64>| -> Result<()> {
            if let Some(v) = v {
                sheet.write_number(row, c, v).map_err(xerr)?;
            }
            Ok(())
        };
        let ms = |ns: Option<u64>| ns.map(|n| n as f64 / 1e6);
        num(sheet, 0, Some(r.index as f64))?;
        sheet.write_string(row, 1, &r.endpoint).map_err(xerr)?;
        num(sheet, 2, r.status.map(f64::from))?;
        if let Some(e) = &r.error {
            sheet.write_string(row, 3, e.kind.as_str()).map_err(xerr)?;
            sheet.write_string(row, 4, &e.message).map_err(xerr)?;
        }
        let values = [
            Some(r.scheduled_ns as f64 / 1e6),
            ms(r.sent_ns),
            r.drift_ms(),
            r.ttft_ms(),
            r.ttft_from_schedule_ms(),
            r.tpot_ms(),
            r.e2el_ms(),
            r.input_tokens.map(|v| v as f64),
            r.prompt_tokens.map(|v| v as f64),
            r.output_tokens_target.map(|v| v as f64),
            r.output_tokens.map(|v| v as f64),
            Some(r.chunks as f64),
        ];
        for (i, v) in values.into_iter().enumerate() {
            num(sheet, 5 + i as u16, v)?;
        }
        Ok(())
    }

    /// Fills the Summary sheet and writes the file (through a temporary name).
    pub fn finish(mut self, summary: &Summary, path: &Path) -> Result<()> {
        if let Some(why) = self.broken.take() {
            return Err(Error::Run(why));
        }
        caught(|| self.write(summary, path))
    }

    fn write(&mut self, summary: &Summary, path: &Path) -> Result<()> {
        let bold = Format::new().set_bold();
        let sheet = self.book.worksheet_from_index(0).map_err(xerr)?;
        let mut row = 0u32;
        let mut pair = |sheet: &mut Worksheet, k: &str, v: f64| -> Result<()> {
            sheet.write_string(row, 0, k).map_err(xerr)?;
            sheet.write_number(row, 1, v).map_err(xerr)?;
            row += 1;
            Ok(())
        };
        for f in crate::headline::FIGURES {
            if let Some(v) = (f.value)(summary) {
                pair(sheet, f.key, v)?;
            }
        }
        pair(sheet, "requests_total", summary.total as f64)?;
        for (kind, n) in &summary.by_error_kind {
            pair(sheet, &format!("failed_{kind}"), *n as f64)?;
        }
        let (input, output) = (&summary.input_length_match, &summary.output_length_match);
        pair(sheet, "input_length_checked", input.checked as f64)?;
        pair(sheet, "input_length_exact", input.exact as f64)?;
        pair(sheet, "output_length_checked", output.checked as f64)?;
        pair(sheet, "output_length_exact", output.exact as f64)?;
        if self.dropped > 0 {
            pair(
                sheet,
                "requests_not_in_sheet (row limit)",
                self.dropped as f64,
            )?;
        }
        row += 1;
        let mut header = vec![
            "metric (ms)".to_string(),
            "count".into(),
            "mean".into(),
            "median".into(),
            "std".into(),
            "min".into(),
        ];
        header.extend(summary.percentiles.iter().map(|p| percentile_key(*p)));
        header.push("max".into());
        for (c, h) in header.iter().enumerate() {
            sheet
                .write_string_with_format(row, c as u16, h, &bold)
                .map_err(xerr)?;
        }
        for (key, _, d) in summary.metrics() {
            let Some(d) = d else { continue };
            row += 1;
            sheet.write_string(row, 0, key).map_err(xerr)?;
            let mut values = vec![d.count as f64, d.mean, d.median, d.std, d.min];
            values.extend(
                summary
                    .percentiles
                    .iter()
                    .map(|p| d.percentile(*p).unwrap_or(f64::NAN)),
            );
            values.push(d.max);
            for (c, v) in values.into_iter().enumerate() {
                sheet.write_number(row, 1 + c as u16, v).map_err(xerr)?;
            }
        }
        sheet.set_column_width(0, 34).map_err(xerr)?;
        let bytes = self.book.save_to_buffer().map_err(xerr)?;
        super::write_atomic(path, &bytes)
    }
}
