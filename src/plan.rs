//! Validated, plain values for the commands (ripgrep's split: parsed arguments -> a checked
//! plan -> the library). `cli` parses; this module turns its structs into plans and refuses
//! every bad value with the option's name; the commands take plans and never a clap type, so
//! calibrate (and tests) build plans directly.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::api::Api;
use crate::cli;
use crate::error::{Error, Result};
use crate::fleet::{EndpointSpec, Route};
pub use crate::prompt::{PromptMode, PromptSource};
pub use crate::report::OutputFormat;
use crate::report::RenderOptions;
use crate::stats::latency::TPOT;
use crate::synthetic::SyntheticSpec;
use crate::trace::{Format, ReadOptions};
use crate::transport::TlsOptions;

mod capture;
pub mod hosts;
mod identity;
mod parts;
mod prompt;
mod sweep;
pub use capture::CapturePlan;
pub use hosts::HostsPlan;
pub use identity::IdentityPlan;
use parts::{load_plan, scrape_plan, session_plan};
pub use parts::{mock_config, render_options, server_timings, ScrapePlan};
pub use prompt::PromptPlan;
pub use sweep::{SweepAxis, SweepPlan};

/// Threads of one kind a run may start: more is a typo, not a plan.
const MAX_THREADS: usize = 256;
/// Most `--loop` passes: 2^32 left a dry run previewing for hours, silently.
const MAX_PASSES: u64 = 1_000_000;

/// `--fresh-prompts`: the prompt seed salted per run (the arrivals keep theirs), so that no
/// block of this run is one a server cached from an earlier run. The salt is the run's start
/// (its `--start-at` when sharded: every shard salts alike), kept in `prompt_salt`.
fn fresh_prompts(
    a: &cli::ReplayArgs,
    mut prompt: PromptPlan,
    hosts: &HostsPlan,
) -> Result<PromptPlan> {
    if !a.fresh_prompts {
        return Ok(prompt);
    }
    let salt = match (hosts.shard.is_some(), hosts.start_at_unix_ns) {
        (_, Some(at)) => at,
        (true, None) => {
            return Err(Error::Usage(
                "--fresh-prompts with --shard needs --start-at: every shard must salt its \
                 prompts alike, or their shared prefixes differ"
                    .into(),
            ))
        }
        (false, None) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    prompt.seed ^= crate::rng::SplitMix64(salt).next_u64();
    prompt.salt = Some(salt);
    Ok(prompt)
}

/// A file to write: its directory must exist (checked before anything is loaded or sent).
fn output_file(flag: &str, path: &std::path::Path) -> Result<PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::Usage(format!(
            "{flag} {}: its directory {} does not exist (create it, or give another path)",
            path.display(),
            dir.display()
        )));
    }
    Ok(path.to_path_buf())
}

/// `--thinking on|off`: `chat_template_kwargs.enable_thinking` in every body, merged into
/// what `--extra-body` holds (whose own `enable_thinking` must agree).
fn thinking_body(
    extra: Option<Map<String, Value>>,
    thinking: crate::prompt::Thinking,
    api: Api,
) -> Result<Option<Map<String, Value>>> {
    let Some(on) = thinking.switch() else {
        return Ok(extra);
    };
    if api != Api::OpenaiChat {
        return Err(Error::Usage(format!(
            "--thinking {thinking} is sent in chat_template_kwargs, which --api {api} does not \
             carry: use --api openai-chat, or --thinking auto"
        )));
    }
    let mut extra = extra.unwrap_or_default();
    let kwargs = extra
        .entry("chat_template_kwargs")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(kwargs) = kwargs else {
        return Err(Error::Usage(
            "--extra-body: chat_template_kwargs must be a JSON object".into(),
        ));
    };
    match kwargs.get("enable_thinking") {
        Some(v) if v != &Value::Bool(on) => {
            return Err(Error::Usage(format!(
                "--thinking {thinking} and --extra-body's enable_thinking {v} disagree"
            )))
        }
        _ => {
            kwargs.insert("enable_thinking".into(), Value::Bool(on));
        }
    }
    Ok(Some(extra))
}

/// Records of `--synthetic` without `--max-requests`.
const DEFAULT_SYNTHETIC_REQUESTS: u64 = 1000;

/// Where the requests go.
#[derive(Clone, Debug)]
pub enum Targets {
    /// The built-in mock, started in-process on a free loopback port.
    Mock {
        ttft_ms: f64,
        itl_ms: f64,
        /// `--mock-cache-blocks`: a prefix cache of this many blocks of the trace's size.
        cache_blocks: Option<usize>,
        /// `--mock-date-offset-ms`: the mock's `Date` header this far off.
        date_offset_ms: i64,
    },
    Servers(Vec<EndpointSpec>),
}

/// One extra request header, checked: its name (saved in run.json) and its whole line (sent,
/// never saved: it may hold a credential).
#[derive(Clone, Debug)]
pub struct Header {
    pub name: String,
    pub line: String,
}

/// Everything a replay needs, checked.
#[derive(Clone, Debug)]
pub struct ReplayPlan {
    /// `--scenario`: what run.json states of the scenario followed (its options are in the
    /// rest of the plan, added before parsing: [`crate::cli::scenario`]).
    pub scenario: Option<Value>,
    pub trace: PathBuf,
    /// `--synthetic`: the generated load and its record count; `trace` is where it is written.
    pub synthetic: Option<(SyntheticSpec, u64)>,
    pub format: Format,
    pub read: ReadOptions,
    /// Refuse timestamps that go backwards.
    pub strict: bool,
    pub targets: Targets,
    /// The dialect of endpoints that say none (and of the mock).
    pub api: Api,
    pub route: Route,
    pub model: Option<String>,
    pub stream: bool,
    pub exact_output: bool,
    pub extra_body: Option<Map<String, Value>>,
    pub headers: Vec<Header>,
    pub api_key_env: String,
    pub tls: TlsOptions,
    pub prompt: PromptPlan,
    pub time_scale: f64,
    /// `--duration`: trace seconds.
    pub duration_s: Option<f64>,
    /// `--time-in-secs`: wall seconds after the start.
    pub wall_limit_s: Option<f64>,
    pub dry_run: bool,
    /// `--null-sink` (hidden): the producers' benchmark; senders take requests and send none.
    pub null_sink: bool,
    pub num_producer: Option<usize>,
    pub num_sender: usize,
    pub channel_capacity: usize,
    pub channel_mb: usize,
    pub pin_cores: String,
    pub connections: usize,
    pub request_timeout_s: f64,
    pub first_token_timeout_s: Option<f64>,
    /// A started response silent this long fails.
    pub stall_timeout_s: f64,
    pub session_mode: crate::session::SessionMode,
    /// `--carry-forward`, `--max-active-sessions`, `--require-cache-report`.
    pub sessions: crate::session::SessionPlan,
    /// What each request says of itself on the wire.
    pub identity: IdentityPlan,
    /// `--think-time`, wall seconds.
    pub think_time_s: Option<f64>,
    /// `--rate`, `--concurrency`, `--max-idle-gap`, `--start-offset`.
    pub load: crate::load::LoadPlan,
    pub warmup_requests: u64,
    /// `--expected-cache-blocks`: the predicted hits assume an LRU of this many blocks.
    pub expected_cache_blocks: Option<usize>,
    /// `--server-block-size`: the expected hits are rounded down to whole blocks of it.
    pub server_block_size: u64,
    /// Not an option: a test's way to starve the producers (each request takes this much
    /// longer to build), for the verdict's "producers behind".
    pub slow_build: Option<std::time::Duration>,
    /// `--server-metrics`, `--scrape-server`: None when nothing is scraped.
    pub scrape: Option<ScrapePlan>,
    /// `--loop`: times the trace is replayed.
    pub passes: u64,
    /// `--prime`: one unmeasured pass of the same schedule first.
    pub prime: bool,
    /// `--loop-prompts`: each pass after the first its own prompts, or the first's again.
    pub loop_prompts: crate::pipeline::LoopPrompts,
    /// `--prompt-source dataset`: the dataset file.
    pub prompt_dataset: Option<PathBuf>,
    /// Stop early past this share of failed requests.
    pub max_error_rate: Option<f64>,
    pub drain_timeout_s: f64,
    pub spin_us: u64,
    pub realtime: bool,
    pub read_coalesce_us: u64,
    pub output: Option<PathBuf>,
    pub output_path: Option<PathBuf>,
    pub record_format: crate::record::RecordFormat,
    pub force: bool,
    pub save_prompts: bool,
    pub record_itl: bool,
    pub render: RenderOptions,
    pub output_format: OutputFormat,
    pub quiet: bool,
    /// `--shard`, `--start-at`, `--ntp`: one host of a run across many.
    pub hosts: HostsPlan,
}

pub(crate) fn positive(name: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(Error::Usage(format!(
            "{name} must be a positive number, got {v}"
        )))
    }
}

/// A positive number no larger than `max` (a bound that keeps nanosecond arithmetic exact
/// and the plan a plan: `--time-scale 1e-300` once overflowed the schedule).
fn bounded(name: &str, v: f64, max: f64) -> Result<f64> {
    let v = positive(name, v)?;
    if v > max {
        return Err(Error::Usage(format!(
            "{name} must be at most {max}, got {v}"
        )));
    }
    Ok(v)
}

/// A time in seconds: a year at most.
fn seconds(name: &str, v: f64) -> Result<f64> {
    bounded(name, v, MAX_SECONDS)
}

const MAX_SECONDS: f64 = 365.0 * 86400.0;
/// Microsecond options (spin, read coalescing): a second at most.
const MAX_US: u64 = 1_000_000;

fn micros(name: &str, v: u64) -> Result<u64> {
    if v > MAX_US {
        return Err(Error::Usage(format!(
            "{name} must be at most {MAX_US} µs, got {v}"
        )));
    }
    Ok(v)
}

fn threads(name: &str, n: usize) -> Result<usize> {
    if (1..=MAX_THREADS).contains(&n) {
        Ok(n)
    } else {
        Err(Error::Usage(format!(
            "{name} must be between 1 and {MAX_THREADS}, got {n}"
        )))
    }
}

/// `--extra-body`, a JSON object, with `--thinking`'s switch for `api` merged in.
fn extra_body(a: &cli::ReplayArgs, api: Api) -> Result<Option<Map<String, Value>>> {
    let extra = match &a.extra_body {
        None => None,
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Some(m),
            _ => {
                return Err(Error::Usage(format!(
                    "--extra-body {text:?}: expected a JSON object"
                )))
            }
        },
    };
    thinking_body(extra, a.prompt.thinking, api)
}

/// Validates `Name: value` and returns it as a header.
fn parse_header(h: &str) -> Result<Header> {
    let bad = || Error::Usage(format!("-H {h:?}: expected 'Name: value'"));
    let (name, value) = h.split_once(':').ok_or_else(bad)?;
    let name = name.trim();
    if name.is_empty()
        || name.bytes().any(|b| !b.is_ascii_graphic())
        || value.contains(['\r', '\n'])
    {
        return Err(bad());
    }
    // The request's framing is the tool's own: a second Content-Length or Host would make
    // the server read another request than the one measured.
    const FRAMING: [&str; 4] = ["content-length", "transfer-encoding", "host", "connection"];
    if FRAMING.iter().any(|f| name.eq_ignore_ascii_case(f)) {
        return Err(Error::Usage(format!(
            "-H {name}: llmreplay frames each request itself (Content-Length, \
             Transfer-Encoding, Host and Connection are its own); drop this header"
        )));
    }
    crate::secrets::register(value);
    Ok(Header {
        name: name.to_string(),
        line: format!("{name}: {}\r\n", value.trim()),
    })
}

impl ReplayPlan {
    pub fn from_args(a: &cli::ReplayArgs) -> Result<ReplayPlan> {
        let api = a.api.unwrap_or(Api::OpenaiChat);
        let targets = if a.mock {
            if a.mock_cache_blocks == Some(0) {
                return Err(Error::Usage(
                    "--mock-cache-blocks must be at least 1 (leave it out for no cache)".into(),
                ));
            }
            if a.sessions.require_cache_report && a.mock_cache_blocks.is_none() {
                return Err(Error::Usage(
                    "--require-cache-report with --mock: the in-process mock has no prefix \
                     cache unless --mock-cache-blocks N gives it one (e.g. 100000)"
                        .into(),
                ));
            }
            Targets::Mock {
                ttft_ms: a.mock_ttft_ms,
                itl_ms: a.mock_itl_ms,
                cache_blocks: a.mock_cache_blocks,
                date_offset_ms: a.mock_date_offset_ms,
            }
        } else if a.endpoints.is_empty() {
            return Err(Error::Usage(
                "give --endpoint URL (repeatable), or --mock to use the built-in mock server"
                    .into(),
            ));
        } else {
            Targets::Servers(
                a.endpoints
                    .iter()
                    .map(|text| EndpointSpec::parse(text, a.api, api).map_err(Error::from))
                    .collect::<Result<_>>()?,
            )
        };
        let extra_body = extra_body(a, api)?;
        if !(a.drain_timeout.is_finite() && a.drain_timeout >= 0.0) {
            return Err(Error::Usage(format!(
                "--drain-timeout must be zero or more seconds, got {}",
                a.drain_timeout
            )));
        }
        if a.channel_capacity == 0 {
            return Err(Error::Usage("--channel-capacity must be at least 1".into()));
        }
        if a.channel_mb == 0 {
            return Err(Error::Usage(
                "--channel-mb 0 would hold no prepared request between producers and senders: \
                 give 1 MiB or more (the default, 256, is about 3 s of lead at 1000 req/s)"
                    .into(),
            ));
        }
        let load = load_plan(a)?;
        let synthetic = match &a.synthetic {
            None => None,
            Some(spec) => {
                let spec = SyntheticSpec::parse(spec).map_err(Error::Usage)?;
                if load.pace == crate::load::Pace::Trace {
                    return Err(Error::Usage(
                        "--synthetic has no timestamps: give --rate R or --concurrency C".into(),
                    ));
                }
                Some((spec, a.max_requests.unwrap_or(DEFAULT_SYNTHETIC_REQUESTS)))
            }
        };
        let scrape = scrape_plan(&a.scrape)?;
        let hosts = hosts::hosts_plan(
            &a.hosts,
            &hosts::Context {
                pace: load.pace,
                max_error_rate: a.max_error_rate.is_some(),
                route: a.route,
                endpoints: match &targets {
                    Targets::Mock { .. } => 1,
                    Targets::Servers(s) => s.len(),
                },
                scrapes: scrape.is_some(),
            },
        )?;
        let scrape = scrape.filter(|_| !hosts.scrape_left_to_shard0);
        let trace = match (&a.trace, &synthetic) {
            (Some(t), _) => t.clone(),
            (None, _) => std::env::temp_dir().join(format!(
                "llmreplay-synthetic-{}-{}.jsonl",
                std::process::id(),
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            )),
        };
        let scenario = a
            .scenario
            .as_deref()
            .map(|n| cli::scenario::Scenario::named(n).map(|s| s.stamp()))
            .transpose()
            .map_err(Error::Usage)?;
        Ok(ReplayPlan {
            scenario,
            trace,
            synthetic,
            // Synthetic load is written as a Mooncake trace.
            format: a.synthetic.as_ref().map_or(a.format, |_| Format::Mooncake),
            read: ReadOptions {
                skip_invalid: a.input.skip_invalid,
                max_records: match a.max_requests {
                    Some(0) => return Err(Error::Usage("--max-requests 0 sends nothing".into())),
                    n => n,
                },
            },
            strict: a.input.strict,
            targets,
            api,
            route: a.route,
            model: a.model.clone(),
            stream: !a.no_stream,
            exact_output: !a.no_exact_output,
            extra_body,
            headers: a
                .headers
                .iter()
                .map(|h| parse_header(h))
                .collect::<Result<_>>()?,
            api_key_env: a.api_key_env.clone(),
            tls: TlsOptions {
                ca_cert: a.ca_cert.clone(),
                insecure: a.insecure,
            },
            prompt: fresh_prompts(a, PromptPlan::from_args(&a.prompt)?, &hosts)?,
            time_scale: match a.time_scale {
                t if (1e-6..=1e6).contains(&t) => t,
                t => {
                    return Err(Error::Usage(format!(
                        "--time-scale must be between 1e-6 and 1e6 (a speed-up factor), got {t}"
                    )))
                }
            },
            duration_s: a.duration.map(|d| seconds("--duration", d)).transpose()?,
            wall_limit_s: a
                .time_in_secs
                .map(|d| seconds("--time-in-secs", d))
                .transpose()?,
            dry_run: a.dry_run,
            null_sink: a.null_sink,
            num_producer: a
                .num_producer
                .map(|n| threads("--num-producer", n))
                .transpose()?,
            num_sender: threads("--num-sender", a.num_sender)?,
            channel_capacity: a.channel_capacity,
            channel_mb: a.channel_mb,
            pin_cores: a.pin_cores.clone(),
            connections: a.connections.max(1),
            request_timeout_s: seconds("--request-timeout", a.request_timeout)?,
            first_token_timeout_s: a
                .first_token_timeout
                .map(|t| seconds("--first-token-timeout", t))
                .transpose()?,
            stall_timeout_s: seconds("--stall-timeout", a.stall_timeout)?,
            session_mode: a.session_mode,
            sessions: session_plan(&a.sessions, a.session_mode)?,
            identity: IdentityPlan::from_args(&a.identity)?,
            load,
            warmup_requests: a.warmup_requests,
            expected_cache_blocks: a.expected_cache_blocks,
            server_block_size: a.server_block_size,
            slow_build: None,
            scrape,
            prompt_dataset: match (a.prompt_source, &a.prompt_dataset) {
                (PromptSource::Dataset, Some(p)) => Some(p.clone()),
                (PromptSource::Dataset, None) => {
                    return Err(Error::Usage(
                        "--prompt-source dataset needs --prompt-dataset FILE".into(),
                    ))
                }
                (PromptSource::Synthetic, Some(_)) => {
                    return Err(Error::Usage(
                        "--prompt-dataset is read with --prompt-source dataset".into(),
                    ))
                }
                (PromptSource::Synthetic, None) => None,
            },
            passes: match a.passes {
                0 => return Err(Error::Usage("--loop must be at least 1".into())),
                n if n > MAX_PASSES => {
                    return Err(Error::Usage(format!(
                        "--loop {n}: at most {MAX_PASSES} passes (for a longer soak, loop a \
                         longer trace, or bound the run with --duration)"
                    )))
                }
                n => n,
            },
            prime: a.prime,
            loop_prompts: a.loop_prompts,
            think_time_s: match a.think_time {
                Some(t) if !(t >= 0.0 && t * 1e3 <= crate::trace::MAX_WAIT_MS) => {
                    let t = match t.abs() < 1e9 {
                        true => t.to_string(),
                        false => format!("{t:e}"),
                    };
                    return Err(Error::Usage(format!(
                        "--think-time {t}: give a number of seconds, 0 to {:e}",
                        crate::trace::MAX_WAIT_MS / 1e3
                    )));
                }
                t => t,
            },
            max_error_rate: match a.max_error_rate {
                Some(r) if !(0.0..=1.0).contains(&r) => {
                    return Err(Error::Usage(format!(
                        "--max-error-rate must be a share between 0 and 1, got {r}"
                    )))
                }
                r => r,
            },
            drain_timeout_s: match a.drain_timeout {
                0.0 => 0.0,
                t => seconds("--drain-timeout", t)?,
            },
            spin_us: micros("--spin-us", a.spin_us)?,
            realtime: a.realtime,
            read_coalesce_us: micros("--read-coalesce-us", a.read_coalesce_us)?,
            output: a.output.clone(),
            output_path: match &a.output_path {
                Some(p) => Some(output_file("--output-path", p)?),
                None => None,
            },
            record_format: a.record_format,
            force: a.force,
            save_prompts: a.save_prompts,
            record_itl: a.record_itl,
            render: match render_options(&a.results)? {
                r if a.no_stream && r.slo.as_ref().is_some_and(|s| s.limit(&TPOT).is_some()) => {
                    return Err(Error::Usage(
                        "--goodput tpot:MS needs streaming: with --no-stream the whole answer \
                         comes at once, so no request has a TPOT and every one would count as \
                         meeting it (drop --no-stream, or the tpot SLO)"
                            .into(),
                    ))
                }
                r => r,
            },
            output_format: a.results.output_format,
            quiet: a.quiet,
            hosts,
        })
    }

    /// A plan with every default, for a trace and targets (what calibrate starts from), quiet.
    /// The defaults are the command line's (its clap attributes), so they are written once.
    pub fn new(trace: PathBuf, targets: Targets) -> ReplayPlan {
        use clap::Parser;
        let words = [
            "llmreplay".into(),
            "replay".into(),
            "--mock".into(),
            "--quiet".into(),
            "--trace".into(),
            trace.into_os_string(),
        ];
        let cli::Command::Replay(args) = cli::Cli::parse_from(words).command else {
            unreachable!("the words above are a replay command")
        };
        let plan = ReplayPlan::from_args(&args).expect("the defaults make a valid plan");
        ReplayPlan { targets, ..plan }
    }
}

/// `llmreplay prompts`, checked.
#[derive(Clone, Debug)]
pub struct PromptsPlan {
    pub trace: PathBuf,
    pub format: Format,
    pub api: Api,
    pub max_requests: Option<u64>,
    pub threads: usize,
    pub verify: bool,
    pub verify_every: u64,
    pub output: Option<PathBuf>,
    pub prompt: PromptPlan,
}

impl PromptsPlan {
    pub fn from_args(a: &cli::PromptsArgs) -> Result<PromptsPlan> {
        if a.verify_every == 0 {
            return Err(Error::Usage("--verify-every must be at least 1".into()));
        }
        Ok(PromptsPlan {
            trace: a.trace.clone(),
            format: a.format,
            api: a.api,
            max_requests: a.max_requests,
            threads: threads("--threads", a.threads)?,
            verify: a.verify,
            verify_every: a.verify_every,
            output: a.output.clone(),
            prompt: PromptPlan::from_args(&a.prompt)?,
        })
    }
}

/// `llmreplay calibrate`, checked.
#[derive(Clone, Debug)]
pub struct CalibratePlan {
    pub rates: Vec<f64>,
    pub seconds: f64,
    pub tokens: u64,
    /// A server instead of the in-process mock.
    pub endpoint: Option<EndpointSpec>,
    pub mock_ttft_ms: f64,
    pub mock_itl_ms: f64,
    pub num_sender: usize,
}

impl CalibratePlan {
    pub fn from_args(a: &cli::CalibrateArgs) -> Result<CalibratePlan> {
        if let Some(rate) = a.rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
            return Err(Error::Usage(format!(
                "--rates: {rate} is not a positive rate"
            )));
        }
        Ok(CalibratePlan {
            rates: a.rates.clone(),
            seconds: positive("--seconds", a.seconds)?,
            tokens: a.tokens,
            endpoint: a
                .endpoint
                .as_deref()
                .map(|url| EndpointSpec::parse(url, None, Api::OpenaiChat).map_err(Error::from))
                .transpose()?,
            mock_ttft_ms: a.mock_ttft_ms,
            mock_itl_ms: a.mock_itl_ms,
            num_sender: threads("--num-sender", a.num_sender)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan(extra: &[&str]) -> Result<ReplayPlan> {
        let argv = ["llmreplay", "replay", "--trace", "t.jsonl"];
        let cli = cli::Cli::parse_from(argv.iter().chain(extra));
        let cli::Command::Replay(args) = cli.command else {
            panic!("replay")
        };
        ReplayPlan::from_args(&args)
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_option() {
        for (extra, option) in [
            (&["--mock", "--num-sender", "0"][..], "--num-sender"),
            (&["--mock", "--num-sender", "100000"], "--num-sender"),
            (&["--mock", "--num-producer", "0"], "--num-producer"),
            (&["--mock", "--time-scale", "0"], "--time-scale"),
            (&["--mock", "--duration=-1"], "--duration"),
            (&["--mock", "--request-timeout", "nan"], "--request-timeout"),
            (&["--mock", "--drain-timeout=-1"], "--drain-timeout"),
            (&["--mock", "--channel-capacity", "0"], "--channel-capacity"),
            (&["--mock", "--extra-body", "[1]"], "--extra-body"),
            (&["--mock", "-H", "no colon"], "-H"),
            (&["--mock", "--percentiles", "101"], "--percentiles"),
            (
                &["--mock", "--no-stream", "--goodput", "tpot:50"],
                "--goodput tpot",
            ),
            (&["--mock", "--max-requests", "0"], "--max-requests"),
            (&["--mock", "--block-size", "0"], "--block-size"),
            (&["--endpoint", "ftp://x"], "ftp://x"),
            (&[], "--endpoint"),
        ] {
            let err = plan(extra)
                .err()
                .unwrap_or_else(|| panic!("{extra:?} accepted"));
            assert!(matches!(err, Error::Usage(_)), "{extra:?}: {err}");
            assert!(err.to_string().contains(option), "{extra:?}: {err}");
            assert_eq!(err.exit_code(), 1);
        }
        let ok = plan(&["--endpoint", "http://h:1/v1/completions", "-H", "X-A: b"]).unwrap();
        let Targets::Servers(specs) = &ok.targets else {
            panic!("servers")
        };
        assert_eq!(specs[0].api, Api::OpenaiCompletions);
        assert_eq!(ok.headers[0].name, "X-A");
        assert_eq!(ok.headers[0].line, "X-A: b\r\n");
    }
}
