# Helpers for reading callgrind's output, sourced by instructions.sh and client-instructions.sh
# (and, for client_bench, by phases.sh).

# The calls recorded to functions whose name contains $2, in callgrind's output $1.
calls_to() {
  awk -v want="$2" '
    /^c?fn=\(/ {
      id = $1; sub(/^c?fn=/, "", id)
      name = $0; sub(/^c?fn=\([0-9]+\) ?/, "", name)
      if (name != "") names[id] = name
      if ($0 ~ /^cfn=/) callee = id
      next
    }
    /^calls=/ {
      n = $1; sub(/^calls=/, "", n)
      if (index(names[callee], want) > 0) total += n
    }
    END { print total + 0 }' "$1"
}

# Every instruction recorded in callgrind's output $1.
total_instructions() {
  callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}

# An awk function for the programs here that read hexadecimal (mawk, the machine's awk, has
# no strtonum): hex("7f3a") and hex("0x7f3a") are both 32570. Put it before the program:
# awk "$awk_hex"'...'.
# shellcheck disable=SC2034 # used by the scripts that source this file
awk_hex='
  function hex(s,    i, n) {
    sub(/^0x/, "", s)
    n = 0
    for (i = 1; i <= length(s); i++) n = n * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
    return n
  }'

# Every instruction executed in callgrind's output $1 (made with --dump-instr=yes), one line
# each: its address (decimal) and how many times it ran. Each cost line starts with the
# instruction's address (absolute in hex, or relative to the line before: `+N`, `-N`, `*`) and
# the source line, then the instructions executed there. The line after `calls=` holds a
# call's inclusive cost, not the instruction's own: skipped.
executed_instructions() {
  awk "$awk_hex"'
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
    END { for (a in ran) printf "%.0f %.0f\n", a, ran[a] }' "$1"
}

# A bench's binary, into bin: the path in the variable named $3 if it is set, else the one
# cargo builds for the bench $2 of the package $1.
bench_binary() {
  bin=${!3:-}
  if [ -z "$bin" ]; then
    bin=$(cargo bench -p "$1" --bench "$2" --no-run --message-format=json 2>/dev/null |
      sed -n 's/.*"executable":"\([^"]*\/'"$2"'-[^"]*\)".*/\1/p' | tail -1)
  fi
  [ -x "$bin" ] || { echo "no $2 benchmark binary at '$bin'" >&2; exit 1; }
}

# The client bench's binary, into bin: $CLIENT_BENCH if set, else the one cargo builds.
client_bench() { bench_binary keepwire-benches client CLIENT_BENCH; }

# proto's lifecycle bench's binary, into bin: $LIFECYCLE_BENCH if set, else the one cargo
# builds.
lifecycle_bench() { bench_binary keepwire-proto lifecycle LIFECYCLE_BENCH; }

# For the scripts that run one cell of the client bench (`benches/client/`): reads their
# arguments, [RUNTIME] [IN_FLIGHT] [CLIENT] [SIZE], into rt (default ct), in_flight (1),
# client (A) and size (64); finds the bench binary (bin: $CLIENT_BENCH if set, else the one
# cargo builds); names the function called once per request by the client (per_request:
# keepwire submits each request to its pool once, the hand-written clients answer each with
# one oneshot send); and makes a directory for callgrind's output (out), removed on exit.
client_cell() {
  rt=${1:-ct}
  in_flight=${2:-1}
  client=${3:-A}
  size=${4:-64}
  client_bench
  case $client in
    A) per_request='Pool::submit' ;;
    *) per_request='oneshot::Sender<T>::send' ;;
  esac
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
}

# For footprint.sh and locked-instructions.sh: runs the cell client_cell read under callgrind
# with every instruction's count recorded (--dump-instr=yes), into $out/run, for 2 s, and puts
# the requests it made in requests.
run_cell_by_instruction() {
  valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out/run" "$bin" --bench \
    rt="$rt" size="$size" inflight="$in_flight" clients="$client" rounds=1 ms=2000 \
    >/dev/null 2>&1
  requests=$(calls_to "$out/run" "$per_request")
  [ "$requests" -gt 0 ] || { echo "no requests recorded" >&2; exit 1; }
}

# Prefixes each line of standard input with the cell and the requests it made.
label_cell() {
  sed "s/^/rt=$rt inflight=$in_flight size=$size client=$client ($requests requests): /"
}
