#!/usr/bin/env bash
# The code a request runs through a whole client, counted by callgrind: the client bench
# (`benches/client/`) run under valgrind for one cell and one client, the instructions executed
# at least 0.9 times per request on average (the code every request's path runs: the callers,
# the driver, the runtime and the echo server's thread, the same for every client) and the
# 64-byte cache lines they occupy. At one request in flight the kernel's work between requests
# evicts the instruction cache, so every request fetches these lines again: the more of them,
# the higher the latency, whatever the instruction count (BENCHMARKS.md, "The code a request
# runs through").
#
# Usage: scripts/footprint.sh [RUNTIME] [IN_FLIGHT] [CLIENT] [SIZE]
#   as scripts/client-instructions.sh (default: ct 1 A 64)
# CLIENT_BENCH=path runs that built bench binary instead of building one. Needs valgrind.
# Takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/callgrind.sh

client_cell "$@"

run_cell_by_instruction

executed_instructions "$out/run" | awk -v requests="$requests" '
  $2 >= 0.9 * requests { hot++; lines[int($1 / 64)] = 1 }
  END {
    for (l in lines) n++
    printf "%d instructions on every request'"'"'s path, in %d cache lines (%.1f KiB)\n", hot, n, n * 64 / 1024
  }' | label_cell
