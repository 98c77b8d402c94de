#!/usr/bin/env bash
# How late can this machine wake a thread at all? The floor under llmreplay's send drift.
#
# Runs cyclictest (Debian package rt-tests) on the core the sender uses (the last one), at
# SCHED_FIFO priority 99 with memory locked, waking every 1 ms: a thread that does nothing but
# sleep and wake. Its worst wake-up delay is what the kernel and the hypervisor allow; no
# client can send more punctually than that. On a shared VM the worst delays come from the
# hypervisor running another guest on this vCPU (steal), which no guest-side setting removes.
#
# Usage: scripts/platform-latency.sh [SECONDS]            (default 60; needs root)
#        LOAD=bench-configs/b-drift-1000rps.env scripts/platform-latency.sh
#          measures while that benchmark runs (cyclictest outranks the sender, so the bench's
#          own figures are slightly worse than in a run of its own).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
command -v cyclictest > /dev/null || { echo "cyclictest not found: apt-get install rt-tests" >&2; exit 1; }
core=$(( $(nproc) - 1 ))
out=$(mktemp)
trap 'rm -f "$out"' EXIT
steal() { awk -v c="cpu$core" '$1 == c {print $9}' /proc/stat; }
steal0=$(steal)
if [ -n "${LOAD:-}" ]; then
  cyclictest -m -q -p 99 -a "$core" -t1 -i 1000 -D "$seconds" -h 20000 > "$out" &
  ct=$!
  scripts/bench.sh "$LOAD"
  wait "$ct"
else
  cyclictest -m -q -p 99 -a "$core" -t1 -i 1000 -D "$seconds" -h 20000 > "$out"
fi
steal_ms=$(( ($(steal) - steal0) * 1000 / $(getconf CLK_TCK) ))
awk -v core="$core" -v s="$seconds" -v steal="$steal_ms" '
  /^# Max Latencies/ { max = $4 + 0 }
  /^# Histogram Overflows/ { over = $4 + 0 }
  !/^#/ && NF == 2 { n += $2; if ($1 > 1000) late += $2; if ($1 > 5000) very += $2 }
  END {
    printf "core %d, %d s, %d wake-ups: max %.3f ms, %d over 1 ms, %d over 5 ms (%d beyond 20 ms)\n",
      core, s, n, max / 1000, late, very + over, over
    printf "hypervisor steal on core %d during the run: %d ms\n", core, steal
  }' "$out"
