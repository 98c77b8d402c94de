//! `llmreplay k8s-job`: a Kubernetes Indexed Job that replays one trace from N pods as the
//! N shards of one run, and a Job that merges them.
//!
//! The common start instant is computed once, here, and written into the manifest; every pod
//! reads its index from `JOB_COMPLETION_INDEX` (`--shard-count N` makes the replay read it).
//! Shards write to one ReadWriteMany volume; the merge Job waits for them (`merge --wait`),
//! so both Jobs can be applied at once.

use serde_json::{json, Map, Value};

use crate::shard::ShardBy;

pub use crate::plan::hosts::{Inputs, K8sJobPlan, INPUTS_DIR};

pub const RESULTS_DIR: &str = "/results";
/// How long the merge Job waits for the shards, seconds.
const MERGE_WAIT_S: u64 = 7 * 86_400;

/// The two Jobs, as one YAML stream.
pub fn manifest(p: &K8sJobPlan) -> String {
    let results = format!("{RESULTS_DIR}/{}", p.name);
    let start_ms = p.start_at_unix_ns / 1_000_000;
    let mut args: Vec<Value> = vec![json!("replay")];
    args.extend(p.replay.iter().map(|a| json!(a)));
    args.extend([
        json!("--shard-count"),
        json!(p.shards.to_string()),
        json!("--shard-by"),
        json!(match p.shard_by {
            ShardBy::Session => "session",
            ShardBy::Endpoint => "endpoint",
        }),
        json!("--start-at"),
        json!("$(LLMREPLAY_START_AT)"),
        json!("--output"),
        json!(format!("{results}/shard-$(JOB_COMPLETION_INDEX)")),
    ]);
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
    let labels = json!({"app.kubernetes.io/name": "llmreplay", "llmreplay/run": p.name});
    // A Job of one pod template; neither is retried: a shard retried later would miss the
    // common start (a failed shard is seen, merge names it, rather than rerun).
    let job = |name: &str, container: Value, volumes: Value| {
        let mut metadata = json!({"name": name, "labels": labels});
        if let Some(ns) = &p.namespace {
            metadata["namespace"] = json!(ns);
        }
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [container],
                        "volumes": volumes,
                    },
                },
            },
        })
    };
    let mut shards_job = job(
        &p.name,
        json!({
            "name": "replay",
            "image": p.image,
            "args": args,
            "env": [
                {"name": "LLMREPLAY_START_AT", "value": start_ms.to_string()},
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath":
                        "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
                },
            ],
            "volumeMounts": mounts,
        }),
        json!(volumes),
    );
    let spec = &mut shards_job["spec"];
    spec["completionMode"] = json!("Indexed");
    spec["completions"] = json!(p.shards);
    spec["parallelism"] = json!(p.shards);
    let mut merge_args = vec![json!("merge"), json!(format!("{results}/merged"))];
    merge_args.extend((0..p.shards).map(|i| json!(format!("{results}/shard-{i}"))));
    merge_args.extend([
        json!("--wait"),
        json!(MERGE_WAIT_S.to_string()),
        json!("--force"),
    ]);
    let merge_job = job(
        &format!("{}-merge", p.name),
        json!({
            "name": "merge",
            "image": p.image,
            "args": merge_args,
            "volumeMounts": [{"name": "results", "mountPath": RESULTS_DIR}],
        }),
        json!([volumes[0]]),
    );
    let start = crate::sys::wall_start::rfc3339_utc(p.start_at_unix_ns);
    let mut text = format!(
        "# llmreplay {}: {} shards of one run, starting together at {start}.\n\
         # Apply both Jobs at once (kubectl apply -f FILE); pods not running by then start\n\
         # late and say so. Results: {results}/shard-I on claim {}, merged into\n\
         # {results}/merged by the second Job once every shard has finished.\n",
        env!("CARGO_PKG_VERSION"),
        p.shards,
        p.results_claim
    );
    for job in [shards_job, merge_job] {
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
