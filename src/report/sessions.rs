//! report.html's "Conversations" section: the summary's session lines (started, finished and
//! cut, waits for a place, the steady state, carry-forward) as a table, and per round (turn
//! number) the prefix-cache hit share production had (planned) beside what the server
//! reported (observed), so a carry-forward or cache gap shows at the round it opens.

use std::fmt::Write as _;

use super::chart::{chart, Series};
use super::parts::{escape, section};
use crate::stats::SessionSummary;

pub fn section_of(out: &mut String, sessions: &SessionSummary) {
    let mut t = String::from("<table>\n");
    for (label, value) in sessions.lines() {
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td class=\"text\">{}</td></tr>",
            escape(label.trim_end_matches(':')),
            escape(&value)
        );
    }
    t.push_str("</table>");
    let points = |share: fn(&crate::stats::Round) -> Option<f64>| -> Vec<(f64, f64)> {
        sessions
            .rounds
            .iter()
            .filter_map(|r| Some((f64::from(r.turn), share(r)? * 100.0)))
            .collect()
    };
    let hits = chart(
        "Prefix-cache hits per round",
        "round (turn number)",
        "% of prompt tokens",
        &[
            Series::points("planned (trace)", points(|r| r.planned_share())),
            Series::points("observed (server)", points(|r| r.observed_share())),
        ],
    );
    section(
        out,
        "conversations",
        "Conversations",
        "A session is started by its first recorded turn and finished by its last turn in the trace; \
         the others were cut. Steady state: first to last send (the drain after it left out).",
        &[t, hits],
    );
}
