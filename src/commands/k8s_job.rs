//! `llmreplay k8s-job`: a Kubernetes Indexed Job that replays one trace from N pods as the
//! N shards of one run, and a Job that merges them.
//!
//! Each manifest is one run, with an id of its own (`--run-id`, or minted when written): its
//! files go to `/results/NAME/ID/` on the shared volume. The pods meet in its `meet/`
//! (`--rendezvous`): each waits at the readiness barrier until all are ready, however long
//! scheduling and image pulls take, and each stops when another is lost. Every pod reads its
//! index from `JOB_COMPLETION_INDEX` (`--shard-count N` makes the replay read it). The merge
//! Job waits for them (`merge --wait`, bounded by the deadline, and ended at once by the
//! heartbeats when the run is called off), so both Jobs can be applied at once. A manifest
//! applied again finds its run's files: every shard refuses, and merge exits 2. The manifest
//! is type-checked in the tests against Kubernetes' own API structs, and validated in CI
//! against the schemas of every version from [`MIN_KUBERNETES`].

use serde_json::{json, Map, Value};

pub use crate::plan::hosts::{Inputs, K8sJobPlan, INPUTS_DIR};

pub const RESULTS_DIR: &str = "/results";
/// The merge Job may run this long past the shards' deadline (reading and rendering).
const MERGE_SLACK_S: u64 = 900;
/// The oldest Kubernetes the manifest is for: `backoffLimitPerIndex` and the `FailIndex`
/// action are on by default from 1.29.
pub const MIN_KUBERNETES: &str = "1.29";
/// Finished Jobs (and their pods, with their logs) are deleted after a day; the results stay
/// on the claim.
const TTL_AFTER_FINISHED_S: u64 = 86_400;
/// The image's user (Containerfile): the pods run as it, and own what they write.
const IMAGE_UID: u64 = 65532;

/// The two Jobs, as one YAML stream.
pub fn manifest(p: &K8sJobPlan) -> String {
    let results = format!("{RESULTS_DIR}/{}/{}", p.name, p.run_id);
    let (mounts, volumes) = volumes(p);
    let mut text = header(p, &results);
    for job in [
        shards_job(p, &results, mounts, &volumes),
        merge_job(p, &results, &volumes[0]),
    ] {
        text.push_str("---\n");
        yaml_map(
            job.as_object().expect("a Job is an object"),
            0,
            false,
            &mut text,
        );
    }
    text
}

/// The shard pods' volume mounts and the volumes: results, and the inputs when given.
fn volumes(p: &K8sJobPlan) -> (Vec<Value>, Vec<Value>) {
    let mut mounts = vec![json!({"name": "results", "mountPath": RESULTS_DIR})];
    let mut volumes = vec![json!({
        "name": "results",
        "persistentVolumeClaim": {"claimName": p.results_claim},
    })];
    match &p.inputs {
        Inputs::None => {}
        Inputs::ConfigMap(name) => {
            mounts.push(json!({"name": "inputs", "mountPath": INPUTS_DIR, "readOnly": true}));
            volumes.push(json!({"name": "inputs", "configMap": {"name": name}}));
        }
        Inputs::Claim(claim) => {
            mounts.push(json!({"name": "inputs", "mountPath": INPUTS_DIR, "readOnly": true}));
            volumes.push(json!({
                "name": "inputs",
                "persistentVolumeClaim": {"claimName": claim, "readOnly": true},
            }));
        }
    }
    (mounts, volumes)
}

/// A Job of one container, as both are: labelled with the run, non-root on a read-only
/// root (it writes only to /results), no restarts, deleted a day after it ends.
fn job(p: &K8sJobPlan, name: &str, mut container: Value, volumes: Value, deadline_s: u64) -> Value {
    let labels = json!({"app.kubernetes.io/name": "llmreplay", "llmreplay/run": p.name,
                        "llmreplay/run-id": p.run_id});
    let mut metadata = json!({"name": name, "labels": labels});
    if let Some(ns) = &p.namespace {
        metadata["namespace"] = json!(ns);
    }
    container["securityContext"] = json!({
        "runAsNonRoot": true,
        "runAsUser": IMAGE_UID,
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
    });
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    // A volume owned by root is made writable for the image's group.
                    "securityContext": {
                        "fsGroup": IMAGE_UID,
                        "fsGroupChangePolicy": "OnRootMismatch",
                    },
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    })
}

/// The Indexed Job: one pod a shard, each `replay` with the user's options and the run's.
fn shards_job(p: &K8sJobPlan, results: &str, mounts: Vec<Value>, volumes: &[Value]) -> Value {
    let mut args: Vec<Value> = vec![json!("replay")];
    args.extend(p.replay.iter().map(|a| json!(a)));
    args.extend([
        json!("--run-id"),
        json!(p.run_id),
        json!("--shard-count"),
        json!(p.shards.to_string()),
        json!("--shard-by"),
        json!(p.shard_by.to_string()),
        // The barrier (unless a fixed start is given), the heartbeats, failure detection.
        json!("--rendezvous"),
        json!(format!("{results}/meet")),
        json!("--output"),
        json!(format!("{results}/shard-$(JOB_COMPLETION_INDEX)")),
    ]);
    let mut env = vec![
        json!({
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath":
                "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
        }),
        // The tokenizer's analysis, kept on the shared volume: done by the first run, read by
        // every later pod (the inputs volume is mounted read-only).
        json!({"name": "LLMREPLAY_CACHE_DIR", "value": format!("{RESULTS_DIR}/tokenizer-cache")}),
    ];
    env.extend(p.secret_env.iter().map(|(var, secret, key)| {
        json!({"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    }));
    if let Some(at) = p.start_at_unix_ns {
        args.extend([json!("--start-at"), json!("$(LLMREPLAY_START_AT)")]);
        env.insert(
            0,
            json!({"name": "LLMREPLAY_START_AT", "value": (at / 1_000_000).to_string()}),
        );
    }
    let mut shards_job = job(
        p,
        &p.name,
        json!({
            "name": "replay",
            "image": p.image,
            "args": args,
            "env": env,
            "resources": {
                "requests": {"cpu": p.cpu, "memory": p.memory},
                "limits": {"memory": p.memory},
            },
            "volumeMounts": mounts,
        }),
        json!(volumes),
        p.deadline_s,
    );
    let spec = &mut shards_job["spec"];
    spec["completionMode"] = json!("Indexed");
    spec["completions"] = json!(p.shards);
    spec["parallelism"] = json!(p.shards);
    // No retries: a shard started again could not join a run whose others have started
    // (its ready file is there, the barrier has passed). A failed pod fails its index only;
    // the other shards stop by themselves (--on-shard-loss), and merge names it.
    spec["backoffLimitPerIndex"] = json!(0);
    spec["podFailurePolicy"] = json!({"rules": [
        {"action": "FailIndex",
         "onExitCodes": {"containerName": "replay", "operator": "NotIn", "values": [0]}},
        {"action": "FailIndex",
         "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]});
    // One shard a node where the cluster can: shards on one node share its cores and NIC.
    spec["template"]["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"llmreplay/run": p.name, "llmreplay/part": "shard"}},
    }]);
    spec["template"]["metadata"]["labels"]["llmreplay/part"] = json!("shard");
    shards_job
}

/// The Job that waits for the shards and merges them (the results volume only).
fn merge_job(p: &K8sJobPlan, results: &str, results_volume: &Value) -> Value {
    let mut args = vec![json!("merge"), json!(format!("{results}/merged"))];
    args.extend((0..p.shards).map(|i| json!(format!("{results}/shard-{i}"))));
    // No --force: a merged run already there is this run's, merged once.
    args.extend([
        json!("--rendezvous"),
        json!(format!("{results}/meet")),
        json!("--wait"),
        json!(p.deadline_s.to_string()),
    ]);
    let mut merge_job = job(
        p,
        &format!("{}-merge", p.name),
        json!({
            "name": "merge",
            "image": p.image,
            "args": args,
            "resources": {"requests": {"cpu": "1", "memory": p.memory}, "limits": {"memory": p.memory}},
            "volumeMounts": [{"name": "results", "mountPath": RESULTS_DIR}],
        }),
        json!([results_volume]),
        p.deadline_s + MERGE_SLACK_S,
    );
    merge_job["spec"]["backoffLimit"] = json!(0);
    merge_job
}

/// The manifest's opening comment: what the run is and how it goes.
fn header(p: &K8sJobPlan, results: &str) -> String {
    let start = match p.start_at_unix_ns {
        Some(at) => format!(
            "starting together at {}",
            crate::sys::wall_start::rfc3339_utc(at)
        ),
        None => {
            format!("starting together 5 s after the last pod is ready (barrier in {results}/meet)")
        }
    };
    format!(
        "# llmreplay {}: run {} of {} shards, for Kubernetes {MIN_KUBERNETES} or newer,\n\
         # {start}.\n\
         # Apply both Jobs at once (kubectl apply -f FILE). A shard that fails or is lost stops\n\
         # the others; `llmreplay watch {results}/meet` shows them live. Results:\n\
         # {results}/shard-I on claim {}, merged into {results}/merged by the second Job,\n\
         # which ends Complete when the run completed, else Failed (its log says why).\n\
         # This file is one run: applied again, every shard refuses the run's own files and\n\
         # the merge fails; write a new one with `llmreplay k8s-job` for the next run.\n",
        env!("CARGO_PKG_VERSION"),
        p.run_id,
        p.shards,
        p.results_claim
    )
}

/// A key as YAML: plain when it is a simple name, else JSON-quoted.
fn yaml_key(k: &str) -> String {
    let plain = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        && k.starts_with(|c: char| c.is_ascii_alphabetic());
    if plain {
        k.to_string()
    } else {
        json!(k).to_string()
    }
}

/// A scalar (or empty container) as YAML: strings JSON-quoted, which YAML reads alike.
fn yaml_scalar(v: &Value) -> Option<String> {
    match v {
        Value::Object(m) if m.is_empty() => Some("{}".into()),
        Value::Array(a) if a.is_empty() => Some("[]".into()),
        Value::Object(_) | Value::Array(_) => None,
        v => Some(v.to_string()),
    }
}

/// A map in block style at `indent`; with `inline`, its first key goes on the current line
/// (after a sequence's `- `).
fn yaml_map(m: &Map<String, Value>, indent: usize, inline: bool, out: &mut String) {
    for (i, (k, v)) in m.iter().enumerate() {
        if !(inline && i == 0) {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&yaml_key(k));
        out.push(':');
        yaml_value(v, indent, out);
    }
}

/// What follows `key:` (or `- `): a scalar on the line, else a nested block.
fn yaml_value(v: &Value, indent: usize, out: &mut String) {
    if let Some(s) = yaml_scalar(v) {
        out.push(' ');
        out.push_str(&s);
        out.push('\n');
        return;
    }
    out.push('\n');
    match v {
        Value::Object(m) => yaml_map(m, indent + 2, false, out),
        Value::Array(items) => {
            for item in items {
                out.push_str(&" ".repeat(indent + 2));
                out.push_str("- ");
                match item {
                    Value::Object(m) if !m.is_empty() => yaml_map(m, indent + 4, true, out),
                    other => match yaml_scalar(other) {
                        Some(s) => {
                            out.push_str(&s);
                            out.push('\n');
                        }
                        None => {
                            out.pop();
                            yaml_value(other, indent + 2, out)
                        }
                    },
                }
            }
        }
        _ => unreachable!("scalars are written above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_of_nested_values() {
        let mut out = String::new();
        let v = json!({"a": {"b": [1, "x: y", {"c": true, "d": []}]}, "e": {}});
        yaml_map(v.as_object().unwrap(), 0, false, &mut out);
        assert_eq!(
            out,
            "a:\n  b:\n    - 1\n    - \"x: y\"\n    - c: true\n      d: []\ne: {}\n"
        );
    }
}
