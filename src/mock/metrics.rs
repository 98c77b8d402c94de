//! The mock's `/metrics`: its queue and prefix cache in vLLM's family names, so that a replay
//! with `--scrape-server` against the mock runs the whole vLLM path.

use std::fmt::Write;

use super::MockStats;

/// What the exposition reports.
pub struct Levels<'a> {
    pub model: &'a str,
    pub running: usize,
    pub waiting: usize,
    pub stats: &'a MockStats,
}

/// The Prometheus text format (0.0.4) of the mock's state.
pub fn exposition(l: &Levels) -> String {
    let label = format!("{{model_name=\"{}\"}}", escape(l.model));
    let mut out = String::new();
    let families: [(&str, &str, &str, f64); 5] = [
        (
            "vllm:num_requests_running",
            "gauge",
            "Requests generating (at most --max-running).",
            l.running as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Requests waiting for a place under --max-running.",
            l.waiting as f64,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prompt words looked up in the --cache-blocks prefix cache.",
            l.stats.prefix_queries as f64,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prompt words found in the --cache-blocks prefix cache.",
            l.stats.prefix_hits as f64,
        ),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Tokens generated.",
            l.stats.tokens as f64,
        ),
    ];
    for (name, kind, help, value) in families {
        writeln!(out, "# HELP {name} {help}").ok();
        writeln!(out, "# TYPE {name} {kind}").ok();
        writeln!(out, "{name}{label} {value:?}").ok();
    }
    out
}

/// A label value as the text format writes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_metrics::families::select;

    #[test]
    fn the_mock_exposition_reads_back_in_common_names() {
        let stats = MockStats {
            prefix_queries: 1000,
            prefix_hits: 250,
            tokens: 77,
            ..MockStats::default()
        };
        let text = exposition(&Levels {
            model: "m \"q\"",
            running: 3,
            waiting: 5,
            stats: &stats,
        });
        let s = select(&text, &[]).unwrap();
        assert_eq!(s.server, Some("vllm"));
        let v = |k: &str| s.values[k];
        assert_eq!(
            [
                v("running"),
                v("waiting"),
                v("prefix_cache_queries"),
                v("prefix_cache_hits")
            ],
            [3.0, 5.0, 1000.0, 250.0]
        );
        assert_eq!(v("generation_tokens"), 77.0);
    }
}
