#!/usr/bin/env bash
# The manifest `llmreplay k8s-job` prints, run pod by pod with the image under podman, as a
# cluster would run it (no Kubernetes can run here): N shard pods at once with
# JOB_COMPLETION_INDEX and the manifest's args ($(VAR) expanded), the merge pod beside them,
# each as user 65532 on a read-only root with the results volume at /results. Then the same
# manifest again (a rerun over its own files), and a root-owned volume without and with what
# fsGroup does (the volume's group made 65532, group-writable).
# Usage: bash scripts/k8s-job-podman.sh PATH/TO/runc-wrap   (root; podman and runc installed)
set -uo pipefail
wrap=${1:?usage: scripts/k8s-job-podman.sh PATH/TO/runc-wrap}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
cleanup() { [ -n "${mock_pid:-}" ] && kill "$mock_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
printf '[engine]\nruntime = "runc"\n[engine.runtimes]\nrunc = ["%s"]\n' "$(realpath "$wrap")" \
  > "$work/containers.conf"
export CONTAINERS_CONF="$work/containers.conf"
cargo rustc -q --release --locked --bin llmreplay -- -C target-feature=+crt-static || exit 1
bin="${CARGO_TARGET_DIR:-target}/release/llmreplay"
mkdir -p "$work/ctx/src/target/release"
cp "$bin" "$work/ctx/src/target/release/llmreplay" && cp -r assets "$work/ctx/src/assets"
podman build -q --build-context build="$work/ctx" -t llmreplay:k8s -f Containerfile . >/dev/null || exit 1

"$bin" mock --listen 127.0.0.1:0 --ttft-ms 5 --itl-ms 2 > "$work/mock.out" 2>/dev/null &
mock_pid=$!
for _ in $(seq 100); do grep -q '^listening on ' "$work/mock.out" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$work/mock.out")
shards=3
"$bin" k8s-job --shards $shards --image llmreplay:k8s -- \
  --trace /assets/traces/mooncake_conversation_500.jsonl --tokenizer /assets/tokenizers/qwen3 \
  --endpoint "http://$addr" --model m --time-scale 20 --max-requests 300 --quiet > "$work/job.yaml"
# Each container's args, one per line, for the shard pods (index I) and the merge pod.
args() {
  python3 - "$work/job.yaml" "$1" <<'PY'
import sys, yaml
jobs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
which = sys.argv[2]
job = jobs[1] if which == "merge" else jobs[0]
for a in job["spec"]["template"]["spec"]["containers"][0]["args"]:
    print(a.replace("$(JOB_COMPLETION_INDEX)", which))
PY
}
pod() { # NAME VOLUME ARGS...: one pod, as the manifest's securityContext asks
  local name=$1 vol=$2; shift 2
  podman run --rm --read-only --network host --user 65532:65532 ${GROUP_ADD:-} \
    -e JOB_COMPLETION_INDEX="${name#shard-}" -v "$vol:/results" llmreplay:k8s "$@" \
    > "$work/$name.log" 2>&1
}
job() { # VOLUME: the shard pods and the merge pod at once; prints each exit status
  local vol=$1 pids=() names=()
  for ((i = 0; i < shards; i++)); do
    mapfile -t a < <(args "$i"); pod "shard-$i" "$vol" "${a[@]}" & pids+=($!); names+=("shard-$i")
  done
  mapfile -t a < <(args merge); pod merge "$vol" "${a[@]}" & pids+=($!); names+=(merge)
  for k in "${!pids[@]}"; do wait "${pids[$k]}"; echo "${names[$k]} exit $?"; done
}
run_id=$(python3 -c "import sys,yaml; print([d for d in yaml.safe_load_all(open(sys.argv[1])) if d][0]['metadata']['labels']['llmreplay/run-id'])" "$work/job.yaml")
echo "== run $run_id: $shards shard pods and the merge pod"
mkdir -m 0777 "$work/vol"
start=$(date +%s.%N); job "$work/vol"; end=$(date +%s.%N)
echo "   took $(echo "$end - $start" | bc) s"
merged="$work/vol/llmreplay/$run_id/merged"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('   merged:', s['requests']['total'], 'requests,', s['ended']['how'], '| verdict', s['verdict']['result'])" "$merged/summary.json"
tail -5 "$work/merge.log" | sed 's/^/   merge: /'
echo "== the same manifest again, over its run's files"
start=$(date +%s.%N); job "$work/vol"; end=$(date +%s.%N)
echo "   took $(echo "$end - $start" | bc) s"
grep -h "error" "$work/shard-0.log" "$work/merge.log" | cut -c1-200 | sed 's/^/   /'
echo "== a root-owned volume (0755), as a fresh claim may be"
mkdir -m 0755 "$work/rootvol"
start=$(date +%s.%N); job "$work/rootvol"; end=$(date +%s.%N)
echo "   took $(echo "$end - $start" | bc) s"
grep -h "error" "$work/shard-0.log" "$work/merge.log" | cut -c1-200 | sed 's/^/   /'
echo "== the same volume with what fsGroup: 65532 does (group 65532, group-writable, setgid)"
chgrp 65532 "$work/rootvol" && chmod 2775 "$work/rootvol"
GROUP_ADD="--group-add 65532" job "$work/rootvol"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('   merged:', s['requests']['total'], 'requests,', s['ended']['how'])" "$work/rootvol/llmreplay/$run_id/merged/summary.json"
