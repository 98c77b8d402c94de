#!/usr/bin/env bash
# Prompt-build throughput: builds every request body of a trace through the producers' code
# (`llmreplay prompts`, nothing sent) and prints, per tokenizer / API / threads / cache size:
# tokens built, build time summed over threads, M tokens/s per thread, wall time (trace
# parsing included), block-cache hit rate and peak RSS.
# Usage: scripts/bench-prompts.sh [bench-configs/prompts-conversation.env]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1090
source "${1:-bench-configs/prompts-conversation.env}"
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-8s %-19s %4s %6s %12s %8s %12s %7s %6s %8s\n' tokenizer api thr cacheMB tokens build_s Mtok/s/thr wall_s hit% rss_MiB
for tok in $TOKENIZERS; do
  for api in $APIS; do
    for threads in $THREADS; do
      for mb in $CACHE_MB; do
        target/release/llmreplay prompts --json --trace "$TRACE" --tokenizer "$tok" --api "$api" \
          --threads "$threads" --block-cache-mb "$mb" > "$out/report.json"
        python3 - "$out/report.json" "$(basename "$tok")" "$api" "$mb" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); tok, api, mb = sys.argv[2:5]
hit = 100 * r["block_cache_hits"] / max(1, r["block_cache_hits"] + r["block_cache_misses"])
print(f'{tok:<8} {api:<19} {r["threads"]:4d} {mb:>6} {r["tokens"]:12d} {r["build_s"]:8.3f} '
      f'{r["tokens_per_s_per_thread"] / 1e6:12.1f} {r["wall_s"]:7.2f} {hit:6.1f} {r["peak_rss_mb"]:8.0f}')
PY
      done
    done
  done
done
