#!/usr/bin/env bash
# Launch to first request: how long `llmreplay replay` takes from exec to the first request's
# bytes reaching the server, for a run whose first record is due at once. A bare listener
# (python, not the mock) notes the instant of its first accepted connection's first bytes;
# the launch instant is taken just before exec. RUNS runs in a row: the first one with an
# empty analysis cache (LLMREPLAY_CACHE_DIR points at a fresh directory), the rest reusing it.
# Usage: RUNS=3 [TOKENIZER=assets/tokenizers/qwen3] scripts/bench-start.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
TOKENIZER=${TOKENIZER:-assets/tokenizers/qwen3}
cargo build --release -q
bin=${BIN:-target/release/llmreplay}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '{"timestamp": 0, "input_length": 2000, "output_length": 4, "hash_ids": [1, 2, 3, 4]}\n' > "$work/trace.jsonl"
export LLMREPLAY_CACHE_DIR="$work/cache"
for run in $(seq "$RUNS"); do
  python3 - "$work/port" "$work/first" <<'PY' &
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
s.settimeout(60)
c, _ = s.accept(); c.recv(1)
open(sys.argv[2], "w").write(repr(time.time()))
c.close(); s.close()
PY
  listener=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
  start=$(python3 -c 'import time; print(repr(time.time()))')
  "$bin" replay --quiet --endpoint "http://127.0.0.1:$(cat "$work/port")" --model m \
    --trace "$work/trace.jsonl" --tokenizer "$TOKENIZER" --request-timeout 2 \
    --output "$work/run$run" > /dev/null 2>&1 || true
  wait "$listener"
  python3 -c "import sys; print(f'run $run: launch to first request {float(sys.argv[2]) - float(sys.argv[1]):.3f} s')" "$start" "$(cat "$work/first")"
  rm -f "$work/port" "$work/first"
done
