#!/usr/bin/env bash
# Does the stand-alone `mock --tokenizer` hold its configured TTFT while it counts real
# prompts? Replays the bundled conversation trace's prompts (12k tokens on average) at RATE
# req/s against `mock --tokenizer --ttft-ms TTFT_MS` in a separate process and prints the
# client's TTFT distribution against the configured value, and that every prompt was counted
# exactly.
# MOCK_CPUS (a taskset list) keeps the mock off the client's pinned sender core on a small
# machine, as a real server would be. COUNT_THREADS=0 runs the mock without a tokenizer: the
# baseline of what this machine gives without counting.
# Usage: RATE=30 SECONDS_=60 COUNT_THREADS=4 [MOCK_CPUS=0] scripts/bench-mock-ttft.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-30}
SECONDS_=${SECONDS_:-60}
TTFT_MS=${TTFT_MS:-20}
COUNT_THREADS=${COUNT_THREADS:-4}
TRACE=${TRACE:-tests/data/mooncake/conversation_trace.jsonl}
TOKENIZER=${TOKENIZER:-assets/tokenizers/qwen3}
cargo build --release -q
bin=${BIN:-target/release/llmreplay}
out=$(mktemp -d)
pin=()
[ -n "${MOCK_CPUS:-}" ] && pin=(taskset -c "$MOCK_CPUS")
counting=(--tokenizer "$TOKENIZER" --count-threads "$COUNT_THREADS")
[ "$COUNT_THREADS" = 0 ] && counting=()
"${pin[@]}" "$bin" mock --listen 127.0.0.1:0 --ttft-ms "$TTFT_MS" --itl-ms 5 "${counting[@]}" \
  > "$out/mock.addr" 2> "$out/mock.err" &
mock=$!
trap 'kill $mock 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 100); do grep -q listening "$out/mock.addr" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$out/mock.addr")
# The trace's own mean rate, scaled to RATE; DURATION is in trace seconds.
scale=$("$bin" inspect --json "$TRACE" | python3 -c "import json,sys; s=json.load(sys.stdin); print($RATE / (s['records'] / (s['span_ms'] / 1000)))")
trace_s=$(python3 -c "print($SECONDS_ * $scale)")
echo "mock ${counting[*]:-(no tokenizer)} --ttft-ms $TTFT_MS; $RATE req/s (time scale $scale) for ${SECONDS_} s"
"$bin" replay --quiet --endpoint "http://$addr" --model mock --trace "$TRACE" \
  --tokenizer "$TOKENIZER" --time-scale "$scale" --duration "$trace_s" --output "$out/run" > /dev/null
python3 - "$out/run/summary.json" "$TTFT_MS" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); t = s["ttft_ms"]; want = float(sys.argv[2])
m = s["input_length_match"]
print(f'requests {s["requests"]["total"]} at {s["request_throughput"]:.1f} req/s, '
      f'{s["input_tokens"] / s["duration_s"]:.0f} prompt tok/s counted')
print(f'TTFT ms: p50 {t["p50"]:.2f}  p99 {t["p99"]:.2f}  max {t["max"]:.2f}  '
      f'(configured {want:g}; p99 - configured = {t["p99"] - want:+.2f})')
e = s["e2el_ms"]
print(f'prompt tokens exact: {m["exact"]}/{m["checked"]}; E2EL ms p50 {e["p50"]:.0f} max {e["max"]:.0f} '
      '(the usage event waits for the count)')
PY
