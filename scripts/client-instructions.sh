#!/usr/bin/env bash
# Instructions per request through a whole client, counted by callgrind: the client bench
# (`tests/benches/client/`) run under valgrind for one cell and one client, its whole process
# (callers, driver, runtime, the echo server's threads and the bench's own bookkeeping, the
# same for every client) divided by the requests it made. Exact and independent of the
# machine's load, unlike the bench's wall-clock table (BENCHMARKS.md, the client section).
#
# Usage: scripts/client-instructions.sh [RUNTIME] [IN_FLIGHT] [CLIENT] [SIZE]
#   RUNTIME    ct, mt or smol (default ct)
#   IN_FLIGHT  callers in flight (default 1)
#   CLIENT     A (keepwire), B or C (the hand-written ones; default A)
#   SIZE       payload bytes (default 64)
# CLIENT_BENCH=path runs that built bench binary instead of building one. Needs valgrind
# (callgrind_annotate comes with it). Takes about half a minute per cell.
set -euo pipefail
cd "$(dirname "$0")/.."

rt=${1:-ct}
in_flight=${2:-1}
client=${3:-A}
size=${4:-64}

bin=${CLIENT_BENCH:-}
if [ -z "$bin" ]; then
  bin=$(cargo bench -p keepwire-tests --bench client --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*client-[^"]*\)".*/\1/p' | tail -1)
fi
[ -x "$bin" ] || { echo "no client benchmark binary at '$bin'" >&2; exit 1; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT

valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$out" "$bin" --bench \
  rt="$rt" size="$size" inflight="$in_flight" clients="$client" rounds=1 ms=3000 >/dev/null 2>&1

# keepwire submits each request to its pool once; the hand-written clients answer each with
# one oneshot send.
case $client in
  A) per_request='Pool::submit' ;;
  *) per_request='oneshot::Sender<T>::send' ;;
esac
requests=$(awk -v want="$per_request" '
  /^c?fn=\(/ {
    id = $1; sub(/^c?fn=/, "", id)
    name = $0; sub(/^c?fn=\([0-9]+\) ?/, "", name)
    if (name != "") names[id] = name
    if ($0 ~ /^cfn=/) callee = id
    next
  }
  /^calls=/ {
    n = $1; sub(/^calls=/, "", n)
    if (index(names[callee], want) > 0) total += n
  }
  END { print total + 0 }' "$out")
total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
[ "$requests" -gt 0 ] || { echo "no requests counted" >&2; exit 1; }
echo "rt=$rt inflight=$in_flight size=$size client=$client: $((total / requests)) instructions per request ($requests requests)"
