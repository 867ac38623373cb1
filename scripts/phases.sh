#!/usr/bin/env bash
# Where one request's time goes at one request in flight, keepwire (A) against a hand-written
# client (C, or B) in the same run, phase by phase: the client bench (`benches/client/`) under
# `perf record` of the write, read and `epoll_wait` syscalls' tracepoints, its cycles told
# apart by their write (A writes with `writev`, B and C with `sendto`), the median of each gap
# between the syscalls of a cycle. The clients take turns in one process, so a slower hour
# slows both alike (BENCHMARKS.md, "One request's time at one in flight").
#
# Usage: scripts/phases.sh [RUNTIME] [OTHER] [SIZE]
#   RUNTIME  ct or smol (default ct): runtimes that run a client's I/O on one thread
#   OTHER    B or C (default C)
#   SIZE     payload bytes (default 64)
# CLIENT_BENCH=path runs that built bench binary instead of building one. Needs perf with
# access to the syscall tracepoints (root, or perf_event_paranoid and tracefs allowing it).
set -euo pipefail
cd "$(dirname "$0")/.."
rt=${1:-ct}
other=${2:-C}
size=${3:-64}
case "$rt" in ct | smol) ;; *) echo "runtime $rt: ct or smol" >&2; exit 2 ;; esac
case "$other" in B | C) ;; *) echo "client $other: B or C" >&2; exit 2 ;; esac
source scripts/callgrind.sh
client_bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

events=syscalls:sys_enter_writev,syscalls:sys_exit_writev,syscalls:sys_enter_sendto
events=$events,syscalls:sys_exit_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_exit_recvfrom
events=$events,syscalls:sys_enter_epoll_wait,syscalls:sys_exit_epoll_wait
events=$events,syscalls:sys_enter_epoll_pwait,syscalls:sys_exit_epoll_pwait
perf record -q -e "$events" -o "$out/perf.data" "$bin" --bench rt="$rt" size="$size" \
  inflight=1 clients="A,$other" rounds=7 ms=300 > "$out/bench.txt" 2>&1
grep '^| ' "$out/bench.txt" | tail -n 1
perf script --ns -i "$out/perf.data" -F tid,time,event 2>/dev/null > "$out/events"

# The clients' thread: the one that makes the most `writev` calls (A's). A cycle runs from
# one write to the next write of the same client; its shape is the list of its syscall
# events. The phases are the gaps between the events of each client's most common shape.
main=$(awk '$3 ~ /sys_enter_writev/ { n[$1]++ } END { for (t in n) print n[t], t }' \
  "$out/events" | sort -rn | head -n 1 | cut -d' ' -f2)
cycles() {
  awk -v main="$main" -v other="$other" -v want="${1:-}" '
    function name(e) {
      sub(/^syscalls:sys_/, "", e); sub(/:$/, "", e)
      sub(/writev|sendto/, "write", e); sub(/epoll_pwait/, "epoll_wait", e)
      return e
    }
    $1 != main { next }
    {
      t = $2; sub(/:$/, "", t); e = $3
      if (e ~ /sys_enter_(writev|sendto)/) {
        c = (e ~ /writev/) ? "A" : other
        if (c == last && n > 0) {
          shape = ev[1]
          for (i = 2; i <= n; i++) shape = shape "," ev[i]
          if (want == "") {
            count[c " " shape]++
          } else if (index(want, c "=" shape ";")) {
            for (i = 2; i <= n; i++) printf "%s %d %s→%s %.3f\n", c, i, ev[i-1], ev[i], (tm[i] - tm[i-1]) * 1e6
            printf "%s %d %s→next_write %.3f\n", c, n + 1, ev[n], (t - tm[n]) * 1e6
            printf "%s %d cycle %.3f\n", c, n + 2, (t - tm[1]) * 1e6
          }
        }
        last = c; n = 0
      }
      n++; ev[n] = name(e); tm[n] = t
    }
    END { if (want == "") for (k in count) print count[k], k }
  ' "$out/events"
}
cycles | sort -rn > "$out/shapes"
want=""
for c in A "$other"; do
  usual=$(awk -v c="$c" '$2 == c { print $3; exit }' "$out/shapes")
  echo "$c: $(awk -v c="$c" '$2 == c { n += $1 } END { print n + 0 }' "$out/shapes") cycles, \
$(awk -v c="$c" '$2 == c { print $1; exit }' "$out/shapes") of the usual shape: $usual"
  want="$want$c=$usual;"
done
cycles "$want" | sort -k1,1 -k2,2n -k4,4g > "$out/gaps"
# One table when both clients' usual cycles have the same shape, else one per client.
median() {
  awk -v c="$1" -v o="$2" -v p="$3" '$1 == c && $2 == o && $3 == p { print $4 }' "$out/gaps" |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.2f µs", v[int((NR + 1) / 2)]; else printf "—" }'
}
phases() {
  awk -v c="$1" '$1 == c { print $2 ":" $3 }' "$out/gaps" | sort -t: -k1,1n -u
}
if [ "$(phases A)" = "$(phases "$other")" ]; then
  echo "| phase (medians) | A | $other |"
  echo "|---|---:|---:|"
  for key in $(phases A); do
    echo "| ${key#*:} | $(median A "${key%%:*}" "${key#*:}") | $(median "$other" "${key%%:*}" "${key#*:}") |"
  done
else
  for c in A "$other"; do
    echo "| phase of $c's cycle (medians) | $c |"
    echo "|---|---:|"
    for key in $(phases "$c"); do
      echo "| ${key#*:} | $(median "$c" "${key%%:*}" "${key#*:}") |"
    done
  done
fi
