//! Which Prometheus families of which server mean what: the known families of vLLM, SGLang,
//! llama.cpp's server and TGI mapped to common names, so that a mixed fleet's series line up.
//!
//! A family is matched by its exact name. Several label sets of one family (vLLM's engines
//! under data parallelism, one per model) are summed, or averaged for a ratio.

use std::collections::BTreeMap;

use prom_text_format_parser::{Metric, Scrape, ScrapeParseError, Type, ValueType};

/// How the label sets of one family become one number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    Sum,
    Mean,
}

/// What the summary does with a series over the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A level: mean and maximum over the run.
    Gauge,
    /// Only grows (until the server restarts): its increase over the run.
    Counter,
}

/// One common name and the families that feed it, by server. A family written `A + B` is the
/// sum of both, present when both are.
pub struct Common {
    pub name: &'static str,
    pub kind: Kind,
    pub combine: Combine,
    pub what: &'static str,
    pub families: &'static [(Server, &'static str)],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Vllm,
    Sglang,
    LlamaCpp,
    Tgi,
}

impl Server {
    pub fn name(self) -> &'static str {
        match self {
            Server::Vllm => "vllm",
            Server::Sglang => "sglang",
            Server::LlamaCpp => "llama.cpp",
            Server::Tgi => "tgi",
        }
    }
}

use Server::*;

/// The common names. vLLM's older names (`gpu_cache_usage_perc`, `gpu_prefix_cache_*`, before
/// v0.10) are listed after the current ones; a server exposes one or the other.
pub const COMMON: &[Common] = &[
    Common {
        name: "running",
        kind: Kind::Gauge,
        combine: Combine::Sum,
        what: "requests being generated",
        families: &[
            (Vllm, "vllm:num_requests_running"),
            (Sglang, "sglang:num_running_reqs"),
            (LlamaCpp, "llamacpp:requests_processing"),
            (Tgi, "tgi_batch_current_size"),
        ],
    },
    Common {
        name: "waiting",
        kind: Kind::Gauge,
        combine: Combine::Sum,
        what: "requests queued in the server",
        families: &[
            (Vllm, "vllm:num_requests_waiting"),
            (Sglang, "sglang:num_queue_reqs"),
            (LlamaCpp, "llamacpp:requests_deferred"),
            (Tgi, "tgi_queue_size"),
        ],
    },
    Common {
        name: "kv_cache_usage",
        kind: Kind::Gauge,
        combine: Combine::Mean,
        what: "share of the KV cache in use (0-1)",
        families: &[
            (Vllm, "vllm:kv_cache_usage_perc"),
            (Vllm, "vllm:gpu_cache_usage_perc"),
            (Sglang, "sglang:token_usage"),
            (LlamaCpp, "llamacpp:kv_cache_usage_ratio"),
        ],
    },
    Common {
        name: "prefix_cache_queries",
        kind: Kind::Counter,
        combine: Combine::Sum,
        what: "prompt tokens looked up in the prefix cache",
        families: &[
            (Vllm, "vllm:prefix_cache_queries_total"),
            (Vllm, "vllm:gpu_prefix_cache_queries_total"),
            // Every prompt token is looked up; its hits are `cached_tokens_total`.
            (Sglang, "sglang:prompt_tokens_total"),
            // It counts only the prompt tokens it evaluated; the cached ones come apart.
            (
                LlamaCpp,
                "llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total",
            ),
        ],
    },
    Common {
        name: "prefix_cache_hits",
        kind: Kind::Counter,
        combine: Combine::Sum,
        what: "prompt tokens found in the prefix cache",
        families: &[
            (Vllm, "vllm:prefix_cache_hits_total"),
            (Vllm, "vllm:gpu_prefix_cache_hits_total"),
            (Sglang, "sglang:cached_tokens_total"),
            (LlamaCpp, "llamacpp:prompt_tokens_cached_total"),
        ],
    },
    Common {
        name: "prefix_cache_hit_rate",
        kind: Kind::Gauge,
        combine: Combine::Mean,
        what: "the server's own recent prefix-cache hit rate (0-1)",
        families: &[(Sglang, "sglang:cache_hit_rate")],
    },
    Common {
        name: "preemptions",
        kind: Kind::Counter,
        combine: Combine::Sum,
        what: "requests preempted (KV cache full)",
        families: &[(Vllm, "vllm:num_preemptions_total")],
    },
    Common {
        name: "prompt_tokens",
        kind: Kind::Counter,
        combine: Combine::Sum,
        what: "prompt tokens of the requests, the cached ones included",
        families: &[
            (Vllm, "vllm:prompt_tokens_total"),
            (Sglang, "sglang:prompt_tokens_total"),
            (
                LlamaCpp,
                "llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total",
            ),
        ],
    },
    Common {
        name: "prompt_tokens_computed",
        kind: Kind::Counter,
        combine: Combine::Sum,
        what: "prompt tokens computed: the prefix cache's hits left out",
        // llama.cpp's `prompt_tokens_total` counts only the tokens it evaluated.
        families: &[(LlamaCpp, "llamacpp:prompt_tokens_total")],
    },
    Common {
        name: "generation_tokens",
        kind: Kind::Counter,
        combine: Combine::Sum,
        what: "tokens generated",
        families: &[
            (Vllm, "vllm:generation_tokens_total"),
            (Sglang, "sglang:generation_tokens_total"),
            (LlamaCpp, "llamacpp:tokens_predicted_total"),
        ],
    },
];

/// The common definition of a name, if it is one.
pub fn common(name: &str) -> Option<&'static Common> {
    COMMON.iter().find(|c| c.name == name)
}

/// What one scrape gave: the common names found, the `--metric` series, and which server
/// the families say it is.
#[derive(Debug, Default, PartialEq)]
pub struct Selected {
    pub server: Option<&'static str>,
    pub values: BTreeMap<String, f64>,
    /// The `extra` series that are counters (their increase is what the run did).
    pub counters: Vec<String>,
}

/// Parses an exposition and picks the common names and the `extra` series. A line the parser
/// cannot read is an error naming it: a partial scrape would look like a quiet server.
pub fn select(text: &str, extra: &[String]) -> Result<Selected, String> {
    let scrape = Scrape::parse(text).map_err(|e| match e {
        ScrapeParseError::Parse(m) => format!("unreadable exposition: {m}"),
        ScrapeParseError::Collect(errors) => {
            let first = errors.first().map_or(String::new(), |e| {
                format!(": line {}: {}", e.line_no.start + 1, e.error)
            });
            format!("unreadable exposition ({} families{first})", errors.len())
        }
    })?;
    let mut out = Selected::default();
    for c in COMMON {
        for &(server, family) in c.families {
            let parts: Option<Vec<f64>> = family
                .split(" + ")
                .map(|f| value_of(&scrape, f, c.combine))
                .collect();
            if let Some(v) = parts.map(|p| p.iter().sum()) {
                out.values.insert(c.name.to_string(), v);
                out.server.get_or_insert(server.name());
                break;
            }
        }
    }
    for name in extra {
        if let Some(v) = value_of(&scrape, name, Combine::Sum) {
            out.values.insert(name.clone(), v);
            if is_counter(&scrape, name) {
                out.counters.push(name.clone());
            }
        }
    }
    Ok(out)
}

/// The family's value over its label sets. A histogram or summary gives its count: `NAME_sum`
/// and `NAME_count` may also be named as series of their own.
fn value_of(scrape: &Scrape, name: &str, combine: Combine) -> Option<f64> {
    let (family, part) = find(scrape, name)?;
    let values: Vec<f64> = family
        .samples
        .iter()
        .filter(|s| s.value.value_type == part)
        .filter_map(|s| s.value.value.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .collect();
    if values.is_empty() {
        return None;
    }
    let sum: f64 = values.iter().sum();
    Some(match combine {
        Combine::Sum => sum,
        Combine::Mean => sum / values.len() as f64,
    })
}

/// Whether a series is a counter: its family says so, or (untyped) its name ends in `_total`.
fn is_counter(scrape: &Scrape, name: &str) -> bool {
    match find(scrape, name) {
        Some((m, ValueType::Sample)) => match m.kind {
            Type::Counter => true,
            Type::Untyped => name.ends_with("_total"),
            _ => false,
        },
        _ => false,
    }
}

/// The family a series name belongs to, and which of its samples the name means. A counter's
/// family may be named with or without `_total` (the text format and OpenMetrics differ).
fn find<'a>(scrape: &'a Scrape, name: &str) -> Option<(&'a Metric, ValueType)> {
    let by_name = |n: &str| scrape.metrics.iter().find(|m| m.name == n);
    if let Some(m) = by_name(name) {
        let part = match m.kind {
            Type::Histogram | Type::Summary => ValueType::Count,
            _ => ValueType::Sample,
        };
        return Some((m, part));
    }
    if let Some(m) = name
        .strip_suffix("_total")
        .and_then(by_name)
        .filter(|m| m.kind == Type::Counter)
    {
        return Some((m, ValueType::Sample));
    }
    for (suffix, part) in [("_sum", ValueType::Sum), ("_count", ValueType::Count)] {
        if let Some(m) = name.strip_suffix(suffix).and_then(by_name) {
            return Some((m, part));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_sets_are_summed_and_ratios_averaged() {
        let text = "# TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_running{engine=\"0\"} 3\n\
            vllm:num_requests_running{engine=\"1\"} 4\n\
            # TYPE vllm:kv_cache_usage_perc gauge\n\
            vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n\
            vllm:kv_cache_usage_perc{engine=\"1\"} 0.25\n\
            # TYPE vllm:e2e_request_latency_seconds histogram\n\
            vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 9\n\
            vllm:e2e_request_latency_seconds_sum 4.5\n\
            vllm:e2e_request_latency_seconds_count 9\n";
        let extra = [
            "vllm:e2e_request_latency_seconds".to_string(),
            "vllm:e2e_request_latency_seconds_sum".to_string(),
            "absent".to_string(),
        ];
        let s = select(text, &extra).unwrap();
        assert_eq!(s.server, Some("vllm"));
        assert_eq!(s.values["running"], 7.0);
        assert_eq!(s.values["kv_cache_usage"], 0.375);
        assert_eq!(s.values["vllm:e2e_request_latency_seconds"], 9.0);
        assert_eq!(s.values["vllm:e2e_request_latency_seconds_sum"], 4.5);
        assert!(!s.values.contains_key("absent"));
    }

    #[test]
    fn a_broken_exposition_is_an_error_not_an_empty_scrape() {
        assert!(select("vllm:num_requests_running{engine=\"0\" 3\n", &[]).is_err());
    }
}
