#!/usr/bin/env bash
# Producer scaling: runs the replay with senders that send nothing (`--null-sink`, hidden)
# at each producer count and prints, per trace and count: requests built, requests/s, the
# speed-up over one producer, and the serial share (the share of the wall time the shared
# reader's lock was held: records are decided there in trace order; near 1, more producers
# cannot help).
# Usage: scripts/bench-producers.sh [bench-configs/producers.env]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1090
source "${1:-bench-configs/producers.env}"
cargo build --release -q
bin=target/release/llmreplay
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Bailian chains: each turn's prompt is its parent's blocks and 4 more.
python3 - "$out/multi.jsonl" "$CONVERSATIONS" "$TURNS" <<'PY'
import json, sys
path, n, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows, block = [], 0
for c in range(n):
    parent, ids = -1, []
    for t in range(1, turns + 1):
        ids = ids + list(range(block, block + 4)); block += 4
        chat = c * 100 + t
        rows.append({"chat_id": chat, "parent_chat_id": parent, "timestamp": c * 0.01 + t * 2.0,
                     "input_length": len(ids) * 16, "output_length": 20, "type": "text",
                     "turn": t, "hash_ids": ids})
        parent = chat
rows.sort(key=lambda r: r["timestamp"])
open(path, "w").write("\n".join(json.dumps(r) for r in rows) + "\n")
PY
printf '%-12s %9s %9s %12s %8s %8s\n' trace producers requests requests/s speedup serial
for trace in "$TRACE" "$out/multi.jsonl"; do
  name=$(basename "$trace" .jsonl)
  base=""
  for p in $PRODUCERS; do
    line=$("$bin" replay --quiet --mock --null-sink --trace "$trace" --tokenizer "$TOKENIZER" \
      --num-producer "$p" --channel-capacity "$CHANNEL_CAPACITY" --loop "$PASSES" \
      --output "$out/run-$name-$p" 2>/dev/null | grep '^null sink:' || true)
    if [ -z "$line" ]; then echo "$name $p: no null-sink line" >&2; exit 1; fi
    python3 - "$line" "$name" "$p" "${base:-0}" <<'PY'
import re, sys
line, name, p, base = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
built = int(re.search(r"null sink: (\d+) requests", line).group(1))
rate = float(re.search(r": (\d+) requests/s", line).group(1))
serial = float(re.search(r"serial share ([0-9.]+)", line).group(1))
speedup = rate / base if base else 1.0
print(f"{name[:12]:<12} {p:9d} {built:9d} {rate:12.0f} {speedup:8.2f} {serial:8.3f}")
PY
    rate=$(echo "$line" | sed -n 's/.*: \([0-9]*\) requests\/s.*/\1/p')
    base=${base:-$rate}
  done
done
