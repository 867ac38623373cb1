#!/usr/bin/env bash
# Mutation testing with cargo-mutants: each mutant (a function body replaced, an operator
# flipped, a condition negated, ...) is built and tests run against it. A mutant the tests do
# not catch ("missed") is a gap in the tests, unless it is equivalent to the original code:
# those are listed, each with its reason, in mutants-equivalent.txt and not counted against
# the score.
#
# Four targets, chosen by MUTANTS_CRATE:
#   proto   (default) keepwire-proto's core, against proto's own tests (unit and integration;
#           not the doc tests).
#   driver  keepwire-driver, in two passes: its own unit tests first (seconds per mutant),
#           then every mutant they missed against the integration tests on real sockets
#           (keepwire-tests: the tokio and smol runs of the suites that exercise the driver,
#           about 20 s per mutant), since most of the driver is a future only a runtime runs.
#   adapters keepwire-tokio, keepwire-smol and keepwire-async-std (the runtime bindings), in
#           one pass against their own tests and the socket suites that run through them, on
#           all three runtimes (most of their mutants do not build; a first run against
#           fewer suites took 13 min, smol's file alone takes 4).
#   codecs  the example protocol codecs of keepwire-tests (tests/src/protocols: RESP, DNS,
#           memcached, PostgreSQL), which applications copy and which decode untrusted bytes,
#           against the crate's unit tests of those codecs (`protocols::`; the crate's other
#           unit tests start real servers). All four: 648 mutants in 13 min with
#           MUTANTS_JOBS=2.
#
# Not run by CI: the whole proto core (about 1,390 mutants) takes about 1 h 50 min on 2 cores
# with MUTANTS_JOBS=2 (MUTATION.md); run the files a change touched.
#
# Usage: scripts/mutants.sh [FILE...]
#   FILE...  source files to mutate (globs as cargo-mutants' --file takes them); default for
#            proto: the core (node/*.rs, pool/*.rs, outbound, timers and timers/keyed,
#            select.rs and select/*.rs, backoff, requests); for driver: the driver future and
#            its children (driver.rs, driver/*.rs); for adapters: all of their sources; for
#            codecs: the four codecs and memcached's request checks.
# Environment:
#   MUTANTS_CRATE proto (default), driver, adapters or codecs
#   MUTANTS_OUT   where cargo-mutants writes mutants.out/ and this script its report
#                 (default target/mutants, or target/mutants-CRATE for the others)
#   MUTANTS_JOBS  mutants built and tested at once (default 1; each needs its own build; the
#                 driver's second pass always runs one at a time, its tests use real timers)
#   MUTANTS_REPORT_ONLY=1  skip the run; write the report again from $MUTANTS_OUT/mutants.out
#                 (after editing mutants-equivalent.txt)
#   MUTANTS_IN_DIFF  a diff (git diff BASE -- proto/src > FILE): only the mutants on lines it
#                 changes, for a change's own code in minutes instead of its files' hours
# The report, $MUTANTS_OUT/report.txt, gives the counts, the score and each missed mutant that
# mutants-equivalent.txt does not explain.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each job builds its mutant in a copy of the tree with that copy's own target directory. A
# CARGO_TARGET_DIR from the environment would make every job build into one: with two jobs,
# a mutant's tests then ran another mutant's build (or the unmutated one), so its verdict,
# caught or missed, was that build's (MUTATION.md: one such run reported as missed a mutant
# that no test can pass).
unset CARGO_TARGET_DIR

if [ -z "${MUTANTS_REPORT_ONLY:-}" ] && ! command -v cargo-mutants >/dev/null 2>&1; then
  cargo install cargo-mutants --locked
fi

crate=${MUTANTS_CRATE:-proto}
files=("$@")
# The optimised profile defined below, for every target but the codecs.
profile_args=(--profile mutants)
case $crate in
  proto)
    packages=(keepwire-proto)
    default_out=target/mutants
    if [ ${#files[@]} -eq 0 ]; then
      files=(
        'proto/src/node/*.rs'
        'proto/src/pool/*.rs'
        proto/src/outbound.rs
        proto/src/timers.rs
        proto/src/timers/keyed.rs
        proto/src/select.rs
        'proto/src/select/*.rs'
        proto/src/backoff.rs
        proto/src/requests.rs
      )
    fi
    ;;
  driver)
    packages=(keepwire-driver)
    default_out=target/mutants-driver
    if [ ${#files[@]} -eq 0 ]; then
      files=(adapters/driver/src/driver.rs 'adapters/driver/src/driver/*.rs')
    fi
    ;;
  adapters)
    packages=(keepwire-tokio keepwire-smol keepwire-async-std)
    default_out=target/mutants-adapters
    if [ ${#files[@]} -eq 0 ]; then
      files=('adapters/tokio/src/*.rs' 'adapters/smol/src/*.rs' 'adapters/async-std/src/*.rs')
    fi
    ;;
  codecs)
    packages=(keepwire-tests)
    default_out=target/mutants-codecs
    # Their unit tests take milliseconds unoptimised, and the tests crate's library builds
    # in a median 1.3 s per mutant at the usual test profile against 3.4 s optimised.
    profile_args=()
    if [ ${#files[@]} -eq 0 ]; then
      files=(
        tests/src/protocols/redis.rs
        tests/src/protocols/dns.rs
        tests/src/protocols/memcached.rs
        tests/src/protocols/memcached/request.rs
        tests/src/protocols/postgres.rs
      )
    fi
    ;;
  *)
    echo "MUTANTS_CRATE must be proto, driver, adapters or codecs, not '$crate'" >&2
    exit 1
    ;;
esac
package_args=()
for package in "${packages[@]}"; do
  package_args+=(--package "$package")
done
file_args=()
for file in "${files[@]}"; do
  file_args+=(--file "$file")
done
if [ -n "${MUTANTS_IN_DIFF:-}" ]; then
  file_args+=(--in-diff "$MUTANTS_IN_DIFF")
fi

out=${MUTANTS_OUT:-$default_out}
# What the report's first line names: a report written again from an earlier run with no
# files given may come from any files, not the default list.
if [ -n "${MUTANTS_REPORT_ONLY:-}" ] && [ $# -eq 0 ]; then
  ran="the files of the run in $out"
fi
mkdir -p "$out"

# An optimised test profile, defined here so that no manifest carries it: proto's tests (a
# property test runs 2,000 cases) take ~0.7 s at opt-level 1 instead of ~5 s unoptimised,
# which pays for the slower build of each mutant; no debug info keeps the links fast.
export CARGO_PROFILE_MUTANTS_INHERITS=test
export CARGO_PROFILE_MUTANTS_OPT_LEVEL=1
export CARGO_PROFILE_MUTANTS_DEBUG=false
export CARGO_PROFILE_MUTANTS_INCREMENTAL=true
# cargo-mutants sets the test timeout from the unmutated run (1-3 s at this profile); on a
# shared, loaded machine a slow but passing run could exceed that and be scored a timeout,
# i.e. caught. At least 20 s (about seven times the slowest baseline seen, with four builds
# running beside it) rules that out; a mutant that loops still times out, and about 40 of
# them do, so a longer floor costs minutes per second of it.
export CARGO_MUTANTS_MINIMUM_TEST_TIMEOUT=${CARGO_MUTANTS_MINIMUM_TEST_TIMEOUT:-20}

# The driver's second pass: the suites on real sockets that run the driver's paths (not those
# that wait out kernel timers or real servers for seconds: keepalive, PostgreSQL, memcached,
# heartbeats, availability), on tokio and smol (async-std's runs share smol's reactor code).
# cargo-mutants tests only the mutated package (its --test-package did not take here,
# 27.1.0), so keepwire-tests comes in as a second --package of cargo's own, built with the
# mutant and filtered to those suites. So does keepwire-tokio's paused_time: the setup
# timeout and each address's share of it, in virtual time. A mutant that hangs a test is
# stopped at 60 s (the suites take about 15 s).
socket_suites='binary(/^real_(client|batching|reads|read_after_write|rounds_in_place|idle_memory|faults|hostile|stream|wakeups|timer|metrics|tracing|panics|options|tls|load|names|tower|allocations)$/)'
integration_filter="(package(keepwire-tests) and not test(/on_async_std/) and $socket_suites) or (package(keepwire-tokio) and binary(paused_time))"

# The adapters' pass: the same suites on all three runtimes, and the adapters' own tests.
adapters_filter="(package(keepwire-tests) and $socket_suites) or package(keepwire-tokio) or package(keepwire-smol) or package(keepwire-async-std)"

run_mutants() {
  cargo mutants "${package_args[@]}" "${file_args[@]}" "${profile_args[@]}" --output "$out" \
    --no-shuffle "$@"
}

status=0
if [ -z "${MUTANTS_REPORT_ONLY:-}" ]; then
  rm -rf "$out/unit-tests"
  case $crate in
    proto)
      run_mutants --jobs "${MUTANTS_JOBS:-1}" \
        --cargo-test-arg=--lib --cargo-test-arg=--tests || status=$?
      ;;
    driver)
      # Every feature on, so that the unit tests of feature-gated modules (tls, the metrics,
      # the async-io streams) run here too, and their code is compiled: without it a mutant
      # of code behind a feature builds and passes, for the second pass to find.
      run_mutants --jobs "${MUTANTS_JOBS:-1}" --all-features --cargo-test-arg=--lib ||
        status=$?
      if [ "$status" -eq 2 ] || [ "$status" -eq 3 ]; then
        status=0
        # The second pass rewrites mutants.out with its own outcomes: the first pass's are
        # kept in unit-tests/ for the report.
        mkdir -p "$out/unit-tests"
        cp "$out"/mutants.out/{caught,timeout,unviable}.txt "$out/unit-tests/"
        # --iterate skips what the first pass caught or could not build.
        run_mutants --jobs 1 --iterate --timeout 60 --test-tool nextest \
          --cargo-arg=--package=keepwire-tests --cargo-arg=--package=keepwire-tokio \
          -- -E "$integration_filter" || status=$?
      fi
      ;;
    adapters)
      # One at a time, as the driver's second pass: the suites use real timers.
      run_mutants --jobs 1 --all-features --timeout 90 --test-tool nextest \
        --cargo-arg=--package=keepwire-tests -- -E "$adapters_filter" || status=$?
      ;;
    codecs)
      # --lib for the build too (a cargo argument, not only a test one): the tests crate's
      # suites and examples would otherwise be built with every mutant.
      run_mutants --jobs "${MUTANTS_JOBS:-1}" --cargo-arg=--lib -- protocols:: ||
        status=$?
      ;;
  esac
fi
# cargo-mutants exits 2 when some mutants were missed, 3 on timeouts: still a report to write.
case $status in
  0 | 2 | 3) ;;
  *)
    echo "cargo mutants failed (exit $status)" >&2
    exit "$status"
    ;;
esac

results="$out/mutants.out"
# The outcome list $1 of the run, and of the driver's first pass when there was a second.
outcomes() { cat "$results/$1" "$out/unit-tests/$1" 2>/dev/null || true; }
count() { outcomes "$1" | grep -c . || true; }
# "path:line:col: description" -> "path: description" (line numbers drift as code changes).
strip_position() { sed -E 's/^([^:]+):[0-9]+:[0-9]+: /\1: /'; }

equivalent=$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' mutants-equivalent.txt |
  sed -E 's/[[:space:]]+#.*$//' || true)
unexplained=""
if [ -f "$results/missed.txt" ]; then
  while IFS= read -r mutant; do
    [ -n "$mutant" ] || continue
    if [ -n "$equivalent" ] && grep -q -x -F "$(strip_position <<<"$mutant")" <<<"$equivalent"; then
      continue
    fi
    unexplained+="$mutant"$'\n'
  done <"$results/missed.txt"
fi

caught=$(count caught.txt)
missed=$(count missed.txt)
timeout=$(count timeout.txt)
unviable=$(count unviable.txt)
unexplained_n=$(grep -c . <<<"$unexplained" || true)
equivalent_n=$((missed - unexplained_n))
# Score: caught (and timed out: the tests did not pass) over the viable mutants that are not
# equivalent.
scored=$((caught + timeout + unexplained_n))
score=$(awk -v c=$((caught + timeout)) -v n=$scored 'BEGIN { printf "%.1f", n ? 100 * c / n : 100 }')

# Per file: caught (with timeouts) over caught + timeouts + unexplained missed.
per_file() {
  {
    { outcomes caught.txt; outcomes timeout.txt; } | sed -E 's/^([^:]+):.*/\1 caught/'
    printf '%s' "$unexplained" | sed -E 's/^([^:]+):.*/\1 missed/'
  } | awk '
    NF == 2 { n[$1]++; if ($2 == "caught") c[$1]++ }
    END { for (f in n) printf "  %-32s %5.1f %% (%d of %d)\n", f, 100 * c[f] / n[f], c[f], n[f] }
  ' | sort
}

{
  echo "cargo-mutants on ${packages[*]}: ${ran:-${files[*]}}"
  echo "caught: $caught  missed: $missed (equivalent, per mutants-equivalent.txt: $equivalent_n)"
  echo "timeout: $timeout  unviable (did not build): $unviable"
  echo "score: $score % ($((caught + timeout)) of $scored viable, non-equivalent mutants caught)"
  echo
  echo "per file (the target is >= 90 % on each):"
  per_file
  if [ -n "$unexplained" ]; then
    echo
    echo "missed, not explained in mutants-equivalent.txt (a test gap, or an equivalent mutant to list):"
    printf '%s' "$unexplained"
  fi
} | tee "$out/report.txt"
echo "report: $out/report.txt; details: $results/"
