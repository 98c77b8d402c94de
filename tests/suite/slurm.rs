//! deploy/slurm/llmreplay.sbatch run as Slurm would run it, with a stand-in `srun` that starts
//! the job's tasks on this host (SLURM_PROCID set, each task's output to its `--output`
//! file): a clean run merges with the job's run id, a resubmission into the same directory is
//! refused, and a task killed mid-run ends the job with a merged run naming it (exit 2). The
//! real Slurm runs are in the closing notes; this keeps the script honest in CI.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{
    bin, path, plain_trace, read_json, read_jsonl, temp_dir, tokenizer, MockProcess,
};

/// Starts `SLURM_NTASKS` copies of the command after its options, each with SLURM_PROCID,
/// its output to `--output` (`%t` the task); with KILL_TASK=I, kills task I once its
/// heartbeat says it is running. Exits with the highest task status.
const SRUN: &str = r#"#!/bin/bash
out=/dev/null
while [[ $1 == --* ]]; do
  case $1 in --output=*) out=${1#--output=} ;; esac
  shift
done
pids=()
for ((t = 0; t < SLURM_NTASKS; t++)); do
  SLURM_PROCID=$t "$@" > "${out//%t/$t}" 2>&1 &
  pids+=($!)
done
if [ -n "${KILL_TASK:-}" ]; then
  beat="$RUN/meet/live/$KILL_TASK"
  for _ in $(seq 1 3000); do
    grep -q '"state":"running"' "$beat" 2>/dev/null && break
    sleep 0.05
  done
  kill -9 "${pids[$KILL_TASK]}"
fi
status=0
for p in "${pids[@]}"; do
  wait "$p"; s=$?
  [ "$s" -gt "$status" ] && status=$s
done
exit "$status"
"#;

struct Job {
    dir: PathBuf,
    trace: PathBuf,
    mock: MockProcess,
}

fn job(name: &str, records: u64, every_ms: u64) -> Job {
    let dir = temp_dir(name);
    let fake = dir.join("bin");
    std::fs::create_dir_all(&fake).unwrap();
    let srun = fake.join("srun");
    std::fs::write(&srun, SRUN).unwrap();
    std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let trace = plain_trace(&dir, records, every_ms);
    let mock = MockProcess::start(&["--ttft-ms", "1", "--itl-ms", "1"]);
    Job { dir, trace, mock }
}

impl Job {
    /// `bash llmreplay.sbatch OPTIONS` as job `id` of `tasks` tasks.
    fn submit(&self, id: u32, tasks: u32, extra_env: &[(&str, String)], opts: &[&str]) -> Output {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/slurm/llmreplay.sbatch");
        let binary = bin().get_program().to_owned();
        let mut cmd = Command::new("bash");
        cmd.arg(script)
            .current_dir(&self.dir)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.dir.join("bin").display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .env("LLMREPLAY", binary)
            .env("SLURM_JOB_ID", id.to_string())
            .env("SLURM_NTASKS", tasks.to_string())
            .env("SLURM_JOB_NUM_NODES", "1")
            .envs(extra_env.iter().map(|(k, v)| (k, v)))
            .args(["--trace", path(&self.trace), "--model", "m"])
            .args(["--endpoint", &self.mock.url()])
            .args(["--tokenizer", path(&tokenizer("qwen3")), "--quiet"])
            .args(opts);
        let out = cmd.output().unwrap();
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        out
    }

    fn run(&self, id: u32) -> PathBuf {
        self.dir.join(format!("llmreplay-{id}"))
    }
}

fn says(out: &Output, code: i32, needle: &str) {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(code), "{text}");
    assert!(text.contains(needle), "{needle:?} not in: {text}");
}

#[test]
fn the_sbatch_runs_one_run_per_job_and_refuses_a_second_in_its_directory() {
    let j = job("sbatch-clean", 30, 5);
    let out = j.submit(101, 3, &[], &[]);
    says(&out, 0, "run slurm-101, 3 shards");
    let merged = j.run(101).join("merged");
    assert_eq!(read_json(&merged.join("run.json"))["run_id"], "slurm-101");
    assert_eq!(read_jsonl(&merged.join("requests.jsonl")).len(), 30);
    for t in 0..3 {
        assert!(j.run(101).join(format!("shard-{t}.log")).is_file());
    }
    // The same job id again (RESULTS reused): nothing runs, nothing of the first is touched.
    let again = j.submit(101, 3, &[], &[]);
    says(&again, 2, "is there already");
    assert_eq!(read_jsonl(&merged.join("requests.jsonl")).len(), 30);
}

#[test]
fn the_sbatch_merges_a_run_whose_task_was_killed_and_names_it() {
    // 2,000 records 20 ms apart: a 40-s schedule the kill cuts short.
    let j = job("sbatch-killed", 2000, 20);
    let run = j.run(202);
    let out = j.submit(
        202,
        3,
        &[("KILL_TASK", "1".into())],
        &["--heartbeat-timeout", "3"],
    );
    says(&out, 2, "a shard ended with a non-zero status");
    let table = std::fs::read_to_string(run.join("merged/shards.txt")).unwrap();
    assert!(table.contains("shard 1/3 ended lost"), "{table}");
    assert_eq!(
        read_json(&run.join("merged/summary.json"))["ended"]["how"],
        "stopped-by-shard-loss"
    );
}
