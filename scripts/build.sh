#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release) from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET="${1:-release}"
cmake --preset "$PRESET" >/dev/null
cmake --build --preset "$PRESET"
