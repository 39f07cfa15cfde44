#!/usr/bin/env bash
# Fetches, on this Debian 12 machine, the development packages a GPU machine lacks for building
# the engine alone (abseil, Boost headers, CLI11, nlohmann-json, GoogleTest) into .gpukit/ (git-
# ignored, ~12 MB), for bench/gpu/run_on_device.sh to unpack there. Nothing is installed here.
#
#   bash bench/gpu/fetch_kit.sh            then carry .gpukit to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=.gpukit
mkdir -p "$KIT"
cd "$KIT"
rm -f ./*.deb
apt-get download libabsl-dev libabsl20220623 libboost1.74-dev libcli11-dev nlohmann-json3-dev \
  libgtest-dev libgmock-dev 2> >(grep -v "unsandboxed" >&2)
ls -1 ./*.deb
du -sh .
