#!/usr/bin/env bash
# Builds the CPU container image (Dockerfile, --target runtime) for real with podman, offline from
# any container registry, runs it, and checks it end to end:
#   base image  debootstrap --variant=minbase bookworm -> tarball (cached) -> podman import as
#               docker.io/library/debian:bookworm-slim; the build never pulls (--pull=never)
#   build       podman build --format docker --target runtime (apt-get inside reaches Debian's
#               archive through --network=host; the compile uses POSBIAS_CONTAINER_JOBS, default 2)
#   image       user 10001:10001, entrypoint, ports, volume, env, health check, stop signal, labels
#   secrets     deploy/compose/make-local-certs.sh (openssl): a CA, the server certificate, a token;
#               mounted read-only at /etc/posbias/{tls,auth}, where the image expects them (TLS and
#               bearer tokens are on by default)
#   run         ports published on loopback; gRPC health over TLS (CLI inside the container and, if given, the
#               host CLI through the published port), `podman healthcheck run`, /metrics from the host,
#               JSON logs, a density call against closed-form values, a gpt2-tiny Jacobian job to
#               success and its result, the server runs as uid 10001 and writes /data
#   stop        podman stop (SIGTERM): exit code 0 within the drain time; the image size is printed
#
# Storage: vfs driver with its own --root/--runroot under POSBIAS_CONTAINER_WORKDIR (default
# /var/tmp/posbias-container), runtime runc. Runs as root (CI) and needs podman, debootstrap, runc
# (scripts/setup.sh installs them). Exits non-zero, naming the step, on any failure.
#
# Environment:
#   POSBIAS_CONTAINER_WORKDIR  work dir (storage, base tarball cache, logs)  [/var/tmp/posbias-container]
#   POSBIAS_CONTAINER_JOBS     compile jobs inside the build                  [2]
#   POSBIAS_CONTAINER_KEEP     1: keep the image and the build cache afterwards (fast reruns; the vfs
#                              driver stores every layer as a full copy: several GB)   [0]
#   POSBIAS_CONTAINER_BASE_MAX_AGE_DAYS  rebuild the cached debootstrap tarball when older   [7]
#   POSBIAS_HOST_CLI           a host-built `posbias` CLI to also check the published port   [unset]
#   POSBIAS_CONTAINER_PREBUILT a folder holding the host build's posbias-server, posbias,
#                              posbias-measure and posbias-train: the image's runtime stage is built
#                              over them instead of compiling inside (the test suite's way: the
#                              compile is the main build's; the build stage's packages are checked
#                              against scripts/setup.sh). Unset: the whole Dockerfile   [unset]
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="${POSBIAS_CONTAINER_WORKDIR:-/var/tmp/posbias-container}"
JOBS="${POSBIAS_CONTAINER_JOBS:-2}"
KEEP="${POSBIAS_CONTAINER_KEEP:-0}"
BASE_MAX_AGE_DAYS="${POSBIAS_CONTAINER_BASE_MAX_AGE_DAYS:-7}"
HOST_CLI="${POSBIAS_HOST_CLI:-}"
PREBUILT="${POSBIAS_CONTAINER_PREBUILT:-}"
BASE_IMAGE="docker.io/library/debian:bookworm-slim"
IMAGE="localhost/posbias:container-test"
CONTAINER="posbias-container-test-$$"
DRAIN_SECONDS=10
PYTHON=/usr/bin/python3
# nofile: the podman default (1048576) is above this machine's hard limit, so set one explicitly.
# nproc 1024 (the documented minimum) counts every thread of the user: the server's gRPC pool, the
# LibTorch/OpenMP pools (one thread per core) and the job worker stay far below 4096 even on big
# hosts. For the build, RUN steps run as root where the limit counts the host's root threads too.
ULIMITS=(--ulimit nofile=16384:16384 --ulimit nproc=4096:4096)

START_SECONDS=$SECONDS
STEP="start"
step() { STEP="$*"; echo "[container-test +$((SECONDS - START_SECONDS))s] $*"; }
fail() { echo "FAIL [${STEP}]: $*" >&2; exit 1; }

for tool in podman debootstrap runc tar openssl "$PYTHON"; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (bash scripts/setup.sh installs it)"
done
[ "$(id -u)" -eq 0 ] || fail "run as root (rootful podman with the vfs driver; CI runs as root)"

mkdir -p "$WORK/base" "$WORK/tmp" "$WORK/logs"
# Podman's own state dirs (runroot, --tmpdir) must survive between runs (their loss reads as a reboot
# to podman) and are separate from TMPDIR, which this script empties.
export TMPDIR="$WORK/tmp"  # build contexts and image exports; /tmp may be small
PODMAN=(podman --root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs --runtime runc
        --cgroup-manager cgroupfs --events-backend file --tmpdir "$WORK/run/libpod-tmp")

# One run at a time per work dir (CTest also has RUN_SERIAL; this guards manual runs).
exec 9>"$WORK/lock"
flock -w 3600 9 || fail "another container test holds $WORK/lock"

cleanup() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ]; then
    echo "container-test FAILED at step: ${STEP}" >&2
    if "${PODMAN[@]}" container exists "$CONTAINER" 2>/dev/null; then
      echo "--- last 40 lines of the container log ---" >&2
      "${PODMAN[@]}" logs --tail 40 "$CONTAINER" >&2
    fi
  fi
  "${PODMAN[@]}" rm -f -v -t 0 "$CONTAINER" >/dev/null 2>&1  # -v: and its anonymous /data volume
  if [ "$KEEP" != 1 ]; then
    # The vfs driver keeps a full copy of the file system per layer (the build stage alone is
    # several GB): remove the images and the build cache, keep only the debootstrap tarball (the
    # base image is re-imported from it in seconds). POSBIAS_CONTAINER_KEEP=1 keeps everything for
    # fast reruns (a source change then recompiles only, without the apt layers).
    "${PODMAN[@]}" rmi -a -f >/dev/null 2>&1
    "${PODMAN[@]}" image prune -a -f >/dev/null 2>&1
    "${PODMAN[@]}" volume prune -f >/dev/null 2>&1
  fi
  rm -rf "$WORK/tmp"/* "$WORK/secrets" 2>/dev/null
  echo "[container-test +$((SECONDS - START_SECONDS))s] done (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- base image -------------------------------------------------------------------------------------
TARBALL="$WORK/base/debian-bookworm-minbase.tar"
if [ -f "$TARBALL" ] && [ -n "$(find "$TARBALL" -mtime "+$BASE_MAX_AGE_DAYS")" ]; then
  echo "base tarball older than $BASE_MAX_AGE_DAYS days: rebuilding it"
  rm -f "$TARBALL"
  "${PODMAN[@]}" rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true
fi
if [ ! -f "$TARBALL" ]; then
  step "debootstrap --variant=minbase bookworm (cached in $TARBALL)"
  rootfs="$WORK/base/rootfs.tmp"
  rm -rf "$rootfs"
  nice -n 19 debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian \
    >"$WORK/logs/debootstrap.log" 2>&1 || { tail -20 "$WORK/logs/debootstrap.log" >&2; fail "debootstrap"; }
  # Like the official slim image: bookworm, -updates and -security sources, no docs/man/locales.
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  tar --numeric-owner -C "$rootfs" -cf "$TARBALL.tmp" . || fail "tar of the debootstrap root"
  mv "$TARBALL.tmp" "$TARBALL"
  rm -rf "$rootfs"
  "${PODMAN[@]}" rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true
fi
if ! "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
  step "podman import $TARBALL as $BASE_IMAGE"
  "${PODMAN[@]}" import --change 'CMD ["bash"]' "$TARBALL" "$BASE_IMAGE" >/dev/null \
    || fail "podman import"
fi

# --- build --------------------------------------------------------------------------------------------
build_start=$SECONDS
revision="$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)"
DOCKERFILE="$SRC/Dockerfile"
CONTEXT="$SRC"
if [ -n "$PREBUILT" ]; then
  # The compile shared with the host build: the Dockerfile's runtime stage, verbatim, over a build
  # stage that holds the host's binaries (stripped, as `cmake --install --strip` does in the image).
  # The build stage's own packages are the host build's: each must be one scripts/setup.sh installs.
  step "Dockerfile's build stage installs only packages of scripts/setup.sh"
  build_packages="$(awk '/AS build$/ {b=1} /AS runtime$/ {b=0} b' "$SRC/Dockerfile" \
    | sed -n '/apt-get install/,/rm -rf/p' | tr ' \\;' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' \
    | grep -vE '^(apt-get|install|rm|y|no|recommends|DEBIAN_FRONTEND)$' || true)"
  [ -n "$build_packages" ] || fail "no package list found in the Dockerfile's build stage"
  for package in $build_packages; do
    grep -qE "(^|[[:space:]])${package//+/\\+}([[:space:]]|\$)" "$SRC/scripts/setup.sh" \
      || fail "the build stage installs $package, which scripts/setup.sh does not: the host build does not vouch for it"
  done
  step "podman build --target runtime over the host's binaries ($PREBUILT; log: $WORK/logs/build.log)"
  CONTEXT="$WORK/prebuilt-context"
  rm -rf "$CONTEXT"
  mkdir -p "$CONTEXT/bin"
  for binary in posbias-server posbias posbias-measure posbias-train; do
    [ -x "$PREBUILT/$binary" ] || fail "$PREBUILT/$binary is missing (build the release preset first)"
    strip -o "$CONTEXT/bin/$binary" "$PREBUILT/$binary" || fail "strip $binary"
  done
  DOCKERFILE="$CONTEXT/Dockerfile"
  { echo 'ARG DEBIAN_IMAGE=debian:bookworm-slim'
    echo 'FROM scratch AS build'
    echo 'COPY bin/ /opt/posbias/bin/'
    awk '/^FROM .* AS runtime$/ {r=1} r' "$SRC/Dockerfile"; } >"$DOCKERFILE"
  grep -q 'COPY --from=build /opt/posbias/bin/ /usr/local/bin/' "$DOCKERFILE" \
    || fail "the runtime stage no longer copies /opt/posbias/bin from the build stage"
else
  step "podman build --target runtime (compile with $JOBS jobs; log: $WORK/logs/build.log)"
fi
if ! nice -n 19 "${PODMAN[@]}" build --pull=never --format docker --layers --network host \
     "${ULIMITS[@]}" --target runtime --build-arg "JOBS=$JOBS" --build-arg "REVISION=$revision" \
     --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
     -t "$IMAGE" -f "$DOCKERFILE" "$CONTEXT" >"$WORK/logs/build.log" 2>&1; then
  tail -40 "$WORK/logs/build.log" >&2
  fail "podman build (full log: $WORK/logs/build.log)"
fi
echo "build took $((SECONDS - build_start)) s"

# --- image configuration ------------------------------------------------------------------------------
step "image configuration"
config="$("${PODMAN[@]}" image inspect "$IMAGE")" || fail "podman image inspect"
"$PYTHON" - "$config" <<'EOF' || fail "image configuration (see above)"
import json, sys
image = json.loads(sys.argv[1])[0]
config = image["Config"]
env = dict(e.split("=", 1) for e in config.get("Env", []))
problems = []
def expect(what, got, want):
    if got != want:
        problems.append(f"{what}: {got!r}, expected {want!r}")
expect("User", config.get("User"), "10001:10001")
expect("Entrypoint", config.get("Entrypoint"), ["posbias-server"])
expect("WorkingDir", config.get("WorkingDir"), "/data")
expect("StopSignal", config.get("StopSignal"), "SIGTERM")
expect("Volumes", sorted(config.get("Volumes") or {}), ["/data"])
expect("ExposedPorts", sorted(config.get("ExposedPorts") or {}), ["50051/tcp", "9464/tcp"])
for key, value in {"POSBIAS_LISTEN": "0.0.0.0:50051", "POSBIAS_METRICS_LISTEN": "0.0.0.0:9464",
                   "POSBIAS_TLS_CERT_FILE": "/etc/posbias/tls/tls.crt",
                   "POSBIAS_TLS_KEY_FILE": "/etc/posbias/tls/tls.key",
                   "POSBIAS_AUTH_TOKENS_FILE": "/etc/posbias/auth/tokens.json",
                   "POSBIAS_DATA_DIR": "/data", "POSBIAS_LOG_FORMAT": "json"}.items():
    expect(f"Env {key}", env.get(key), value)
health = image.get("Healthcheck") or config.get("Healthcheck") or {}
if "health" not in " ".join(health.get("Test") or []):
    problems.append(f"Healthcheck: {health!r}, expected the CLI's gRPC health check")
labels = config.get("Labels") or {}
for label in ["org.opencontainers.image.title", "org.opencontainers.image.version",
              "org.opencontainers.image.revision"]:
    if not labels.get(label):
        problems.append(f"label {label} missing")
size = image.get("Size") or 0
print(f"image size: {size / 2**20:.0f} MiB ({size} bytes)")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
EOF

# --- secrets ------------------------------------------------------------------------------------------
step "local CA, server certificate and token (deploy/compose/make-local-certs.sh)"
SECRETS="$WORK/secrets"
bash "$SRC/deploy/compose/make-local-certs.sh" --force --out "$SECRETS" >"$WORK/logs/secrets.log" 2>&1 \
  || { cat "$WORK/logs/secrets.log" >&2; fail "make-local-certs.sh"; }
TOKEN="$(cat "$SECRETS/token")"
# The CLI over TLS (verified with the local CA, SAN localhost), with the admin token.
TLS_ARGS=(--tls --ca-file /etc/posbias/tls/ca.crt --tls-server-name localhost)

# --- run ----------------------------------------------------------------------------------------------
read -r GRPC_PORT METRICS_PORT < <("$PYTHON" -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
step "podman run (gRPC on 127.0.0.1:$GRPC_PORT, metrics on 127.0.0.1:$METRICS_PORT)"
# Podman schedules periodic health checks as systemd timers and there is no systemd here (CI
# containers): podman 4.3 logs harmless "unable to get systemd connection" errors on run and stop even
# with --health-interval=disable. `podman healthcheck run` below runs the image's check directly.
"${PODMAN[@]}" run -d --name "$CONTAINER" "${ULIMITS[@]}" --health-interval=disable \
  -p "127.0.0.1:$GRPC_PORT:50051" -p "127.0.0.1:$METRICS_PORT:9464" \
  -e POSBIAS_DRAIN_SECONDS="$DRAIN_SECONDS" -e POSBIAS_CPU_THREADS=2 \
  -v "$SECRETS/tls:/etc/posbias/tls:ro" -v "$SECRETS/auth:/etc/posbias/auth:ro" \
  "$IMAGE" >/dev/null || fail "podman run"

in_ctr() { "${PODMAN[@]}" exec "$CONTAINER" "$@"; }
# The bundled CLI inside the container, over TLS, with the token (POSBIAS_TOKEN).
pb_ctr() { "${PODMAN[@]}" exec -e POSBIAS_TOKEN="$TOKEN" "$CONTAINER" posbias "${TLS_ARGS[@]}" "$@"; }
json_field() { "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); print(d[sys.argv[1]])' "$1"; }

step "wait for gRPC health SERVING (posbias health inside the container)"
deadline=$((SECONDS + 120))
until status="$(pb_ctr --timeout 3 --format json health 2>/dev/null | json_field status 2>/dev/null)" \
      && [ "$status" = SERVING ]; do
  running="$("${PODMAN[@]}" inspect -f '{{.State.Running}}' "$CONTAINER" 2>/dev/null || echo false)"
  [ "$running" = true ] || fail "the container exited: $("${PODMAN[@]}" inspect -f '{{.State.ExitCode}}' "$CONTAINER" 2>&1)"
  [ "$SECONDS" -lt "$deadline" ] || fail "not SERVING after 120 s (last: '${status:-}')"
  sleep 1
done
echo "SERVING after $((SECONDS - deadline + 120)) s"
for service in posbias.v1.DensityService posbias.v1.ModelService posbias.v1.JobService; do
  status="$(pb_ctr --format json health --service "$service" | json_field status)" \
    || fail "health of $service"
  [ "$status" = SERVING ] || fail "$service is $status"
done

step "podman healthcheck run (the image's HEALTHCHECK)"
out="$("${PODMAN[@]}" healthcheck run "$CONTAINER" 2>&1)" || fail "podman healthcheck run: $out"
echo "healthcheck: ${out:-healthy}"

step "no call without TLS, none without a token"
if in_ctr posbias --timeout 5 health >/dev/null 2>&1; then fail "plaintext health succeeded: the server does not serve TLS"; fi
if "${PODMAN[@]}" exec "$CONTAINER" posbias "${TLS_ARGS[@]}" --timeout 5 density --depth 2 --alpha 0.5 --x 1 >/dev/null 2>&1; then
  fail "a density call without a token succeeded"
fi

if [ -n "$HOST_CLI" ]; then
  step "gRPC health through the published port with the host CLI ($HOST_CLI)"
  "$HOST_CLI" --timeout 5 --server "127.0.0.1:$GRPC_PORT" --tls --ca-file "$SECRETS/tls/ca.crt" --tls-server-name localhost health \
    || fail "host CLI health via 127.0.0.1:$GRPC_PORT"
fi

step "Prometheus /metrics through the published port"
"$PYTHON" - "$METRICS_PORT" <<'EOF' || fail "GET http://127.0.0.1:$METRICS_PORT/metrics"
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
lines = [l for l in body.splitlines() if l and not l.startswith("#")]
assert lines, "no samples"
print(f"{len(lines)} metric samples")
EOF

step "logs are JSON lines (POSBIAS_LOG_FORMAT=json)"
# The whole log first: `podman logs | head` would fail under pipefail when head closes the pipe early.
container_log="$("${PODMAN[@]}" logs "$CONTAINER" 2>&1 | grep -v 'level=error msg="unable to get systemd' || true)"
printf '%s\n' "$container_log" | "$PYTHON" -c '
import json, sys
lines = [l for l in sys.stdin.read().splitlines() if l.strip()][:3]
assert lines, "no log lines"
for l in lines: json.loads(l)
print(lines[0][:200])' || fail "the server log is not JSON lines"

step "density call against closed-form values (H=2, alpha=0.5)"
# rho_2(x) = 2(1-a)a + a^2 ln(1/x): 0.5 at x=1, 0.75 at x=1/e; atom (1-a)^2 = 0.25.
out="$(pb_ctr --format json density --depth 2 --alpha 0.5 --x 1,0.36787944117144233)" \
  || fail "posbias density: $out"
"$PYTHON" -c '
import json, math, sys
d = json.loads(sys.argv[1])
want = {"density": [0.5, 0.75], "atom": 0.25, "floor": 0.5}
for key, value in want.items():
    got = d[key]
    for g, w in zip(got if isinstance(got, list) else [got], value if isinstance(value, list) else [value]):
        assert math.isclose(g, w, rel_tol=1e-12), f"{key}: {got} != {value}"
print("density", d["density"], "atom", d["atom"], "floor", d["floor"])' "$out" || fail "density values"

step "Jacobian job on gpt2-tiny (L=8, 2 samples, exact) until succeeded"
out="$(timeout 300 "${PODMAN[@]}" exec -e POSBIAS_TOKEN="$TOKEN" "$CONTAINER" posbias "${TLS_ARGS[@]}" --timeout 290 --format json jobs submit \
       --model gpt2-tiny --length 8 --samples 2 --method exact --seed 1 --wait 2>/dev/null)" \
  || fail "posbias jobs submit --wait: $out"
job_id="$(json_field id <<<"$out")" || fail "no job id in: $out"
state="$(json_field state <<<"$out")"
[ "$state" = succeeded ] || fail "job $job_id ended $state: $out"
result="$(pb_ctr --format json jobs result "$job_id")" || fail "posbias jobs result $job_id"
"$PYTHON" -c '
import json, math, sys
r = json.loads(sys.argv[1])
assert r["positions"] == list(range(1, 9)), r["positions"]
norms = r["sq_norm_mean"]
assert len(norms) == 8 and all(math.isfinite(v) and v > 0 for v in norms), norms
# At init the last position (the residual path) dominates the influence on the last output.
assert norms[-1] == max(norms), norms
print("job", sys.argv[2], "sq_norm_mean", [f"{v:.4g}" for v in norms])' "$result" "$job_id" \
  || fail "job result"

step "runs as uid 10001 and writes /data"
uid="$(in_ctr id -u)" || fail "podman exec id"
[ "$uid" = 10001 ] || fail "exec uid is $uid"
server_uid="$(in_ctr awk '/^Uid:/ { print $2 }' /proc/1/status)" || fail "read /proc/1/status"
[ "$server_uid" = 10001 ] || fail "the server (pid 1) runs as uid $server_uid"
data_owner="$(in_ctr stat -c %u /data)" || fail "stat /data"
[ "$data_owner" = 10001 ] || fail "/data is owned by uid $data_owner"
in_ctr sh -c 'ls -ln /data; test -n "$(ls -A /data)"' || fail "the server wrote nothing to /data"

step "podman stop (SIGTERM): exit 0 within the drain time ($DRAIN_SECONDS s)"
stop_start=$SECONDS
"${PODMAN[@]}" stop -t $((DRAIN_SECONDS + 20)) "$CONTAINER" >/dev/null || fail "podman stop"
stop_seconds=$((SECONDS - stop_start))
exit_code="$("${PODMAN[@]}" inspect -f '{{.State.ExitCode}}' "$CONTAINER")"
echo "stopped in ${stop_seconds} s, exit code ${exit_code}"
[ "$exit_code" = 0 ] || fail "exit code $exit_code after SIGTERM"
[ "$stop_seconds" -le $((DRAIN_SECONDS + 5)) ] || fail "stop took ${stop_seconds} s (drain ${DRAIN_SECONDS} s)"
"${PODMAN[@]}" logs "$CONTAINER" 2>&1 | grep -q "stopped cleanly" || fail "no 'stopped cleanly' in the log"

size="$("${PODMAN[@]}" image inspect -f '{{.Size}}' "$IMAGE")"
echo "image $IMAGE: $((size / 1048576)) MiB"
echo "container test passed in $((SECONDS - START_SECONDS)) s"
