#!/usr/bin/env bash
# A fuzzing campaign beyond CI's smoke run: every cargo-fuzz target for SECONDS each (default
# 600), one target per core at a time, each on its own growing corpus in fuzz/corpus/<target>.
# Appends one row per target to FUZZING.md: executions, rate, coverage and corpus size, so the
# totals per target add up over campaigns (the goal is 10^8 executions per target).
#
#   scripts/fuzz-campaign.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
jobs="$(nproc)"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
if rustup toolchain list | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
fi
targets=$(ls fuzz/fuzz_targets | sed -n 's/\.rs$//p')
# No AddressSanitizer: the workspace has no unsafe code, and ASan (with the trace-cmp hooks
# it adds to every memory access) makes pool_ops five times slower (FUZZING.md, "Speed").
sanitizer=(--sanitizer none)
"${fuzz[@]}" build --release "${sanitizer[@]}" >/dev/null
logs="$(mktemp -d)"
run() {
  local target="$1" extra=()
  mkdir -p "fuzz/corpus/$target"
  [ -d "fuzz/seeds/$target" ] && extra=("fuzz/seeds/$target")
  [ "$target" = pool_ops ] && set -- -len_control=0 -max_len=16384 || set --
  "${fuzz[@]}" run "${sanitizer[@]}" "$target" "fuzz/corpus/$target" "${extra[@]}" -- \
    -max_total_time="$seconds" -print_final_stats=1 "$@" >"$logs/$target.log" 2>&1
}
running=0
for target in $targets; do
  run "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
date="$(date -u +%Y-%m-%d)"
for target in $targets; do
  log="$logs/$target.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(ls "fuzz/corpus/$target" | wc -l)
  row="| $date | $target | ${seconds} s | ${execs:-?} | ${rate:-?}/s | ${cov:-?} | $corpus |"
  echo "$row"
  # Into the campaigns table, after its last row (the file goes on after the table); at the
  # end of the file while the table has no row yet.
  last=$(grep -n '^| [0-9][0-9][0-9][0-9]-' FUZZING.md | tail -n 1 | cut -d: -f1)
  awk -v at="${last:-0}" -v row="$row" '{ print } NR == at { print row }
    END { if (at == 0) print row }' FUZZING.md > FUZZING.md.new
  mv FUZZING.md.new FUZZING.md
done
