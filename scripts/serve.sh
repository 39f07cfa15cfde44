#!/usr/bin/env bash
# Quick start 1: install what is missing, build, and run posbias-server on its embedded defaults
# (gRPC on 127.0.0.1:50051, metrics on http://127.0.0.1:9464/metrics). Extra arguments go to the
# server, e.g. `bash scripts/serve.sh --listen 0.0.0.0:50051`. Ctrl-C stops it cleanly. Its model
# root is runs/ (where posbias-train's checkpoints go, so `posbias models register NAME --checkpoint
# RUN/stepN` finds them) unless --model-root or POSBIAS_MODEL_ROOT names another.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
root=()
if [ -z "${POSBIAS_MODEL_ROOT:-}" ] && [[ " $* " != *" --model-root"* ]]; then
  mkdir -p runs
  root=(--model-root runs)
fi
exec build/release/server/posbias-server "${root[@]}" "$@"
