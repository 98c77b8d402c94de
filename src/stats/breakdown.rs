//! The parts of a run summary that break it down: prefix-cache hits (observed against
//! expected), each endpoint's share, the conversations' waits, prompt lengths against the
//! servers' counts.

use serde_json::{json, Value};

use super::Distribution;
use crate::record::RequestRecord;

/// Prefix-cache hits in prompt tokens, as the servers reported them and as the hash ids
/// predict them: (hit tokens, prompt tokens) of the successful requests that have them; and
/// the same in whole blocks of the trace's block size (hit blocks, prompt blocks), the unit
/// its hash ids count in (Mooncake's 512 tokens): a long prompt weighs by its blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixHits {
    pub observed: (u64, u64),
    pub expected: (u64, u64),
    /// The block size of the block-weighted shares (0: unknown, none).
    pub block: u64,
    pub observed_blocks: (u64, u64),
    pub expected_blocks: (u64, u64),
    /// Over the requests with both figures: the cached tokens beyond each one's expected hits
    /// (what no reuse of this run explains), and their prompt tokens.
    pub unexplained: (u64, u64),
}

impl PrefixHits {
    /// Adds `r`; `block` is the trace's block size (0: no block-weighted shares).
    pub(super) fn add(&mut self, r: &RequestRecord, block: u64) {
        // The share's base: the server's prompt count, else the trace's (a server without an
        // exact count still reports its cache hits).
        let Some(prompt) = r.prompt_tokens.or(r.input_tokens) else {
            return;
        };
        self.block = block;
        let blocks = |hit: u64| match block {
            0 => (0, 0),
            b => (hit / b, prompt.div_ceil(b)),
        };
        let add = |tokens: &mut (u64, u64), in_blocks: &mut (u64, u64), hit: u64| {
            *tokens = (tokens.0 + hit, tokens.1 + prompt);
            let (h, p) = blocks(hit);
            *in_blocks = (in_blocks.0 + h, in_blocks.1 + p);
        };
        if let Some(cached) = r.cached_tokens {
            add(&mut self.observed, &mut self.observed_blocks, cached);
        }
        if let Some(expected) = r.expected_cached_tokens {
            add(&mut self.expected, &mut self.expected_blocks, expected);
        }
        if let (Some(cached), Some(expected)) = (r.cached_tokens, r.expected_cached_tokens) {
            let beyond = cached.saturating_sub(expected);
            self.unexplained = (self.unexplained.0 + beyond, self.unexplained.1 + prompt);
        }
    }

    /// The share of prompt tokens served from cache beyond each request's expected hits: a
    /// cache warmed before the run shows here even where the server keeps less than an
    /// ideal cache elsewhere (a branch that lost its slot), which the overall shares mix in.
    pub fn unexplained_share(&self) -> Option<f64> {
        Self::share(self.unexplained)
    }

    pub fn any(&self) -> bool {
        self.observed.1 > 0 || self.expected.1 > 0
    }

    fn share((hit, prompt): (u64, u64)) -> Option<f64> {
        (prompt > 0).then(|| hit as f64 / prompt as f64)
    }

    pub fn observed_share(&self) -> Option<f64> {
        Self::share(self.observed)
    }

    pub fn expected_share(&self) -> Option<f64> {
        Self::share(self.expected)
    }

    /// Prompt tokens the servers reported served from their caches (None: none reported).
    pub fn cached_tokens(&self) -> Option<u64> {
        (self.observed.1 > 0).then_some(self.observed.0)
    }

    /// Prompt tokens the hash ids predict a cache serves (None: no prediction).
    pub fn expected_cached_tokens(&self) -> Option<u64> {
        (self.expected.1 > 0).then_some(self.expected.0)
    }

    /// The prompt tokens the shares are of.
    pub fn prompt_tokens(&self) -> u64 {
        self.observed.1.max(self.expected.1)
    }

    pub(super) fn to_json(self) -> Value {
        let mut v = json!({"observed_hit_share": self.observed_share(),
               "expected_hit_share": self.expected_share(),
               "cached_tokens": self.cached_tokens(),
               "expected_cached_tokens": self.expected_cached_tokens(),
               "prompt_tokens": self.prompt_tokens(),
               "unexplained_hit_share": self.unexplained_share()});
        if self.block > 0 {
            v["block_size"] = json!(self.block);
            v["observed_block_hit_share"] = json!(Self::share(self.observed_blocks));
            v["expected_block_hit_share"] = json!(Self::share(self.expected_blocks));
        }
        v
    }

    /// The block-weighted shares (observed, expected), where the block size is known.
    pub fn block_shares(&self) -> (Option<f64>, Option<f64>) {
        match self.block {
            0 => (None, None),
            _ => (
                Self::share(self.observed_blocks),
                Self::share(self.expected_blocks),
            ),
        }
    }
}

/// One endpoint's share of a run, accumulated.
#[derive(Default)]
pub(super) struct EndpointBuilder {
    pub(super) total: u64,
    pub(super) ok: u64,
    pub(super) output_tokens: u64,
    /// Its own active span: first send (or due time) to last end.
    pub(super) first_send_ns: Option<u64>,
    pub(super) last_end_ns: u64,
    pub(super) ttft: Vec<f64>,
    pub(super) e2el: Vec<f64>,
    pub(super) prefix: PrefixHits,
}

/// One endpoint's share of a run (`per_endpoint` in summary.json).
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointSummary {
    pub endpoint: String,
    pub requests: u64,
    pub ok: u64,
    pub failed: u64,
    pub ttft: Option<Distribution>,
    pub e2el: Option<Distribution>,
    /// Output tokens per second of its own active span (first send to last end): an
    /// instance 4x slower than the rest shows a quarter of their rate.
    pub output_throughput: f64,
    /// That span, in seconds.
    pub duration_s: f64,
    pub prefix: PrefixHits,
}

impl EndpointSummary {
    /// TTFT p50 and p99, then E2EL p50 and p99 (ms): the figures every view of an endpoint
    /// shows.
    pub fn latency_percentiles(&self) -> [Option<f64>; 4] {
        let p = |d: &Option<Distribution>, q| d.as_ref().and_then(|d| d.percentile(q));
        [
            p(&self.ttft, 50.0),
            p(&self.ttft, 99.0),
            p(&self.e2el, 50.0),
            p(&self.e2el, 99.0),
        ]
    }

    /// The same four as text: each with `decimals`, "n/a (N samples)" where too few samples
    /// hold it, "-" where there is none.
    pub fn latency_cells(&self, decimals: usize) -> [String; 4] {
        let c = |d: &Option<Distribution>, q| {
            d.as_ref()
                .map_or_else(|| "-".to_string(), |d| d.cell(q, decimals))
        };
        [
            c(&self.ttft, 50.0),
            c(&self.ttft, 99.0),
            c(&self.e2el, 50.0),
            c(&self.e2el, 99.0),
        ]
    }

    pub(super) fn to_json(&self) -> Value {
        let [ttft50, ttft99, e2el50, e2el99] = self.latency_percentiles();
        json!({
            "endpoint": self.endpoint, "requests": self.requests, "ok": self.ok,
            "failed": self.failed,
            "ttft_ms": {"p50": ttft50, "p99": ttft99},
            "e2el_ms": {"p50": e2el50, "p99": e2el99},
            "output_throughput": self.output_throughput,
            "duration_s": self.duration_s,
            "prefix_cache": self.prefix.any().then(|| self.prefix.to_json()),
        })
    }
}

/// A trace's token counts against what the server reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LengthMatch {
    pub checked: u64,
    pub exact: u64,
    pub max_abs_diff: u64,
    /// Over the checked ones: the trace's tokens, and how many the server's counts were off.
    pub target_tokens: u64,
    pub abs_diff_tokens: u64,
    /// Successful requests with a target the server gave no (exact) count for.
    pub not_checked: u64,
}

impl LengthMatch {
    pub(super) fn add(&mut self, target: Option<u64>, actual: Option<u64>) {
        match (target, actual) {
            (Some(target), Some(actual)) => {
                self.checked += 1;
                self.exact += u64::from(target == actual);
                self.max_abs_diff = self.max_abs_diff.max(target.abs_diff(actual));
                self.target_tokens += target;
                self.abs_diff_tokens += target.abs_diff(actual);
            }
            (Some(_), None) => self.not_checked += 1,
            (None, _) => {}
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"checked": self.checked, "exact": self.exact, "max_abs_diff": self.max_abs_diff,
               "not_checked": self.not_checked, "target_tokens": self.target_tokens,
               "abs_diff_tokens": self.abs_diff_tokens})
    }

    /// `exact/checked (max diff N)`, or why nothing was checked.
    pub fn describe(&self) -> String {
        let mut s = if self.checked == 0 {
            "not checked".to_string()
        } else {
            format!(
                "{}/{} (max diff {})",
                self.exact, self.checked, self.max_abs_diff
            )
        };
        if self.not_checked > 0 {
            s.push_str(&format!(
                "; {} without an exact server count",
                self.not_checked
            ));
        }
        s
    }

    /// The share of checked lengths that differ, and the tokens off as a share of the
    /// trace's.
    pub fn inexact_shares(&self) -> (f64, f64) {
        let share = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 / of as f64 };
        (
            share(self.checked - self.exact, self.checked),
            share(self.abs_diff_tokens, self.target_tokens),
        )
    }

    /// Anything to say: a comparison, or requests that could not be compared.
    pub fn any(&self) -> bool {
        self.checked + self.not_checked > 0
    }
}
