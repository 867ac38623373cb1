#!/usr/bin/env bash
# Atomic read-modify-write instructions per request through a whole client, counted by
# callgrind: the client bench (`benches/client/`) run under valgrind for one cell and one
# client, and every executed instruction of the bench binary that carries a `lock` prefix or is
# an `xchg` with memory (an atomic increment, compare-and-swap, swap...), divided by the
# requests. Callgrind counts such an instruction as one, like any other, but each costs the
# core about as much as twenty plain ones, even uncontended, so instruction counts
# (`scripts/client-instructions.sh`) underrate them. Code in shared libraries (libc) is not
# counted. At 64 in flight the executor's share moves with how the callers batch: on smol,
# runs of one build differ by about 1.5 per request (BENCHMARKS.md, "A hand-out read in place").
#
# Usage: scripts/locked-instructions.sh [RUNTIME] [IN_FLIGHT] [CLIENT] [SIZE]
#   as scripts/client-instructions.sh (default: ct 1 A 64)
# CLIENT_BENCH=path runs that built bench binary instead of building one. Needs valgrind and
# objdump. Takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/callgrind.sh

client_cell "$@"

run_cell_by_instruction
# The binary is position-independent, and valgrind maps it at the addresses its file gives.
# (`xchg %ax,%ax`, with no memory operand, is the assembler's two-byte padding, not an atomic.)
objdump -d --no-show-raw-insn "$bin" |
  awk '/^ *[0-9a-f]+:\t(lock |xchg .*\()/ { sub(":", "", $1); print $1 }' >"$out/locked"

executed_instructions "$out/run" | awk -v requests="$requests" -v locked="$out/locked" '
  BEGIN { while ((getline line < locked) > 0) is_locked[line] = 1 }
  sprintf("%x", $1) in is_locked { total += $2 }
  END {
    printf "%.2f locked instructions per request\n", total / requests
  }' | label_cell
