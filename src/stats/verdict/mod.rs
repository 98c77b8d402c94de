//! The verdict on a run, as MLPerf LoadGen ends each run: VALID, or INVALID with every reason
//! its numbers may not hold. It is judged from the records (through the summary) and run.json,
//! so a live run, `report DIR`, a sweep step and a merged run are judged by the same code.
//! Each bound has a default, a reason for it (the README's "Can I trust this run?" prints
//! this table) and a name that `--bound NAME=VALUE` sets ([`bounds`]); each reason names its
//! likely cause and its fix ([`causes`]). INVALID means the numbers do not measure what the
//! run meant: what a valid run cannot give (a tail too few samples hold) is a note.

use serde_json::{json, Value};

use super::Summary;

mod bounds;
mod causes;
mod checks;

pub use bounds::{Bound, BoundSpec, Bounds, BOUNDS, TAIL_SAMPLES_DEFAULT};
pub use checks::sender_cpu_share;

/// One reason a run is INVALID (or a note beside its verdict): a stable key and a sentence
/// with the figures, the likely cause and the fix.
#[derive(Clone, Debug, PartialEq)]
pub struct Reason {
    pub key: &'static str,
    pub text: String,
}

impl Reason {
    fn to_json(&self) -> Value {
        json!({"key": self.key, "text": self.text})
    }
}

/// VALID when there is no reason. Notes say what a valid run cannot give (a percentile too
/// few samples hold) without making it INVALID.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    pub reasons: Vec<Reason>,
    pub notes: Vec<Reason>,
    pub bounds: Bounds,
}

impl Verdict {
    pub fn valid(&self) -> bool {
        self.reasons.is_empty()
    }

    pub fn word(&self) -> &'static str {
        match self.valid() {
            true => "VALID",
            false => "INVALID",
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "result": self.word(),
            "reasons": self.reasons.iter().map(Reason::to_json).collect::<Vec<_>>(),
            "notes": self.notes.iter().map(Reason::to_json).collect::<Vec<_>>(),
            "bounds": self.bounds.to_json(),
        })
    }

    /// The lines that open summary.txt: the word, then a reason a line.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![match self.reasons.len() {
            0 => "Verdict: VALID (every check of README \"Can I trust this run?\" passed)".into(),
            n => format!(
                "Verdict: INVALID ({n} reason{})",
                if n == 1 { "" } else { "s" }
            ),
        }];
        out.extend(
            self.reasons
                .iter()
                .map(|r| format!("  - {}: {}", r.key, r.text)),
        );
        out.extend(
            self.notes
                .iter()
                .map(|r| format!("  note, {}: {}", r.key, r.text)),
        );
        out
    }
}

/// Judges a run by `bounds`: its summary and (when there is one) its run.json.
pub fn judge(s: &Summary, run: Option<&Value>, bounds: &Bounds) -> Verdict {
    let mut reasons = Vec::new();
    let mut say = |key: &'static str, text: String| reasons.push(Reason { key, text });
    checks::outcome(s, bounds, &mut say);
    checks::schedule(s, run, bounds, &mut say);
    checks::client(s, run, bounds, &mut say);
    checks::caches(s, run, bounds, &mut say);
    checks::lengths(s, bounds, &mut say);
    let mut notes = Vec::new();
    checks::thin_tails(s, &mut |key, text| notes.push(Reason { key, text }));
    Verdict {
        reasons,
        notes,
        bounds: bounds.clone(),
    }
}
