# Helpers for reading callgrind's output, sourced by instructions.sh and client-instructions.sh.

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

# The client bench binary (`benches/client/`): $CLIENT_BENCH if set, else the one cargo builds.
# Prints nothing if there is none.
client_bench() {
  local bin=${CLIENT_BENCH:-}
  if [ -z "$bin" ]; then
    bin=$(cargo bench -p keepwire-benches --bench client --no-run --message-format=json \
      2>/dev/null | sed -n 's/.*"executable":"\([^"]*client-[^"]*\)".*/\1/p' | tail -1)
  fi
  if [ -x "$bin" ]; then echo "$bin"; fi
}

# The function called once per request by client $1: keepwire submits each request to its
# pool once; the hand-written clients answer each with one oneshot send.
per_request_call() {
  case $1 in
    A) echo 'Pool::submit' ;;
    *) echo 'oneshot::Sender<T>::send' ;;
  esac
}
