#!/usr/bin/env bash
# Whether a round trip at one request in flight was fast because the client's thread and the
# echo server's shared a CPU: the client bench (`benches/client/`) for one client alone under
# `perf record` of the write syscalls' tracepoints, each round trip (from one of the client's
# writes to its next) sorted by the CPUs its two writes ran on, the client's and the server's
# (the server's threads are named `echo`). On a machine whose idle vCPUs halt, a round trip
# with both on one CPU wakes no halted vCPU (BENCHMARKS.md, "Two round-trip times at one in
# flight, and what sets each").
#
# Usage: scripts/colocation.sh [CLIENT] [RUNTIME]   (default: A mt)
# CLIENT_BENCH=path runs that built bench binary instead of building one. Needs perf with
# access to the syscall tracepoints (root, or perf_event_paranoid and tracefs allowing it).
set -euo pipefail
cd "$(dirname "$0")/.."
client=${1:-A}
rt=${2:-mt}
source scripts/callgrind.sh
client_bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

perf record -q -e syscalls:sys_enter_writev,syscalls:sys_enter_sendto -o "$out/perf.data" \
  "$bin" --bench rt="$rt" size=64 inflight=1 clients="$client" rounds=3 > /dev/null 2>&1
perf script --ns -i "$out/perf.data" -F comm,cpu,time 2>/dev/null > "$out/events"

# Lines: "comm [cpu] time:". A round trip runs from one client write to the next; the
# server's write between them says where the server ran.
awk '
  {
    cpu = $(NF - 1); gsub(/[^0-9]/, "", cpu); t = $NF; sub(/:$/, "", t)
    if ($1 == "echo") { server = cpu; next }
    if (last != "" && server != "") {
      printf "%s %.3f\n", (client == server) ? "same" : "two", (t - last) * 1e6
    }
    last = t; client = cpu; server = ""
  }' "$out/events" | sort -k1,1 -k2,2g > "$out/trips"
echo "| client and server | round trips | share | median |"
echo "|---|---:|---:|---:|"
total=$(wc -l < "$out/trips")
for key in same two; do
  awk -v key="$key" -v total="$total" '
    $1 == key { v[++n] = $2 }
    END {
      where = (key == "same") ? "on one CPU" : "on two CPUs"
      if (n) printf "| %s | %d | %.1f %% | %.2f µs |\n", where, n, 100 * n / total, v[int((n + 1) / 2)]
      else printf "| %s | 0 | 0 %% | — |\n", where
    }' "$out/trips"
done
