//! The gaps between a stream's content chunks, the samples of ITL: each sender fills one
//! [`Gaps`], the run adds them up, `itl.json` keeps them (requests.jsonl holds chunk times only
//! with `--record-itl`), and `report` and `merge` read them back.
//!
//! Every gap counts in the chunk and token ITL. A gap that ends at a reasoning chunk also counts
//! in `reasoning`, so the ITL splits by kind: reasoning, and the answer's (all less reasoning).

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::distribution::latency_histogram;
use crate::record::RequestRecord;

#[derive(Clone, Debug)]
pub struct Gaps {
    /// Per chunk.
    pub chunk: Histogram<u64>,
    /// Each chunk's gap spread over its tokens.
    pub token: Histogram<u64>,
    /// Per chunk, those that ended at a reasoning chunk.
    pub reasoning: Histogram<u64>,
}

impl Default for Gaps {
    fn default() -> Self {
        Gaps {
            chunk: latency_histogram(),
            token: latency_histogram(),
            reasoning: latency_histogram(),
        }
    }
}

impl Gaps {
    /// Records one gap of `gap_ns` before a chunk of `tokens` tokens.
    pub fn record(&mut self, gap_ns: u64, tokens: u64, reasoning: bool) {
        let gap = gap_ns.max(1);
        let tokens = tokens.max(1);
        let _ = self.chunk.record(gap);
        let _ = self.token.record_n((gap / tokens).max(1), tokens);
        if reasoning {
            let _ = self.reasoning.record(gap);
        }
    }

    /// Records the gaps of a record's chunk times (`--record-itl`); a chunk before the first
    /// answer token of an answer that reasoned is a reasoning chunk.
    pub fn record_chunks(&mut self, r: &RequestRecord) {
        let (Some(times), Some(tokens)) = (&r.chunk_times_ns, &r.chunk_tokens) else {
            return;
        };
        let answer_from = match r.reasoning_tokens {
            Some(_) => r.first_answer_ns.unwrap_or(u64::MAX),
            None => 0,
        };
        for (w, &n) in times.windows(2).zip(&tokens[1..]) {
            self.record(w[1].saturating_sub(w[0]), u64::from(n), w[1] < answer_from);
        }
    }

    pub fn add(&mut self, other: &Gaps) {
        self.chunk.add(&other.chunk).ok();
        self.token.add(&other.token).ok();
        self.reasoning.add(&other.reasoning).ok();
    }

    /// The answer's chunk gaps (all less reasoning); empty where nothing reasoned, as the
    /// chunk ITL is then the answer's.
    pub fn answer(&self) -> Histogram<u64> {
        let mut h = latency_histogram();
        if !self.reasoning.is_empty() {
            h.add(&self.chunk).ok();
            h.subtract(&self.reasoning).ok();
        }
        h
    }

    /// `itl.json`: sparse `[value_ns, count]` pairs per histogram.
    pub fn to_json(&self) -> Value {
        let pairs = super::distribution::histogram_pairs;
        json!({
            "itl_ns": pairs(&self.chunk),
            "token_itl_ns": pairs(&self.token),
            "reasoning_itl_ns": pairs(&self.reasoning),
        })
    }

    /// Reads `itl.json`; `reasoning_itl_ns` may be absent (runs before it was kept).
    pub fn from_json(v: &Value) -> Result<Gaps, String> {
        let hist = |key: &str, required: bool| -> Result<Histogram<u64>, String> {
            let mut h = latency_histogram();
            let pairs = match v.get(key) {
                None if !required => return Ok(h),
                pairs => pairs
                    .and_then(Value::as_array)
                    .ok_or_else(|| format!("missing field `{key}`"))?,
            };
            for pair in pairs {
                let (Some(value), Some(count)) = (pair[0].as_u64(), pair[1].as_u64()) else {
                    return Err(format!("field `{key}`: expected [value_ns, count] pairs"));
                };
                h.record_n(value, count).map_err(|e| e.to_string())?;
            }
            Ok(h)
        };
        Ok(Gaps {
            chunk: hist("itl_ns", true)?,
            token: hist("token_itl_ns", true)?,
            reasoning: hist("reasoning_itl_ns", false)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reasoning_answers_gaps_split_by_kind_and_survive_itl_json() {
        // Chunks at 0, 10, 30 (reasoning), then the answer at 60, 100.
        let r = RequestRecord {
            chunk_times_ns: Some(vec![0, 10, 30, 60, 100]),
            chunk_tokens: Some(vec![1, 1, 1, 1, 2]),
            reasoning_tokens: Some(3),
            first_answer_ns: Some(60),
            ..RequestRecord::default()
        };
        let mut g = Gaps::default();
        g.record_chunks(&r);
        assert_eq!((g.chunk.len(), g.reasoning.len()), (4, 2));
        assert_eq!((g.reasoning.min(), g.reasoning.max()), (10, 20));
        let answer = g.answer();
        assert_eq!((answer.len(), answer.min(), answer.max()), (2, 30, 40));
        assert_eq!(g.token.len(), 5, "the last gap spread over its 2 tokens");
        let back = Gaps::from_json(&g.to_json()).unwrap();
        assert_eq!(back.to_json(), g.to_json());
        // Without reasoning the answer's gaps are the chunk ITL itself: none apart.
        let mut plain = Gaps::default();
        plain.record_chunks(&RequestRecord {
            reasoning_tokens: None,
            ..r
        });
        assert_eq!((plain.chunk.len(), plain.reasoning.len()), (4, 0));
        assert!(plain.answer().is_empty());
        let mut old = g.to_json();
        old.as_object_mut().unwrap().remove("reasoning_itl_ns");
        assert!(Gaps::from_json(&old).unwrap().reasoning.is_empty());
    }
}
