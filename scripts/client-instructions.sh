#!/usr/bin/env bash
# Instructions per request through a whole client, counted by callgrind: the client bench
# (`benches/client/`) run under valgrind for one cell and one client, its whole process
# (callers, driver, runtime, the echo server's threads, the same for every client), what a
# 3 s run spends beyond a 1 s run divided by the requests it made beyond it. Independent of
# the machine's load, unlike the bench's wall-clock table (BENCHMARKS.md, the client section).
#
# Usage: scripts/client-instructions.sh [RUNTIME] [IN_FLIGHT] [CLIENT] [SIZE]
#   RUNTIME    ct, mt or smol (default ct)
#   IN_FLIGHT  callers in flight (default 1)
#   CLIENT     A (keepwire), B or C (the hand-written ones; default A)
#   SIZE       payload bytes (default 64)
# CLIENT_BENCH=path runs that built bench binary instead of building one. Needs valgrind
# (callgrind_annotate comes with it). Takes about a minute per cell.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/callgrind.sh

client_cell "$@"

# Two runs, of 1 s and 3 s: the difference leaves out what the process spends once (start-up,
# warm-up, the bench's own report), which a single run would spread over however many
# requests the machine's speed under valgrind let it make.
for ms in 1000 3000; do
  valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$out/$ms" "$bin" --bench \
    rt="$rt" size="$size" inflight="$in_flight" clients="$client" rounds=1 ms="$ms" \
    >/dev/null 2>&1
done
requests=$(($(calls_to "$out/3000" "$per_request") - $(calls_to "$out/1000" "$per_request")))
total=$(($(total_instructions "$out/3000") - $(total_instructions "$out/1000")))
[ "$requests" -gt 0 ] || { echo "no more requests in the longer run" >&2; exit 1; }
echo "rt=$rt inflight=$in_flight size=$size client=$client: $((total / requests)) instructions per request (over the $requests requests the longer run made beyond the shorter)"
