#!/usr/bin/env bash
# The jumps a request takes through proto, counted by callgrind: proto's lifecycle bench run
# under valgrind (as scripts/instructions.sh, nothing pending), each executed instruction
# matched with its disassembly. A conditional jump counts as taken each time the instruction
# after it did not run next; `jmp`, `call` and `ret` always count. Every taken jump ends the
# core's fetch of a straight run of code, so the usual side of each branch should be laid out
# as the straight path (BENCHMARKS.md, "The unusual paths marked cold").
#
# Usage: scripts/taken-jumps.sh [BENCH_BINARY] [--list]
#   BENCH_BINARY  a built lifecycle benchmark (default: $LIFECYCLE_BENCH, else build it)
#   --list        also list each conditional jump taken at least once per request in three,
#                 with its source line
# Needs valgrind and binutils (objdump, addr2line). Takes about half a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/callgrind.sh

list=
if [ "${2:-}" = --list ]; then list=1; fi
if [ "${1:-}" = --list ]; then list=1; shift; fi
LIFECYCLE_BENCH=${1:-${LIFECYCLE_BENCH:-}}
lifecycle_bench

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
LIFECYCLE_SIZE=0 valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out/run" \
  --toggle-collect=lifecycle::keepwire_once "$bin" --bench --warm-up-time 0.1 \
  --measurement-time 0.3 --sample-size 10 request_lifecycle/keepwire/0 >/dev/null 2>&1
requests=$(calls_to "$out/run" 'Pool::submit')
executed_instructions "$out/run" > "$out/executed"
objdump -d --no-show-raw-insn "$bin" > "$out/asm"

# Each executed instruction's mnemonic and the address of the instruction after it.
awk -v requests="$requests" -v list="$list" "$awk_hex"'
  FNR == NR { ran[$1] = $2; next }
  /^ *[0-9a-f]+:\t/ {
    address = $1; sub(":", "", address); at = hex(address)
    if (previous != "") following[previous] = at
    previous = at
    split($0, fields, "\t"); split(fields[2], words, " ")
    mnemonic[at] = words[1]
  }
  END {
    for (at in ran) {
      m = mnemonic[at]
      if (m ~ /^(jmp|call|ret)/) always += ran[at]
      else if (m ~ /^j/) {
        taken = ran[at] - ran[following[at]]
        if (taken > 0) {
          conditional += taken
          if (list && taken * 3 >= requests) printf "%x %.2f\n", at, taken / requests > "/dev/stderr"
        }
      }
    }
    printf "per request: %.1f conditional jumps taken, %.1f jmp / call / ret (%d requests)\n",
      conditional / requests, always / requests, requests
  }' "$out/executed" "$out/asm" 2> "$out/sites"

if [ -n "$list" ]; then
  sort "$out/sites" | while read -r address per_request; do
    where=$(addr2line -e "$bin" -f -C -i -a "0x$address" | sed -n '2,3p' | paste -s -d ' ' |
      sed -E 's#[^ ]*/(src|benches)/#\1/#')
    echo "  $address $per_request  $where"
  done
fi
