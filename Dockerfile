# posbias-server container image (CPU, Debian 12 LibTorch 1.13).
#
#   podman build --format docker --target runtime -t posbias:cpu .     # or: docker build --target runtime -t posbias:cpu .
#   podman run --rm -p 50051:50051 -p 9464:9464 -v posbias-data:/data posbias:cpu
#
# `--format docker` matters for podman/buildah only: the OCI image format has no HEALTHCHECK, and
# buildah drops it (with a warning) unless the docker format is asked for.
# The CUDA variant lives in Dockerfile.cuda, so that no builder (BuildKit, buildah, or Docker's legacy
# builder, which builds every stage before the target) ever touches the CUDA base images here.
# docs/container.md documents building, running and the offline test (tests/container).

ARG DEBIAN_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------------------------------
# build: compiles posbias-server, the posbias CLI, posbias-measure and posbias-train, installs them into /opt/posbias.
FROM ${DEBIAN_IMAGE} AS build

# The packages of scripts/setup.sh that the server build needs (no tests, benchmarks or deployment
# tools). Kept in its own layer before any source is copied, so a source change does not refetch it.
# libpqxx-dev/libpq-dev: the PostgreSQL job store; libpcre2-dev/libicu-dev: the tokenizers.
RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto libabsl-dev \
      libspdlog-dev prometheus-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libcli11-dev \
      libboost-math-dev libsqlite3-dev libpq-dev libpqxx-dev libssl-dev libpcre2-dev libicu-dev libtorch-dev; \
    rm -rf /var/lib/apt/lists/*

# Parallel compile jobs. A torch translation unit needs ~1.5 GB of memory: raise with care.
ARG JOBS=2

WORKDIR /src
# .dockerignore keeps build trees, tests, benchmarks, docs and deployment files out of the context,
# so only changes to the sources that the build uses invalidate the layers from here on.
COPY . /src
RUN set -eux; \
    cmake -S /src -B /build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DPOSBIAS_BUILD_TESTS=OFF -DPOSBIAS_BUILD_BENCH=OFF \
      -DCMAKE_INSTALL_PREFIX=/opt/posbias; \
    cmake --build /build --parallel "${JOBS}" --target posbias-server posbias posbias-measure posbias-train; \
    cmake --install /build --strip; \
    ls -l /opt/posbias/bin

# ---------------------------------------------------------------------------------------------------
# runtime: the server, the CLI (health checks, `podman exec ... posbias ...`), posbias-measure and posbias-train on
# the runtime shared libraries only. The package list is what `readelf -d` (NEEDED) of the
# binaries maps to with `dpkg -S` (posbias-train needs nothing more); apt adds their dependencies. libopenblas0-openmp provides an
# optimized libblas.so.3/liblapack.so.3 for LibTorch (the reference BLAS is ~15x slower).
# libpq5/libpqxx-6.4: the PostgreSQL job store; libpcre2-8-0/libicu72: the tokenizers.
FROM ${DEBIAN_IMAGE} AS runtime

RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 \
      libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libcpp-httplib0.11 \
      libsqlite3-0 libpq5 libpqxx-6.4 libssl3 libpcre2-8-0 libicu72 \
      libtorch1.13 libopenblas0-openmp; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --system --gid 10001 posbias; \
    useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin posbias; \
    mkdir -p /data; \
    chown 10001:10001 /data; \
    chmod 0750 /data

COPY --from=build /opt/posbias/bin/ /usr/local/bin/

# Fail the build here, not at run time, when a shared library is missing or BLAS is the reference one.
RUN set -eu; \
    for binary in posbias-server posbias posbias-measure posbias-train; do \
      if ldd "/usr/local/bin/${binary}" | grep 'not found'; then echo "missing libraries: ${binary}" >&2; exit 1; fi; \
    done; \
    blas="$(readlink -f "$(ldconfig -p | awk '$1 == "libblas.so.3" { print $NF; exit }')")"; \
    echo "libblas.so.3 -> ${blas}"; \
    case "${blas}" in *openblas*) ;; *) echo "libblas.so.3 is not OpenBLAS" >&2; exit 1 ;; esac; \
    posbias-server --version; \
    posbias --version

# Configuration is by POSBIAS_* environment variables (each server flag has one; see README "Limits").
# Secure by default: gRPC on all interfaces with TLS and bearer tokens, from files mounted read-only
# at /etc/posbias (Kubernetes: the Secrets posbias-tls and posbias-auth; Compose and `podman run`:
# what deploy/compose/make-local-certs.sh makes). Without them the server does not start. Empty
# values turn them off, e.g. for a listener on loopback (-e POSBIAS_LISTEN=127.0.0.1:50051) or behind
# a mesh that authenticates (add --allow-unauthenticated). /metrics and /healthz stay plain HTTP.
# The root filesystem may be read-only (--read-only, readOnlyRootFilesystem): the server writes only
# to /data (the volume) and /tmp (give it a tmpfs or emptyDir).
ENV POSBIAS_LISTEN=0.0.0.0:50051 \
    POSBIAS_METRICS_LISTEN=0.0.0.0:9464 \
    POSBIAS_TLS_CERT_FILE=/etc/posbias/tls/tls.crt \
    POSBIAS_TLS_KEY_FILE=/etc/posbias/tls/tls.key \
    POSBIAS_AUTH_TOKENS_FILE=/etc/posbias/auth/tokens.json \
    POSBIAS_DATA_DIR=/data \
    POSBIAS_LOG_FORMAT=json

VOLUME ["/data"]
WORKDIR /data
USER 10001:10001
EXPOSE 50051 9464

# A real gRPC health check (grpc.health.v1.Health/Check, overall status) with the bundled CLI, on the
# port taken from POSBIAS_LISTEN (the server must listen on 127.0.0.1 too: 0.0.0.0 or [::] do). With
# TLS on it verifies the server with ca.crt beside the certificate and the name localhost (a SAN the
# certificate must carry); with mTLS on (POSBIAS_TLS_CLIENT_CA_FILE) it presents the server's own
# certificate. Health needs no token.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
  CMD ["/bin/sh", "-c", "exec posbias --timeout 5 --server \"127.0.0.1:${POSBIAS_LISTEN##*:}\" ${POSBIAS_TLS_CERT_FILE:+--tls --ca-file ${POSBIAS_TLS_CERT_FILE%/*}/ca.crt --tls-server-name localhost} ${POSBIAS_TLS_CLIENT_CA_FILE:+--cert-file ${POSBIAS_TLS_CERT_FILE} --key-file ${POSBIAS_TLS_KEY_FILE}} health"]

# The server drains in-flight calls for POSBIAS_DRAIN_SECONDS (default 10) on SIGTERM and exits 0:
# give `docker stop -t` / terminationGracePeriodSeconds a few seconds more than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["posbias-server"]

# Last, so that a new revision or build date does not invalidate the layers above.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="posbias" \
      org.opencontainers.image.description="Transformer position bias: theory and measurement over gRPC (posbias-server, posbias CLI, posbias-measure, posbias-train; CPU LibTorch)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim" \
      org.opencontainers.image.documentation="docs/container.md"
