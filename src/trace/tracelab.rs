//! TraceLab's coding-agent sessions (CSV; uw-syfi/TraceLab, `replay/README.md`): one row a
//! round, `session_id` (or `id`), `round_idx`, `prefix_len` (context tokens kept from the
//! round before), `input_len` (tokens appended), `output_len`, `tool_wait_after_ms` (the wait
//! after this round's answer before the next round), and optionally `arrival_time` (the
//! session's arrival, ms; 0 when absent).
//!
//! A round becomes a synthetic record of `prefix_len + input_len` tokens at its session's
//! arrival time. The trace gives no hash ids, so they are made here, in blocks of
//! [`BLOCK_TOKENS`]: a round repeats the blocks of the round before for as much of that
//! round's prompt as its `prefix_len` keeps, then takes new ones. What it keeps of the
//! previous *answer* is carried forward by the sender ([`crate::carry`]), and its record
//! says when `prefix_len` keeps less than the previous prompt and answer. The session
//! tracker ([`crate::session`]) sends each round after the previous answer plus that
//! round's tool wait; `prefix_len` is the planned prefix-cache hit.

use std::collections::HashMap;
use std::path::Path;

use super::{Input, RawLine, TraceIds, TraceRecord};
use crate::error::{Error, Result};
use crate::trace::parse::{MAX_LENGTH, MAX_TIMESTAMP_MS};

/// Tokens a made-up hash id stands for (`--block-size` does not apply: these ids are ours).
pub const BLOCK_TOKENS: u64 = 16;

pub const REQUIRED: [&str; 5] = [
    "round_idx",
    "prefix_len",
    "input_len",
    "output_len",
    "tool_wait_after_ms",
];

/// Whether a CSV header is TraceLab's (either of its two forms).
pub fn detect(cells: &[&str]) -> bool {
    REQUIRED.iter().all(|n| cells.contains(n))
        && (cells.contains(&"session_id") || cells.contains(&"id"))
}

/// A session's latest round, for the next one to share its blocks.
struct LastRound {
    round: u64,
    input: u64,
    output: u64,
    hash_ids: Vec<u64>,
}

/// Reads TraceLab rows in file order (a session's rows must come in round order).
pub struct Tracelab {
    session: usize,
    arrival: Option<usize>,
    /// `REQUIRED`'s columns, in its order.
    at: [usize; 5],
    sessions: HashMap<String, LastRound>,
    next_block: u64,
}

impl Tracelab {
    pub fn from_header(raw: &RawLine, cells: &[&str], file: &Path) -> Result<Tracelab> {
        let find = |name: &str| cells.iter().position(|c| *c == name);
        let mut at = [0; 5];
        for (slot, name) in at.iter_mut().zip(REQUIRED) {
            *slot = find(name).ok_or_else(|| Error::Trace {
                file: file.to_path_buf(),
                line: raw.line,
                message: format!(
                    "missing column `{name}`: a TraceLab trace's header names session_id (or id), {}",
                    REQUIRED.join(", ")
                ),
            })?;
        }
        let session = find("session_id")
            .or_else(|| find("id"))
            .ok_or_else(|| Error::Trace {
                file: file.to_path_buf(),
                line: raw.line,
                message: "missing column `session_id` (or `id`)".into(),
            })?;
        Ok(Tracelab {
            session,
            arrival: find("arrival_time"),
            at,
            sessions: HashMap::new(),
            next_block: 0,
        })
    }

    /// One data line (its cells split already).
    pub fn parse(&mut self, raw: &RawLine, cells: &[&str], file: &Path) -> Result<TraceRecord> {
        let fail = |message: String| Error::Trace {
            file: file.to_path_buf(),
            line: raw.line,
            message,
        };
        let cell = |i: usize| cells.get(i).copied().unwrap_or("");
        let [round_at, prefix_at, input_at, output_at, wait_at] = self.at;
        let count = |i: usize, name: &str| -> Result<u64> {
            let c = cell(i);
            let n: u64 = c
                .parse()
                .map_err(|_| fail(format!("column `{name}`: not a whole number: {c:?}")))?;
            match n > MAX_LENGTH {
                true => Err(fail(format!("column `{name}`: {n} is above {MAX_LENGTH}"))),
                false => Ok(n),
            }
        };
        let millis = |i: Option<usize>, name: &str| -> Result<f64> {
            match i.map(cell).filter(|c| !c.is_empty()) {
                None => Ok(0.0),
                Some(c) => match c.parse::<f64>().ok().filter(|t| *t >= 0.0 && t.is_finite()) {
                    None => Err(fail(format!("column `{name}`: not milliseconds: {c:?}"))),
                    // Capped as a Mooncake timestamp is: a bounded schedule, a bounded wait.
                    Some(t) if t > MAX_TIMESTAMP_MS => Err(fail(format!(
                        "column `{name}`: {t:e} is out of range (at most {MAX_TIMESTAMP_MS:e} ms)"
                    ))),
                    Some(t) => Ok(t),
                },
            }
        };
        let session = cell(self.session);
        if session.is_empty() {
            return Err(fail("column `session_id`: missing".into()));
        }
        let round = count(round_at, "round_idx")?;
        let prefix = count(prefix_at, "prefix_len")?;
        let appended = count(input_at, "input_len")?;
        let output = count(output_at, "output_len")?;
        if output == 0 {
            return Err(fail("column `output_len`: must be at least 1".into()));
        }
        let input = prefix + appended;
        if input == 0 {
            return Err(fail(
                "columns `prefix_len` + `input_len`: the prompt must have at least 1 token".into(),
            ));
        }
        if input > MAX_LENGTH {
            return Err(fail(format!(
                "columns `prefix_len` + `input_len`: {input} tokens is above {MAX_LENGTH}"
            )));
        }
        let wait = millis(Some(wait_at), "tool_wait_after_ms")?;
        let arrival = millis(self.arrival, "arrival_time")?;
        let last = self.sessions.get(session);
        if let Some(last) = last.filter(|l| l.round >= round) {
            return Err(fail(format!(
                "column `round_idx`: round {round} of session {session:?} comes after its round {}: a session's rows must be in round order",
                last.round
            )));
        }
        // A round keeps at most what the round before held: its prompt and its answer (a
        // tool's result is new input). More is a planned hit no server can give.
        if let Some(l) = last.filter(|l| prefix > l.input + l.output) {
            return Err(fail(format!(
                "column `prefix_len`: round {round} of session {session:?} keeps {prefix} \
                 tokens, but its round {} held {} ({} of prompt, {} of answer): no cache can \
                 serve that prefix",
                l.round,
                l.input + l.output,
                l.input,
                l.output
            )));
        }
        // The blocks of the round before that this one keeps: all of its prompt's when the
        // prefix reaches past it (the last one may be partial: its tokens are a prefix of the
        // same block here), else the whole blocks within the prefix.
        let shared = match last {
            Some(l) if prefix >= l.input => l.hash_ids.as_slice(),
            Some(l) => &l.hash_ids[..(prefix / BLOCK_TOKENS) as usize],
            None => &[],
        };
        let blocks = input.div_ceil(BLOCK_TOKENS) as usize;
        let mut hash_ids = Vec::with_capacity(blocks);
        hash_ids.extend_from_slice(shared);
        let fresh = (blocks - hash_ids.len()) as u64;
        hash_ids.extend(self.next_block..self.next_block + fresh);
        self.next_block += fresh;
        self.sessions.insert(
            session.to_string(),
            LastRound {
                round,
                input,
                output,
                hash_ids: hash_ids.clone(),
            },
        );
        Ok(TraceRecord {
            index: raw.index,
            line: raw.line,
            timestamp_ms: Some(arrival),
            input: Input::Synthetic {
                input_length: input,
                hash_ids,
            },
            output_length: Some(output),
            ids: TraceIds {
                session_id: Some(session.to_string()),
                prefix_tokens: Some(prefix),
                wait_after_ms: Some(wait),
                ..TraceIds::default()
            },
            extra: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(lines: &[&str]) -> Result<Vec<TraceRecord>> {
        let cells = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        let header = cells(lines[0]);
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        assert!(detect(&header));
        let raw = |i: usize| RawLine {
            line: i as u64 + 1,
            index: i.saturating_sub(1) as u64,
            bytes: lines[i].as_bytes().to_vec(),
        };
        let file = Path::new("s.csv");
        let mut t = Tracelab::from_header(&raw(0), &header, file)?;
        (1..lines.len())
            .map(|i| {
                let c = cells(lines[i]);
                let c: Vec<&str> = c.iter().map(String::as_str).collect();
                t.parse(&raw(i), &c, file)
            })
            .collect()
    }

    #[test]
    fn rounds_keep_the_blocks_their_prefix_keeps() {
        let r = rows(&[
            "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms",
            "a,100,0,0,40,8,250",
            // The prompt before and its answer (40 + 8), then 10 new tokens.
            "a,100,1,48,10,8,0",
            "b,200,0,0,16,4,5",
            // Compacted: 20 tokens of the 58 kept (one whole block of them).
            "a,100,2,20,30,8,0",
        ])
        .unwrap();
        let ids = |i: usize| r[i].hash_ids().to_vec();
        assert_eq!(ids(0), vec![0, 1, 2]);
        assert_eq!(r[1].input_length(), Some(58));
        assert_eq!(
            ids(1),
            vec![0, 1, 2, 3],
            "all of round 0's blocks, then a new one"
        );
        assert_eq!(ids(2), vec![4]);
        assert_eq!(ids(3), vec![0, 5, 6, 7]);
        assert_eq!(r[0].timestamp_ms, Some(100.0));
        assert_eq!(r[1].timestamp_ms, Some(100.0), "a round is its session's");
        assert_eq!(r[0].ids.wait_after_ms, Some(250.0));
        assert_eq!(r[1].ids.prefix_tokens, Some(48));
        assert_eq!(r[2].ids.session_id.as_deref(), Some("b"));
    }

    #[test]
    fn the_canonical_form_and_its_errors() {
        let r = rows(&[
            "id,input_len,output_len,arrival_time,round_idx,tool_wait_after_ms,prefix_len",
            "7,12,3,,0,1.5,0",
        ])
        .unwrap();
        assert_eq!(r[0].timestamp_ms, Some(0.0), "no arrival: 0");
        assert_eq!(r[0].ids.session_id.as_deref(), Some("7"));
        let head = "session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms";
        let cases = [
            (
                "s,1,0,10,4,0\ns,1,0,10,4,0",
                "s.csv:3: column `round_idx`: round 1 of session \"s\" comes after its round 1",
            ),
            ("s,0,0,10,0,0", "column `output_len`: must be at least 1"),
            ("s,0,0,0,4,0", "the prompt must have at least 1 token"),
            (
                "s,0,x,10,4,0",
                "column `prefix_len`: not a whole number: \"x\"",
            ),
            (
                "s,0,0,10,4,-1",
                "column `tool_wait_after_ms`: not milliseconds",
            ),
            (
                "s,0,0,10,4,0\ns,1,15,5,4,0",
                "s.csv:3: column `prefix_len`: round 1 of session \"s\" keeps 15 tokens, but \
                 its round 0 held 14 (10 of prompt, 4 of answer)",
            ),
        ];
        for (body, expected) in cases {
            let mut lines = vec![head];
            lines.extend(body.lines());
            let e = rows(&lines).unwrap_err().to_string();
            assert!(e.contains(expected), "{e} (expected {expected:?})");
        }
        let raw = RawLine {
            line: 1,
            index: 0,
            bytes: Vec::new(),
        };
        let e = Tracelab::from_header(
            &raw,
            &["id", "round_idx", "prefix_len", "input_len", "output_len"],
            Path::new("s.csv"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("missing column `tool_wait_after_ms`"), "{e}");
    }
}
