#!/usr/bin/env bash
# What `llmreplay capture` adds: the same load replayed against a mock in its own process,
# straight and through the capture, alternately, ROUNDS times; per round the TTFT p50 and p99
# of each, the difference (what the proxy adds), the capture's CPU per 1M tokens it
# forwarded (user+system time of its process, less its start-up's), and how far its timestamps lie
# from the replay's sends (p99 over the requests, the k-th arrival against the k-th send,
# each from the first).
# Usage: scripts/bench-capture.sh [bench-configs/capture.env]
# BIN=path runs that binary instead of building this checkout (to compare two builds).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1090
source "${1:-bench-configs/capture.env}"
if [ -n "${BIN:-}" ]; then
  bin=$(realpath "$BIN")
else
  cargo build --release -q
  bin=$PWD/target/release/llmreplay
fi
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$out"' EXIT
# STREAMS requests, each OUTPUT tokens, text prompts of PROMPT words, sent evenly over
# SPREAD_MS (0: all at once).
python3 - "$out/trace.jsonl" "$STREAMS" "$OUTPUT" "$PROMPT" "${SPREAD_MS:-0}" <<'PY'
import json, sys
path, n, output, words, spread = sys.argv[1], *map(int, sys.argv[2:6])
with open(path, "w") as f:
    for i in range(n):
        text = " ".join(["load"] * words) + f" {i}"
        at = i * spread / n
        f.write(json.dumps({"timestamp": at, "text_input": text, "output_length": output}) + "\n")
PY
"$bin" mock --listen 127.0.0.1:0 --ttft-ms "$TTFT_MS" --itl-ms "$ITL_MS" \
  --tokenizer "$TOKENIZER" > "$out/mock.out" 2>/dev/null &
until grep -q listening "$out/mock.out" 2>/dev/null; do sleep 0.1; done
mock=$(sed -n 's/^listening on //p' "$out/mock.out")
ttft() { python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['ttft_ms']; print(t['p50'], t['p99'])" "$1/summary.json"; }
replay() { "$bin" replay --quiet --model m --api openai-completions --endpoint "http://$1" \
  --trace "$out/trace.jsonl" --connections "$STREAMS" --output "$2" >/dev/null 2>&1; }
printf '%-6s %10s %10s %10s %10s %10s %12s %10s\n' round p50 p99 p50-prx p99-prx added-p99 cpu-s/1Mtok ts-err-p99
for r in $(seq 1 "$ROUNDS"); do
  replay "$mock" "$out/direct-$r"
  # Its CPU (user + system seconds) as it exits, less what it spent before the load.
  /usr/bin/time -f "%U %S" -o "$out/cpu-$r" \
    "$bin" capture --listen 127.0.0.1:0 --upstream "http://$mock" --tokenizer "$TOKENIZER" \
    --output "$out/cap-$r.jsonl" --max-requests "$STREAMS" > "$out/cap-$r.out" 2>/dev/null &
  cap_pid=$!
  until grep -q capturing "$out/cap-$r.out" 2>/dev/null; do sleep 0.1; done
  # Its CPU before the load (loading the tokenizer, measuring the template), left out.
  started=$(awk '{print $14 + $15}' "/proc/$(pgrep -P "$cap_pid")/stat")
  cap=$(sed -n 's/^capturing on //p' "$out/cap-$r.out")
  replay "$cap" "$out/proxied-$r"
  wait "$cap_pid"
  cpu=$(awk -v s="$started" -v hz="$(getconf CLK_TCK)" '{print $1 + $2 - s / hz}' "$out/cpu-$r")
  read -r d50 d99 <<< "$(ttft "$out/direct-$r")"
  read -r p50 p99 <<< "$(ttft "$out/proxied-$r")"
  tokens=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['output_tokens'])" "$out/proxied-$r/summary.json")
  python3 - "$r" "$d50" "$d99" "$p50" "$p99" "$cpu" "$tokens" \
    "$out/cap-$r.jsonl" "$out/proxied-$r/requests.jsonl" <<'PY'
import json, sys
r, d50, d99, p50, p99, cpu, tokens, cap, sent = sys.argv[1:]
cpu = float(cpu)
arrivals = sorted(json.loads(l)["timestamp"] * 1e3 for l in open(cap))
sends = sorted(json.loads(l)["sent_ms"] for l in open(sent))
errs = sorted(abs(a - (s - sends[0])) for a, s in zip(arrivals, sends))
err99 = errs[max(int(len(errs) * 0.99) - 1, 0)]
print(f"{r:<6} {float(d50):10.3f} {float(d99):10.3f} {float(p50):10.3f} {float(p99):10.3f} "
      f"{float(p99) - float(d99):10.3f} {cpu / max(int(tokens), 1) * 1e6:12.2f} {err99:10.3f}")
PY
done
