//! The option groups every plan is made of, each checked with the option's name in its
//! error: the mock's configuration, conversations, the load mode, scraping, and how results
//! are rendered.

use crate::cli;
use crate::error::{Error, Result};
use crate::http::endpoint::Endpoint;
use std::path::PathBuf;

use crate::report::RenderOptions;
use crate::server_timing::{self, Source, SOURCES};
use crate::session::{SessionMode, SessionPlan};

/// `mock`'s configuration; loads the tokenizer when one is given.
pub fn mock_config(a: &cli::MockArgs) -> Result<crate::mock::MockConfig> {
    use crate::mock::PromptCounting;
    let counting = match &a.tokenizer {
        None => PromptCounting::Approximate,
        Some(path) => {
            let (tokenizer, file) = crate::prompt::load_tokenizer(path)?;
            let counter =
                crate::prompt::PromptCounter::new(tokenizer, &file, a.tokenizer_config.as_deref())?;
            PromptCounting::Tokenizer(std::sync::Arc::new(counter))
        }
    };
    let (ttft_ns, itl_ns) = (
        crate::sys::clock::ms_to_ns(a.ttft_ms),
        crate::sys::clock::ms_to_ns(a.itl_ms),
    );
    let replay_stream = match &a.replay_stream {
        Some(path) => Some(std::sync::Arc::new(crate::mock::StreamFixture::load(
            path, ttft_ns, itl_ns,
        )?)),
        None => None,
    };
    Ok(crate::mock::MockConfig {
        ttft_ns,
        itl_ns,
        replay_stream,
        tokens_per_chunk: a.tokens_per_chunk.max(1),
        reasoning_tokens: a.reasoning_tokens,
        model: a.model.clone(),
        counting,
        faults: crate::mock::FaultPlan::parse(&a.faults, a.seed).map_err(Error::Usage)?,
        fault_log: a.fault_log.clone(),
        arrival_log: a.arrival_log.clone(),
        timing_log: a.timing_log.clone(),
        http_workers: a.http_workers,
        keep_bodies: 0,
        count_threads: a.count_threads.clamp(1, 256),
        prefix_cache: a.cache_blocks.map(|n| (n, a.cache_block_size.max(1))),
        max_running: a.max_running.map(|n| n.max(1)),
        graceful_shutdown_after: a.graceful_shutdown_after,
        prefill_ns_per_token: crate::sys::clock::ms_to_ns(a.prefill_us_per_token / 1000.0),
        keep_alive_ns: crate::sys::clock::ms_to_ns(a.keep_alive_s * 1000.0),
        date_offset_ms: a.date_offset_ms,
        tls: match (&a.tls_cert, &a.tls_key) {
            (Some(cert), Some(key)) => Some(crate::transport::tls::server_config(cert, key)?),
            _ => None,
        },
    })
}

/// The conversation options (`--carry-forward`, `--require-cache-report`,
/// `--max-active-sessions`) under `--session-mode`.
pub(super) fn session_plan(
    a: &cli::sessions::SessionArgs,
    mode: SessionMode,
) -> Result<SessionPlan> {
    let max_active = match (a.max_active_sessions, mode) {
        (Some(0), _) => {
            return Err(Error::Usage(
                "--max-active-sessions 0 would start no session".into(),
            ))
        }
        (Some(_), SessionMode::Timestamp) => {
            return Err(Error::Usage(
                "--max-active-sessions caps conversations that run turn after turn: it needs \
                 --session-mode after-parent"
                    .into(),
            ))
        }
        (n, _) => n,
    };
    if a.measure_from == crate::session::MeasureFrom::Mid && mode == SessionMode::Timestamp {
        return Err(Error::Usage(
            "--measure-from mid draws an instant inside each conversation, whose turns run one \
             after another: it needs --session-mode after-parent"
                .into(),
        ));
    }
    Ok(SessionPlan {
        carry_forward: match mode {
            SessionMode::AfterParent => a.carry_forward,
            SessionMode::Timestamp => crate::session::CarryForward::Off,
        },
        require_cache_report: a.require_cache_report,
        max_active,
        measure_from: a.measure_from,
    })
}

/// The load mode from `--rate`/`--arrival`/`--burstiness`, `--concurrency`,
/// `--max-idle-gap` and `--start-offset` (`--seed` draws the arrivals).
pub(super) fn load_plan(a: &cli::ReplayArgs) -> Result<crate::load::LoadPlan> {
    use crate::load::{Arrival, LoadPlan, Pace};
    let secs = |name: &str, v: Option<f64>| -> Result<Option<f64>> {
        match v {
            Some(x) if !(x >= 0.0 && x.is_finite()) => Err(Error::Usage(format!(
                "{name} {x}: give a number of seconds, 0 or more"
            ))),
            v => Ok(v),
        }
    };
    let pace = match (a.rate, a.concurrency) {
        (Some(r), _) if !(r > 0.0 && r.is_finite()) => {
            let hint = match r.is_infinite() {
                true => {
                    " (vLLM's `--request-rate inf` sends every request at once: here \
                     --time-scale 1e6 sends the trace a million times faster, and \
                     --concurrency N keeps N requests in flight)"
                }
                false => "",
            };
            return Err(Error::Usage(format!(
                "--rate {r}: give a finite number of requests per second above 0{hint}"
            )));
        }
        (Some(per_s), _) => {
            let arrival = a.arrival.unwrap_or_default();
            let burstiness = match (arrival, a.burstiness) {
                (Arrival::Gamma, Some(k)) if k > 0.0 && k.is_finite() => k,
                (Arrival::Gamma, Some(k)) => {
                    return Err(Error::Usage(format!(
                        "--burstiness {k}: give a shape above 0"
                    )))
                }
                (Arrival::Gamma, None) => 1.0,
                (_, Some(_)) => {
                    return Err(Error::Usage(
                        "--burstiness shapes gamma gaps: add --arrival gamma".into(),
                    ))
                }
                (_, None) => 1.0,
            };
            Pace::Rate {
                per_s,
                arrival,
                burstiness,
            }
        }
        (None, Some(0)) => return Err(Error::Usage("--concurrency must be at least 1".into())),
        (None, Some(concurrency)) => Pace::Closed { concurrency },
        (None, None) => Pace::Trace,
    };
    Ok(LoadPlan {
        pace,
        seed: a.prompt.seed,
        max_idle_gap_ms: secs("--max-idle-gap", a.max_idle_gap)?.map(|s| s * 1000.0),
        start_offset_ms: secs("--start-offset", a.start_offset)?.unwrap_or(0.0) * 1000.0,
    })
}

/// What is scraped during a run, and how often.
#[derive(Clone, Debug, PartialEq)]
pub struct ScrapePlan {
    /// `--server-metrics` URLs, parsed (the path is the metrics path).
    pub urls: Vec<Endpoint>,
    /// `--scrape-server`: each endpoint's `/metrics` too.
    pub endpoints: bool,
    pub interval_s: f64,
    /// `--metric` series.
    pub extra: Vec<String>,
}

pub(super) fn scrape_plan(a: &cli::ScrapeArgs) -> Result<Option<ScrapePlan>> {
    let interval_s = a.scrape_interval;
    if !(interval_s >= 0.05 && interval_s.is_finite()) {
        return Err(Error::Usage(format!(
            "--scrape-interval {interval_s}: give seconds, 0.05 or more"
        )));
    }
    if a.server_metrics.is_empty() && !a.scrape_server {
        if !a.metric.is_empty() {
            return Err(Error::Usage(
                "--metric names a series to scrape: add --scrape-server or --server-metrics URL"
                    .into(),
            ));
        }
        return Ok(None);
    }
    let urls = a
        .server_metrics
        .iter()
        .map(|u| Endpoint::parse(u).map_err(|e| Error::Usage(format!("--server-metrics: {e}"))))
        .collect::<Result<_>>()?;
    Ok(Some(ScrapePlan {
        urls,
        endpoints: a.scrape_server,
        interval_s,
        extra: a.metric.clone(),
    }))
}

/// `report --server-timings SOURCE:FILE`, each: a known source and a file.
pub fn server_timings(specs: &[String]) -> Result<Vec<(&'static Source, PathBuf)>> {
    specs
        .iter()
        .map(|spec| {
            let known = || {
                let names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
                names.join(", ")
            };
            let (name, file) = spec.split_once(':').ok_or_else(|| {
                Error::Usage(format!(
                    "--server-timings {spec}: give SOURCE:FILE (sources: {})",
                    known()
                ))
            })?;
            let source = server_timing::source(name).ok_or_else(|| {
                Error::Usage(format!(
                    "--server-timings {spec}: no source {name:?} (sources: {})",
                    known()
                ))
            })?;
            Ok((source, PathBuf::from(file)))
        })
        .collect()
}

/// `--goodput` and `--percentiles`, checked.
pub fn render_options(a: &cli::ResultArgs) -> Result<RenderOptions> {
    if let Some(p) = a.percentiles.iter().find(|p| !(0.0..=100.0).contains(*p)) {
        return Err(Error::Usage(format!(
            "--percentiles: {p} is not between 0 and 100"
        )));
    }
    Ok(RenderOptions {
        slo: crate::stats::Slo::parse(&a.goodput).map_err(Error::Usage)?,
        percentiles: a.percentiles.clone(),
        bounds: {
            crate::stats::Bounds::parse(&a.bound).map_err(Error::Usage)?;
            a.bound.clone()
        },
    })
}
