#!/usr/bin/env bash
# Reference replays: what a refactor must not change.
#
#   scripts/reference-replays.sh BINARY OUT_DIR
#
# Runs four replays against mocks on 127.0.0.1 with BINARY and writes, in OUT_DIR/digest.txt,
# the sha256 of each run's prompts.jsonl and of its records with the timings taken out (every
# `*_ms` field but a first turn's `scheduled_ms`: a later turn's follows its parent's end),
# and the endpoint's port, which the mock picks). Two binaries
# replay the same when their digest files are equal:
#
#   scripts/reference-replays.sh /tmp/before/llmreplay /tmp/ref-before
#   scripts/reference-replays.sh target/release/llmreplay /tmp/ref-after
#   diff /tmp/ref-before/digest.txt /tmp/ref-after/digest.txt
#
# The runs: the README demo (60 records at 100x), a TraceLab session run against a mock that
# injects faults (by request index, so the same requests fail every time), an agentic sample
# threaded live, and the demo as 3 shards merged.
set -euo pipefail
BIN=$(realpath "$1")
OUT=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOK=$ROOT/assets/tokenizers/qwen3
rm -rf "$OUT" && mkdir -p "$OUT"
cd "$OUT"

# Records as the refactor must keep them: by index, timings and ports out.
normalise() {
  python3 - "$1" <<'EOF'
import json, re, sys
rows = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k in list(r):
        if k.endswith("_ms") and (k != "scheduled_ms" or r.get("parent_index") is not None):
            del r[k]
    if isinstance(r.get("endpoint"), str):
        r["endpoint"] = re.sub(r":\d+", ":PORT", r["endpoint"])
    rows.append(r)
rows.sort(key=lambda r: (r.get("index"), r.get("attempt", 0)))
for r in rows:
    print(json.dumps(r, sort_keys=True))
EOF
}

digest() {
  local name=$1 dir=$2
  echo "$name prompts $(sha256sum <"$dir/prompts.jsonl" | cut -c1-16)" >>digest.txt
  normalise "$dir/requests.jsonl" >"$name.records.jsonl"
  echo "$name records $(sha256sum <"$name.records.jsonl" | cut -c1-16) ($(wc -l <"$name.records.jsonl") lines)" >>digest.txt
}

mock() { # PORT_FILE ARGS...: a mock on port 0, its address in PORT_FILE
  local log=$1; shift
  "$BIN" mock --listen 127.0.0.1:0 "$@" >"$log" 2>&1 &
  MOCK_PID=$!
  for _ in $(seq 100); do
    grep -qo '127.0.0.1:[0-9]*' "$log" && break
    sleep 0.1
  done
  MOCK=http://$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1)
}

DEMO=(--trace "$ROOT/assets/traces/mooncake_conversation_500.jsonl" --tokenizer "$TOK"
  --time-scale 100 --max-requests 60 --save-prompts --seed 3)

"$BIN" replay --mock "${DEMO[@]}" --output demo >demo.log 2>&1
digest demo demo

mock faults.mock.log --ttft-ms 5 --itl-ms 1 --fault status:503:0.2 --fault reset-mid-stream:0.1 --seed 1
"$BIN" replay --endpoint "$MOCK" --model m --trace "$ROOT/tests/data/formats/tracelab_sample.csv" \
  --tokenizer "$TOK" --time-scale 10 --save-prompts --seed 3 --output tracelab >tracelab.log 2>&1 || true
kill $MOCK_PID
digest tracelab tracelab

"$BIN" replay --mock --trace "$ROOT/tests/data/agentic/dag_sample.jsonl" --tokenizer "$TOK" \
  --time-scale 10 --save-prompts --seed 3 --carry-forward on --output agentic >agentic.log 2>&1
digest agentic agentic

mock shards.mock.log --ttft-ms 5 --itl-ms 1
AT=$(($(date +%s%3N) + 3000))
for i in 0 1 2; do
  "$BIN" replay --endpoint "$MOCK" --model m "${DEMO[@]}" --shard "$i/3" --start-at "$AT" \
    --output "shard-$i" >"shard-$i.log" 2>&1 &
done
wait %2 %3 %4
kill $MOCK_PID
"$BIN" merge merged shard-0 shard-1 shard-2 >merge.log 2>&1
cat shard-0/prompts.jsonl shard-1/prompts.jsonl shard-2/prompts.jsonl | sort >merged/prompts.jsonl
digest shards merged

cat digest.txt
