#!/usr/bin/env bash
# The data a round trip touches at one request in flight: the client bench (`benches/client/`)
# for one client at a time under valgrind's lackey, which traces every load and store of the
# whole process (client, runtime, the echo server's threads: the same for every client), cut
# into round trips at the entry of the echo server's `answer`. For each client: the distinct
# 64-byte lines of data one round trip touches (the median over the round trips traced), how
# many of them every round trip touches again (in 90 % of them: the working set a round trip
# brings back into the core's cache after the kernel and the other thread ran), and which
# functions touch those first. A line the core's first-level cache lost costs a round trip
# about 3 ns on this VM, whether or not a load waits on it in a chain (BENCHMARKS.md, "What a
# fast round trip's extra time is made of"). Deterministic: the counts do not move with the
# machine's hour.
#
# Usage: scripts/working-set.sh [CLIENTS] [RUNTIME]   (default: A,C mt)
# CLIENT_BENCH=path runs that built bench binary instead of building one. Needs valgrind.
# Takes a few seconds per client.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-A,C}
rt=${2:-mt}
source scripts/callgrind.sh
client_bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The functions of the bench's binary by address, and the echo server's `answer` among them.
nm -C -n --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ { a = $1; $1 = ""; $2 = ""; sub(/^  /, ""); print a, $0 }' \
  > "$out/symbols"
answer=$(awk '$2 == "client::echo::answer" { print $1; exit }' "$out/symbols")
[ -n "$answer" ] || { echo "no client::echo::answer in $bin" >&2; exit 1; }

echo "| client | round trips traced | data lines per round trip | lines in 90 % of them |"
echo "|---|---:|---:|---:|"
for client in ${clients//,/ }; do
  trace="$out/trace.$client"
  valgrind --tool=lackey --trace-mem=yes --log-file="$trace" \
    "$bin" --bench rt="$rt" size=64 inflight=1 clients="$client" rounds=1 ms=300 > /dev/null 2>&1 &
  pid=$!
  # Where valgrind mapped the (position-independent) binary: its first mapping's start.
  real=$(readlink -f "$bin")
  base=""
  for _ in $(seq 200); do
    base=$(awk -v f="$real" '$6 == f { split($1, r, "-"); print r[1]; exit }' "/proc/$pid/maps" 2>/dev/null || true)
    [ -n "$base" ] && break
    sleep 0.05
  done
  wait "$pid"
  [ -n "$base" ] || { echo "could not find where valgrind mapped $bin" >&2; exit 1; }
  marker=$(printf '%08x' $((0x$base + 0x$answer)))
  awk -v marker="$marker" -v base="$base" -v client="$client" -v symbols="$out/symbols" \
    -v top="$out/top.$client" "$awk_hex"'
    # Round trips: from one entry of `answer` to the next; the first ten are warm-up.
    /^I/ {
      at = substr($2, 1, index($2, ",") - 1)
      if (at == marker) {
        if (++trips > 11) {
          sizes[++kept] = distinct
          for (l in first) { seen[l]++; toucher[l] = first[l] }
        }
        split("", first); distinct = 0
      }
      next
    }
    /^ [LSM]/ {
      a = substr($2, 1, index($2, ",") - 1)
      l = int(hex(a) / 64)
      if (!(l in first)) { first[l] = at; distinct++ }
    }
    END {
      if (kept < 5) { print "too few round trips traced: " kept > "/dev/stderr"; exit 1 }
      # Median of the distinct lines per round trip (insertion sort: a few dozen values).
      for (i = 2; i <= kept; i++) {
        v = sizes[i]
        for (j = i - 1; j >= 1 && sizes[j] > v; j--) sizes[j + 1] = sizes[j]
        sizes[j + 1] = v
      }
      steady = 0
      while ((getline line < symbols) > 0) {
        split(line, f, " "); nsym++; start[nsym] = hex(f[1]); name[nsym] = substr(line, length(f[1]) + 2)
      }
      b = hex(base)
      for (l in seen) {
        if (seen[l] < 0.9 * kept) continue
        steady++
        # The function that touched the line first, by binary search over the symbols.
        x = hex(toucher[l]) - b; lo = 1; hi = nsym; fn = "(a shared library)"
        if (x >= start[1]) {
          while (lo < hi) { mid = int((lo + hi + 1) / 2); if (start[mid] <= x) lo = mid; else hi = mid - 1 }
          if (x - start[lo] < 65536) fn = name[lo]
        }
        by[fn]++
      }
      printf "| %s | %d | %d | %d |\n", client, kept, sizes[int((kept + 1) / 2)], steady
      for (fn in by) printf "%d\t%s\n", by[fn], fn > top
    }' "$trace"
done
for client in ${clients//,/ }; do
  echo
  echo "$client: the functions that first touch the lines every round trip touches (the top 15)"
  sort -rn "$out/top.$client" | head -15 | awk -F'\t' '{ printf "  %4d  %s\n", $1, substr($2, 1, 110) }'
done
