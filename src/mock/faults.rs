//! Fault injection for the mock (`--fault KIND:RATE`, repeatable; `--seed N`).
//!
//! Whether a request gets a fault is a pure function of (seed, request index), the index
//! coming from llmreplay's `x-llmreplay-index` header (else the arrival count), so a rerun
//! with the same seed injects the same faults into the same requests whatever the arrival
//! order. Each injection is logged (`--fault-log FILE`, one JSON line each) so tests can
//! match the client's records against what was done.

/// What can go wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Close a new connection at once, before reading anything.
    Refuse,
    /// Reset the connection (RST) after a few streamed tokens.
    ResetMidStream,
    /// Answer with this status and a vLLM-shaped error body.
    Status(u16),
    /// Stop sending in the middle of the stream, leaving the connection open.
    Stall,
    /// Send the response head late (by [`SLOW_HEAD_NS`]); the request still succeeds.
    SlowHead,
    /// Send one SSE event whose data is not JSON.
    MalformedSse,
    /// Announce a chunk and close the connection before its end.
    TruncatedChunk,
    /// `connection: close` and close after the response (no keep-alive); succeeds.
    CloseAfterResponse,
    /// A response head larger than any client should accept.
    HugeHead,
    /// Close a keep-alive connection that already answered a request when the next one
    /// arrives, without a byte of answer (llama.cpp's server does so to a request sent right
    /// after the previous answer's end). A connection's first request is never dropped.
    DropReused,
}

/// How late a `slow-head` response starts.
pub const SLOW_HEAD_NS: u64 = 300_000_000;
/// Bytes of filler in a `huge-head` response head.
pub const HUGE_HEAD_BYTES: usize = 256 << 10;

impl FaultKind {
    pub fn parse(name: &str) -> Result<FaultKind, String> {
        Ok(match name {
            "refuse" => FaultKind::Refuse,
            "reset-mid-stream" => FaultKind::ResetMidStream,
            "stall" => FaultKind::Stall,
            "slow-head" => FaultKind::SlowHead,
            "malformed-sse" => FaultKind::MalformedSse,
            "truncated-chunk" => FaultKind::TruncatedChunk,
            "close-after-response" => FaultKind::CloseAfterResponse,
            "huge-head" => FaultKind::HugeHead,
            "drop-reused" => FaultKind::DropReused,
            other => match other.strip_prefix("status:").map(str::parse::<u16>) {
                Some(Ok(code)) if (400..600).contains(&code) => FaultKind::Status(code),
                _ => {
                    return Err(format!(
                        "unknown fault {other:?}: refuse, reset-mid-stream, status:CODE (400-599), stall, \
                         slow-head, malformed-sse, truncated-chunk, close-after-response, huge-head, \
                         drop-reused"
                    ))
                }
            },
        })
    }

    pub fn name(self) -> String {
        match self {
            FaultKind::Refuse => "refuse".into(),
            FaultKind::ResetMidStream => "reset-mid-stream".into(),
            FaultKind::Status(c) => format!("status:{c}"),
            FaultKind::Stall => "stall".into(),
            FaultKind::SlowHead => "slow-head".into(),
            FaultKind::MalformedSse => "malformed-sse".into(),
            FaultKind::TruncatedChunk => "truncated-chunk".into(),
            FaultKind::CloseAfterResponse => "close-after-response".into(),
            FaultKind::HugeHead => "huge-head".into(),
            FaultKind::DropReused => "drop-reused".into(),
        }
    }
}

/// The faults of a mock and their rates.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// (fault, rate), request faults only; rates add up to at most 1.
    request: Vec<(FaultKind, f64)>,
    refuse_rate: f64,
    seed: u64,
}

impl FaultPlan {
    /// Parses `KIND:RATE` specs (`status:503:0.05` for statuses).
    pub fn parse(specs: &[String], seed: u64) -> Result<FaultPlan, String> {
        let mut plan = FaultPlan {
            seed,
            ..FaultPlan::default()
        };
        for spec in specs {
            let (kind, rate) = spec
                .rsplit_once(':')
                .ok_or_else(|| format!("--fault {spec:?}: expected KIND:RATE, e.g. stall:0.05"))?;
            let rate: f64 = rate
                .parse()
                .ok()
                .filter(|r: &f64| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("--fault {spec:?}: the rate must be between 0 and 1"))?;
            match FaultKind::parse(kind).map_err(|e| format!("--fault {spec:?}: {e}"))? {
                FaultKind::Refuse => plan.refuse_rate += rate,
                k => plan.request.push((k, rate)),
            }
        }
        let total: f64 = plan.request.iter().map(|(_, r)| r).sum();
        if total > 1.0 + 1e-9 || plan.refuse_rate > 1.0 {
            return Err(format!("--fault: the rates add up to {total}, more than 1"));
        }
        Ok(plan)
    }

    pub fn is_empty(&self) -> bool {
        self.request.is_empty() && self.refuse_rate == 0.0
    }

    /// The fault of request `index`, if any.
    pub fn for_request(&self, index: u64) -> Option<FaultKind> {
        let mut u = uniform(self.seed, index, 0x7265_7175);
        for &(kind, rate) in &self.request {
            if u < rate {
                return Some(kind);
            }
            u -= rate;
        }
        None
    }

    /// Whether the `n`th accepted connection is refused.
    pub fn refuses_connection(&self, n: u64) -> bool {
        self.refuse_rate > 0.0 && uniform(self.seed, n, 0x636f_6e6e) < self.refuse_rate
    }
}

/// A uniform number in [0, 1) from (seed, key, stream), SplitMix64-mixed.
fn uniform(seed: u64, key: u64, stream: u64) -> f64 {
    let mut z = seed ^ stream.rotate_left(29) ^ key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
    }
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_rates_and_determinism() {
        let specs = ["stall:0.1", "status:503:0.2", "refuse:0.05"].map(String::from);
        let plan = FaultPlan::parse(&specs, 7).unwrap();
        let draws: Vec<_> = (0..10_000).map(|i| plan.for_request(i)).collect();
        let again: Vec<_> = (0..10_000).map(|i| plan.for_request(i)).collect();
        assert_eq!(draws, again, "a pure function of (seed, index)");
        let count = |k| draws.iter().filter(|d| **d == Some(k)).count();
        assert!(
            (800..1200).contains(&count(FaultKind::Stall)),
            "{}",
            count(FaultKind::Stall)
        );
        assert!((1700..2300).contains(&count(FaultKind::Status(503))));
        let other = FaultPlan::parse(&specs, 8).unwrap();
        assert_ne!(
            draws,
            (0..10_000)
                .map(|i| other.for_request(i))
                .collect::<Vec<_>>()
        );
        assert!(FaultPlan::parse(&["stall:2".into()], 0).is_err());
        assert!(FaultPlan::parse(&["nope:0.1".into()], 0).is_err());
        assert!(FaultPlan::parse(&["stall:0.6".into(), "huge-head:0.6".into()], 0).is_err());
        assert_eq!(FaultKind::parse("status:429"), Ok(FaultKind::Status(429)));
    }
}
