//! The run's latency distributions, one table: each entry's key (summary.json, results.xlsx,
//! report.html, the comparison page), its section title and row name in summary.txt, and
//! where its samples come from. [`SummaryBuilder`](super::SummaryBuilder) fills one sample
//! list per entry and every writer walks the table, so a new per-request latency is one
//! entry here and its accessor on [`RequestRecord`].

use hdrhistogram::Histogram;

use super::Gaps;
use crate::record::RequestRecord;

/// Where a distribution's samples come from.
#[derive(Clone, Copy)]
pub enum Samples {
    /// One value per successful request.
    Succeeded(fn(&RequestRecord) -> Option<f64>),
    /// One value per measured record, failed or not.
    Every(fn(&RequestRecord) -> Option<f64>),
    /// A histogram of the senders' gaps between content chunks.
    Gaps(fn(&Gaps) -> Histogram<u64>),
}

/// One latency distribution of the summary.
pub struct Latency {
    /// Its key in summary.json and the pages (`ttft_ms`).
    pub key: &'static str,
    /// Its section title in summary.txt.
    pub title: &'static str,
    /// Its name in summary.txt's rows (`Mean TTFT (ms)`).
    pub name: &'static str,
    pub samples: Samples,
}

/// Every latency distribution, in the order summary.txt and the pages show them.
pub const LATENCIES: &[Latency] = &[
    TTFT,
    TTFO,
    TTFT_SCHED,
    SERVER_TTFT,
    TTFT_OUTSIDE_SERVER,
    TPOT,
    TPOT_REASONING,
    TPOT_ANSWER,
    ITL,
    ITL_REASONING,
    ITL_ANSWER,
    TOKEN_ITL,
    E2EL,
    E2EL_SCHED,
    CONNECTION_WAIT,
    DRIFT,
];

pub const TTFT: Latency = Latency {
    key: "ttft_ms",
    title: "Time to First Token",
    name: "TTFT",
    samples: Samples::Succeeded(RequestRecord::ttft_ms),
};

pub const TTFO: Latency = Latency {
    key: "ttfo_ms",
    title: "Time to First Output (after reasoning)",
    name: "TTFO",
    samples: Samples::Succeeded(RequestRecord::ttfo_ms),
};

pub const TTFT_SCHED: Latency = Latency {
    key: "ttft_from_schedule_ms",
    title: "TTFT from schedule",
    name: "TTFT-sched",
    samples: Samples::Succeeded(RequestRecord::ttft_from_schedule_ms),
};

/// Where TTFT goes: the server's own account of it ([`crate::server_timing`]), and the rest.
pub const SERVER_TTFT: Latency = Latency {
    key: "server_ttft_ms",
    title: "TTFT inside the server (its own timing)",
    name: "Server TTFT",
    samples: Samples::Succeeded(RequestRecord::server_ttft_ms),
};

pub const TTFT_OUTSIDE_SERVER: Latency = Latency {
    key: "ttft_outside_server_ms",
    title: "TTFT outside the server",
    name: "TTFT-outside",
    samples: Samples::Succeeded(RequestRecord::ttft_outside_server_ms),
};

pub const TPOT: Latency = Latency {
    key: "tpot_ms",
    title: "Time per Output Token (excl. 1st token)",
    name: "TPOT",
    samples: Samples::Succeeded(RequestRecord::tpot_ms),
};

pub const TPOT_REASONING: Latency = Latency {
    key: "tpot_reasoning_ms",
    title: "TPOT of reasoning tokens",
    name: "TPOT-reasoning",
    samples: Samples::Succeeded(RequestRecord::tpot_reasoning_ms),
};

pub const TPOT_ANSWER: Latency = Latency {
    key: "tpot_answer_ms",
    title: "TPOT of answer tokens (after reasoning)",
    name: "TPOT-answer",
    samples: Samples::Succeeded(RequestRecord::tpot_answer_ms),
};

pub const ITL: Latency = Latency {
    key: "itl_ms",
    title: "Inter-token Latency (per chunk)",
    name: "ITL",
    samples: Samples::Gaps(|g| g.chunk.clone()),
};

pub const ITL_REASONING: Latency = Latency {
    key: "itl_reasoning_ms",
    title: "ITL of reasoning chunks",
    name: "ITL-reasoning",
    samples: Samples::Gaps(|g| g.reasoning.clone()),
};

pub const ITL_ANSWER: Latency = Latency {
    key: "itl_answer_ms",
    title: "ITL of answer chunks (after reasoning)",
    name: "ITL-answer",
    samples: Samples::Gaps(Gaps::answer),
};

pub const TOKEN_ITL: Latency = Latency {
    key: "token_itl_ms",
    title: "Inter-token Latency (per token)",
    name: "Token ITL",
    samples: Samples::Gaps(|g| g.token.clone()),
};

pub const E2EL: Latency = Latency {
    key: "e2el_ms",
    title: "End-to-end Latency",
    name: "E2EL",
    samples: Samples::Succeeded(RequestRecord::e2el_ms),
};

pub const E2EL_SCHED: Latency = Latency {
    key: "e2el_from_schedule_ms",
    title: "E2EL from schedule",
    name: "E2EL-sched",
    samples: Samples::Succeeded(RequestRecord::e2el_from_schedule_ms),
};

pub const CONNECTION_WAIT: Latency = Latency {
    key: "connection_wait_ms",
    title: "Waits for a connection (requests due with none idle)",
    name: "Conn wait",
    samples: Samples::Every(RequestRecord::connection_wait_ms),
};

pub const DRIFT: Latency = Latency {
    key: "drift_ms",
    title: "Send drift (sent - scheduled)",
    name: "Drift",
    samples: Samples::Every(RequestRecord::drift_ms),
};

/// Where `latency` (one of the consts above) is in [`LATENCIES`].
pub fn position(latency: &Latency) -> usize {
    LATENCIES
        .iter()
        .position(|l| l.key == latency.key)
        .expect("each latency const is in LATENCIES")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_names_are_unique() {
        for (i, a) in LATENCIES.iter().enumerate() {
            for b in &LATENCIES[i + 1..] {
                assert_ne!(a.key, b.key);
                assert_ne!(a.name, b.name);
            }
        }
    }
}
