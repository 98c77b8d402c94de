//! Several endpoints in one run: `--route round-robin` spreads the records evenly,
//! `--route session` keeps conversations and shared first blocks together, and a mixed fleet
//! (chat and completions instances, a full-URL endpoint among them) works in one run, each
//! instance receiving its own dialect.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::common;
use common::{read_jsonl, temp_dir};
use llmreplay::mock::{MockConfig, MockServer, MockStats};

fn mocks(n: usize) -> Vec<MockServer> {
    (0..n)
        .map(|_| {
            let cfg = MockConfig {
                ttft_ns: 1_000_000,
                itl_ns: 100_000,
                ..MockConfig::default()
            };
            MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap()
        })
        .collect()
}

fn write_trace(path: &Path, records: &[Value]) {
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    std::fs::write(path, lines.join("\n")).unwrap();
}

fn stop_all(mocks: Vec<MockServer>) -> Vec<MockStats> {
    mocks.into_iter().map(|m| m.stop().unwrap()).collect()
}

#[test]
fn round_robin_spreads_records_evenly_by_weight() {
    let dir = temp_dir("fleet-rr");
    let trace = dir.join("t.jsonl");
    let records: Vec<Value> = (0..400)
        .map(|i| json!({"timestamp": i, "text_input": "a b c", "output_length": 2}))
        .collect();
    write_trace(&trace, &records);
    let servers = mocks(4);
    let urls: Vec<String> = servers
        .iter()
        .map(|m| format!("http://{}", m.addr()))
        .collect();
    let mut args = vec!["--trace".to_string(), trace.display().to_string()];
    args.extend(["--time-scale", "10", "--output"].map(String::from));
    args.push(dir.join("run").display().to_string());
    for (i, url) in urls.iter().enumerate() {
        args.push("--endpoint".into());
        // The last instance takes twice the share of the others.
        args.push(if i == 3 {
            format!("{url},weight=2")
        } else {
            url.clone()
        });
    }
    let outcome = common::replay_in_process(&args);
    assert_eq!(outcome.summary.ok, 400);
    let stats = stop_all(servers);
    let got: Vec<u64> = stats.iter().map(|s| s.requests - 1).collect(); // less discovery
    assert_eq!(got, vec![80, 80, 80, 160], "{stats:?}");
    // summary.json and the table break the run down per endpoint.
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/summary.json")).unwrap())
            .unwrap();
    let per: HashMap<&str, &Value> = summary["per_endpoint"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["endpoint"].as_str().unwrap(), e))
        .collect();
    assert_eq!(per.len(), 4);
    assert_eq!(per[urls[3].as_str()]["requests"], 160);
    assert_eq!(per[urls[0].as_str()]["ok"], 80);
    // 80 requests hold p50 but not p99 (it needs 500): null, as in the run's own figures.
    let ttft = &per[urls[0].as_str()]["ttft_ms"];
    assert!(
        ttft["p50"].as_f64().unwrap() >= 1.0 && ttft["p99"].is_null(),
        "{ttft}"
    );
    let table = outcome.summary.to_table();
    assert!(
        table.contains("Per endpoint") && table.contains(&urls[2]),
        "{table}"
    );
    // Within every round of five records, each instance has its share.
    let by_index: HashMap<u64, String> = read_jsonl(&dir.join("run/requests.jsonl"))
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["endpoint"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for round in 0..80u64 {
        let mut count = HashMap::new();
        for i in round * 5..round * 5 + 5 {
            *count.entry(by_index[&i].clone()).or_insert(0) += 1;
        }
        assert_eq!(count.get(&urls[3]), Some(&2), "round {round}: {count:?}");
        assert_eq!(count.len(), 4, "round {round}: {count:?}");
    }
}

/// Bailian-style chains (chat_id / parent_chat_id, 3 turns each, the child's hash ids
/// starting with its history) and standalone records that share a first hash id.
#[test]
fn session_routing_keeps_conversations_and_first_block_groups_on_one_endpoint() {
    let dir = temp_dir("fleet-session");
    let trace = dir.join("t.jsonl");
    let mut records = common::bailian_chains(30, 0.05, 0.5, 2);
    // chat id -> the root chat id of its conversation
    let mut roots: HashMap<i64, i64> = records
        .iter()
        .map(|r| {
            let chat = r["chat_id"].as_i64().unwrap();
            (chat, chat / 10 * 10 + 1)
        })
        .collect();
    // Standalone records: ten groups of four sharing their first block.
    for i in 0..40i64 {
        records.push(json!({
            "chat_id": 10_000 + i, "parent_chat_id": -1, "timestamp": 2.0 + i as f64 * 0.01,
            "input_length": 32, "output_length": 2, "type": "api", "turn": 1,
            "hash_ids": [900_000 + (i % 10) as u64, 800_000 + i as u64],
        }));
        roots.insert(10_000 + i, -(i % 10) - 1); // the group stands for the root
    }
    records.sort_by(|a, b| {
        a["timestamp"]
            .as_f64()
            .partial_cmp(&b["timestamp"].as_f64())
            .unwrap()
    });
    write_trace(&trace, &records);
    let servers = mocks(4);
    let mut args = vec!["--trace".to_string(), trace.display().to_string()];
    args.extend(["--route", "session", "--time-scale", "4", "--output"].map(String::from));
    args.push(dir.join("run").display().to_string());
    args.extend([
        "--tokenizer".to_string(),
        common::tokenizer("qwen3").display().to_string(),
    ]);
    for m in &servers {
        args.push("--endpoint".into());
        args.push(format!("http://{}", m.addr()));
    }
    let outcome = common::replay_in_process(&args);
    assert_eq!(outcome.summary.ok as usize, records.len());
    let mut endpoint_of_group: HashMap<i64, String> = HashMap::new();
    let mut used = std::collections::HashSet::new();
    for r in read_jsonl(&dir.join("run/requests.jsonl")) {
        let chat = r["chat_id"].as_i64().unwrap();
        let endpoint = r["endpoint"].as_str().unwrap().to_string();
        used.insert(endpoint.clone());
        let group = roots[&chat];
        let first = endpoint_of_group
            .entry(group)
            .or_insert_with(|| endpoint.clone());
        assert_eq!(*first, endpoint, "chat {chat} left its group {group}");
    }
    assert!(used.len() > 1, "groups are spread over the endpoints");
    stop_all(servers);
}

/// Two chat instances, a completions one and a TGI one (the last two given as full API
/// URLs): each receives its own dialect, with prompts synthesised for what its server wraps around them (a chat
/// template, or nothing), and an endpoint's own model= is what run.json records for it.
#[test]
fn a_mixed_fleet_speaks_each_endpoints_dialect() {
    let dir = temp_dir("fleet-mixed");
    let trace = dir.join("t.jsonl");
    let records: Vec<Value> = (0..120)
        .map(|i| json!({"timestamp": i * 2, "input_length": 40, "output_length": 3, "hash_ids": [i % 7]}))
        .collect();
    write_trace(&trace, &records);
    let servers = mocks(4);
    let a = servers[0].addr();
    let b = servers[1].addr();
    let c = servers[2].addr();
    let d = servers[3].addr();
    let args: Vec<String> = [
        "--trace".to_string(),
        trace.display().to_string(),
        "--endpoint".into(),
        format!("http://{a}"),
        "--endpoint".into(),
        format!("http://{b},model=chat-b"),
        "--endpoint".into(),
        format!("http://{c}/v1/completions"),
        "--endpoint".into(),
        format!("http://{d}/generate_stream"),
        "--time-scale".into(),
        "10".into(),
        "--tokenizer".into(),
        common::tokenizer("qwen3").display().to_string(),
        "--block-size".into(),
        "16".into(),
        "--output".into(),
        dir.join("run").display().to_string(),
    ]
    .into();
    let outcome = common::replay_in_process(&args);
    assert_eq!(outcome.summary.ok, 120);
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/run.json")).unwrap()).unwrap();
    let fleet = run["fleet"].as_array().unwrap();
    let chat_overhead = fleet[0]["prompt_overhead_tokens"].as_u64().unwrap();
    assert!(chat_overhead > 0, "the chat template's tokens: {run}");
    assert_eq!(fleet[2]["prompt_overhead_tokens"], 0, "Qwen3 adds no BOS");
    assert_eq!(
        fleet[3]["prompt_overhead_tokens"], 0,
        "TGI's inputs are a completion"
    );
    for r in read_jsonl(&dir.join("run/requests.jsonl")) {
        assert_eq!(r["output_tokens"], 3, "{r}");
        // These mocks count words, one per synthetic token, and know no template: the chat
        // content is the input length less the template, the completions prompt all of it.
        if r["endpoint"] == format!("http://{d}") {
            assert!(
                r["prompt_tokens"].is_null(),
                "TGI reports no prompt count: {r}"
            );
            continue;
        }
        let overhead = if r["endpoint"] == format!("http://{c}") {
            0
        } else {
            chat_overhead
        };
        assert_eq!(r["prompt_tokens"].as_u64().unwrap() + overhead, 40, "{r}");
    }
    let stats = stop_all(servers);
    let dialects: Vec<(u64, u64, u64)> = stats
        .iter()
        .map(|s| {
            (
                s.requests_of("openai-chat"),
                s.requests_of("openai-completions"),
                s.requests_of("tgi"),
            )
        })
        .collect();
    assert_eq!(
        dialects,
        vec![(30, 0, 0), (30, 0, 0), (0, 30, 0), (0, 0, 30)],
        "{stats:?}"
    );
    let models: Vec<&str> = fleet.iter().map(|e| e["model"].as_str().unwrap()).collect();
    assert_eq!(
        models,
        vec!["mock-model", "chat-b", "mock-model", "mock-model"]
    );
    assert_eq!(fleet[2]["api"], "openai-completions");
    assert_eq!(fleet[2]["url"], format!("http://{c}"));
    assert_eq!(
        run["api"],
        json!(["openai-chat", "openai-chat", "openai-completions", "tgi"])
    );
}

/// `least-inflight` sends more to a fast instance than to a slow one: the slow one's
/// requests stay in flight, so the next ones go to the other.
#[test]
fn least_inflight_favours_the_faster_endpoint() {
    let dir = temp_dir("fleet-least");
    let trace = dir.join("t.jsonl");
    let records: Vec<Value> = (0..200)
        .map(|i| json!({"timestamp": i * 5, "text_input": "a b c", "output_length": 4}))
        .collect();
    write_trace(&trace, &records);
    let start = |ttft_ns, itl_ns| {
        let cfg = MockConfig {
            ttft_ns,
            itl_ns,
            ..MockConfig::default()
        };
        MockServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap()
    };
    let fast = start(1_000_000, 100_000);
    let slow = start(150_000_000, 10_000_000);
    let mut args = vec!["--trace".to_string(), trace.display().to_string()];
    args.extend(["--route", "least-inflight", "--output"].map(String::from));
    args.push(dir.join("run").display().to_string());
    for m in [&fast, &slow] {
        args.push("--endpoint".into());
        args.push(format!("http://{}", m.addr()));
    }
    let outcome = common::replay_in_process(&args);
    assert_eq!(outcome.summary.ok, 200);
    let fast_n = fast.stop().unwrap().requests - 1;
    let slow_n = slow.stop().unwrap().requests - 1;
    assert_eq!(fast_n + slow_n, 200);
    // Alone, round-robin would give each 100. The slow one holds each request ~180 ms, so
    // it is busy nearly always and takes a request only when the fast one has one too.
    assert!(fast_n > 3 * slow_n, "fast {fast_n}, slow {slow_n}");
}

/// The hits a hash-id trace predicts are counted per instance, at the instance a request
/// is sent to: with `least-inflight` too, whose instance is chosen only when the request is
/// due. Every record shares three blocks: at each instance the first request sent finds
/// nothing, every later one the same hits (the template's head and the shared blocks).
#[test]
fn expected_prefix_hits_are_counted_at_the_instance_each_request_reached() {
    let dir = temp_dir("fleet-expected");
    let trace = dir.join("t.jsonl");
    let records: Vec<Value> = (0..10)
        .map(|i| json!({"timestamp": i * 10, "input_length": 64, "output_length": 2, "hash_ids": [1, 2, 3, 100 + i]}))
        .collect();
    write_trace(&trace, &records);
    let mocks: Vec<MockServer> = (0..2)
        .map(|_| MockServer::start("127.0.0.1:0".parse().unwrap(), MockConfig::default()).unwrap())
        .collect();
    for route in ["round-robin", "least-inflight"] {
        let out = dir.join(route);
        let mut args: Vec<String> = [
            "--trace",
            &trace.display().to_string(),
            "--tokenizer",
            &common::tokenizer("qwen3").display().to_string(),
            "--block-size",
            "16",
            "--route",
            route,
            "--output",
            &out.display().to_string(),
        ]
        .map(String::from)
        .to_vec();
        for m in &mocks {
            args.push("--endpoint".into());
            args.push(format!("http://{}", m.addr()));
        }
        let outcome = common::replay_in_process(&args);
        assert_eq!(outcome.summary.ok, 10, "{route}");
        let mut records = read_jsonl(&out.join("requests.jsonl"));
        records.sort_by(|a, b| {
            a["sent_ms"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["sent_ms"].as_f64().unwrap())
        });
        let mut later_hits = std::collections::BTreeSet::new();
        let mut seen = std::collections::HashSet::new();
        for r in &records {
            let hits = r["expected_cached_tokens"].as_u64().expect("predicted");
            if seen.insert(r["endpoint"].as_str().unwrap().to_string()) {
                assert_eq!(hits, 0, "{route}: the first request at its instance: {r}");
            } else {
                later_hits.insert(hits);
            }
        }
        assert_eq!(later_hits.len(), 1, "{route}: {later_hits:?}");
        let hits = *later_hits.first().unwrap();
        assert!(
            (48..64).contains(&hits),
            "{route}: head + 3 blocks of 16: {hits}"
        );
        assert!(outcome.summary.prefix.expected_share().is_some());
    }
}
