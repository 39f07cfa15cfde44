#!/usr/bin/env bash
# Reproduces the Step-0 result of "Lost in the Middle at Birth" (arXiv 2603.10123) at laptop size:
# the U-shaped influence profile of untrained decoders, with and without position encoding, for a
# qwen2-0.5b-shaped and a gpt2-shaped model, each fitted with the coherent and incoherent theory.
#
#   bash scripts/reproduce_paper.sh [BUILD_DIR] [OUT_DIR]     (defaults: build/release, docs/reproduce)
#
# Starts its own posbias-server on a free port with a scratch data directory, registers the four
# models, runs one Hutchinson job each (K = 16 probes, L = 128, 4 random sequences), and writes
# OUT_DIR/<model>.json (the job result) and OUT_DIR/<model>.svg (measured profile and fitted theory),
# then prints a summary table. About 3 minutes on 2 CPU cores. Then the trained half
# (scripts/reproduce_trained.sh, about 10 minutes more; TRAINED=0 skips it): small models trained
# on the Brown corpus, their checkpoints compared with their birth.
#
# Full-size recipe on a GPU (same commands, other sizes):
#   posbias jobs submit --model qwen-pe --length 2048 --samples 32 --method hutchinson --probes 64 \
#       --device cuda --dtype bfloat16 --wait --format json
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build/release}"
OUT="${2:-docs/reproduce}"
SERVER="$BUILD_DIR/server/posbias-server"
CLI="$BUILD_DIR/client/cli/posbias"
LENGTH="${LENGTH:-128}"
mkdir -p "$OUT"
DATA=$(mktemp -d)
LOG="$DATA/server.log"
. scripts/lib/local_server.sh
start_local_server "$LOG" --data-dir "$DATA"
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DATA"' EXIT

# Seeded random initialization (seed 0) of the published shapes.
P models register qwen-pe   --preset qwen2-0.5b --seed 0 > /dev/null
P models register qwen-nope --preset qwen2-0.5b --seed 0 --no-position-encoding > /dev/null
P models register gpt2-pe   --preset gpt2 --seed 0 > /dev/null
P models register gpt2-nope --preset gpt2 --seed 0 --no-position-encoding > /dev/null

for model in qwen-pe qwen-nope gpt2-pe gpt2-nope; do
  id=$(P jobs submit --model "$model" --length "$LENGTH" --samples 4 --method hutchinson --probes 16 \
         --seed 1 --wait --format json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  P jobs result "$id" --format json > "$OUT/$model.json"
  P jobs result "$id" --plot "$OUT/$model.svg" > /dev/null
done

/usr/bin/python3 - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
print("| model | PE | first / middle / last weight | coherent at H: alpha, rmse_log, Spearman | incoherent at H: alpha, rmse_log, Spearman | best effective depth (incoherent): H_eff, lambda [interval], rmse_log | measured / coherent last jump | s |")
print("|---|---|---|---|---|---|---|---:|")
for model in ("qwen-pe", "qwen-nope", "gpt2-pe", "gpt2-nope"):
    r = json.load(open(f"{out}/{model}.json"))
    m = r["sq_norm_mean"]
    total = sum(m)
    p = [v / total for v in m]
    fits = {f["model"]: f for f in r["theory"]["fits"]}
    def fit(name):
        f = fits[name]
        return f'{f["alpha"]:.3f}, {f["metrics"]["rmse_log"]:.2f}, {f["metrics"]["spearman"]:.3f}'
    jump = fits["coherent"]["metrics"]["measured_last_jump"]
    model_jump = fits["coherent"]["metrics"]["model_last_jump"]
    ridge = {f["model"]: f for f in r["theory"].get("effective_depth_fits", [])}
    inc = ridge.get("incoherent")
    eff = (f'{inc["depth"]}, {inc["lambda"]:.2f} [{inc["lambda_low"]:.2f}, {inc["lambda_high"]:.2f}], '
           f'{inc["metrics"]["rmse_log"]:.2f}') if inc else "n/a"
    pe = "off" if r["model"]["no_position_encoding"] else "on"
    print(f'| {r["model"]["preset"] or model} | {pe} | {p[0]:.2e} / {p[len(p)//2]:.2e} / {p[-1]:.2e} '
          f'| {fit("coherent")} | {fit("incoherent")} | {eff} | {jump:.0f} / {model_jump:.0f} '
          f'| {r["measurement"]["seconds"]:.0f} |')
PYEOF

if [ "${TRAINED:-1}" != 0 ]; then
  bash scripts/reproduce_trained.sh "$BUILD_DIR" "$OUT"
fi
