#!/usr/bin/env bash
# Quick start 1: install what the server needs, build what it runs, and run posbias-server on its
# embedded defaults
# (gRPC on 127.0.0.1:50051, metrics on http://127.0.0.1:9464/metrics). Extra arguments go to the
# server, e.g. `bash scripts/serve.sh --listen 0.0.0.0:50051`. Ctrl-C stops it cleanly. Its model
# root is runs/ (where posbias-train's checkpoints go, so `posbias models register NAME --checkpoint
# RUN/stepN` finds them) unless --model-root or POSBIAS_MODEL_ROOT names another.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh serve
# Only what it runs: the server, the CLI, posbias-train and posbias-measure (scripts/test.sh
# configures the same tree with the tests and benchmarks and builds everything).
cmake --preset release -DPOSBIAS_BUILD_TESTS=OFF -DPOSBIAS_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release --target posbias-server posbias posbias-train posbias-measure
root=()
if [ -z "${POSBIAS_MODEL_ROOT:-}" ] && [[ " $* " != *" --model-root"* ]]; then
  mkdir -p runs
  root=(--model-root runs)
fi
exec build/release/server/posbias-server "${root[@]}" "$@"
