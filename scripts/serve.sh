#!/usr/bin/env bash
# Quick start 1: install what is missing, build, and run posbias-server on its embedded defaults
# (gRPC on 127.0.0.1:50051, metrics on http://127.0.0.1:9464/metrics). Extra arguments go to the
# server, e.g. `bash scripts/serve.sh --listen 0.0.0.0:50051`. Ctrl-C stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
exec build/release/server/posbias-server "$@"
