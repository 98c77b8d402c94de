//! The verdict's bounds: one table of names (what `--bound NAME=VALUE` sets), defaults and
//! why each default, read by the checks through a typed [`Bound`], so a misspelt bound is a
//! compile error, not a panic at the end of a run.

use serde_json::{json, Map, Value};

/// Samples a printed percentile needs beyond it, unless `--bound tail-samples=N`.
pub const TAIL_SAMPLES_DEFAULT: f64 = 5.0;

/// Each bound, in the order of [`BOUNDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    DriftP99Ms,
    LateShare,
    StallMs,
    ShardSkewMs,
    SenderCpu,
    FailedShare,
    WarmCachePoints,
    ColdCachePoints,
    InexactShare,
    TailSamples,
}

/// One bound of the verdict: its name for `--bound`, its default and why.
pub struct BoundSpec {
    pub bound: Bound,
    pub name: &'static str,
    pub default: f64,
    pub why: &'static str,
}

/// Every bound, in the order of [`Bound`] (a unit test holds them together).
pub const BOUNDS: [BoundSpec; 10] = [
    BoundSpec {
        bound: Bound::DriftP99Ms,
        name: "drift-p99-ms",
        default: 50.0,
        why: "p99 of send drift (sent - scheduled): 50 ms is a tenth of a typical 500 ms TTFT \
              SLO; later, the server met another arrival pattern than the trace's",
    },
    BoundSpec {
        bound: Bound::LateShare,
        name: "late-share",
        default: 0.05,
        why: "share of sends more than 1 ms late, and of requests that reached their sender \
              after their time (producers behind): one in twenty changes the burst shape",
    },
    BoundSpec {
        bound: Bound::StallMs,
        name: "stall-ms",
        default: 1000.0,
        why: "the longest a due request waited to be sent: a second without sends is a hole \
              in the load that no percentile shows",
    },
    BoundSpec {
        bound: Bound::ShardSkewMs,
        name: "shard-skew-ms",
        default: 50.0,
        why: "how far a shard of a merged run started from the agreed instant, on the \
              reference clock: every request of that shard is shifted so far against the \
              others', as drift shifts one",
    },
    BoundSpec {
        bound: Bound::SenderCpu,
        name: "sender-cpu",
        default: 0.9,
        why: "share of the run the sender threads were on a CPU: above 90 % their timestamps \
              wait for the CPU as much as for the server",
    },
    BoundSpec {
        bound: Bound::FailedShare,
        name: "failed-share",
        default: 0.01,
        why: "share of requests that failed: latencies of the 99 % that succeeded describe \
              another load than the one sent",
    },
    BoundSpec {
        bound: Bound::WarmCachePoints,
        name: "warm-cache-points",
        default: 10.0,
        why: "observed prefix-cache hits above expected, in percentage points, overall or \
              summed over the requests that hit beyond their own expected hits: a cache \
              warmed before the run (an earlier replay of the same prompts) makes every TTFT \
              too good",
    },
    BoundSpec {
        bound: Bound::ColdCachePoints,
        name: "cold-cache-points",
        default: 10.0,
        why: "observed prefix-cache hits below expected, in percentage points, and under half \
              of them: a server with caching off or evicting what the trace reuses makes \
              every TTFT too bad for the traffic the trace describes",
    },
    BoundSpec {
        bound: Bound::InexactShare,
        name: "inexact-share",
        default: 0.05,
        why: "share of input or output lengths the server counted otherwise than the trace, \
              or of their tokens: a few answers a server ended a token or two early change no \
              figure, a tokenizer that is not the server's changes every prompt",
    },
    BoundSpec {
        bound: Bound::TailSamples,
        name: "tail-samples",
        default: TAIL_SAMPLES_DEFAULT,
        why: "samples beyond a printed percentile (p99 needs 500 requests at 5): with fewer, \
              the percentile is one or two requests, not a distribution, and prints n/a",
    },
];

/// The bounds a run is judged by: the defaults, with what `--bound` changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds([f64; BOUNDS.len()]);

impl Default for Bounds {
    fn default() -> Self {
        Bounds(BOUNDS.map(|b| b.default))
    }
}

impl Bounds {
    /// `--bound NAME=VALUE`, each a known name and a non-negative number, over the defaults.
    pub fn parse(specs: &[String]) -> Result<Bounds, String> {
        Bounds::default().with(specs)
    }

    /// These bounds with `--bound NAME=VALUE` specs applied: the others stay as they are.
    pub fn with(self, specs: &[String]) -> Result<Bounds, String> {
        let mut bounds = self;
        for spec in specs {
            let names = || BOUNDS.map(|b| b.name).join(", ");
            let (name, value) = spec
                .split_once('=')
                .ok_or_else(|| format!("--bound {spec:?}: expected NAME=VALUE ({})", names()))?;
            let at = BOUNDS
                .iter()
                .position(|b| b.name == name.trim())
                .ok_or_else(|| format!("--bound {spec:?}: no bound {name:?} ({})", names()))?;
            bounds.0[at] = value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("--bound {spec:?}: {value:?} is not a number >= 0"))?;
        }
        Ok(bounds)
    }

    pub fn get(&self, bound: Bound) -> f64 {
        self.0[bound as usize]
    }

    pub fn to_json(&self) -> Value {
        let m: Map<String, Value> = BOUNDS
            .iter()
            .zip(self.0)
            .map(|(b, v)| (b.name.to_string(), json!(v)))
            .collect();
        Value::Object(m)
    }

    /// The bounds run.json recorded (`verdict_bounds`); defaults for any it lacks.
    pub fn from_json(v: &Value) -> Bounds {
        let mut bounds = Bounds::default();
        for (at, b) in BOUNDS.iter().enumerate() {
            if let Some(x) = v[b.name].as_f64() {
                bounds.0[at] = x;
            }
        }
        bounds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_enum_and_names_are_unique() {
        for (at, b) in BOUNDS.iter().enumerate() {
            assert_eq!(b.bound as usize, at, "{}", b.name);
            assert_eq!(BOUNDS.iter().filter(|o| o.name == b.name).count(), 1);
        }
        let b = Bounds::parse(&["cold-cache-points=3".into()]).unwrap();
        assert_eq!(b.get(Bound::ColdCachePoints), 3.0);
        assert_eq!(b.get(Bound::WarmCachePoints), 10.0);
    }
}
