//! One trace replayed by several processes as the shards of one run (`--shard`, `--start-at`,
//! `--ntp`), joined by `merge`, and the Kubernetes manifest that runs them (`k8s-job`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

use common::{bin, path, read_json, read_jsonl, replay_against, temp_dir, tokenizer, MockProcess};
use llmreplay::stats::Distribution;
use serde_json::{json, Value};

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn refused(cmd: &mut Command, expected: &str) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{cmd:?} succeeded");
    assert!(err.contains(expected), "{cmd:?}: {err}");
}

/// 2,000 Mooncake records, 2 ms apart: 400 conversations of 4 turns (`session_id`, each
/// turn's hash ids the history plus a block) and 400 records of no conversation.
fn conversation_trace(dir: &Path) -> PathBuf {
    let lines: Vec<String> = (0..2000u64)
        .map(|i| {
            let mut r = json!({"timestamp": i * 2, "output_length": 4});
            if i % 5 == 4 {
                r["input_length"] = json!(30);
                r["hash_ids"] = json!([100_000 + 2 * i, 100_001 + 2 * i]);
            } else {
                let session = (i / 20) * 4 + i % 5;
                let turn = i % 20 / 5;
                let history: Vec<u64> = (0..turn + 2).map(|b| session * 10 + b).collect();
                r["input_length"] = json!(history.len() as u64 * 16 - 3);
                r["hash_ids"] = json!(history);
                r["session_id"] = json!(format!("s{session}"));
            }
            r.to_string()
        })
        .collect();
    let trace = dir.join("conversations.jsonl");
    std::fs::write(&trace, lines.join("\n")).unwrap();
    trace
}

/// Records by index.
fn by_index(records: &[Value]) -> BTreeMap<u64, &Value> {
    records
        .iter()
        .map(|r| (r["index"].as_u64().unwrap(), r))
        .collect()
}

fn total(records: &[Value], key: &str) -> u64 {
    records.iter().filter_map(|r| r[key].as_u64()).sum()
}

#[test]
fn three_shards_started_together_merge_into_the_single_run() {
    let dir = temp_dir("shards-three");
    let trace = conversation_trace(&dir);
    let mock = MockProcess::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let qwen3 = tokenizer("qwen3");
    let options = [
        "--tokenizer",
        path(&qwen3),
        "--block-size",
        "16",
        "--time-scale",
        "2",
        "--save-prompts",
        "--stall-timeout",
        "3600",
    ];
    let single = dir.join("single");
    ok(
        replay_against(&mock, &trace, &single)
            .args(options)
            .output()
            .unwrap(),
        "single run",
    );

    let at = unix_ms() + 2000;
    let shards: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("shard-{i}"))).collect();
    let children: Vec<_> = shards
        .iter()
        .enumerate()
        .map(|(i, out)| {
            replay_against(&mock, &trace, out)
                .args(options)
                .args(["--shard", &format!("{i}/3"), "--start-at", &at.to_string()])
                // Heartbeats with a fixed instant: no barrier, the same instant kept.
                .arg("--rendezvous")
                .arg(dir.join("meet"))
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        ok(c.wait_with_output().unwrap(), &format!("shard {i}"));
    }
    let merged = dir.join("merged");
    let out = ok(
        bin()
            .arg("merge")
            .arg(&merged)
            .args(&shards)
            .output()
            .unwrap(),
        "merge",
    );
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(
        table.contains("drift p99") && table.contains("2/3"),
        "{table}"
    );

    // The same records, in index order, with the very prompts.
    let one = read_jsonl(&single.join("requests.jsonl"));
    let all = read_jsonl(&merged.join("requests.jsonl"));
    let indices: Vec<u64> = all.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert!(indices.windows(2).all(|w| w[0] < w[1]), "index order");
    assert_eq!(
        by_index(&one).keys().collect::<Vec<_>>(),
        indices.iter().collect::<Vec<_>>()
    );
    assert_eq!(indices.len(), 2000);
    assert_eq!(
        common::prompt_lines_by_index(&single.join("prompts.jsonl")),
        common::prompt_lines_by_index(&merged.join("prompts.jsonl")),
        "prompt bytes per index"
    );
    for key in ["input_tokens", "output_tokens", "output_tokens_target"] {
        assert_eq!(total(&one, key), total(&all, key), "{key}");
    }
    assert!(all.iter().all(|r| r["error"].is_null()), "every request ok");

    // Every statistic of the merged summary is the records' own.
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["requests"]["total"], 2000);
    assert_eq!(summary["output_tokens"], total(&all, "output_tokens"));
    for key in [
        "ttft_ms",
        "ttft_from_schedule_ms",
        "tpot_ms",
        "e2el_ms",
        "drift_ms",
    ] {
        let mut values: Vec<f64> = all.iter().filter_map(|r| r[key].as_f64()).collect();
        let recomputed = Distribution::of(&mut values, &llmreplay::stats::Percentiles::default())
            .unwrap()
            .to_json();
        assert_eq!(summary[key], recomputed, "{key}");
    }

    // No conversation split: each session's turns all in one shard.
    let mut shard_of: HashMap<String, usize> = HashMap::new();
    for (i, s) in shards.iter().enumerate() {
        for r in read_jsonl(&s.join("requests.jsonl")) {
            if let Some(session) = r["session_id"].as_str() {
                let first = *shard_of.entry(session.to_string()).or_insert(i);
                assert_eq!(first, i, "session {session} split");
            }
        }
    }
    assert_eq!(shard_of.len(), 400);
    let runs: Vec<Value> = shards
        .iter()
        .map(|s| {
            serde_json::from_str(&std::fs::read_to_string(s.join("run.json")).unwrap()).unwrap()
        })
        .collect();
    let shares: u64 = runs
        .iter()
        .map(|r| r["shard"]["records"].as_u64().unwrap())
        .sum();
    assert_eq!(shares, 2000, "the planned shares add up");
    // Each shard checked its clock against the mock's Date header (one host: near 0).
    for r in &runs {
        let check = &r["clock_check"]["start"];
        assert_eq!(check["method"], "http-date", "{check}");
        let (offset, within) = (
            check["offset_ms"].as_f64().unwrap(),
            check["uncertainty_ms"].as_f64().unwrap(),
        );
        assert!(offset.abs() <= within + 1.0, "{check}");
    }

    // Started together: each shard's time 0 on CLOCK_MONOTONIC (one clock for the three
    // processes) is the agreed instant, less what each recorded as its own lateness.
    let zero: Vec<f64> = runs
        .iter()
        .map(|r| {
            assert_eq!(r["start"]["at_unix_ms"], json!(at as f64));
            r["clock"]["t0_monotonic_ns"].as_f64().unwrap() / 1e6
                - r["start"]["late_ms"].as_f64().unwrap()
        })
        .collect();
    let spread = zero.iter().cloned().fold(f64::MIN, f64::max)
        - zero.iter().cloned().fold(f64::MAX, f64::min);
    // Each shard's time 0 is the instant itself (read on its clock), or its lateness after
    // it: only reading two clocks apart separates them. The instant is 2 s after the shards
    // were launched, so a shard that ignored it would start up to 2 s early: a second
    // apart is far from both.
    assert!(spread < 1000.0, "time 0 of the shards {spread} ms apart");
    let first_drift: Vec<f64> = shards
        .iter()
        .map(|s| {
            let rs = read_jsonl(&s.join("requests.jsonl"));
            let first = rs
                .iter()
                .min_by(|a, b| {
                    a["scheduled_ms"]
                        .as_f64()
                        .partial_cmp(&b["scheduled_ms"].as_f64())
                        .unwrap()
                })
                .unwrap();
            first["drift_ms"].as_f64().unwrap()
        })
        .collect();
    eprintln!("time 0 spread {spread:.3} ms; first sends' drift {first_drift:?} ms");
    let merged_run: Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("run.json")).unwrap()).unwrap();
    assert_eq!(merged_run["merged"]["count"], 3);
    assert_eq!(merged_run["merged"]["shards"].as_array().unwrap().len(), 3);
    // The merged directory is an ordinary run directory.
    ok(bin().arg("report").arg(&merged).output().unwrap(), "report");
    ok(
        bin()
            .arg("report")
            .arg(&single)
            .arg(&merged)
            .output()
            .unwrap(),
        "report A B",
    );
}

/// `replay --mock` of the small text trace as shard `spec`, into `out`.
fn shard_run(trace: &Path, out: &Path, spec: &str, extra: &[&str]) {
    ok(
        common::replay_mock(trace, out)
            .args(["--time-scale", "20", "--shard", spec])
            .args(["--tokenizer", path(&tokenizer("qwen3"))])
            .args(extra)
            .output()
            .unwrap(),
        spec,
    );
}

#[test]
fn merge_refuses_what_is_not_one_run_and_corrects_skew_by_the_clock_check() {
    let dir = temp_dir("shards-refused");
    let trace = common::text_trace(&dir, 40, 10, 2);
    // A responder 250 ms ahead of this host's clock.
    let sntp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let ntp = sntp.local_addr().unwrap().to_string();
    std::thread::spawn(move || llmreplay::ntp::serve_offset(sntp, 250_000_000));
    let at = (unix_ms() + 1500).to_string();
    let a: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("a{i}"))).collect();
    for (i, out) in a.iter().enumerate() {
        shard_run(
            &trace,
            out,
            &format!("{i}/2"),
            &["--start-at", &at, "--ntp", &ntp],
        );
    }
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(a[0].join("run.json")).unwrap()).unwrap();
    for phase in ["start", "end"] {
        let check = &run["clock_check"][phase];
        let (offset, unc) = (
            check["offset_ms"].as_f64().unwrap(),
            check["uncertainty_ms"].as_f64().unwrap(),
        );
        assert!((offset - 250.0).abs() <= 2.0 + unc, "{phase}: {check}");
    }
    let merged = dir.join("merged");
    let out = ok(
        bin().arg("merge").arg(&merged).args(&a).output().unwrap(),
        "merge",
    );
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("run.json")).unwrap()).unwrap();
    for row in m["merged"]["shards"].as_array().unwrap() {
        // Each clock is 250 ms behind the server's, and each start corrected by it: on the
        // server's clock, each started at the instant.
        let skew = row["start_skew_ms"].as_f64().unwrap() - row["late_ms"].as_f64().unwrap();
        assert!(
            skew.abs() < 3.0 + row["clock_uncertainty_ms"].as_f64().unwrap(),
            "{row}"
        );
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("+250."));

    // Another run's shard (another seed), a shard missing, a shard twice, not a shard.
    let b1 = dir.join("b1");
    shard_run(&trace, &b1, "1/2", &["--seed", "7"]);
    let plain = dir.join("plain");
    ok(
        common::replay_mock(&trace, &plain).output().unwrap(),
        "plain",
    );
    let merge = |dirs: &[&PathBuf]| {
        let mut c = bin();
        c.arg("merge").arg(dir.join("m")).arg("--force").args(dirs);
        c
    };
    refused(
        &mut merge(&[&a[0], &b1]),
        "are not shards of one run: their `seed` differs",
    );
    refused(&mut merge(&[&a[0]]), "shard 1/2 missing");
    refused(&mut merge(&[&a[0], &a[0], &a[1]]), "shard 0 given twice");
    refused(&mut merge(&[&a[0], &plain]), "not a shard");
    refused(bin().args(["merge", path(&merged)]).args(&a), "not empty");
}

#[test]
fn every_shaping_option_shares_out_the_single_runs_records() {
    let dir = temp_dir("shards-shaping");
    let trace = common::text_trace(&dir, 60, 10, 2);
    let chains: Vec<String> = common::bailian_chains(12, 0.05, 0.01, 2)
        .iter()
        .map(Value::to_string)
        .collect();
    let bailian = dir.join("chains.jsonl");
    std::fs::write(&bailian, chains.join("\n")).unwrap();
    let cases: [(&Path, &[&str]); 5] = [
        (&trace, &["--max-requests", "33", "--start-offset", "0.1"]),
        (&trace, &["--loop", "2", "--warmup-requests", "5"]),
        (&trace, &["--rate", "500", "--duration", "0.05"]),
        (&bailian, &["--session-mode", "timestamp"]),
        (&bailian, &["--max-requests", "25"]),
    ];
    for (n, (trace, options)) in cases.iter().enumerate() {
        let single = dir.join(format!("single-{n}"));
        ok(
            common::replay_mock(trace, &single)
                .args(["--time-scale", "20"])
                .args(["--tokenizer", path(&tokenizer("qwen3"))])
                .args(*options)
                .output()
                .unwrap(),
            "single",
        );
        let one: BTreeMap<u64, bool> = read_jsonl(&single.join("requests.jsonl"))
            .iter()
            .map(|r| (r["index"].as_u64().unwrap(), r["warmup"] == true))
            .collect();
        let mut union = BTreeMap::new();
        for i in 0..3 {
            let out = dir.join(format!("shard-{n}-{i}"));
            shard_run(trace, &out, &format!("{i}/3"), options);
            for r in read_jsonl(&out.join("requests.jsonl")) {
                let index = r["index"].as_u64().unwrap();
                assert!(
                    union.insert(index, r["warmup"] == true).is_none(),
                    "{index} twice"
                );
            }
        }
        assert_eq!(
            one, union,
            "{options:?}: the shards' records are the single run's"
        );
    }
    // Shard by endpoint: shard I drives endpoints I, I+2; with conversations routed whole.
    let mocks: Vec<MockProcess> = (0..4)
        .map(|_| MockProcess::start(&["--ttft-ms", "1"]))
        .collect();
    let endpoint_args = |extra: &[&str]| {
        let mut args: Vec<String> = vec!["--tokenizer".into(), path(&tokenizer("qwen3")).into()];
        for m in &mocks {
            args.extend(["--endpoint".into(), m.url()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let mut seen = BTreeSet::new();
    for i in 0..2 {
        let out = dir.join(format!("by-endpoint-{i}"));
        ok(
            bin()
                .args(["replay", "--quiet", "--model", "m", "--time-scale", "20"])
                .args(["--trace", path(&bailian), "--output", path(&out)])
                .args(endpoint_args(&[
                    "--shard",
                    &format!("{i}/2"),
                    "--shard-by",
                    "endpoint",
                    "--route",
                    "session",
                ]))
                .output()
                .unwrap(),
            "by endpoint",
        );
        for r in read_jsonl(&out.join("requests.jsonl")) {
            let endpoint = mocks.iter().position(|m| r["endpoint"] == m.url()).unwrap();
            assert_eq!(endpoint % 2, i, "shard {i} sent to endpoint {endpoint}");
            seen.insert(r["index"].as_u64().unwrap());
        }
    }
    assert_eq!(seen.len(), 36);
    // Round-robin would put a conversation's turns on two shards' endpoints.
    refused(
        bin()
            .args(["replay", "--model", "m", "--trace", path(&bailian)])
            .args(endpoint_args(&[
                "--shard",
                "0/2",
                "--shard-by",
                "endpoint",
                "--route",
                "round-robin",
            ])),
        "where a turn could not wait for its parent's answer",
    );
}

#[test]
fn shard_options_that_cannot_hold_are_refused_before_anything_runs() {
    let dir = temp_dir("shards-usage");
    let trace = common::text_trace(&dir, 10, 10, 2);
    let replay = |extra: &[&str]| {
        let mut c = common::replay_mock(&trace, &dir.join("out"));
        c.args(extra);
        c
    };
    refused(&mut replay(&["--shard", "3/3"]), "below the count");
    refused(
        &mut replay(&["--shard", "0/2", "--concurrency", "4"]),
        "closed loop",
    );
    refused(
        &mut replay(&["--shard", "0/2", "--max-error-rate", "0.1"]),
        "--max-error-rate",
    );
    refused(
        &mut replay(&["--shard", "0/2", "--shard-by", "endpoint"]),
        "there are 1 for 2",
    );
    refused(
        replay(&["--shard-count", "2"])
            .env_remove("JOB_COMPLETION_INDEX")
            .env_remove("SLURM_PROCID"),
        "give --shard I/N",
    );
    refused(&mut replay(&["--start-at", "tomorrow"]), "RFC 3339");
    // A day in the past: the shards would each start at once, apart.
    let yesterday = (unix_ms() - 86_400_000).to_string();
    refused(
        &mut replay(&["--start-at", &yesterday]),
        "s ago (at most 60 s)",
    );
    refused(&mut replay(&["--rendezvous", "meet"]), "give --shard I/N");
    refused(
        &mut replay(&[
            "--shard",
            "0/2",
            "--rendezvous",
            "m",
            "--heartbeat-timeout",
            "1",
        ]),
        "at least 2 s",
    );
    // The environment of a Kubernetes Indexed Job and of a Slurm task.
    let out = ok(
        replay(&["--shard-count", "2", "--dry-run"])
            .env("JOB_COMPLETION_INDEX", "1")
            .output()
            .unwrap(),
        "k8s env",
    );
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains("shard 1/2 by conversation: this host sends 5 of the 10 records"),
        "{plan}"
    );
    let out = ok(
        replay(&["--shard", "auto", "--dry-run"])
            .env("SLURM_PROCID", "0")
            .env("SLURM_NTASKS", "5")
            .output()
            .unwrap(),
        "slurm env",
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("shard 0/5"));
    refused(
        bin().args([
            "sweep",
            "--mock",
            "--trace",
            path(&trace),
            "--goodput",
            "ttft:100",
            "--shard",
            "0/2",
        ]),
        "a sweep runs on one host",
    );
}

/// Kubernetes' `$(VAR)` references in a container's args, expanded as the kubelet does.
fn expand(arg: &str, env: &HashMap<&str, String>) -> String {
    env.iter().fold(arg.to_string(), |a, (k, v)| {
        a.replace(&format!("$({k})"), v)
    })
}

#[test]
fn the_k8s_manifest_is_an_indexed_job_whose_pods_run_the_shards_and_the_merge() {
    use k8s_openapi::api::batch::v1::Job;
    use serde::Deserialize;
    let dir = temp_dir("shards-k8s");
    let inputs = dir.join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    common::text_trace(&inputs, 30, 10, 2);
    let out = ok(
        bin()
            .args([
                "k8s-job",
                "--shards",
                "3",
                "--image",
                "registry.local/llmreplay:1",
            ])
            .args([
                "--inputs-configmap",
                "trace",
                "--results-claim",
                "shared",
                "--cpu",
                "3",
                "--deadline",
                "600",
            ])
            .args([
                "--",
                "--mock",
                "--trace",
                "/inputs/t.jsonl",
                "--time-scale",
                "20",
                "--quiet",
            ])
            .output()
            .unwrap(),
        "k8s-job",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let jobs: Vec<Job> = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Job::deserialize(doc).unwrap())
        .collect();
    assert_eq!(jobs.len(), 2, "{text}");
    let spec = jobs[0].spec.as_ref().unwrap();
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(3)));
    // No retry (a late shard could not join), a failed pod fails its index, a deadline.
    assert_eq!(spec.backoff_limit_per_index, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(600));
    let rules = &spec.pod_failure_policy.as_ref().unwrap().rules;
    assert!(rules.iter().all(|r| r.action == "FailIndex"), "{rules:?}");
    let exits = rules[0].on_exit_codes.as_ref().unwrap();
    assert_eq!(
        (exits.operator.as_str(), exits.values.as_slice()),
        ("NotIn", &[0][..])
    );
    let pod = spec.template.spec.as_ref().unwrap();
    let spread = &pod.topology_spread_constraints.as_ref().unwrap()[0];
    assert_eq!(
        (spread.topology_key.as_str(), spread.max_skew),
        ("kubernetes.io/hostname", 1)
    );
    let volumes = pod.volumes.as_ref().unwrap();
    assert_eq!(
        volumes[0]
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name,
        "shared"
    );
    assert_eq!(volumes[1].config_map.as_ref().unwrap().name, "trace");
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("registry.local/llmreplay:1")
    );
    let resources = container.resources.as_ref().unwrap();
    let requests = resources.requests.as_ref().unwrap();
    assert_eq!(requests["cpu"].0, "3");
    assert_eq!(requests["memory"].0, "4Gi");
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.run_as_non_root, Some(true));
    let env = container.env.as_ref().unwrap();
    // No fixed instant: the pods meet at the barrier.
    assert!(env.iter().all(|e| e.name != "LLMREPLAY_START_AT"));
    let cache = env
        .iter()
        .find(|e| e.name == "LLMREPLAY_CACHE_DIR")
        .unwrap();
    assert!(cache.value.as_ref().unwrap().starts_with("/results/"));
    let index_var = env
        .iter()
        .find(|e| e.name == "JOB_COMPLETION_INDEX")
        .unwrap();
    assert!(format!("{index_var:?}").contains("job-completion-index"));

    // Run each pod's command here, as the kubelet would: its args with $(VAR) expanded, the
    // volumes at local directories. Then the merge Job's.
    let local = |arg: String| {
        arg.replace("/inputs", path(&inputs))
            .replace("/results", path(&dir.join("results")))
    };
    let pod = |index: usize| {
        let vars = HashMap::from([("JOB_COMPLETION_INDEX", index.to_string())]);
        let args: Vec<String> = container
            .args
            .as_ref()
            .unwrap()
            .iter()
            .map(|a| local(expand(a, &vars)))
            .collect();
        let mut cmd = bin();
        cmd.args(&args)
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    // The pods run at once, as the Job starts them: they meet at the barrier.
    let pods: Vec<_> = (0..3).map(|index| pod(index).spawn().unwrap()).collect();
    for (index, pod) in pods.into_iter().enumerate() {
        ok(pod.wait_with_output().unwrap(), &format!("pod {index}"));
    }
    let merge = &jobs[1]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    let args: Vec<String> = merge
        .args
        .as_ref()
        .unwrap()
        .iter()
        .map(|a| local(a.clone()))
        .collect();
    assert_eq!(args[0], "merge");
    assert_eq!(args[args.len() - 2..], ["--wait", "600"]);
    assert!(!args.contains(&"--force".to_string()), "{args:?}");
    ok(bin().args(&args).output().unwrap(), "merge pod");
    // Every file of the run is under its own directory, named by the run id.
    let run_id = jobs[0].metadata.labels.as_ref().unwrap()["llmreplay/run-id"].clone();
    let run_dir = dir.join("results/llmreplay").join(&run_id);
    assert_eq!(
        read_json(&run_dir.join("merged/run.json"))["run_id"],
        run_id
    );
    let merged = read_jsonl(&run_dir.join("merged/requests.jsonl"));
    assert_eq!(
        merged
            .iter()
            .map(|r| r["index"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        (0..30).collect::<Vec<_>>()
    );
    // The same manifest applied again (the Jobs deleted, the volume kept): every pod
    // refuses the run's own files, and the merge pod fails instead of merging them again.
    for pod in (0..3).map(|index| pod(index).output().unwrap()) {
        assert_eq!(pod.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&pod.stderr).contains("from an earlier run"));
    }
    let again = bin().args(&args).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("the run never started"));
    let pod_spec = spec.template.spec.as_ref().unwrap();
    let fs_group = pod_spec.security_context.as_ref().unwrap().fs_group;
    assert_eq!(fs_group, Some(65532));
    assert_eq!(spec.ttl_seconds_after_finished, Some(86_400));
    refused(
        bin().args([
            "k8s-job", "--shards", "2", "--", "--mock", "--trace", "t", "--output", "x",
        ]),
        "the manifest sets",
    );
    refused(
        bin().args([
            "k8s-job",
            "--shards",
            "2",
            "--inputs-claim",
            "c",
            "--",
            "--mock",
            "--trace",
            "t.jsonl",
        ]),
        "/inputs",
    );
    // No inputs volume: a trace path the pods cannot see is refused.
    refused(
        bin().args([
            "k8s-job",
            "--shards",
            "2",
            "--",
            "--mock",
            "--trace",
            "/data/t.jsonl",
        ]),
        "no inputs volume",
    );
}

/// deploy/kubernetes/indexed-job.yaml is what `k8s-job` prints for the README's example, and
/// parses into Kubernetes' own Job type.
#[test]
fn the_checked_in_manifest_is_what_k8s_job_prints() {
    use k8s_openapi::api::batch::v1::Job;
    use serde::Deserialize;
    let out = ok(
        bin()
            .args([
                "k8s-job",
                "--shards",
                "4",
                "--image",
                "registry.example/llmreplay:0.1.0",
            ])
            .args(["--inputs-claim", "llmreplay-inputs", "--"])
            .args([
                "--trace",
                "/inputs/trace.jsonl",
                "--tokenizer",
                "/inputs/Qwen3-8B",
            ])
            .args(["--endpoint", "http://vllm.inference:8000"])
            .output()
            .unwrap(),
        "k8s-job",
    );
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/indexed-job.yaml");
    let checked_in = std::fs::read_to_string(&file).unwrap();
    // The run id is minted when the manifest is written: the checked-in file's stands in.
    let run_id = |text: &str| {
        let at = text.find("llmreplay/run-id: \"").unwrap() + 19;
        text[at..at + text[at..].find('"').unwrap()].to_string()
    };
    let printed = String::from_utf8(out.stdout).unwrap();
    let printed = printed.replace(&run_id(&printed), &run_id(&checked_in));
    assert_eq!(
        printed,
        checked_in,
        "regenerate {} with the command above",
        file.display()
    );
    let jobs: Vec<Job> = serde_yaml::Deserializer::from_str(&checked_in)
        .map(|doc| Job::deserialize(doc).unwrap())
        .collect();
    assert_eq!(jobs.len(), 2);
    let merge = jobs[1].spec.as_ref().unwrap();
    assert_eq!(merge.active_deadline_seconds, Some(7200 + 900));
}

/// Lost records are refused, not summarised: a shard with a line deleted or emptied stops
/// `merge` with the shard and the count named; `report DIR` of an unsharded run with a line
/// deleted names the missing index.
#[test]
fn merge_and_report_refuse_lost_records() {
    let dir = temp_dir("shards-lost");
    let trace = common::text_trace(&dir, 30, 10, 2);
    let drop_line = |file: &Path, n: usize| {
        let text = std::fs::read_to_string(file).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != n)
            .map(|(_, l)| l)
            .collect();
        std::fs::write(file, kept.join("\n") + "\n").unwrap();
    };
    for (case, damage) in [("deleted", 0), ("emptied", 1)] {
        let shards: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("{case}{i}"))).collect();
        for (i, out) in shards.iter().enumerate() {
            shard_run(&trace, out, &format!("{i}/2"), &[]);
        }
        let damaged = shards[1].join("requests.jsonl");
        let before = std::fs::read_to_string(&damaged).unwrap().lines().count();
        match damage {
            0 => drop_line(&damaged, 3),
            _ => std::fs::write(&damaged, "").unwrap(),
        }
        let o = bin()
            .arg("merge")
            .arg(dir.join(format!("{case}-merged")))
            .args(&shards)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{case}: {stderr}");
        let missing = if damage == 0 { 1 } else { before };
        assert!(stderr.contains("shard 1: "), "{case}: {stderr}");
        assert!(
            stderr.contains(&format!("{missing} are missing")),
            "{case}: {stderr}"
        );
    }

    let whole = dir.join("whole");
    ok(
        common::replay_mock(&trace, &whole)
            .args([
                "--time-scale",
                "20",
                "--tokenizer",
                path(&tokenizer("qwen3")),
            ])
            .output()
            .unwrap(),
        "whole",
    );
    let records = whole.join("requests.jsonl");
    let text = std::fs::read_to_string(&records).unwrap();
    let gone: Value = serde_json::from_str(text.lines().nth(7).unwrap()).unwrap();
    drop_line(&records, 7);
    let o = bin().arg("report").arg(&whole).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("missing indices: {}", gone["index"])),
        "{stderr}"
    );
}
