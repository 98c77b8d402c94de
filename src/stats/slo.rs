//! `--goodput`'s SLOs (vLLM's syntax): bounds on latencies of the table in
//! [`latency`](super::latency). A request is good when it succeeded and meets every bound
//! given, inclusive.

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::latency::{self, Latency, Samples};
use crate::record::RequestRecord;

/// A latency `--goodput` may bound.
struct Bounded {
    /// Its name in `--goodput NAME:MS`.
    name: &'static str,
    latency: &'static Latency,
    /// A request without a value meets it: a one-token answer has no TPOT (vLLM counts 0).
    absent_meets: bool,
    /// vLLM's three: sweep.json states them even when not given (null).
    always_stated: bool,
}

/// The latencies `--goodput` may bound: vLLM's three, and two timed from the planned send
/// (a request the client sent late is not good for them).
const BOUNDED: [Bounded; 5] = [
    Bounded {
        name: "ttft",
        latency: &latency::TTFT,
        absent_meets: false,
        always_stated: true,
    },
    Bounded {
        name: "tpot",
        latency: &latency::TPOT,
        absent_meets: true,
        always_stated: true,
    },
    Bounded {
        name: "e2el",
        latency: &latency::E2EL,
        absent_meets: false,
        always_stated: true,
    },
    Bounded {
        name: "ttft-sched",
        latency: &latency::TTFT_SCHED,
        absent_meets: false,
        always_stated: false,
    },
    Bounded {
        name: "e2el-sched",
        latency: &latency::E2EL_SCHED,
        absent_meets: false,
        always_stated: false,
    },
];

/// Service-level objectives for goodput (`--goodput ttft:MS tpot:MS e2el:MS`,
/// `ttft-sched:MS`, `e2el-sched:MS`): a bound in ms per row of [`BOUNDED`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slo {
    limits: [Option<f64>; BOUNDED.len()],
}

impl Slo {
    /// Parses `ttft:500`, `tpot:50`, `e2el:2000` items (a name given twice: the last).
    pub fn parse(items: &[String]) -> Result<Option<Slo>, String> {
        if items.is_empty() {
            return Ok(None);
        }
        let mut slo = Slo::default();
        for item in items {
            let bad = || {
                let names: Vec<String> = BOUNDED.iter().map(|b| format!("{}:MS", b.name)).collect();
                let (last, first) = names.split_last().expect("BOUNDED is not empty");
                format!(
                    "--goodput {item:?}: expected {} or {last}",
                    first.join(", ")
                )
            };
            let (name, value) = item.split_once(':').ok_or_else(bad)?;
            let ms: f64 = value.trim().parse().map_err(|_| bad())?;
            if !(ms.is_finite() && ms >= 0.0) {
                return Err(bad());
            }
            let row = BOUNDED
                .iter()
                .position(|b| b.name == name.trim())
                .ok_or_else(bad)?;
            slo.limits[row] = Some(ms);
        }
        Ok(Some(slo))
    }

    /// The bound on `latency` (one of [`latency`]'s consts), if given.
    pub fn limit(&self, latency: &Latency) -> Option<f64> {
        let row = BOUNDED.iter().position(|b| b.latency.key == latency.key)?;
        self.limits[row]
    }

    /// The bounds given, with their rows.
    fn given(&self) -> impl Iterator<Item = (&'static Bounded, f64)> + '_ {
        BOUNDED
            .iter()
            .zip(&self.limits)
            .filter_map(|(b, limit)| limit.map(|l| (b, l)))
    }

    /// Whether a successful request meets every SLO.
    pub fn met_by(&self, r: &RequestRecord) -> bool {
        self.given()
            .all(|(b, limit)| match per_request(b.latency, r) {
                Some(v) => v <= limit,
                None => b.absent_meets,
            })
    }

    /// The bounds as a sentence: `TTFT <= 500 ms, E2EL <= 3000 ms`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .given()
            .map(|(b, limit)| format!("{} <= {limit} ms", b.latency.name))
            .collect();
        parts.join(", ")
    }
}

/// A request's value of a per-request latency.
fn per_request(latency: &Latency, r: &RequestRecord) -> Option<f64> {
    match latency.samples {
        Samples::Succeeded(of) | Samples::Every(of) => of(r),
        Samples::Gaps(_) => None,
    }
}

/// As sweep.json states them: each latency's key (`ttft_ms`), vLLM's three always.
impl Serialize for Slo {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let stated = BOUNDED.iter().zip(&self.limits);
        let stated = stated.filter(|(b, limit)| b.always_stated || limit.is_some());
        let mut map = serializer.serialize_map(None)?;
        for (b, limit) in stated {
            map.serialize_entry(b.latency.key, limit)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bounded_latency_is_one_value_per_request() {
        for b in &BOUNDED {
            assert!(
                !matches!(b.latency.samples, Samples::Gaps(_)),
                "--goodput {}: {} is not per request",
                b.name,
                b.latency.key
            );
            assert!(latency::LATENCIES.iter().any(|l| l.key == b.latency.key));
        }
    }

    #[test]
    fn parsing_states_the_names_and_keeps_the_last_of_a_repeat() {
        let items = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let slo = Slo::parse(&items(&["ttft:500", "e2el-sched:900", "ttft:300"]))
            .unwrap()
            .unwrap();
        assert_eq!(slo.limit(&latency::TTFT), Some(300.0));
        assert_eq!(slo.limit(&latency::E2EL_SCHED), Some(900.0));
        assert_eq!(slo.limit(&latency::TPOT), None);
        assert_eq!(
            serde_json::to_value(&slo).unwrap(),
            serde_json::json!({"ttft_ms": 300.0, "tpot_ms": null, "e2el_ms": null,
                               "e2el_from_schedule_ms": 900.0})
        );
        assert_eq!(slo.describe(), "TTFT <= 300 ms, E2EL-sched <= 900 ms");
        let err = Slo::parse(&items(&["itl:5"])).unwrap_err();
        assert!(
            err.contains("expected ttft:MS, tpot:MS, e2el:MS, ttft-sched:MS or e2el-sched:MS"),
            "{err}"
        );
        assert_eq!(Slo::parse(&[]), Ok(None));
    }
}
