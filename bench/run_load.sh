#!/usr/bin/env bash
# The load benchmark: a release posbias-server on a free loopback port (no job runs: its jobs stay
# queued, so watches stay open), then bench/load_bench at 1, 64 and 1000 calls in flight, without
# and with 100 WatchJob streams open. Writes bench-results/load.jsonl and prints it.
#
# usage: bash bench/run_load.sh [BUILD_DIR] [SECONDS_PER_CASE]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${1:-build/release}"
SECONDS_PER_CASE="${2:-5}"
SERVER="$BUILD_DIR/server/posbias-server"
CLI="$BUILD_DIR/client/cli/posbias"
LOAD="$BUILD_DIR/bench/load_bench"
for binary in "$SERVER" "$CLI" "$LOAD"; do
  [[ -x "$binary" ]] || { echo "error: $binary not built (cmake --build --preset release)" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
"$SERVER" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$WORK/data" --no-cpu-worker \
  >"$WORK/server.log" 2>&1 &
PID=$!
PORT=""
for _ in $(seq 100); do
  PORT="$(grep -o 'listening for gRPC on port [0-9]*' "$WORK/server.log" 2>/dev/null | head -1 | sed 's/.* //')" || true
  [[ -n "$PORT" ]] && break
  sleep 0.1
done
[[ -n "$PORT" ]] || { echo "error: the server did not report its port" >&2; cat "$WORK/server.log" >&2; exit 1; }
ADDRESS="127.0.0.1:$PORT"
JOB="$("$CLI" --server "$ADDRESS" jobs submit --model cesaro --length 8 --format json | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -1)"
mkdir -p bench-results
{
  "$LOAD" --server "$ADDRESS" --seconds "$SECONDS_PER_CASE" --inflight 1,64,1000
  "$LOAD" --server "$ADDRESS" --seconds "$SECONDS_PER_CASE" --inflight 64,1000 --watches 100 --watch-job "$JOB"
} | tee bench-results/load.jsonl
echo "server RSS after the run: $(ps -o rss= -p "$PID") KiB" | tee -a bench-results/load.jsonl
