#!/usr/bin/env bash
# The GPU checks of the Jacobian engine as one run on a CUDA machine:
#  1. unpacks the Debian development packages of .gpukit (bench/gpu/fetch_kit.sh) into a prefix,
#  2. builds posbias-measure and torch_tests alone (-DPOSBIAS_ENGINE_ONLY=ON) against the
#     machine's LibTorch (the torch of $PYTHON, default python3),
#  3. runs torch_tests, the *_CUDA tests included,
#  4. runs the real-shapes benchmark (bench/run_real_shapes.sh: gpt2 small at L = 1024, the
#     Qwen2-0.5B shape at L = 2048, the Llama-3.2-1B shape at L = 1024; Hutchinson K = 8) on
#     cuda:0 in bfloat16 and float32: posbias against the PyTorch baseline on the same device,
#     weights, ids and probes, and both against the FLOP floor over the device's measured peak;
#  5. measures the long-context benchmark's llama at L = 8k and 32k on cuda:0 (the blocked
#     passes on CUDA; each bounded to 150 s), kept in summary.json's long_context.
# It writes five files to $OUT (default bench-results/gpu): run.log (steps, nvidia-smi,
# configure and build output, the benchmark's tables), torch_tests.log, the real-shapes rows
# real-shapes-{bfloat16,float32}.jsonl (one line per case: seconds of both sides, the FLOPs, the
# peak, the profiles' difference), and summary.json. A failed step does not stop the others; the
# run then exits 1 and names them.
#
#   OUT=... bash bench/gpu/run_on_device.sh          on the GPU machine (about 10 minutes)
#   POSBIAS_GPU_DRY_RUN=1 bash bench/gpu/run_on_device.sh
#       here, on the CPU: the same steps with Debian's LibTorch and a tiny model (checks the kit
#       and the script, not the GPU)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-bench-results/gpu}"
# The python with torch: $PYTHON, else the first of python3 and Debian's /usr/bin/python3 that
# imports it (a pyenv or venv python3 first on PATH may lack it).
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=python3
  for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import torch' 2> /dev/null; then PYTHON="$candidate"; break; fi
  done
fi
DRY_RUN="${POSBIAS_GPU_DRY_RUN:-0}"
PREFIX="${POSBIAS_KIT_PREFIX:-/tmp/posbias-kit}"
BUILD="${POSBIAS_GPU_BUILD:-build/gpu}"
mkdir -p "$OUT" "$PREFIX"
LOG="$OUT/run.log"
: > "$LOG"
log() { echo "== $*" | tee -a "$LOG" >&2; }
# Steps that fail are named here; the run goes on (each step's figures stand alone) and exits 1.
FAILED=()

log "kit: unpacking .gpukit into $PREFIX"
ls .gpukit/*.deb > /dev/null || { echo "error: .gpukit is empty: run bench/gpu/fetch_kit.sh here first" >&2; exit 1; }
for deb in .gpukit/*.deb; do dpkg -x "$deb" "$PREFIX"; done
export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

TORCH_PREFIX="$($PYTHON -c 'import torch, os; p = torch.utils.cmake_prefix_path; print(p if os.path.isdir(os.path.join(p, "Torch")) else "")' 2>/dev/null || true)"
log "torch: $($PYTHON -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 || echo none) cmake prefix '${TORCH_PREFIX:-system}'"
command -v nvidia-smi > /dev/null && nvidia-smi >> "$LOG" 2>&1 || true

log "configure ($BUILD)"
cmake -S . -B "$BUILD" -G Ninja -DPOSBIAS_ENGINE_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX/usr;${TORCH_PREFIX}" >> "$LOG" 2>&1 \
  || { tail -40 "$LOG" >&2; exit 1; }
log "build posbias-measure, torch_tests"
cmake --build "$BUILD" --target posbias-measure torch_tests -j "$(nproc)" >> "$LOG" 2>&1 \
  || { grep -m 20 -A 5 "error" "$LOG" >&2; exit 1; }

log "torch_tests"
set +e
"$BUILD/tests/torch_tests" > "$OUT/torch_tests.log" 2>&1
TESTS_RC=$?
set -e
grep -E "^\[  (PASSED|FAILED) |tests ran|_CUDA" "$OUT/torch_tests.log" | tail -20 >&2 || true

MEASURE="$BUILD/server/posbias-measure"
if [[ "$DRY_RUN" == 1 ]]; then
  REAL_CASES="qwen2-tiny" DEVICE=cpu DTYPES=(float32) BUDGET=2048
else
  REAL_CASES="gpt2-1k qwen2-2k llama-1k" DEVICE=cuda:0 DTYPES=(bfloat16 float32) BUDGET=100000
fi
WORK="$(mktemp -d)"
# Real shapes on the device: the CPU benchmark's own script (bench/run_real_shapes.sh), its cases
# with the PyTorch baseline beside each on the same device, weights, ids and probes, and the FLOP
# floor over the device's peak matrix-product rate in that dtype (bench/gemm_peak.py on $DEVICE).
for dtype in "${DTYPES[@]}"; do
  log "real shapes: $REAL_CASES, Hutchinson K = 8, $dtype on $DEVICE"
  OUT="$WORK/real-$dtype" DEVICE="$DEVICE" DTYPE="$dtype" MEMORY_BUDGET_MB="$BUDGET" CASES="$REAL_CASES" \
    BASELINE_CASES="$REAL_CASES" PY="$PYTHON" timeout 240 bash bench/run_real_shapes.sh "$BUILD" "$(nproc)" \
    > "$WORK/real-$dtype.table" 2>> "$LOG" || { tail -5 "$LOG" >&2; FAILED+=("real shapes $dtype"); }
  cat "$WORK/real-$dtype.table" >&2 || true
  cp "$WORK/real-$dtype/real-shapes.jsonl" "$OUT/real-shapes-$dtype.jsonl" 2> /dev/null || true
done
# Long contexts on the device: the long-context benchmark's llama (bench/run_long_context.sh: 2
# layers, width 64, 4 heads of 64, 2 kv heads) through the same blocked passes, Hutchinson K = 8
# in float32, with the planner's memory-sized CUDA blocks; the reports stay in $WORK (the device
# brings back at most 8 files), summarize.py keeps their seconds, blocks and memory.
LONG=(--arch llama --layers 2 --width 64 --heads 4 --kv-heads 2 --mlp-width 128 --vocab 128 --max-positions 131072)
mkdir -p "$WORK/long"
if [[ "$DRY_RUN" == 1 ]]; then LONG_LENGTHS=(1024); else LONG_LENGTHS=(8192 32768); fi
for L in "${LONG_LENGTHS[@]}"; do
  log "long context: llama (2 layers, width 64) L = $L, Hutchinson K = 8, float32 on $DEVICE"
  timeout 150 "$MEASURE" "${LONG[@]}" --length "$L" --samples 1 --method hutchinson --probes 8 --seed 0 \
    --device "$DEVICE" --dtype float32 --memory-budget-mb "$BUDGET" > "$WORK/long/long-$L.json" 2>> "$LOG" \
    || { tail -5 "$LOG" >&2; rm -f "$WORK/long/long-$L.json"; FAILED+=("long context L = $L"); }
done
log "summary"
"$PYTHON" bench/gpu/summarize.py "$OUT" "$WORK/long" | tee "$OUT/summary.json"
rm -rf "$WORK"
[[ "$TESTS_RC" == 0 ]] || FAILED+=("torch_tests")
if (( ${#FAILED[@]} )); then
  log "failed steps: $(IFS=,; echo "${FAILED[*]}") (run.log has their output)"
  exit 1
fi
