#!/usr/bin/env bash
# The seeds' headline usage as a benchmark: INSTANCES mock servers, each its own process,
# replayed directly (round-robin) with --num-producer NUM_PRODUCER --channel-capacity
# CHANNEL_CAPACITY. Prints requests, output tok/s, client drift p50/p99/max, the client's
# CPU-seconds and peak RSS (/usr/bin/time), and the verdict.
# Usage: scripts/bench-seeds.sh [bench-configs/seeds-16.env]   (BIN=path: that binary)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1090
source "${1:-bench-configs/seeds-16.env}"
if [ -n "${BIN:-}" ]; then bin=$(realpath "$BIN"); else cargo build --release -q; bin=$PWD/target/release/llmreplay; fi
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
endpoints=()
for i in $(seq "$INSTANCES"); do
  "$bin" mock --listen 127.0.0.1:0 --ttft-ms "$MOCK_TTFT_MS" --itl-ms "$MOCK_ITL_MS" > "$work/mock-$i.addr" 2>/dev/null &
  pids+=($!)
done
for i in $(seq "$INSTANCES"); do
  for _ in $(seq 100); do grep -q listening "$work/mock-$i.addr" && break; sleep 0.1; done
  endpoints+=(--endpoint "http://$(sed -n 's/^listening on //p' "$work/mock-$i.addr")")
done
/usr/bin/time -v -o "$work/time.txt" "$bin" replay --quiet "${endpoints[@]}" --model mock \
  --trace "$TRACE" --tokenizer "$TOKENIZER" --max-requests "$RECORDS" --time-scale "$TIME_SCALE" \
  --num-producer "$NUM_PRODUCER" --channel-capacity "$CHANNEL_CAPACITY" --output "$work/run" > /dev/null
python3 - "$work" "$INSTANCES" "$NUM_PRODUCER" <<'PY'
import json, re, sys
work, instances, producers = sys.argv[1], sys.argv[2], sys.argv[3]
s = json.load(open(f"{work}/run/summary.json"))
t = open(f"{work}/time.txt").read()
num = lambda k: float(re.search(re.escape(k) + r":\s*([\d.]+)", t).group(1))
cpu = num("User time (seconds)") + num("System time (seconds)")
d = s["drift_ms"]
print(f"{instances} instances, {producers} producers: {s['requests']['total']} requests "
      f"({s['requests']['ok']} ok) in {s['duration_s']:.1f} s, {s['output_throughput']:,.0f} output tok/s")
print(f"drift ms: p50 {d['p50']:.3f} p99 {d['p99']:.3f} max {d['max']:.3f}; late sends {s['late_sends']}")
print(f"client CPU {cpu:.1f} s, peak RSS {num('Maximum resident set size (kbytes)') / 1024:.0f} MB; "
      f"verdict {s['verdict']['result']}")
PY
