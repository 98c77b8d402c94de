//! The summary's headline figures, listed once, and the text table they make: the table,
//! report.html, results.xlsx and the comparison of two runs all read this list, so a figure added here shows everywhere
//! under one name. (summary.json keeps the shape CONTRACT §6 fixes; its fields carry the same
//! values.)

use crate::stats::{format_number, SessionSummary, Summary, PRIMED};

impl Summary {
    /// The vLLM-style table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: String| match v.is_empty() {
            true => s.push_str(&format!("{k}\n")),
            false => s.push_str(&format!("{k:<40}{v:<10}\n")),
        };
        for f in FIGURES {
            let Some(v) = f.format(self) else { continue };
            line(&format!("{}:", f.label), v);
            if f.key == "requests_failed" {
                for (kind, n) in &self.by_error_kind {
                    line(&format!("  {kind}:"), n.to_string());
                    if let Some(m) = self.first_error_by_kind.get(kind) {
                        line(&format!("    first: {m}"), String::new());
                    }
                }
            }
        }
        if self.input_length_match.any() {
            line(
                "Input length exact (server usage):",
                self.input_length_match.describe(),
            );
        }
        if self.output_length_match.any() {
            line("Output length exact:", self.output_length_match.describe());
        }
        if let Some(q) = &self.queue {
            line("Queue wait p50 / p99 (ms):", q.p50_p99());
        }
        for (label, value) in self.reasoning.lines() {
            line(&label, value);
        }
        for t in self.server.iter().flatten() {
            line(&format!("Server {}:", t.target), t.describe());
        }
        for (label, value) in self.sessions.iter().flat_map(SessionSummary::lines) {
            line(&label, value);
        }
        if self.primed {
            line("Primed:", PRIMED.to_string());
        }
        if let Some(detail) = self.ended.as_ref().and_then(|e| e["detail"].as_str()) {
            line("Ended:", detail.to_string());
        }
        let mut out = String::new();
        for line in self.verdict.iter().flat_map(|v| v.lines()) {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str(&format!("{:=^50}\n", " Serving Benchmark Result "));
        out.push_str(&s);
        for (l, d) in self.metrics() {
            let Some(d) = d else { continue };
            let (title, name) = (l.title, l.name);
            out.push_str(&format!("{:-^50}\n", title));
            let mut row = |k: String, v: String| out.push_str(&format!("{k:<40}{v:<10}\n"));
            let ms = |v: f64| format!("{v:.2}");
            row(format!("Mean {name} (ms):"), ms(d.mean));
            row(format!("Median {name} (ms):"), ms(d.median));
            row(format!("Std {name} (ms):"), ms(d.std));
            for &(p, _) in &d.percentiles {
                row(format!("P{} {name} (ms):", format_number(p)), d.cell(p, 2));
            }
            row(format!("Max {name} (ms):"), ms(d.max));
        }
        if self.per_endpoint.len() > 1 {
            out.push_str(&format!("{:-^50}\n", "Per endpoint"));
            for e in &self.per_endpoint {
                let [ttft50, ttft99, e2el50, e2el99] = e.latency_cells(2);
                out.push_str(&format!(
                    "{}\n  requests {} (ok {}, failed {}), {:.2} output tok/s\n  \
                     TTFT p50/p99 (ms): {} / {}  E2EL p50/p99 (ms): {} / {}\n",
                    e.endpoint,
                    e.requests,
                    e.ok,
                    e.failed,
                    e.output_throughput,
                    ttft50,
                    ttft99,
                    e2el50,
                    e2el99,
                ));
            }
        }
        out.push_str(&"=".repeat(50));
        out.push('\n');
        out
    }
}

/// One headline figure.
pub struct Figure {
    /// Its name in results.xlsx and in a comparison (snake case, as summary.json's field of
    /// the same meaning).
    pub key: &'static str,
    /// Its label in the text table (vLLM's, where vLLM has one) and report.html.
    pub label: &'static str,
    pub decimals: usize,
    /// None: not measured in this run (no SLOs, nothing scraped...), and left out.
    pub value: fn(&Summary) -> Option<f64>,
}

impl Figure {
    pub fn format(&self, s: &Summary) -> Option<String> {
        (self.value)(s).map(|v| format!("{v:.*}", self.decimals))
    }
}

/// A series over every scraped target: the sum of their means (the fleet's), and the highest
/// maximum of any one.
fn server(s: &Summary, name: &str) -> Option<(f64, f64)> {
    let series: Vec<_> = s
        .server
        .iter()
        .flatten()
        .filter_map(|t| t.series(name))
        .collect();
    (!series.is_empty()).then(|| {
        (
            series.iter().map(|x| x.mean).sum(),
            series.iter().map(|x| x.max).fold(f64::MIN, f64::max),
        )
    })
}

fn pct(v: Option<f64>) -> Option<f64> {
    v.map(|v| v * 100.0)
}

/// In the order the table prints them.
pub const FIGURES: &[Figure] = &[
    Figure {
        key: "requests_ok",
        label: "Successful requests",
        decimals: 0,
        value: |s| Some(s.ok as f64),
    },
    Figure {
        key: "requests_failed",
        label: "Failed requests",
        decimals: 0,
        value: |s| Some(s.failed as f64),
    },
    Figure {
        key: "requests_resent",
        label: "Resent on a fresh connection",
        decimals: 0,
        value: |s| (s.resent > 0).then_some(s.resent as f64),
    },
    Figure {
        key: "duration_s",
        label: "Benchmark duration (s)",
        decimals: 2,
        value: |s| Some(s.duration_s),
    },
    Figure {
        key: "input_tokens",
        label: "Total input tokens",
        decimals: 0,
        value: |s| Some(s.input_tokens as f64),
    },
    Figure {
        key: "output_tokens",
        label: "Total generated tokens",
        decimals: 0,
        value: |s| Some(s.output_tokens as f64),
    },
    Figure {
        key: "request_throughput",
        label: "Request throughput (req/s)",
        decimals: 2,
        value: |s| Some(s.request_throughput),
    },
    Figure {
        key: "output_throughput",
        label: "Output token throughput (tok/s)",
        decimals: 2,
        value: |s| Some(s.output_throughput),
    },
    Figure {
        key: "total_token_throughput",
        label: "Total Token throughput (tok/s)",
        decimals: 2,
        value: |s| Some(s.total_token_throughput),
    },
    Figure {
        key: "max_output_tokens_per_s",
        label: "Peak output token throughput (tok/s)",
        decimals: 2,
        value: |s| Some(s.max_output_tokens_per_s),
    },
    Figure {
        key: "goodput",
        label: "Request goodput (req/s)",
        decimals: 2,
        value: |s| s.goodput,
    },
    Figure {
        key: "late_sends",
        label: "Late sends (drift > 1 ms)",
        decimals: 0,
        value: |s| Some(s.late_sends as f64),
    },
    Figure {
        key: "warmup_requests",
        label: "Warmup requests (not counted)",
        decimals: 0,
        value: |s| (s.warmup_requests > 0).then_some(s.warmup_requests as f64),
    },
    Figure {
        key: "prefix_cache_observed_pct",
        label: "Prefix-cache hits, observed (%)",
        decimals: 2,
        value: |s| pct(s.observed_prefix_share().map(|o| o.0)),
    },
    Figure {
        key: "prefix_cache_expected_pct",
        label: "Prefix-cache hits, expected (%)",
        decimals: 2,
        value: |s| pct(s.prefix.expected_share()),
    },
    Figure {
        key: "prefix_cache_observed_block_pct",
        label: "Prefix-cache block hits, observed (%)",
        decimals: 2,
        value: |s| pct(s.prefix.block_shares().0),
    },
    Figure {
        key: "prefix_cache_expected_block_pct",
        label: "Prefix-cache block hits, expected (%)",
        decimals: 2,
        value: |s| pct(s.prefix.block_shares().1),
    },
    Figure {
        key: "server_running_mean",
        label: "Server running requests, mean (all)",
        decimals: 1,
        value: |s| server(s, "running").map(|v| v.0),
    },
    Figure {
        key: "server_waiting_mean",
        label: "Server queue, mean (all targets)",
        decimals: 1,
        value: |s| server(s, "waiting").map(|v| v.0),
    },
    Figure {
        key: "server_waiting_max",
        label: "Server queue, max (any target)",
        decimals: 0,
        value: |s| server(s, "waiting").map(|v| v.1),
    },
    Figure {
        key: "server_kv_cache_usage_max_pct",
        label: "Server KV-cache use, max (%)",
        decimals: 1,
        // Each target's own maximum; the highest of them (a share does not add up).
        value: |s| {
            s.server
                .iter()
                .flatten()
                .filter_map(|t| t.series("kv_cache_usage"))
                .map(|x| x.max * 100.0)
                .reduce(f64::max)
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_absent_figures_are_left_out() {
        let mut keys: Vec<&str> = FIGURES.iter().map(|f| f.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), FIGURES.len());
        let s = crate::stats::SummaryBuilder::new(None).finish(
            &crate::stats::Gaps::default(),
            &crate::stats::Percentiles::default(),
        );
        let shown: Vec<&str> = FIGURES
            .iter()
            .filter(|f| f.format(&s).is_some())
            .map(|f| f.key)
            .collect();
        assert!(shown.contains(&"requests_ok") && !shown.contains(&"goodput"));
        assert!(!shown
            .iter()
            .any(|k| k.starts_with("server_") || k.starts_with("prefix")));
    }
}
