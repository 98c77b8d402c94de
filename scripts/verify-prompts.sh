#!/usr/bin/env bash
# Re-encodes EVERY synthetic prompt of the given traces with the real tokenizers, as the server
# would count them (chat template for openai-chat, special tokens for completions), and checks
# exact lengths, intact token ids and equal token blocks under equal hash-id prefixes.
# Slow by nature: the Hugging Face tokenizer runs at ~0.2M tokens/s per thread, so both
# Mooncake traces x 2 tokenizers x 2 APIs is ~800M tokens (~30-40 min on 2 cores).
#
# usage: scripts/verify-prompts.sh [TRACE...]   (default: tests/data/mooncake/*.jsonl)
# env:   TOKENIZERS="assets/tokenizers/qwen3 tests/data/tokenizers/mistral"  APIS="openai-chat openai-completions"
#        (any other tokenizer.json directory works too, e.g. a Llama-3 one you have locally)
#        THREADS=2  VERIFY_EVERY=1
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
traces=("$@")
[ ${#traces[@]} -gt 0 ] || traces=(tests/data/mooncake/*.jsonl)
TOKENIZERS=${TOKENIZERS:-"assets/tokenizers/qwen3 tests/data/tokenizers/mistral"}
APIS=${APIS:-"openai-chat openai-completions"}
status=0
for trace in "${traces[@]}"; do
  for tok in $TOKENIZERS; do
    for api in $APIS; do
      echo "== $(basename "$trace")  $(basename "$tok")  $api"
      start=$(date +%s)
      if ! target/release/llmreplay prompts --trace "$trace" --tokenizer "$tok" --api "$api" \
           --verify --verify-every "${VERIFY_EVERY:-1}" --threads "${THREADS:-2}" \
           | grep -E "Records:|Verified|Exact|Max abs|Shared prefixes|record "; then
        status=1
      fi
      echo "   ($(( $(date +%s) - start )) s)"
    done
  done
done
exit $status
