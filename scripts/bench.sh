#!/usr/bin/env bash
# Sender-engine benchmarks (issue: 1M tok/s on one sender thread, sub-ms drift, 10k streams).
# Each bench-configs/*.env scenario runs the client against `llmreplay mock` in its own process
# and prints: requests recorded, tokens/s, client send drift (and the drift the mock saw, from
# its arrival log), client CPU-seconds and peak RSS from /usr/bin/time, CPU-s per 1M tokens and
# events per CPU-second.
# Also printed: the time the hypervisor gave this VM's CPUs to others during the run (steal),
# the usual cause of a rare multi-millisecond send delay on a shared VM.
# Usage: scripts/bench.sh [bench-configs/a-max-tokens.env ...]   (default: a, b, c, d)
# KEEP=1 keeps each run's work directory (trace, records, arrival log) for a closer look.
# BIN=path runs that binary instead of building this checkout (to compare two builds).
# TLS=1 runs the same scenario over https: the mock serves a self-signed certificate made
# with openssl for the run, and the client verifies it with --ca-cert.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${BIN:-}" ]; then
  bin=$(realpath "$BIN")
else
  cargo build --release -q
  bin=$PWD/target/release/llmreplay
fi
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(bench-configs/a-max-tokens.env bench-configs/b-drift-1000rps.env
  bench-configs/c-10k-streams.env bench-configs/d-cpu-per-token.env)
ulimit -n "$(ulimit -Hn)"

for config in "${configs[@]}"; do
  (
  # shellcheck disable=SC1090
  source "$config"
  work=$(mktemp -d)
  trap 'kill $mock 2>/dev/null; [ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"' EXIT
  case "$SCENARIO" in
    streams)
      python3 - "$work/trace.jsonl" "$STREAMS" "$SPREAD_MS" "$TOKENS_PER_STREAM" <<'PY'
import sys
path, n, spread, tokens = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
with open(path, "w") as f:
    for i in range(n):
        f.write(f'{{"timestamp": {i * spread / n:.3f}, "text_input": "a b c", "input_length": 3, "output_length": {tokens}}}\n')
PY
      extra=(--time-scale 1) ;;
    trace)
      python3 - "$TRACE" "$work/trace.jsonl" "$REPEAT" "${SESSIONS:-0}" <<'PY'
import json, sys
src, dst, repeat, turns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = [json.loads(l) for l in open(src) if l.strip()]
span = lines[-1]["timestamp"] - lines[0]["timestamp"] + 1
with open(dst, "w") as f:
    for r in range(repeat):
        for i, rec in enumerate(lines):
            out = dict(rec, timestamp=rec["timestamp"] + r * span)
            if turns:  # consecutive records as conversations of `turns` turns
                out["session_id"] = f"{r}-{i // turns}"
            f.write(json.dumps(out) + "\n")
PY
      records=$(wc -l < "$work/trace.jsonl")
      span_ms=$(python3 -c "import json;l=open('$work/trace.jsonl').readlines();print(json.loads(l[-1])['timestamp']-json.loads(l[0])['timestamp'])")
      scale=$(python3 -c "print($RATE * $span_ms / 1000 / $records)")
      extra=(--time-scale "$scale" --tokenizer "$TOKENIZER") ;;
    *) echo "$config: unknown SCENARIO=$SCENARIO" >&2; exit 1 ;;
  esac
  # The mock stands for a server on another machine: it is kept on the first core, away from
  # the sender thread (which `--pin-cores auto` puts on the last one). MOCK_CORES= disables.
  pin_mock=()
  [ -n "${MOCK_CORES-0}" ] && [ "$(nproc)" -ge 2 ] && pin_mock=(taskset -c "${MOCK_CORES-0}")
  scheme=http mock_tls=() client_tls=()
  if [ -n "${TLS:-}" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench \
      -addext subjectAltName=IP:127.0.0.1 -addext basicConstraints=critical,CA:FALSE \
      -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
    scheme=https mock_tls=(--tls-cert "$work/cert.pem" --tls-key "$work/key.pem")
    client_tls=(--ca-cert "$work/cert.pem")
  fi
  "${pin_mock[@]}" "$bin" mock --listen 127.0.0.1:0 --ttft-ms "$MOCK_TTFT_MS" --itl-ms "$MOCK_ITL_MS" \
    "${mock_tls[@]}" --arrival-log "$work/arrivals.jsonl" > "$work/mock.addr" &
  mock=$!
  for _ in $(seq 50); do grep -q listening "$work/mock.addr" && break; sleep 0.1; done
  addr=$(sed -n 's/^listening on //p' "$work/mock.addr")
  steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; }
  steal0=$(steal_ticks)
  /usr/bin/time -v -o "$work/time.txt" "$bin" replay --quiet --endpoint "$scheme://$addr" --model mock "${client_tls[@]}" \
    --trace "$work/trace.jsonl" --num-sender "$NUM_SENDER" ${CONNECTIONS:+--connections "$CONNECTIONS"} ${CLIENT_FLAGS:-} --output "$work/run" "${extra[@]}" > /dev/null
  steal_ms=$(( ($(steal_ticks) - steal0) * 1000 / $(getconf CLK_TCK) ))
  python3 - "$config" "$work" "$steal_ms" <<'PY'
import json, os, re, sys
config, work, steal_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = json.load(open(f"{work}/run/summary.json"))
t = open(f"{work}/time.txt").read()
num = lambda k: float(re.search(re.escape(k) + r":\s*([\d.:]+)", t).group(1))
cpu = num("User time (seconds)") + num("System time (seconds)")
rss_mb = num("Maximum resident set size (kbytes)") / 1024
recs = [json.loads(l) for l in open(f"{work}/run/requests.jsonl")]
sched = {r["index"]: r["scheduled_ms"] * 1e6 for r in recs}
events = sum(r["chunks"] for r in recs)
arr = [json.loads(l) for l in open(f"{work}/arrivals.jsonl")]
pairs = [(sched[a["index"]], a["arrival_ns"] - sched[a["index"]]) for a in arr if a["index"] in sched]
# The mock's clock and the client's run at slightly different rates (a few ppm: ~1 ms a
# minute), so the lag has a linear trend: take it out (least squares), then measure each
# arrival's delay over the fastest one.
n = max(len(pairs), 1)
mx, my = sum(x for x, _ in pairs) / n, sum(y for _, y in pairs) / n
vx = sum((x - mx) ** 2 for x, _ in pairs)
slope = sum((x - mx) * (y - my) for x, y in pairs) / vx if vx else 0.0
resid = sorted(y - slope * x for x, y in pairs)
mock_drift = [(r - resid[0]) / 1e6 for r in resid]
pct = lambda v, p: v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")
d = s["drift_ms"]
tok = s["output_tokens"]
print(f"== {config}" + (" over TLS" if os.environ.get("TLS") else ""))
print(f"requests recorded {len(recs)} (ok {s['requests']['ok']}, failed {s['requests']['failed']}), "
      f"run {s['duration_s']:.1f} s, {s['request_throughput']:.0f} req/s")
print(f"output tokens {tok}, {s['output_throughput']:,.0f} tok/s, {events} SSE events")
print(f"client drift ms: p50 {d['p50']:.3f} p99 {d['p99']:.3f} max {d['max']:.3f}, late sends (> 1 ms) {s['late_sends']}")
print(f"mock-side drift ms (arrival - schedule, detrended, over the fastest): p50 {pct(mock_drift, 50):.3f} "
      f"p99 {pct(mock_drift, 99):.3f} max {pct(mock_drift, 100):.3f}")
print(f"client CPU {cpu:.2f} s ({cpu / max(s['duration_s'], 1e-9) * 100:.0f} % of one core), peak RSS {rss_mb:.0f} MB")
print(f"CPU time stolen by the hypervisor during the run (all CPUs): {steal_ms} ms")
print(f"per 1M tokens: {cpu / max(tok, 1) * 1e6:.3f} CPU-s; events per CPU-second: {events / max(cpu, 1e-9):,.0f}")
PY
  )
done
