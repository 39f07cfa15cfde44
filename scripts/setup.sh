#!/usr/bin/env bash
# Installs the Debian 12 packages posbias needs, skipping what is already installed. Idempotent;
# runs as root (or through sudo when available).
#
#   bash scripts/setup.sh          everything: build, test and benchmark (what scripts/test.sh runs)
#   bash scripts/setup.sh serve    the server, the CLIs and the Python client only (scripts/serve.sh):
#                                  no test frameworks, PostgreSQL, container tools, clang or mkdocs
set -euo pipefail

SERVE_PACKAGES=(
  # Toolchain
  g++ cmake ninja-build pkg-config git util-linux
  # RPC stack and libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto libabsl-dev
  libspdlog-dev prometheus-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libboost-math-dev
  # The job stores (embedded SQLite; shared PostgreSQL through libpqxx) and SHA-256 of weights and
  # uploads (OpenSSL's libcrypto)
  libsqlite3-dev libpq-dev libpqxx-dev libssl-dev
  # Tokenizers: the Unicode split patterns of byte-level BPE (PCRE2) and NFC normalization (ICU)
  libpcre2-dev libicu-dev
  # LibTorch (CPU) for the model zoo and the Jacobian engine, with an optimized BLAS behind
  # libblas.so.3 (the reference BLAS is ~15x slower for the matrix products)
  libtorch-dev libopenblas0-openmp
  # The Python client package (README's first session): a venv of Debian's Python with its gRPC,
  # protobuf and numpy, and its optional progress bar and plot (tqdm, matplotlib)
  python3 python3-venv python3-pip python3-setuptools python3-grpcio python3-protobuf python3-numpy
  python3-tqdm python3-matplotlib
)
TEST_PACKAGES=(
  # Tests and benchmarks; high-precision golden values (mpmath), scipy and PyTorch references;
  # clang for the libFuzzer harnesses
  libgtest-dev libgmock-dev libbenchmark-dev python3-mpmath python3-scipy python3-torch clang
  # A real PostgreSQL 15 server for the job-store tests (started by the tests on a loopback port)
  postgresql-15
  # Deployment tests: the container image built and run without a Docker engine, manifests
  # rendered and validated offline (kubectl kustomize; Node.js for kubernetes-models and dockerfilelint)
  podman buildah debootstrap runc uidmap fuse-overlayfs slirp4netns
  # The docs site (docs/, mkdocs.yml), built with --strict by the test suite
  mkdocs
)

case "${1:-all}" in
  serve) PACKAGES=("${SERVE_PACKAGES[@]}") ;;
  all)
    PACKAGES=("${SERVE_PACKAGES[@]}" "${TEST_PACKAGES[@]}")
    # Node.js (with npm) and kubectl may come from other sources on the machine: only when a command
    # is missing is Debian's package for it added.
    command -v node >/dev/null && command -v npm >/dev/null || PACKAGES+=(nodejs npm)
    command -v kubectl >/dev/null || PACKAGES+=(kubernetes-client)
    ;;
  *) echo "setup: unknown set '$1': allowed serve or all" >&2; exit 2 ;;
esac

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
