#!/usr/bin/env bash
# Instructions per request through proto, counted by callgrind: exact and independent of the
# machine's load, unlike wall-clock time on a shared 2-core VM (BENCHMARKS.md, the lifecycle
# section). Runs the lifecycle benchmark's keepwire cases under valgrind and divides the
# instructions spent in one step's function by the calls of `Pool::submit` (one per request:
# one per step, 8 or 64 per round).
#
# Usage: scripts/instructions.sh [BENCH_BINARY]
#   BENCH_BINARY  a built lifecycle benchmark (default: $LIFECYCLE_BENCH, else build it and
#                 take cargo's)
# Needs valgrind (callgrind_annotate comes with it). Takes about 4 min.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/callgrind.sh

LIFECYCLE_BENCH=${1:-${LIFECYCLE_BENCH:-}}
lifecycle_bench

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for spec in \
  "lifecycle::keepwire_once 0 request_lifecycle/keepwire/0" \
  "lifecycle::keepwire_once 1000 request_lifecycle/keepwire/1000" \
  "lifecycle::Pipeline::step 64 pipeline/keepwire/64" \
  "lifecycle::Pipeline::step 1000 pipeline/keepwire/1000" \
  "lifecycle::Pipeline::step_in_order 64 pipeline_in_order/keepwire/64" \
  "lifecycle::Pipeline::step_in_order 1000 pipeline_in_order/keepwire/1000" \
  "lifecycle::routed_once 1 routed/keepwire/1" \
  "lifecycle::routed_once 8 routed/keepwire/8" \
  "lifecycle::routed_once 16 routed/keepwire/16" \
  "lifecycle::routed_once 64 routed/keepwire/64" \
  "lifecycle::round_once 8 round/keepwire/8 keepwire" \
  "lifecycle::round_once 64 round/keepwire/64 keepwire" \
  "lifecycle::round_once 8 round/scattered/8 scattered" \
  "lifecycle::round_once 64 round/scattered/64 scattered"; do
  set -- $spec
  file="$out/callgrind.$2"
  LIFECYCLE_SIZE=$2 LIFECYCLE_VARIANT=${4:-} valgrind --tool=callgrind --dump-instr=no \
    --callgrind-out-file="$file" --toggle-collect="$1" "$bin" --bench --warm-up-time 0.1 \
    --measurement-time 0.3 --sample-size 10 "$3" >/dev/null 2>&1
  total=$(total_instructions "$file")
  calls=$(calls_to "$file" 'Pool::submit')
  echo "$3: $((total / calls)) instructions per request ($calls requests)"
done
