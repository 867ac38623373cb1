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

valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out/run" "$bin" --bench \
  rt="$rt" size="$size" inflight="$in_flight" clients="$client" rounds=1 ms=2000 \
  >/dev/null 2>&1
requests=$(calls_to "$out/run" "$per_request")
[ "$requests" -gt 0 ] || { echo "no requests recorded" >&2; exit 1; }

# Each cost line starts with the instruction's address (absolute in hex, or relative to the
# line before: `+N`, `-N`, `*`) and the source line, then the instructions executed there.
# The line after `calls=` holds a call's inclusive cost, not the instruction's own: skipped.
awk -v requests="$requests" '
  function hex(s,    i, n) {
    n = 0
    for (i = 3; i <= length(s); i++) n = n * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
    return n
  }
  function number(s) { return s ~ /^0x/ ? hex(s) : s + 0 }
  /^calls=/ { call = 1; next }
  /^[0-9+*-]/ {
    p = $1
    if (p ~ /^0x/) at = hex(p)
    else if (p ~ /^\+/) at += number(substr(p, 2))
    else if (p ~ /^-/) at -= number(substr(p, 2))
    if (call) { call = 0; next }
    if (NF >= 3) ran[at] += $3
  }
  END {
    for (a in ran) if (ran[a] >= 0.9 * requests) { hot++; lines[int(a / 64)] = 1 }
    for (l in lines) n++
    printf "%d instructions on every request'"'"'s path, in %d cache lines (%.1f KiB)\n", hot, n, n * 64 / 1024
  }' "$out/run" | sed "s/^/rt=$rt inflight=$in_flight size=$size client=$client ($requests requests): /"
