#!/usr/bin/env python3
"""Birth against training, end to end: the checkpoints train.brown_corpus wrote (a tiny llama on
the Brown corpus: step0 = the seeded initialization, step100, step250) registered in a real
posbias-server, measured in comparison jobs, and checked against an independent route.

1. A comparison job on random tokens, step0 against init (the server's own seeded
   initialization of step0's architecture, at the trainer's seed), step100 and step250: init must
   measure exactly what step0 does (the trainer's step0 is that initialization, through
   config.json and model.safetensors), the trained checkpoints must not.
2. The same models on text laid out from Brown documents joined by EOS: every model reports its
   boundary spikes.
3. The training signal (loss_gradient) at birth against step250 on that text.
4. step250's profile for given tokens equals the plain-PyTorch Llama of tests/models/
   reference_families.py (written from transformers, no posbias code) differentiated by autograd
   in float64, one backward pass per output coordinate.

Usage: birth_vs_training_test.py --server-binary B --cli-binary C --run-dir RUN --docs-dir DOCS
       --reference-dir tests/models
"""
import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

LENGTH, SAMPLES, SEED = 64, 8, 3
TRAINER_SEED = "1"  # tests/train/brown_corpus_test.py trains with --seed 1.


def relative_error(a, b):
    return max(abs(x - y) / max(abs(y), 1e-300) for x, y in zip(a, b))


def submit(cli, *flags):
    job = cli.json("jobs", "submit", *flags, "--wait", timeout=600)
    assert job["state"] == "succeeded", job
    return cli.json("jobs", "result", job["id"])


def describe(compared):
    rows = []
    for m in compared:
        ratio = m.get("middle_log_ratio")
        text = "reference" if ratio is None else (f"{ratio['mean']:+.4f} +- {ratio['stderr']:.4f} "
                                                  f"[{ratio['low']:+.4f}, {ratio['high']:+.4f}]")
        rows.append(f"  {m['model']:8s} middle {m['middle']['mean']:.4f} +- {m['middle']['stderr']:.4f}  first "
                    f"{m['first']['mean']:.4f} +- {m['first']['stderr']:.4f}  last {m['last']['mean']:.4f} +- "
                    f"{m['last']['stderr']:.4f}  log middle ratio {text}  spearman {m['spearman']:.3f}")
    return "\n".join(rows)


def text_file(docs_dir, directory):
    """Samples of four Brown documents each (their first 18 bytes), joined by EOS."""
    docs = sorted(docs_dir.glob("c*.txt"))[1::15][:32]
    samples = [[doc.read_text()[:18] for doc in docs[i:i + 4]] for i in range(0, len(docs), 4)]
    path = Path(directory) / "samples.jsonl"
    path.write_text("\n".join(json.dumps(sample) for sample in samples) + "\n")
    return path


def check_random_tokens(cli):
    compared = submit(cli, "--model", "step0", "--versus", "init,step100,step250", "--init-seed", TRAINER_SEED,
                      "--length", str(LENGTH), "--samples", str(SAMPLES), "--seed", str(SEED))["comparison"]
    print("random tokens, L = %d, %d samples:\n%s" % (LENGTH, SAMPLES, describe(compared)))
    assert [m["model"] for m in compared] == ["step0", "init", "step100", "step250"]
    assert relative_error(compared[1]["sq_norm_mean"], compared[0]["sq_norm_mean"]) < 1e-6, "init is not step0"
    assert abs(compared[1]["middle_log_ratio"]["mean"]) < 1e-6
    assert relative_error(compared[3]["sq_norm_mean"], compared[0]["sq_norm_mean"]) > 1e-3, "training changed nothing"
    # Without --init-seed, init is the seed the checkpoint's trainer recorded: step250's birth is
    # step0, and --reference init reads step250 against it.
    birth = submit(cli, "--model", "step250", "--versus", "init", "--reference", "init", "--length", str(LENGTH),
                   "--samples", str(SAMPLES), "--seed", str(SEED))["comparison"]
    assert relative_error(birth[1]["sq_norm_mean"], compared[0]["sq_norm_mean"]) < 1e-6, "init is not the trainer's step0"
    assert "middle_log_ratio" in birth[0] and "middle_log_ratio" not in birth[1], "step250 reads against init"
    for m in compared:
        shares = m["leading"]["mean"] + m["middle"]["mean"] + m["trailing"]["mean"]
        assert abs(shares - 1) < 1e-9, (m["model"], shares)
        if "middle_log_ratio" in m:
            ratio = m["middle_log_ratio"]
            assert ratio["samples"] == SAMPLES and ratio["low"] <= ratio["mean"] <= ratio["high"], ratio


def check_text(cli, samples_path):
    text = ["--text-file", str(samples_path), "--layout", "concatenate", "--truncate", "--length", str(LENGTH)]
    result = submit(cli, "--model", "step0", "--versus", "step250", *text)
    # The table names every model's spikes (it used to print the first model's alone, unnamed).
    table = cli.run("jobs", "result", result["job"]["id"])
    assert table.returncode == 0, table.stderr
    for model in ("step0", "step250"):
        assert "boundary spikes of %s: at " % model in table.stdout, table.stdout[-2000:]
    for m in result["comparison"]:
        spikes = m.get("boundary_spikes", [])
        assert spikes, (m["model"], "no boundary spikes")
        print("text, %s: spikes at document starts %s" % (m["model"], ", ".join(
            f"{s['position']}: {s['ratio_mean']:.2f} +- {s['ratio_stderr']:.2f}" for s in spikes if "ratio_mean" in s)))
    signal = submit(cli, "--model", "step0", "--versus", "step250", "--output", "loss", *text)
    assert signal["measurement"]["output"] == "loss_gradient"
    print("training signal (loss_gradient) on text:\n%s" % describe(signal["comparison"]))
    for m in signal["comparison"]:
        assert all(v > 0 and math.isfinite(v) for v in m["sq_norm_mean"]), m["model"]


def check_reference(cli, run_dir, reference_dir, directory):
    sys.path.insert(0, str(reference_dir))
    import torch
    import reference_families
    import reference_models
    step = run_dir / "step250"
    config = json.loads((step / "config.json").read_text())
    state, _ = reference_models.load_safetensors(str(step / "model.safetensors"))
    ids = [(7 * j + 11) % 256 for j in range(24)]
    expected = reference_families.jacobian_sq_norms(state, config, torch.tensor([ids]))[0].tolist()
    tokens = Path(directory) / "tokens.json"
    tokens.write_text(json.dumps([ids]))
    measured = submit(cli, "--model", "step250", "--tokens", str(tokens), "--length", "24", "--samples", "1",
                      "--method", "exact")["sq_norm_mean"]
    error = relative_error(measured, expected)
    print(f"step250 against the PyTorch reference (float64 autograd): largest relative error {error:.2e}")
    assert error < 1e-4, (measured, expected)


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--server-binary", "--cli-binary", "--run-dir", "--docs-dir", "--reference-dir", "--e2e-dir"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    sys.path.insert(0, args.e2e_dir)
    from posbias_server import Cli, ServerProcess, start_watchdog
    start_watchdog(280, "birth_vs_training_test")
    run_dir = Path(args.run_dir)
    server = ServerProcess(args.server_binary, ["--model-root", str(run_dir), "--cpu-threads", "2"])
    server.start()
    try:
        cli = Cli(args.cli_binary, server)
        for step in ("step0", "step100", "step250"):
            model = cli.json("models", "register", step, "--checkpoint", step, timeout=120)
            assert model["state"] == "ready", model
        with tempfile.TemporaryDirectory(prefix="birth_vs_training_") as directory:
            check_random_tokens(cli)
            check_text(cli, text_file(Path(args.docs_dir), directory))
            check_reference(cli, run_dir, Path(args.reference_dir), directory)
    finally:
        server.stop()
    print("ok")


if __name__ == "__main__":
    sys.exit(main())
