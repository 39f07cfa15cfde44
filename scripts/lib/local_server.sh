# Sourced by the reproduce scripts: a posbias-server of their own on a free loopback port.
#
#   start_local_server LOG [SERVER FLAGS...]   starts "$SERVER" (2 CPU threads, the given flags,
#                                              its log in LOG) and sets PID and PORT
#   P ARGS...                                  runs the posbias CLI ("$CLI") against it
#
# The caller sets its own EXIT trap after the start (it knows what else to remove).

start_local_server() {
  local log="$1"
  shift
  "$SERVER" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --cpu-threads 2 "$@" 2> "$log" &
  PID=$!
  for _ in $(seq 100); do grep -q "listening for gRPC on port" "$log" && break; sleep 0.1; done
  PORT=$(grep -o 'gRPC on port [0-9]*' "$log" | grep -o '[0-9]*$' || true)
  if [ -z "$PORT" ]; then
    echo "posbias-server did not start; its log ($log):" >&2
    cat "$log" >&2
    return 1
  fi
}

P() { "$CLI" --server "127.0.0.1:$PORT" "$@"; }
