//! Distributions (numpy-compatible: population std, linear-interpolation percentiles) and the
//! run summary of CONTRACT §6.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::record::RequestRecord;
use crate::server_metrics::summary::TargetSummary;

mod breakdown;
mod distribution;
mod gaps;
pub mod latency;
mod reasoning;
mod sessions;
mod slo;
mod tasks;
pub mod verdict;

use breakdown::EndpointBuilder;
pub use breakdown::{EndpointSummary, LengthMatch, PrefixHits};
pub use distribution::{
    add_pairs, format_number, histogram_pairs, histogram_percentile_ms, latency_histogram,
    percentile_key, Distribution, Percentiles,
};
pub use gaps::Gaps;
use latency::{Samples, LATENCIES};
use sessions::SessionBuilder;
pub use sessions::{Round, SessionSummary};
pub use slo::Slo;
pub use tasks::TaskSummary;
pub use verdict::{Bounds, Verdict};

/// Percentiles every distribution reports; `--percentiles` adds more.
pub const DEFAULT_PERCENTILES: [f64; 5] = [25.0, 50.0, 75.0, 90.0, 99.0];

/// Adds `amount` to per-second buckets, spread evenly over `[start_ns, end_ns]` (all at
/// `start_ns` when the span is empty).
pub fn spread_over_seconds(buckets: &mut Vec<f64>, start_ns: u64, end_ns: u64, amount: f64) {
    const SEC: u64 = 1_000_000_000;
    let end_ns = end_ns.max(start_ns);
    let last = (end_ns / SEC) as usize;
    if buckets.len() <= last {
        buckets.resize(last + 1, 0.0);
    }
    if end_ns == start_ns {
        buckets[last] += amount;
        return;
    }
    let span = (end_ns - start_ns) as f64;
    let mut t = start_ns;
    while t < end_ns {
        let next = ((t / SEC + 1) * SEC).min(end_ns);
        buckets[(t / SEC) as usize] += amount * (next - t) as f64 / span;
        t = next;
    }
}

/// Output tokens of a record by the second they arrived: exact with `--record-itl` chunk
/// times, else the first token at its time and the rest spread evenly until the end.
pub fn add_output_tokens(buckets: &mut Vec<f64>, r: &RequestRecord) {
    let Some(tokens) = r.output_tokens.filter(|&t| t > 0) else {
        return;
    };
    if let (Some(times), Some(counts)) = (&r.chunk_times_ns, &r.chunk_tokens) {
        for (&t, &n) in times.iter().zip(counts) {
            spread_over_seconds(buckets, t, t, f64::from(n));
        }
        return;
    }
    let (Some(first), Some(end)) = (r.first_token_ns, r.end_ns) else {
        return;
    };
    spread_over_seconds(buckets, first, first, 1.0);
    if tokens > 1 {
        spread_over_seconds(buckets, first, end, (tokens - 1) as f64);
    }
}

/// Accumulates records into the figures of the summary.
#[derive(Default)]
pub struct SummaryBuilder {
    slo: Option<Slo>,
    good: u64,
    output_per_second: Vec<f64>,
    total: u64,
    ok: u64,
    by_error_kind: BTreeMap<String, u64>,
    first_error_by_kind: BTreeMap<String, String>,
    first_send_ns: Option<u64>,
    last_end_ns: u64,
    input_tokens: u64,
    output_tokens: u64,
    /// One sample list per entry of [`LATENCIES`] (empty for the histograms).
    latencies: Vec<Vec<f64>>,
    late_sends: u64,
    input_length_match: LengthMatch,
    output_length_match: LengthMatch,
    per_endpoint: BTreeMap<String, EndpointBuilder>,
    sessions: SessionBuilder,
    warmup: u64,
    resent: u64,
    queue_ms: Vec<f64>,
    prefix: PrefixHits,
    /// The trace's block size, for the block-weighted prefix-cache shares (0: unknown).
    block: u64,
    reasoning: reasoning::Reasoning,
}

/// Sends later than this are `late_sends` (CONTRACT §6).
pub const LATE_SEND_MS: f64 = 1.0;

impl SummaryBuilder {
    pub fn new(slo: Option<Slo>) -> Self {
        SummaryBuilder {
            slo,
            latencies: vec![Vec::new(); LATENCIES.len()],
            ..SummaryBuilder::default()
        }
    }

    /// Prefix-cache shares also in blocks of `block` tokens (the trace's block size).
    pub fn with_block_size(mut self, block: Option<u64>) -> Self {
        self.block = block.unwrap_or(0);
        self
    }

    /// Adds `r`'s samples: of the latencies taken from every record, or (`succeeded`) of
    /// those taken from successful ones.
    fn add_latencies(&mut self, r: &RequestRecord, succeeded: bool) {
        for (l, v) in LATENCIES.iter().zip(&mut self.latencies) {
            let x = match l.samples {
                Samples::Succeeded(of) if succeeded => of(r),
                Samples::Every(of) if !succeeded => of(r),
                _ => None,
            };
            v.extend(x);
        }
    }

    pub fn add(&mut self, r: &RequestRecord) {
        if r.warmup {
            self.warmup += 1;
            return;
        }
        self.total += 1;
        self.resent += u64::from(r.resent_ns.is_some());
        if let Some(q) = r.queue_ns {
            self.queue_ms.push(q as f64 / 1e6);
        }
        let good = r.ok() && self.slo.as_ref().is_none_or(|slo| slo.met_by(r));
        self.sessions.add(r, good);
        let block = self.block;
        let mine = self.per_endpoint.entry(r.endpoint.clone()).or_default();
        mine.total += 1;
        let s = r.sent_ns.unwrap_or(r.scheduled_ns);
        mine.first_send_ns = Some(mine.first_send_ns.map_or(s, |f| f.min(s)));
        mine.last_end_ns = mine.last_end_ns.max(r.end_ns.unwrap_or(0));
        if r.ok() {
            mine.ok += 1;
            mine.output_tokens += r.output_tokens.unwrap_or(0);
            mine.ttft.extend(r.ttft_ms());
            mine.e2el.extend(r.e2el_ms());
            mine.prefix.add(r, block);
        }
        self.add_latencies(r, false);
        if r.drift_ms().is_some_and(|d| d > LATE_SEND_MS) {
            self.late_sends += 1;
        }
        // The run's duration spans every record, failures included: a request that never
        // got sent (its endpoint was down) counts from when it was due.
        let s = r.sent_ns.unwrap_or(r.scheduled_ns);
        self.first_send_ns = Some(self.first_send_ns.map_or(s, |f| f.min(s)));
        if let Some(e) = r.end_ns {
            self.last_end_ns = self.last_end_ns.max(e);
        }
        if !r.ok() {
            let kind = r.error.as_ref().map_or("http", |e| e.kind.as_str());
            *self.by_error_kind.entry(kind.to_string()).or_default() += 1;
            if !self.first_error_by_kind.contains_key(kind) {
                let message = match (&r.error, r.status) {
                    (Some(e), _) => crate::printable::printable(&e.message).into_owned(),
                    (None, Some(status)) => format!("HTTP status {status}"),
                    (None, None) => String::new(),
                };
                self.first_error_by_kind.insert(kind.to_string(), message);
            }
            return;
        }
        self.ok += 1;
        if self.slo.as_ref().is_some_and(|slo| slo.met_by(r)) {
            self.good += 1;
        }
        add_output_tokens(&mut self.output_per_second, r);
        self.input_tokens += r.prompt_tokens.or(r.input_tokens).unwrap_or(0);
        self.output_tokens += r.output_tokens.unwrap_or(0);
        self.input_length_match.add(r.input_tokens, r.prompt_tokens);
        self.prefix.add(r, block);
        self.reasoning.add(r);
        self.output_length_match
            .add(r.output_tokens_target, r.output_tokens);
        self.add_latencies(r, true);
    }

    pub fn finish(mut self, gaps: &Gaps, percentiles: &Percentiles) -> Summary {
        let duration_s = self
            .first_send_ns
            .map_or(0.0, |f| self.last_end_ns.saturating_sub(f) as f64 / 1e9);
        let per_s = |x: f64| {
            if duration_s > 0.0 {
                x / duration_s
            } else {
                0.0
            }
        };
        Summary {
            total: self.total,
            ok: self.ok,
            failed: self.total - self.ok,
            by_error_kind: self.by_error_kind,
            first_error_by_kind: self.first_error_by_kind,
            duration_s,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            request_throughput: per_s(self.ok as f64),
            output_throughput: per_s(self.output_tokens as f64),
            total_token_throughput: per_s((self.input_tokens + self.output_tokens) as f64),
            goodput: self.slo.is_some().then(|| per_s(self.good as f64)),
            good_requests: self.good,
            slo: self.slo,
            max_output_tokens_per_s: self.output_per_second.iter().copied().fold(0.0, f64::max),
            latencies: {
                LATENCIES
                    .iter()
                    .zip(&mut self.latencies)
                    .map(|(l, samples)| match l.samples {
                        Samples::Gaps(of) => Distribution::of_histogram_ns(&of(gaps), percentiles),
                        _ => Distribution::of(samples, percentiles),
                    })
                    .collect()
            },
            late_sends: self.late_sends,
            input_length_match: self.input_length_match,
            output_length_match: self.output_length_match,
            percentiles: percentiles.clone(),
            warmup_requests: self.warmup,
            resent: self.resent,
            queue: Distribution::of(&mut self.queue_ms, percentiles),
            prefix: self.prefix,
            reasoning: self.reasoning,
            server: None,
            sessions: self.sessions.finish(percentiles),
            per_endpoint: self
                .per_endpoint
                .into_iter()
                .map(|(endpoint, mut b)| {
                    let span_s = b
                        .first_send_ns
                        .map_or(0.0, |f| b.last_end_ns.saturating_sub(f) as f64 / 1e9);
                    EndpointSummary {
                        endpoint,
                        requests: b.total,
                        ok: b.ok,
                        failed: b.total - b.ok,
                        ttft: Distribution::of(&mut b.ttft, percentiles),
                        e2el: Distribution::of(&mut b.e2el, percentiles),
                        output_throughput: match span_s > 0.0 {
                            true => b.output_tokens as f64 / span_s,
                            false => 0.0,
                        },
                        duration_s: span_s,
                        prefix: b.prefix,
                    }
                })
                .collect(),
            ended: None,
            primed: false,
            verdict: None,
        }
    }
}

/// The aggregate of a run (CONTRACT §6).
#[derive(Clone, Debug)]
pub struct Summary {
    /// Reasoning answers and tool calls.
    pub reasoning: reasoning::Reasoning,
    pub total: u64,
    pub ok: u64,
    pub failed: u64,
    pub by_error_kind: BTreeMap<String, u64>,
    /// The message of the first failure of each kind, in the order records completed, safe
    /// to print ([`crate::printable`]).
    pub first_error_by_kind: BTreeMap<String, String>,
    pub duration_s: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    /// Good requests per second, when SLOs were given.
    pub goodput: Option<f64>,
    pub good_requests: u64,
    pub slo: Option<Slo>,
    /// The most output tokens received in one second of the run (1-s buckets).
    pub max_output_tokens_per_s: f64,
    /// One distribution per entry of [`LATENCIES`], in its order (None: no sample).
    pub latencies: Vec<Option<Distribution>>,
    pub late_sends: u64,
    /// The trace's input_length against the server's usage.prompt_tokens.
    pub input_length_match: LengthMatch,
    /// The trace's output_length against the tokens the server generated.
    pub output_length_match: LengthMatch,
    /// The percentiles every distribution reports, and the samples each needs beyond it.
    pub percentiles: Percentiles,
    /// Each endpoint's share, by URL.
    pub per_endpoint: Vec<EndpointSummary>,
    /// Conversation turns that waited for their parent (None when there were none).
    pub sessions: Option<SessionSummary>,
    /// `--warmup-requests` records, left out of everything else.
    pub warmup_requests: u64,
    /// Requests sent again on a fresh connection, their keep-alive one having closed before
    /// a byte of answer (each record says so in `resent_ms`).
    pub resent: u64,
    /// Closed loop: each request's wait for a free slot.
    pub queue: Option<Distribution>,
    /// Prefix-cache hits, reported and predicted.
    pub prefix: PrefixHits,
    /// The scraped server metrics, per target (None when nothing was scraped).
    pub server: Option<Vec<TargetSummary>>,
    /// How the run ended (run.json's `ended`: how, detail, exit_code); None for a records
    /// file alone, or a run written before runs said so.
    pub ended: Option<Value>,
    /// `--prime`: an unmeasured pass filled the servers' caches before this run (run.json).
    pub primed: bool,
    /// Whether the numbers hold ([`verdict::judge`]); None until the run is judged.
    pub verdict: Option<Verdict>,
}

/// What `--prime` did, said beside the figures it changes.
pub const PRIMED: &str =
    "yes: one unmeasured pass of the same schedule filled the caches first (prime/); the \
     prefix hits include what it left";

impl Summary {
    /// The prefix-cache hit share of all scraped targets together, from their counters.
    pub fn server_counter_hit_share(&self) -> Option<f64> {
        let (hits, queries) = self
            .server
            .iter()
            .flatten()
            .filter_map(TargetSummary::prefix_counters)
            .fold((0.0, 0.0), |(h, q), (dh, dq)| (h + dh, q + dq));
        (queries > 0.0).then(|| hits / queries)
    }

    /// The observed prefix-cache hit share and where it comes from: the requests'
    /// `cached_tokens`, else the servers' counters.
    pub fn observed_prefix_share(&self) -> Option<(f64, &'static str)> {
        match self.prefix.observed_share() {
            Some(share) => Some((share, "cached_tokens")),
            None => self
                .server_counter_hit_share()
                .map(|s| (s, "server_counters")),
        }
    }

    /// Each latency of [`LATENCIES`] with its distribution.
    pub fn metrics(&self) -> Vec<(&'static latency::Latency, &Option<Distribution>)> {
        LATENCIES.iter().zip(&self.latencies).collect()
    }

    /// The distribution of `latency`, one of [`latency`]'s consts (`latency::DRIFT`).
    pub fn latency(&self, latency: &latency::Latency) -> Option<&Distribution> {
        self.latencies.get(latency::position(latency))?.as_ref()
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert(
            "requests".into(),
            json!({"total": self.total, "ok": self.ok, "failed": self.failed, "resent": self.resent, "by_error_kind": self.by_error_kind, "first_error_by_kind": self.first_error_by_kind}),
        );
        m.insert("duration_s".into(), json!(self.duration_s));
        m.insert("input_tokens".into(), json!(self.input_tokens));
        m.insert("output_tokens".into(), json!(self.output_tokens));
        m.insert("request_throughput".into(), json!(self.request_throughput));
        m.insert("output_throughput".into(), json!(self.output_throughput));
        m.insert(
            "total_token_throughput".into(),
            json!(self.total_token_throughput),
        );
        m.insert("goodput".into(), json!(self.goodput));
        if let Some(slo) = &self.slo {
            m.insert("good_requests".into(), json!(self.good_requests));
            m.insert("slo".into(), json!(slo));
        }
        m.insert(
            "max_output_tokens_per_s".into(),
            json!(self.max_output_tokens_per_s),
        );
        for (l, d) in self.metrics() {
            m.insert(
                l.key.into(),
                d.as_ref().map_or(Value::Null, Distribution::to_json),
            );
        }
        m.insert(
            "input_length_match".into(),
            self.input_length_match.to_json(),
        );
        m.insert(
            "output_length_match".into(),
            self.output_length_match.to_json(),
        );
        m.insert("late_sends".into(), json!(self.late_sends));
        if self.primed {
            m.insert("primed".into(), json!(true));
        }
        if let Some(verdict) = &self.verdict {
            m.insert("verdict".into(), verdict.to_json());
        }
        if let Some(ended) = &self.ended {
            m.insert("ended".into(), ended.clone());
        }
        if let Some(sessions) = &self.sessions {
            m.insert("sessions".into(), sessions.to_json());
        }
        if self.warmup_requests > 0 {
            m.insert("warmup_requests".into(), json!(self.warmup_requests));
        }
        if self.reasoning.any() {
            m.insert("reasoning".into(), self.reasoning.to_json());
        }
        if let Some(q) = &self.queue {
            m.insert("queue_ms".into(), q.to_json());
        }
        let counters = self.server_counter_hit_share();
        if self.prefix.any() || counters.is_some() {
            let mut p = self.prefix.to_json();
            let observed = self.observed_prefix_share();
            p["observed_hit_share"] = json!(observed.map(|o| o.0));
            p["observed_from"] = json!(observed.map(|o| o.1));
            p["server_counter_hit_share"] = json!(counters);
            m.insert("prefix_cache".into(), p);
        }
        if let Some(targets) = &self.server {
            m.insert(
                "server_metrics".into(),
                json!(targets
                    .iter()
                    .map(TargetSummary::to_json)
                    .collect::<Vec<_>>()),
            );
        }
        m.insert(
            "per_endpoint".into(),
            json!(self
                .per_endpoint
                .iter()
                .map(EndpointSummary::to_json)
                .collect::<Vec<_>>()),
        );
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goodput_from_the_schedule_counts_the_clients_lateness() {
        // Sent 100 ms late, first token 10 ms after the send, end 30 ms after it.
        let late = RequestRecord {
            status: Some(200),
            scheduled_ns: 0,
            sent_ns: Some(100_000_000),
            first_token_ns: Some(110_000_000),
            end_ns: Some(130_000_000),
            output_tokens: Some(3),
            chunks: 3,
            ..RequestRecord::default()
        };
        let slo = |items: &[&str]| {
            let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
            Slo::parse(&items).unwrap().unwrap()
        };
        assert!(slo(&["ttft:50", "e2el:50"]).met_by(&late));
        assert!(!slo(&["ttft-sched:50"]).met_by(&late));
        assert!(!slo(&["e2el-sched:120"]).met_by(&late));
        assert!(slo(&["ttft-sched:110", "e2el-sched:130"]).met_by(&late));
        let e = Slo::parse(&["ttft_sched:5".into()]).unwrap_err();
        assert!(e.contains("ttft-sched:MS"), "{e}");
    }

    /// A percentile is shown only where `tail_samples` lie beyond it: 120 samples give p90
    /// (12 beyond) but not p99 (1.2 beyond), which prints "n/a (120 samples)" and is null in
    /// the JSON, listed in `too_few_samples`; the value stays computed for bounds.
    #[test]
    fn a_percentile_too_few_samples_hold_is_not_shown() {
        let p = Percentiles::new(&[99.9], 5.0);
        let mut samples: Vec<f64> = (1..=120).map(f64::from).collect();
        let d = Distribution::of(&mut samples, &p).unwrap();
        assert!(d.percentile(90.0).is_some() && d.percentile(99.0).is_none());
        assert!(d.raw_percentile(99.0).is_some_and(|v| v > 118.0));
        assert_eq!(d.cell(99.0, 2), "n/a (120 samples)");
        assert_eq!(d.cell(50.0, 1), "60.5");
        let j = d.to_json();
        assert!(j["p99"].is_null() && j["p90"].is_number());
        assert_eq!(j["too_few_samples"], json!(["p99", "p99.9"]));
        assert_eq!(
            (
                p.samples_needed(50.0),
                p.samples_needed(90.0),
                p.samples_needed(99.0)
            ),
            (10, 50, 500)
        );
        assert!(p.holds(99.0, 500) && !p.holds(99.0, 499));
        // Enough samples: nothing is withheld.
        let mut many: Vec<f64> = (1..=5000).map(f64::from).collect();
        let d = Distribution::of(&mut many, &p).unwrap();
        assert!(d.to_json().get("too_few_samples").is_none());
        assert!(d.percentile(99.9).is_some());
    }

    #[test]
    fn matches_numpy_linear_interpolation() {
        // numpy: np.percentile([1,2,3,4,10], [25,50,75,90,99]) = [2, 3, 4, 7.6, 9.76];
        // mean 4, population std sqrt(10) = 3.1623
        let d =
            Distribution::of(&mut [10.0, 2.0, 4.0, 1.0, 3.0], &Percentiles::new(&[], 0.0)).unwrap();
        assert_eq!(d.mean, 4.0);
        assert!((d.std - 10f64.sqrt()).abs() < 1e-12);
        assert_eq!(d.median, 3.0);
        let expected = [
            (25.0, 2.0),
            (50.0, 3.0),
            (75.0, 4.0),
            (90.0, 7.6),
            (99.0, 9.76),
        ];
        for ((p, v), (ep, ev)) in d.percentiles.iter().zip(expected) {
            assert_eq!(*p, ep);
            assert!((v - ev).abs() < 1e-9, "p{p}: {v} vs {ev}");
        }
        let d = Distribution::of(&mut [5.0], &Percentiles::new(&[99.9], 0.0)).unwrap();
        assert_eq!(d.percentile(99.9), Some(5.0));
        assert_eq!(percentile_key(99.9), "p99.9");
        assert!(Distribution::of(&mut [], &Percentiles::default()).is_none());
    }

    /// The servers' `cached_tokens`: summed over the requests that report them, as a share
    /// of their prompt tokens; absent when no server reports any.
    #[test]
    fn prefix_cache_hits_are_the_share_of_reported_prompt_tokens() {
        let record = |index, prompt, cached| RequestRecord {
            index,
            status: Some(200),
            sent_ns: Some(1),
            first_token_ns: Some(2),
            end_ns: Some(3),
            prompt_tokens: Some(prompt),
            cached_tokens: cached,
            ..RequestRecord::default()
        };
        let gaps = Gaps::default();
        let mut b = SummaryBuilder::new(None);
        b.add(&record(0, 1000, Some(0)));
        b.add(&record(1, 1000, Some(750)));
        b.add(&record(2, 5000, None));
        let s = b.finish(&gaps, &Percentiles::default());
        assert_eq!(s.prefix.observed, (750, 2000));
        assert_eq!(s.to_json()["prefix_cache"]["observed_hit_share"], 0.375);
        assert!(s.to_json()["prefix_cache"].get("block_size").is_none());
        // In 512-token blocks: 750 hit tokens are one whole block of the two of each prompt;
        // a small prompt all hit weighs one block, not its tokens.
        let mut b = SummaryBuilder::new(None).with_block_size(Some(512));
        b.add(&record(0, 1000, Some(0)));
        b.add(&record(1, 1000, Some(750)));
        b.add(&record(2, 100, Some(99)));
        let p = &b.finish(&gaps, &Percentiles::default()).to_json()["prefix_cache"];
        assert_eq!(p["block_size"], 512);
        assert_eq!(
            p["observed_block_hit_share"], 0.2,
            "(0 + 1 + 0) / (2 + 2 + 1)"
        );
        assert_eq!(p["observed_hit_share"], 849.0 / 2100.0);
        let mut b = SummaryBuilder::new(None);
        b.add(&record(0, 1000, None));
        let s = b.finish(&gaps, &Percentiles::default());
        assert!(!s.prefix.any() && s.to_json().get("prefix_cache").is_none());
    }

    /// A warm cache cannot hide behind a server that keeps less than an ideal cache
    /// elsewhere: one request hit 90 tokens it had no reason to, another lost the 90 it
    /// should have found; the overall shares agree, the tokens beyond each request's own
    /// expected hits do not, and the verdict says warm-cache.
    #[test]
    fn hits_beyond_each_requests_expectation_are_a_warm_cache() {
        let record = |index, cached, expected| RequestRecord {
            index,
            status: Some(200),
            sent_ns: Some(1),
            first_token_ns: Some(2),
            end_ns: Some(3),
            prompt_tokens: Some(100),
            cached_tokens: Some(cached),
            expected_cached_tokens: Some(expected),
            ..RequestRecord::default()
        };
        let mut b = SummaryBuilder::new(None);
        b.add(&record(0, 90, 0));
        b.add(&record(1, 0, 90));
        let s = b.finish(&Gaps::default(), &Percentiles::default());
        assert_eq!(s.prefix.observed_share(), s.prefix.expected_share());
        assert_eq!(s.prefix.unexplained_share(), Some(0.45));
        assert_eq!(s.to_json()["prefix_cache"]["unexplained_hit_share"], 0.45);
        let v = verdict::judge(&s, None, &Bounds::default());
        assert_eq!(v.reasons[0].key, "warm-cache", "{v:?}");
        assert!(
            v.reasons[0].text.contains("45.0 % of the prompt tokens"),
            "{v:?}"
        );
    }

    /// Each endpoint's output rate is over its own active span: an instance 4x slower than
    /// its peer shows a quarter of the peer's tok/s (over the whole run both showed the same).
    #[test]
    fn per_endpoint_throughput_is_over_its_own_span() {
        let record = |endpoint: &str, index, end_s: u64| RequestRecord {
            index,
            endpoint: endpoint.into(),
            status: Some(200),
            sent_ns: Some(0),
            first_token_ns: Some(1),
            end_ns: Some(end_s * 1_000_000_000),
            output_tokens: Some(100),
            ..RequestRecord::default()
        };
        let gaps = Gaps::default();
        let mut b = SummaryBuilder::new(None);
        for i in 0..10 {
            b.add(&record("fast", i, 1));
            b.add(&record("slow", 10 + i, 4));
        }
        let s = b.finish(&gaps, &Percentiles::default());
        let rate = |name: &str| {
            let e = s.per_endpoint.iter().find(|e| e.endpoint == name).unwrap();
            (e.output_throughput, e.duration_s)
        };
        assert_eq!(rate("fast"), (1000.0, 1.0));
        assert_eq!(rate("slow"), (250.0, 4.0));
        assert_eq!(
            s.output_throughput, 500.0,
            "the run's: 2000 tokens over 4 s"
        );
    }
}
