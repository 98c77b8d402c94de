#!/usr/bin/env bash
# Replays a trace prefix against a separate mock process at increasing time scales and prints,
# per scale: achieved req/s, output tok/s, send drift p50/p99/max, late sends, sender CPU.
# Usage: scripts/bench-scale.sh [bench-configs/scale-500.env]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1090
source "${1:-bench-configs/scale-500.env}"
cargo build --release -q
bin=target/release/llmreplay
out=$(mktemp -d)
"$bin" mock --listen 127.0.0.1:0 --ttft-ms "$MOCK_TTFT_MS" --itl-ms "$MOCK_ITL_MS" > "$out/mock.addr" &
mock=$!
trap 'kill $mock 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 50); do grep -q listening "$out/mock.addr" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$out/mock.addr")
printf '%-8s %10s %12s %10s %10s %10s %6s\n' scale req/s out_tok/s drift_p50 drift_p99 drift_max late
for s in $SCALES; do
  "$bin" replay --quiet --endpoint "http://$addr" --model mock --trace "$TRACE" --tokenizer "$TOKENIZER" \
    --max-requests "$RECORDS" --time-scale "$s" --output "$out/run-$s" > /dev/null
  python3 - "$out/run-$s/summary.json" "$s" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); d = s["drift_ms"]
print(f'{sys.argv[2]:<8} {s["request_throughput"]:10.1f} {s["output_throughput"]:12.0f} {d["p50"]:10.3f} {d["p99"]:10.3f} {d["max"]:10.3f} {s["late_sends"]:6d}')
PY
done
