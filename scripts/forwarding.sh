#!/usr/bin/env bash
# The loads on a request's path that the store buffer cannot forward (a wide load of data
# just written by narrower stores), found in a memory trace of valgrind's lackey by
# `scripts/forwarding.rs`. Each costs about 5 ns on this machine (`cost`, below) when the code
# after it waits for it, whatever the instruction count (BENCHMARKS.md, "A load the store
# buffer cannot forward").
#
# Usage: scripts/forwarding.sh cost                what one such stall costs on this machine
#                                                  (`scripts/forwarding_cost.rs`; no valgrind)
#        scripts/forwarding.sh lifecycle           proto's lifecycle bench, nothing pending
#        scripts/forwarding.sh in-order            its in-order pipeline, 64 in flight
#        scripts/forwarding.sh client [RUNTIME] [IN_FLIGHT] [CLIENT] [SIZE]
#                                                  one cell of the client bench (as
#                                                  scripts/client-instructions.sh; 1 s)
# Prints each site seen at least once per request on average: how often per request, the
# load's function and the store's. LIFECYCLE_BENCH / CLIENT_BENCH=path run that built
# binary. Needs valgrind and binutils (addr2line). Takes about half a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/callgrind.sh

what=${1:-lifecycle}
shift || true
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$what" = cost ]; then
  rustc -O --edition 2021 scripts/forwarding_cost.rs -o "$work/cost"
  "$work/cost"
  exit
fi
rustc -O --edition 2021 scripts/forwarding.rs -o "$work/forwarding"

case $what in
  lifecycle | in-order)
    lifecycle_bench
    requests=20000
    export LIFECYCLE_TRACE=$requests
    if [ "$what" = in-order ]; then export LIFECYCLE_TRACE_IN_ORDER=1; fi
    run=("$bin" --bench)
    ;;
  client)
    client_cell "$@"
    run=("$bin" --bench rt="$rt" size="$size" inflight="$in_flight" clients="$client" rounds=1
      ms=1000)
    ;;
  *)
    echo "usage: $0 cost | lifecycle | in-order | client [RUNTIME] [IN_FLIGHT] [CLIENT] [SIZE]" >&2
    exit 2
    ;;
esac

valgrind --tool=lackey --trace-mem=yes --log-fd=9 "${run[@]}" 9>&1 >"$work/out" 2>/dev/null |
  "$work/forwarding" >"$work/sites"
if [ "$what" = client ]; then
  # The bench's row (A, B and C's req/s in its fifth to seventh fields): the client's
  # requests per second over the 1 s run are the requests the trace saw.
  case $client in
    A) column=5 ;;
    B) column=6 ;;
    *) column=7 ;;
  esac
  requests=$(awk -F'|' -v c="$column" '/^\| (tokio|smol)/ { gsub(/ /, "", $c); print $c; exit }' \
    "$work/out")
fi
[ "${requests:-0}" -gt 0 ] || { echo "no requests made" >&2; exit 1; }
head -1 "$work/sites"
# valgrind maps a position-independent executable at 0x108000: the addresses in the binary
# are the traced ones less that.
where() {
  addr2line -f -C -i -e "$bin" "0x$(printf %x $((0x$1 - 0x108000)))" | paste -s -d' ' |
    sed -E 's#/rustc/[0-9a-f]+/library/##g; s#[^ ]*/registry/src/[^/]+/##g; s#'"$PWD"'/##g'
}
tail -n +2 "$work/sites" | while read -r n load store; do
  [ "$n" -ge "$requests" ] || continue
  printf '%s per request\n  load  %s: %s\n  store %s: %s\n' \
    "$(awk -v n="$n" -v r="$requests" 'BEGIN { printf "%.2f", n / r }')" \
    "$load" "$(where "$load" | cut -c1-300)" "$store" "$(where "$store" | cut -c1-300)"
done
