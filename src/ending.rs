//! How a run ended, and the exit status that says so: one table (CONTRACT §2, the README's
//! "Exit status" table) that the binary, run.json, summary.json, summary.txt and report.html
//! all read.

use serde_json::{json, Value};

/// Exit status of a run that completed: failed requests are recorded, not fatal.
pub const COMPLETED_EXIT_CODE: i32 = 0;
/// A usage or input error: the message names the option, or the file, line and field.
pub const USAGE_EXIT_CODE: i32 = 1;
/// The run could not be carried out (no endpoint reachable, a certificate refused, ...).
pub const RUN_ERROR_EXIT_CODE: i32 = 2;
/// The run completed but no request succeeded, or `--max-error-rate` stopped it.
pub const NO_SUCCESS_EXIT_CODE: i32 = 3;
/// `--strict`: the run completed, but its verdict is INVALID (summary.txt's first lines say
/// why).
pub const INVALID_EXIT_CODE: i32 = 4;
/// A signal stopped the run (128 + SIGINT, as shells report Ctrl-C); outputs are written.
pub const STOPPED_EXIT_CODE: i32 = crate::sys::stop::STOPPED_EXIT_CODE;

/// Every exit status with what it means, in the order the README's table gives them.
pub const EXIT_CODES: [(i32, &str); 6] = [
    (
        COMPLETED_EXIT_CODE,
        "the run completed (failed requests are recorded, not fatal)",
    ),
    (USAGE_EXIT_CODE, "a usage or input error: nothing was sent"),
    (
        RUN_ERROR_EXIT_CODE,
        "the run could not be carried out, or stopped part-way (records unwritable, another \
         shard lost)",
    ),
    (
        NO_SUCCESS_EXIT_CODE,
        "no request succeeded, or --max-error-rate stopped the run",
    ),
    (
        INVALID_EXIT_CODE,
        "--strict: the run completed, but its verdict is INVALID",
    ),
    (
        STOPPED_EXIT_CODE,
        "a signal stopped the run; outputs are written",
    ),
];

/// How a replay that ran ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every scheduled request was sent and recorded.
    Completed,
    /// Completed, but no measured request succeeded; `hint` names a cause found after the
    /// fact (an `http://` endpoint that serves TLS).
    NoSuccess { failed: u64, hint: Option<String> },
    /// `--max-error-rate` stopped sending; the reason says the counts.
    MaxErrorRate { reason: String },
    /// SIGINT or SIGTERM stopped sending; requests in flight drained.
    Signal,
    /// The records could not be written (the disk full): the run stopped; what was written
    /// is whole and summarised.
    WriteFailed { reason: String },
    /// `--rendezvous`: another shard of the run failed, was stopped or went silent, and this
    /// one stopped sending (`--on-shard-loss stop`); the reason names the shard.
    ShardLost { reason: String },
}

impl Ending {
    /// The name in run.json and summary.json (`ended.how`).
    pub fn key(&self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::NoSuccess { .. } => "no-success",
            Ending::MaxErrorRate { .. } => "stopped-by-max-error-rate",
            Ending::Signal => "stopped-by-signal",
            Ending::WriteFailed { .. } => "stopped-by-write-error",
            Ending::ShardLost { .. } => "stopped-by-shard-loss",
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Ending::Completed => COMPLETED_EXIT_CODE,
            Ending::NoSuccess { .. } | Ending::MaxErrorRate { .. } => NO_SUCCESS_EXIT_CODE,
            Ending::Signal => STOPPED_EXIT_CODE,
            Ending::WriteFailed { .. } | Ending::ShardLost { .. } => RUN_ERROR_EXIT_CODE,
        }
    }

    /// One sentence for people.
    pub fn describe(&self) -> String {
        match self {
            Ending::Completed => "completed: every scheduled request was sent".into(),
            Ending::NoSuccess { failed, hint } => {
                let hint = hint.as_ref().map_or(String::new(), |h| format!("; {h}"));
                format!("completed, but no request succeeded ({failed} failed){hint}")
            }
            Ending::MaxErrorRate { reason } => reason.clone(),
            Ending::WriteFailed { reason } => {
                format!("stopped: {reason}; the summary covers the records written before it")
            }
            Ending::ShardLost { reason } => format!(
                "stopped: {reason}; the run lacks that shard's share of the load, and this \
                 one sent nothing new after it"
            ),
            Ending::Signal => {
                "stopped by a signal: nothing new was sent after it, requests in flight drained \
                 or were cancelled"
                    .into()
            }
        }
    }

    /// `ended` in run.json and summary.json.
    pub fn to_json(&self) -> Value {
        json!({"how": self.key(), "detail": self.describe(), "exit_code": self.exit_code()})
    }
}

/// `--strict` on a completed run judged INVALID: its `ended` (run.json's, carried into
/// summary.json) gets the exit status the process ends with, [`INVALID_EXIT_CODE`].
pub fn strict_invalid(ended: Option<&mut Value>) {
    let Some(ended) = ended.filter(|e| e["exit_code"] == COMPLETED_EXIT_CODE) else {
        return;
    };
    ended["exit_code"] = json!(INVALID_EXIT_CODE);
    let detail = ended["detail"].as_str().unwrap_or_default();
    ended["detail"] = json!(format!(
        "{detail}; --strict: the verdict is INVALID, exit status {INVALID_EXIT_CODE}"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ending_has_its_exit_code_in_the_table() {
        for e in [
            Ending::Completed,
            Ending::NoSuccess {
                failed: 3,
                hint: None,
            },
            Ending::MaxErrorRate { reason: "x".into() },
            Ending::Signal,
            Ending::WriteFailed { reason: "x".into() },
            Ending::ShardLost { reason: "x".into() },
        ] {
            assert!(EXIT_CODES.iter().any(|(c, _)| *c == e.exit_code()), "{e:?}");
            assert_eq!(e.to_json()["how"], e.key());
        }
    }
}
