//! `run.json`: the resolved configuration of a run and the tool's version. Never a secret:
//! header values and the API key are left out (their names are kept).

use serde_json::{json, Map, Value};

use super::setup::{Fleet, TraceInput};
use crate::pipeline::RequestBuilder;
use crate::plan::{ReplayPlan, Targets};

/// What the run resolved beyond its plan.
pub struct Resolved<'a> {
    pub trace: &'a TraceInput,
    pub fleet: &'a Fleet,
    pub builder: &'a RequestBuilder,
    pub num_producer: usize,
    pub started_unix_ms: u64,
    /// The run's time 0 on CLOCK_MONOTONIC.
    pub t0_monotonic_ns: u64,
    pub connections_at_start: usize,
    /// `--start-at`: how the common start went.
    pub common_start: Option<crate::sys::wall_start::StartReport>,
    /// `--ntp`: the clock check before the start.
    pub clock_check: Option<&'a crate::ntp::ClockCheck>,
    /// `--run-id`, or the one minted ([`super::time_zero::run_id`]).
    pub run_id: Option<&'a str>,
    /// `--measure-from mid`: each conversation's first measured turn.
    pub measure_cuts: &'a crate::session::MeasureCuts,
    /// Per synthesiser: the tokenizer files' digests, and whether the analysis was cached.
    pub tokenizer_analysis: &'a [Value],
}

/// The configuration; `fleet` has one object per endpoint (url, api, model, weight, prompt
/// overhead), and `api`, `model` and `prompt_overhead_tokens` at the top are theirs when all
/// endpoints agree, else the list of them.
pub fn run_json(plan: &ReplayPlan, r: &Resolved<'_>) -> Value {
    let fleet = fleet_json(r);
    let common = |key: &str| {
        let values: Vec<&Value> = fleet.iter().map(|e| &e[key]).collect();
        if values.iter().all(|v| *v == values[0]) {
            values[0].clone()
        } else {
            json!(values)
        }
    };
    let header_names: Vec<&str> = plan.headers.iter().map(|h| h.name.as_str()).collect();
    let mock = match plan.targets {
        Targets::Mock {
            ttft_ms,
            itl_ms,
            cache_blocks,
            date_offset_ms,
        } => json!({"ttft_ms": ttft_ms, "itl_ms": itl_ms, "cache_blocks": cache_blocks,
                    "date_offset_ms": date_offset_ms}),
        Targets::Servers(_) => Value::Null,
    };
    let prompt = &plan.prompt;
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.into(), v);
    };
    put("tool", json!("llmreplay"));
    put("version", json!(env!("CARGO_PKG_VERSION")));
    put("started_unix_ms", json!(r.started_unix_ms));
    // Record times (ms since the run's time 0) on CLOCK_MONOTONIC, the clock of the mock's
    // --timing-log: t0 + ms. `end` (written when the run ends) gives the drift between them.
    // `host`: shards of one host share a clock (the verdict's `shard-clocks`).
    put(
        "clock",
        json!({"t0_monotonic_ns": r.t0_monotonic_ns, "host": crate::sys::hostname()}),
    );
    put("trace", json!(plan.trace));
    put("format", json!(r.trace.format));
    put("block_size", json!(r.trace.block_size));
    put(
        "trace_stats",
        serde_json::to_value(&r.trace.stats).unwrap_or(Value::Null),
    );
    put(
        "endpoints",
        json!(fleet.iter().map(|e| &e["url"]).collect::<Vec<_>>()),
    );
    put("route", json!(plan.route));
    put("mock", mock);
    put("api", common("api"));
    put("model", common("model"));
    put("stream", json!(plan.stream));
    put("exact_output", json!(plan.exact_output));
    put("tokenizer", json!(prompt.tokenizer));
    put("tokenizer_config", json!(prompt.tokenizer_config));
    put("tokenizer_analysis", json!(r.tokenizer_analysis));
    if let Some(s) = &prompt.tokenizer_model {
        put(
            "tokenizer_model",
            json!({"repo": s.model.repo, "revision": s.model.revision, "commit": s.commit}),
        );
    }
    put("input_length_of", json!(prompt.length_of));
    put("prompt_mode", json!(prompt.mode));
    put("thinking", json!(prompt.thinking));
    put("prompt_overhead_tokens", common("prompt_overhead_tokens"));
    put("block_cache_mb", json!(prompt.block_cache_mb));
    put("save_prompts", json!(plan.save_prompts));
    put("seed", json!(prompt.seed));
    put("prompt_salt", json!(prompt.salt));
    put("time_scale", json!(plan.time_scale));
    put("duration_s", json!(plan.duration_s));
    put("load", load_json(&plan.load));
    put("session_mode", json!(plan.session_mode));
    put("carry_forward", json!(plan.sessions.carry_forward));
    put(
        "require_cache_report",
        json!(plan.sessions.require_cache_report),
    );
    put("max_active_sessions", json!(plan.sessions.max_active));
    put("think_time_s", json!(plan.think_time_s));
    put("warmup_requests", json!(plan.warmup_requests));
    put("expected_cache_blocks", json!(plan.expected_cache_blocks));
    put("server_block_size", json!(plan.server_block_size));
    put(
        "scrape",
        json!(plan.scrape.as_ref().map(|s| json!({
            "server_metrics": s.urls.iter().map(|u| &u.url).collect::<Vec<_>>(),
            "scrape_server": s.endpoints,
            "interval_s": s.interval_s,
            "metrics": s.extra,
        }))),
    );
    put("max_requests", json!(plan.read.max_records));
    put("time_in_secs", json!(plan.wall_limit_s));
    put("loop", json!(plan.passes));
    put("loop_prompts", json!(plan.loop_prompts));
    // What recorded `messages` begin their conversations with in the first pass (null: sent
    // as recorded); each later pass of --loop-prompts fresh has its own.
    put(
        "messages_marker",
        json!(crate::pipeline::Salts::new(prompt.salt, plan.loop_prompts).marker()),
    );
    put("prime", json!(plan.prime));
    // The effective schedule the plan line announced and the producers followed.
    let p = &r.trace.preview;
    put(
        "schedule",
        json!({
            "records": p.records,
            "warmup": p.warmup,
            "skipped_by_offset": p.skipped_by_offset,
            "cut_by": p.cut_by.map(|c| c.option()),
            "cut_records": p.cut_records,
            "first_send_ms": p.first_ns as f64 / 1e6,
            "last_send_ms": p.last_ns as f64 / 1e6,
            "busiest_second": p.busiest_second,
            // With a session bound, `records` is an upper bound: the turns that the answers
            // release after it are cut, and the end of the run adds their count (turns_cut).
            "records_at_most": r.trace.bound_cutting_turns(plan).is_some(),
        }),
    );
    put("num_producer", json!(r.num_producer));
    put("num_sender", json!(plan.num_sender));
    put("channel_capacity", json!(plan.channel_capacity));
    put("channel_mb", json!(plan.channel_mb));
    put("pin_cores", json!(plan.pin_cores));
    put("connections", json!(plan.connections));
    put("request_timeout_s", json!(plan.request_timeout_s));
    put("record_itl", json!(plan.record_itl));
    put("spin_us", json!(plan.spin_us));
    put("realtime", json!(plan.realtime));
    put("read_coalesce_us", json!(plan.read_coalesce_us));
    put("header_names", json!(header_names));
    put(
        "api_key",
        json!(r
            .fleet
            .has_api_key
            .then(|| format!("from ${} (not saved)", plan.api_key_env))),
    );
    put("extra_body", json!(plan.extra_body));
    put(
        "tls",
        json!({"verify_certificates": !plan.tls.insecure, "ca_cert": plan.tls.ca_cert}),
    );
    put("fleet", json!(fleet));
    put("connections_at_start", json!(r.connections_at_start));
    put(
        "shard",
        match (plan.hosts.shard, &r.trace.shares) {
            (Some(shard), Some((shares, _))) => shares.to_json(shard),
            _ => Value::Null,
        },
    );
    put("run_id", json!(r.run_id));
    put("request_identity", json!(r.builder.identity));
    put(
        "trace_digest",
        json!(r.trace.shares.as_ref().map(|(_, digest)| digest)),
    );
    put(
        "start",
        json!(r.common_start.map(|s| json!({
            "at": crate::sys::wall_start::rfc3339_utc(s.requested_unix_ns),
            "at_unix_ms": unix_ms(s.requested_unix_ns),
            "actual_unix_ms": unix_ms(s.actual_unix_ns),
            "late_ms": s.late_ns as f64 / 1e6,
        }))),
    );
    put(
        "clock_check",
        match r.clock_check {
            Some(c) => json!({"start": c.to_json()}),
            None if plan.hosts.shard.is_some() => json!({"checked": false,
                "why": "no --ntp, and the target's Date header could not be read"}),
            None => json!({"checked": false, "why": "one host: its clock was not checked (--ntp)"}),
        },
    );
    put("scenario", json!(plan.scenario));
    put(
        "measure_from",
        match plan.sessions.measure_from {
            crate::session::MeasureFrom::Start => json!({"mode": "start"}),
            crate::session::MeasureFrom::Mid => json!({
                "mode": "mid",
                "seed": plan.load.seed,
                "conversations": r.measure_cuts.len(),
                // Each conversation's first measured turn, numbered as records number them
                // (from 1): the turns before it are warmup.
                "from_turn": r.measure_cuts.iter().map(|(root, first)| (root, first + 1))
                    .collect::<std::collections::BTreeMap<_, _>>(),
            }),
        },
    );
    put(
        "rendezvous",
        json!(plan.hosts.rendezvous.as_ref().map(|r| json!({
            "dir": r.dir.display().to_string(),
            "ready_timeout_s": r.ready_timeout.as_secs_f64(),
            "heartbeat_timeout_s": r.heartbeat_timeout.as_secs_f64(),
            "on_shard_loss": r.on_loss,
            "barrier": plan.hosts.start_at_unix_ns.is_none(),
        }))),
    );
    // What `report DIR` judges the run by again, unless given other --bound values.
    let bounds = crate::stats::Bounds::parse(&plan.render.bounds).unwrap_or_default();
    put("verdict_bounds", bounds.to_json());
    // --strict: a completed run judged INVALID exits 4, and its summary says so.
    put("strict", json!(plan.strict));
    Value::Object(m)
}

/// Unix ns as ms, exact for whole milliseconds (ns as f64 is not: it passes 2^53).
/// Each endpoint: its URL, dialect, model, weight, and what the server wraps around a
/// synthetic prompt.
fn fleet_json(r: &Resolved<'_>) -> Vec<Value> {
    r.fleet
        .specs
        .iter()
        .zip(&r.fleet.models)
        .zip(&r.builder.styles)
        .map(|((spec, model), style)| {
            json!({
                "url": spec.endpoint.url,
                "api": spec.api,
                "model": model,
                "weight": spec.weight,
                "prompt_overhead_tokens": style.synth.map(|i| r.builder.synths[i].overhead()),
                // What the server puts before and after the content: the expected prefix
                // hits count the head as shared.
                "prompt_frame": style.synth.map(|i| {
                    let frame = r.builder.synths[i].frame();
                    json!({"head": frame.head, "tail": frame.tail})
                }),
            })
        })
        .collect()
}

fn unix_ms(ns: u64) -> f64 {
    (ns / 1_000_000) as f64 + (ns % 1_000_000) as f64 / 1e6
}

/// The load mode, as run.json says it.
fn load_json(load: &crate::load::LoadPlan) -> Value {
    let mut v = load.pace.json();
    v["max_idle_gap_s"] = json!(load.max_idle_gap_ms.map(|g| g / 1000.0));
    v["start_offset_s"] = json!(load.start_offset_ms / 1000.0);
    v
}
