#!/usr/bin/env bash
# Timing truth: how far llmreplay's TTFT, ITL and E2EL are from what the server itself did.
# STREAMS requests start within SPREAD_MS and stream TOKENS tokens each (ITL_MS apart), so
# they are all open at once. The mock (its own process, on MOCK_CORES) logs, per request, the
# kernel's receive time of the request's first byte, the time each write of events began
# and its last byte, on CLOCK_MONOTONIC (--timing-log); run.json gives the client's time 0 on
# the same clock. Printed: client minus server, per request (TTFT, E2EL) and per token gap
# (ITL), as p50 / p99 / max in ms. The client's span also holds loopback transit both ways:
# the error of the whole measurement, not of the client alone.
# Usage: STREAMS=1000 [SPREAD_MS=1000 TOKENS=100 ITL_MS=20 TTFT_MS=20 NUM_SENDER=1]
#        scripts/bench-timing-truth.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMS=${STREAMS:-1000}
SPREAD_MS=${SPREAD_MS:-1000}
TOKENS=${TOKENS:-100}
ITL_MS=${ITL_MS:-20}
TTFT_MS=${TTFT_MS:-20}
NUM_SENDER=${NUM_SENDER:-1}
if [ -n "${BIN:-}" ]; then bin=$(realpath "$BIN"); else cargo build --release -q; bin=target/release/llmreplay; fi
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
python3 - "$work/trace.jsonl" "$STREAMS" "$SPREAD_MS" "$TOKENS" <<'PY'
import sys
path, n, spread, tokens = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
with open(path, "w") as f:
    for i in range(n):
        f.write(f'{{"timestamp": {i * spread / n:.3f}, "text_input": "a b c", "input_length": 3, "output_length": {tokens}}}\n')
PY
pin_mock=()
[ -n "${MOCK_CORES-0}" ] && [ "$(nproc)" -ge 2 ] && pin_mock=(taskset -c "${MOCK_CORES-0}")
"${pin_mock[@]}" "$bin" mock --listen 127.0.0.1:0 --ttft-ms "$TTFT_MS" --itl-ms "$ITL_MS" \
  --timing-log "$work/timing.jsonl" > "$work/mock.addr" 2> /dev/null &
mock=$!
trap 'kill $mock 2>/dev/null; [ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"' EXIT
for _ in $(seq 50); do grep -q listening "$work/mock.addr" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$work/mock.addr")
echo "$STREAMS streams within $SPREAD_MS ms, $TOKENS tokens each every $ITL_MS ms (TTFT $TTFT_MS ms), $NUM_SENDER sender(s)"
"$bin" replay --quiet --endpoint "http://$addr" --model mock --trace "$work/trace.jsonl" \
  --num-sender "$NUM_SENDER" --record-itl --output "$work/run" > /dev/null
kill $mock; wait $mock 2>/dev/null || true
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
run = json.load(open(f"{work}/run/run.json"))
clock = run["clock"]
t0 = clock["t0_monotonic_ns"]
# The client's run clock (TSC) against CLOCK_MONOTONIC over the run: a linear map.
end = clock.get("end")
rate = (end["monotonic_ns"] - t0) / end["run_ns"] if end and end["run_ns"] else 1.0
mono = lambda ms: t0 + ms * 1e6 * rate
def per_token(times, tokens, cumulative):
    out, total = [], 0
    for t, n in zip(times, tokens):
        new = n - total if cumulative else n
        total = n if cumulative else total + n
        out.extend([t] * max(new, 0))
    return out
server = {}
for line in open(f"{work}/timing.jsonl"):
    t = json.loads(line)
    server[t["index"]] = t
ttft, e2el, itl = [], [], []
matched = 0
for line in open(f"{work}/run/requests.jsonl"):
    r = json.loads(line)
    s = server.get(r["index"])
    if s is None or r.get("first_token_ms") is None:
        continue
    matched += 1
    sent, first, end_ms = mono(r["sent_ms"]), mono(r["first_token_ms"]), mono(r["end_ms"])
    ttft.append(((first - sent) - (s["chunks_ns"][0] - s["received_ns"])) / 1e6)
    e2el.append(((end_ms - sent) - (s["last_byte_ns"] - s["received_ns"])) / 1e6)
    # Each token's time on both sides: the write (server) or read (client) that carried it. A
    # busy side batches several tokens in one write or read; token by token they line up.
    client = per_token([mono(c) for c in r.get("chunk_times_ms") or []], r.get("chunk_tokens") or [], cumulative=False)
    srv = per_token(s["chunks_ns"], s["chunks_tokens"], cumulative=True)
    n = min(len(client), len(srv))
    for k in range(1, n):
        itl.append(((client[k] - client[k - 1]) - (srv[k] - srv[k - 1])) / 1e6)
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")
print(f"requests matched with the mock's log: {matched}; clock rate (monotonic / run) {rate:.9f}")
for name, v in [("TTFT", ttft), ("ITL", itl), ("E2EL", e2el)]:
    print(f"{name:5} client - server ms: p50 {pct(v, 50):+.3f}  p99 {pct(v, 99):+.3f}  max {max(v, default=float('nan')):+.3f}  min {min(v, default=float('nan')):+.3f}  (n={len(v)})")
PY
