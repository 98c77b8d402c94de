//! Conversations replayed as users have them (`--session-mode after-parent`, the default):
//! a turn leaves only after its parent has ended, plus the think time; every turn of a
//! conversation stays on one endpoint with `--route session`; a failed parent still releases
//! its child, which is marked.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::common;
use common::{read_jsonl, temp_dir};
use llmreplay::mock::{FaultPlan, MockConfig, MockServer};

/// 3-turn Bailian chains, turns 100 ms apart in the trace: without waiting, every child would
/// leave long before its parent's answer (200 ms TTFT) is in.
fn chains(conversations: i64) -> Vec<Value> {
    common::by_timestamp(common::bailian_chains(conversations, 0.02, 0.1, 4))
}

fn write_trace(path: &Path, records: &[Value]) {
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    std::fs::write(path, lines.join("\n")).unwrap();
}

fn mock(faults: &[&str]) -> MockServer {
    let cfg = MockConfig {
        ttft_ns: 200_000_000,
        itl_ns: 1_000_000,
        faults: FaultPlan::parse(&faults.iter().map(|f| f.to_string()).collect::<Vec<_>>(), 3)
            .unwrap(),
        ..MockConfig::default()
    };
    MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap()
}

fn args(trace: &Path, out: &Path, servers: &[MockServer], extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--trace".into(),
        trace.display().to_string(),
        "--output".into(),
        out.display().to_string(),
        "--tokenizer".into(),
        common::tokenizer("qwen3").display().to_string(),
        "--model".into(),
        "m".into(),
        "--num-sender".into(),
        "3".into(),
    ];
    for m in servers {
        a.push("--endpoint".into());
        a.push(format!("http://{}", m.addr()));
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn ms(r: &Value, k: &str) -> f64 {
    r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"))
}

#[test]
fn a_turn_leaves_after_its_parent_ends_and_stays_on_its_endpoint() {
    let dir = temp_dir("sessions");
    let trace = dir.join("t.jsonl");
    let records = chains(20);
    write_trace(&trace, &records);
    let servers = vec![mock(&[]), mock(&[])];
    let out = dir.join("run");
    let outcome = common::replay_in_process(&args(&trace, &out, &servers, &["--route", "session"]));
    assert_eq!(outcome.summary.ok, 60);
    let rows = read_jsonl(&out.join("requests.jsonl"));
    let by_index: HashMap<u64, &Value> = rows
        .iter()
        .map(|r| (r["index"].as_u64().unwrap(), r))
        .collect();
    let mut children = 0;
    for r in &rows {
        assert_eq!(
            r["turn"].as_u64().unwrap(),
            r["chat_id"].as_u64().unwrap() % 10
        );
        let Some(parent) = r["parent_index"].as_u64() else {
            assert_eq!(ms(r, "session_delay_ms"), 0.0, "a root is not delayed: {r}");
            continue;
        };
        children += 1;
        let p = by_index[&parent];
        assert!(
            ms(r, "sent_ms") >= ms(p, "end_ms"),
            "child sent before its parent ended: {r} {p}"
        );
        assert_eq!(ms(r, "released_ms"), ms(p, "end_ms"));
        // The trace's 100 ms gap is the think time, after the parent's end.
        assert!(ms(r, "scheduled_ms") >= ms(p, "end_ms") + 99.0, "{r}");
        assert!(
            ms(r, "session_delay_ms") > 150.0,
            "the 200 ms answer delayed it: {r}"
        );
        // Drift is measured against the release (the deadline above), not the trace time.
        assert!(
            (ms(r, "drift_ms") - (ms(r, "sent_ms") - ms(r, "scheduled_ms"))).abs() < 1e-3,
            "{r}"
        );
        assert_eq!(
            r["endpoint"], p["endpoint"],
            "a conversation stays on its endpoint"
        );
        assert_eq!(r["session_id"], p["session_id"]);
        assert_eq!(r["parent_failed"], false);
    }
    assert_eq!(children, 40);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["sessions"]["turns_after_parent"], 40, "{summary}");
    assert!(
        summary["sessions"]["session_delay_ms"]["p50"]
            .as_f64()
            .unwrap()
            > 150.0
    );
    for m in servers {
        m.stop().unwrap();
    }
}

#[test]
fn a_failed_parent_still_releases_its_child_which_is_marked() {
    let dir = temp_dir("sessions-fail");
    let trace = dir.join("t.jsonl");
    write_trace(&trace, &chains(20));
    let servers = vec![mock(&["status:500:0.3"])];
    let out = dir.join("run");
    common::replay_in_process(&args(&trace, &out, &servers, &[]));
    let rows = read_jsonl(&out.join("requests.jsonl"));
    assert_eq!(rows.len(), 60, "every turn is sent and recorded");
    let by_index: HashMap<u64, &Value> = rows
        .iter()
        .map(|r| (r["index"].as_u64().unwrap(), r))
        .collect();
    let mut marked = 0;
    for r in &rows {
        let Some(parent) = r["parent_index"].as_u64() else {
            continue;
        };
        let p = by_index[&parent];
        let failed = p["error"].is_object();
        assert_eq!(r["parent_failed"], failed, "{r} {p}");
        assert!(ms(r, "sent_ms") >= ms(p, "end_ms"));
        marked += usize::from(failed);
    }
    assert!(marked > 0, "some parents failed (30 % faults)");
    servers.into_iter().for_each(|m| {
        m.stop().unwrap();
    });
}

/// `--session-mode timestamp` is the stateless replay: children leave at their own time.
#[test]
fn timestamp_mode_sends_every_turn_at_its_own_time() {
    let dir = temp_dir("sessions-ts");
    let trace = dir.join("t.jsonl");
    write_trace(&trace, &chains(5));
    let servers = vec![mock(&[])];
    let out = dir.join("run");
    common::replay_in_process(&args(
        &trace,
        &out,
        &servers,
        &["--session-mode", "timestamp"],
    ));
    let rows = read_jsonl(&out.join("requests.jsonl"));
    assert!(rows.iter().all(|r| r.get("turn").is_none()));
    // Each record is due at its own trace time (from the first's), exactly (a released
    // turn's would move).
    let records = chains(5);
    let ts = |i: usize| records[i]["timestamp"].as_f64().unwrap() * 1000.0;
    for r in &rows {
        let at = ts(r["index"].as_u64().unwrap() as usize) - ts(0);
        assert!((ms(r, "scheduled_ms") - at).abs() < 1e-3, "{r}");
    }
    // And leaves without waiting for its parent: a parent takes at least the mock's 200 ms,
    // its child is due 100 ms after it, so children leave while their parents are answered
    // (with a waiting sender, none could).
    let chat = |r: &Value| r["chat_id"].as_i64();
    let ends: HashMap<i64, f64> = rows
        .iter()
        .filter_map(|r| Some((chat(r)?, ms(r, "end_ms"))))
        .collect();
    let before_parent_ended = rows
        .iter()
        .filter_map(|r| Some((ms(r, "sent_ms"), ends.get(&r["parent_chat_id"].as_i64()?)?)))
        .filter(|(sent, parent_end)| sent < parent_end)
        .count();
    assert!(
        before_parent_ended > 0,
        "no child left before its parent ended"
    );
    servers.into_iter().for_each(|m| {
        m.stop().unwrap();
    });
}
