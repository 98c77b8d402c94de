#!/usr/bin/env bash
# Launch to first request: how long `llmreplay replay` takes from exec to the first request's
# bytes reaching the server, for a run whose first record is due at once. A bare listener
# (python, not the mock) notes the instant the first byte of a request arrives, on any of its
# connections (the liveness probe's close carries none);
# the launch instant is taken just before exec. RUNS runs in a row: the first one with an
# empty analysis cache (LLMREPLAY_CACHE_DIR points at a fresh directory), the rest reusing it.
# TRACE=FILE measures on that trace instead of a one-record one (each run sends at most 5
# records, at --time-scale 20), e.g. the README demo's assets/traces/mooncake_conversation_500.jsonl.
# Usage: RUNS=3 [TOKENIZER=assets/tokenizers/qwen3] [TRACE=FILE] scripts/bench-start.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
TOKENIZER=${TOKENIZER:-assets/tokenizers/qwen3}
cargo build --release -q
bin=${BIN:-target/release/llmreplay}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${TRACE:-}" ]; then
  cp "$TRACE" "$work/trace.jsonl"
else
  printf '{"timestamp": 0, "input_length": 2000, "output_length": 4, "hash_ids": [1, 2, 3, 4]}\n' > "$work/trace.jsonl"
fi
export LLMREPLAY_CACHE_DIR="$work/cache"
for run in $(seq "$RUNS"); do
  python3 - "$work/port" "$work/first" <<'PY' &
# The first request's first byte, on whichever connection brings it: the liveness probe
# connects and closes without a byte, and connections opened ahead are silent until their
# request, so neither counts.
import selectors, socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
deadline = time.time() + 60
while time.time() < deadline:
    for key, _ in sel.select(timeout=1):
        if key.fileobj is s:
            c, _ = s.accept(); sel.register(c, selectors.EVENT_READ)
        elif key.fileobj.recv(1):
            open(sys.argv[2], "w").write(repr(time.time()))
            sys.exit(0)
        else:
            sel.unregister(key.fileobj); key.fileobj.close()
sys.exit(1)
PY
  listener=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
  start=$(python3 -c 'import time; print(repr(time.time()))')
  "$bin" replay --quiet --endpoint "http://127.0.0.1:$(cat "$work/port")" --model m \
    --trace "$work/trace.jsonl" --tokenizer "$TOKENIZER" --request-timeout 2 \
    --time-scale 20 --max-requests 5 \
    --output "$work/run$run" > /dev/null 2>&1 || true
  wait "$listener"
  python3 -c "import sys; print(f'run $run: launch to first request {float(sys.argv[2]) - float(sys.argv[1]):.3f} s')" "$start" "$(cat "$work/first")"
  rm -f "$work/port" "$work/first"
done
