#!/usr/bin/env bash
# Runs the whole suite (the README's test command, `cargo test --release`) N times in a row and
# prints every failure, to show that no test depends on how busy the machine is.
#
#   scripts/soak-tests.sh N            # N runs on the machine as it is
#   scripts/soak-tests.sh N --busy     # N runs with two busy loops beside them (each spins
#                                      # one core for the whole soak; stopped at the end)
#
# The build happens once, before the first run, and is not timed. Each run's log is kept in
# $SOAK_DIR (default: a fresh temporary directory), named run-K.log. Prints one line per run
# (passed or FAILED, its wall time, the failing tests), then "soak: P of N passed" and the
# total wall time; exits 0 only when all N passed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 N [--busy]" >&2; exit 1; }
[ $# -ge 1 ] || usage
runs=$1
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || usage
busy=0
case "${2:-}" in
  "") ;;
  --busy) busy=1 ;;
  *) usage ;;
esac

logs=${SOAK_DIR:-$(mktemp -d -t llmreplay-soak.XXXXXX)}
mkdir -p "$logs"
cargo test --release --no-run >"$logs/build.log" 2>&1 || {
  echo "soak: the build failed; see $logs/build.log" >&2
  exit 1
}

loops=()
stop_loops() {
  for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_loops EXIT
if [ "$busy" = 1 ]; then
  for _ in 1 2; do
    (while :; do :; done) &
    loops+=("$!")
  done
  echo "soak: two busy loops beside the suite (pids ${loops[*]})"
fi

passed=0
soak_start=$(date +%s)
for k in $(seq 1 "$runs"); do
  log="$logs/run-$k.log"
  start=$(date +%s)
  if cargo test --release >"$log" 2>&1; then
    status=passed
    passed=$((passed + 1))
  else
    status=FAILED
  fi
  took=$(($(date +%s) - start))
  tests=$(grep -E '^test result:' "$log" | awk '{s += $4} END {print s + 0}')
  echo "run $k/$runs: $status in ${took} s ($tests tests passed)"
  if [ "$status" = FAILED ]; then
    # The failing tests, and each one's panic message.
    grep -E '^test .* FAILED$|panicked at|^error: test failed' "$log" | sed 's/^/    /' || true
    grep -A3 'panicked at' "$log" | grep -v 'panicked at' | sed 's/^/      /' | head -40 || true
  fi
done
echo "soak: $passed of $runs passed$([ "$busy" = 1 ] && echo ' with two busy loops'), $(($(date +%s) - soak_start)) s in all; logs in $logs"
[ "$passed" = "$runs" ]
