//! Where a tokenizer comes from: a model name resolved in a (fake) local Hugging Face cache,
//! and the analysis cache that spares later runs the scan of the vocabulary. Each check runs
//! the binary with its own environment (the cache directories are environment variables).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{bin, path, read_jsonl, temp_dir, tokenizer};
use serde_json::Value;

const COMMIT_MAIN: &str = "0123456789abcdef0123456789abcdef01234567";
const COMMIT_V1: &str = "fedcba9876543210fedcba9876543210fedcba98";

/// A hub cache as `huggingface-cli download` leaves it: blobs, snapshots (here copies, not
/// links), and refs naming the commit of each branch or tag.
fn fake_hub(root: &Path) -> PathBuf {
    let hub = root.join("hub");
    let repo = hub.join("models--Org--Model");
    for commit in [COMMIT_MAIN, COMMIT_V1] {
        let snap = repo.join("snapshots").join(commit);
        std::fs::create_dir_all(&snap).unwrap();
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(tokenizer("qwen3").join(f), snap.join(f)).unwrap();
        }
    }
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), COMMIT_MAIN).unwrap();
    std::fs::write(repo.join("refs/v1"), format!("{COMMIT_V1}\n")).unwrap();
    hub
}

/// Bailian-style records of lengths and hash ids (prompts to synthesise).
fn trace(dir: &Path) -> PathBuf {
    let records: Vec<String> = common::bailian_chains(3, 0.01, 0.002, 4)
        .iter()
        .map(Value::to_string)
        .collect();
    let file = dir.join("t.jsonl");
    std::fs::write(&file, records.join("\n")).unwrap();
    file
}

/// `replay --mock` of `trace` with `--tokenizer spec`, HF_* and the analysis cache set by
/// `env` only.
fn replay(trace: &Path, out: &Path, spec: &str, env: &[(&str, &Path)]) -> std::process::Output {
    let mut cmd: Command = common::replay_mock(trace, out);
    cmd.args(["--tokenizer", spec, "--save-prompts"]);
    for var in [
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HOME",
        "XDG_CACHE_HOME",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn run_json(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_model_name_is_found_in_the_local_hugging_face_cache() {
    let dir = temp_dir("hub");
    let hub = fake_hub(&dir);
    let trace = trace(&dir);
    let cache = dir.join("analysis");
    let by_commit = format!("Org/Model@{COMMIT_V1}");
    // (spec, variable and the directory it names, commit, revision)
    let cases = [
        ("Org/Model", ("HF_HUB_CACHE", &hub), COMMIT_MAIN, "main"),
        ("Org/Model@v1", ("HF_HUB_CACHE", &hub), COMMIT_V1, "v1"),
        // A commit names its snapshot directly.
        (&by_commit, ("HF_HUB_CACHE", &hub), COMMIT_V1, COMMIT_V1),
        // HF_HOME's hub/.
        ("Org/Model", ("HF_HOME", &dir), COMMIT_MAIN, "main"),
    ];
    for (i, (spec, var, commit, revision)) in cases.into_iter().enumerate() {
        let out = dir.join(format!("run{i}"));
        let o = replay(
            &trace,
            &out,
            spec,
            &[(var.0, var.1), ("LLMREPLAY_CACHE_DIR", &cache)],
        );
        assert!(o.status.success(), "{spec}: {}", stderr(&o));
        let run = run_json(&out);
        assert_eq!(run["tokenizer_model"]["repo"], "Org/Model", "{spec}");
        assert_eq!(run["tokenizer_model"]["revision"], revision, "{spec}");
        assert_eq!(run["tokenizer_model"]["commit"], commit, "{spec}");
        // The snapshot's tokenizer_config.json was found beside it: the chat template's
        // overhead is taken off, so the mock counts every prompt at its trace length.
        let snap = hub.join("models--Org--Model/snapshots").join(commit);
        assert_eq!(run["tokenizer"], path(&snap), "{spec}");
        let requests = read_jsonl(&out.join("requests.jsonl"));
        assert_eq!(requests.len(), 9, "{spec}");
        assert!(
            requests
                .iter()
                .all(|r| r["status"] == 200 && r["prompt_tokens"] == r["input_tokens"]),
            "{spec}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_model_not_in_the_cache_says_where_it_looked_and_how_to_fetch_it() {
    let dir = temp_dir("hub-missing");
    let hub = fake_hub(&dir);
    let trace = trace(&dir);
    let cases = [
        (
            "Org/Other",
            "huggingface-cli download Org/Other tokenizer.json tokenizer_config.json",
        ),
        // A revision never downloaded: the refs there are listed.
        (
            "Org/Model@v2",
            "huggingface-cli download Org/Model --revision v2 tokenizer.json tokenizer_config.json",
        ),
    ];
    for (spec, hint) in cases {
        let o = replay(&trace, &dir.join("out"), spec, &[("HF_HUB_CACHE", &hub)]);
        assert_eq!(o.status.code(), Some(1), "{spec}");
        let err = stderr(&o);
        assert!(err.contains(hint), "{spec}: {err}");
        assert!(
            err.contains(path(&hub)),
            "names the cache it looked in: {err}"
        );
        assert!(err.contains("HF_HUB_CACHE"), "{err}");
        assert!(err.contains("never downloads"), "{err}");
        assert!(!dir.join("out").exists(), "nothing was run");
    }
    let o = replay(
        &trace,
        &dir.join("out"),
        "Org/Model@v2",
        &[("HF_HUB_CACHE", &hub)],
    );
    assert!(stderr(&o).contains("refs main, v1"), "{}", stderr(&o));
    // The default place, named as such, when no variable is set.
    let o = replay(&trace, &dir.join("out"), "Org/Other", &[("HOME", &dir)]);
    assert!(
        stderr(&o).contains(path(&dir.join(".cache/huggingface/hub"))),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn from_cache(out: &Path) -> bool {
    let analysis = &run_json(out)["tokenizer_analysis"];
    assert_eq!(analysis.as_array().map(Vec::len), Some(1), "{analysis}");
    analysis[0]["from_cache"].as_bool().unwrap()
}

fn prompts_of(out: &Path) -> Vec<String> {
    common::prompt_lines_by_index(&out.join("prompts.jsonl"))
}

#[test]
fn the_analysis_cache_gives_the_same_prompts_and_survives_damage_and_concurrent_runs() {
    let dir = temp_dir("analysis-cache");
    let trace = trace(&dir);
    let tok = path(&tokenizer("qwen3")).to_string();
    let cache = dir.join("cache");
    let empty = PathBuf::new();

    // No cache: analysed, nothing kept.
    let o = replay(
        &trace,
        &dir.join("none"),
        &tok,
        &[("LLMREPLAY_CACHE_DIR", &empty)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let reference = prompts_of(&dir.join("none"));
    assert!(!reference.is_empty());

    let o = replay(
        &trace,
        &dir.join("first"),
        &tok,
        &[("LLMREPLAY_CACHE_DIR", &cache)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!from_cache(&dir.join("first")));
    let entries: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one entry, no temporary file left: {entries:?}"
    );
    replay(
        &trace,
        &dir.join("second"),
        &tok,
        &[("LLMREPLAY_CACHE_DIR", &cache)],
    );
    assert!(from_cache(&dir.join("second")));
    let digest = run_json(&dir.join("second"))["tokenizer_analysis"][0]["digest"].clone();
    assert_eq!(
        entries[0].file_name().unwrap().to_str().unwrap(),
        format!("{}.txt", digest.as_str().unwrap()),
        "the entry is named by the files' digests"
    );
    assert_eq!(prompts_of(&dir.join("first")), reference);
    assert_eq!(prompts_of(&dir.join("second")), reference);

    // A damaged entry is analysed again (and rewritten), never used.
    let good = std::fs::read_to_string(&entries[0]).unwrap();
    let damaged = good.replacen("\t ", "\t x", 1);
    std::fs::write(&entries[0], damaged).unwrap();
    let o = replay(
        &trace,
        &dir.join("damaged"),
        &tok,
        &[("LLMREPLAY_CACHE_DIR", &cache)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!from_cache(&dir.join("damaged")));
    assert_eq!(prompts_of(&dir.join("damaged")), reference);
    assert_eq!(std::fs::read_to_string(&entries[0]).unwrap(), good);

    // Runs starting together on an empty cache each get a sound analysis.
    std::fs::remove_dir_all(&cache).unwrap();
    let runs: Vec<_> = (0..3)
        .map(|i| {
            let mut cmd = common::replay_mock(&trace, &dir.join(format!("together{i}")));
            cmd.args(["--tokenizer", &tok, "--save-prompts"])
                .env("LLMREPLAY_CACHE_DIR", &cache)
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, mut run) in runs.into_iter().enumerate() {
        assert!(run.wait().unwrap().success());
        assert_eq!(prompts_of(&dir.join(format!("together{i}"))), reference);
    }
    replay(
        &trace,
        &dir.join("after"),
        &tok,
        &[("LLMREPLAY_CACHE_DIR", &cache)],
    );
    assert!(from_cache(&dir.join("after")));
    assert_eq!(std::fs::read_to_string(&entries[0]).unwrap(), good);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_deferred_tokenizer_still_counts_when_counting_is_needed() {
    // The second run reads the analysis from the cache, then --verify counts every prompt
    // with the tokenizer it loads only then.
    let dir = temp_dir("analysis-verify");
    let trace = trace(&dir);
    let cache = dir.join("cache");
    for _ in 0..2 {
        let o = bin()
            .args(["prompts", "--trace", path(&trace), "--verify", "--json"])
            .args(["--tokenizer", path(&tokenizer("qwen3"))])
            .env("LLMREPLAY_CACHE_DIR", &cache)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["verify"]["checked"], 9, "{report}");
        assert_eq!(report["verify"]["exact"], 9, "{report}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
