#!/usr/bin/env bash
# Quick start 2: install what is missing, build, and run the whole test suite (ctest). Exits
# non-zero on any failure. Timings of the build and the tests are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
start=$(date +%s)
bash scripts/build.sh release
built=$(date +%s)
status=0
ctest --preset release || status=$?
done_at=$(date +%s)
echo "build: $((built - start)) s, tests: $((done_at - built)) s"
exit "$status"
