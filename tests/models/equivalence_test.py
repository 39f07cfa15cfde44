#!/usr/bin/python3
"""Equivalence of posbias' LibTorch model zoo and Jacobian engine with the Python reference.

    /usr/bin/python3 tests/models/equivalence_test.py \
        --dump-binary build/release/tests/model_forward_dump [--keep-dir DIR] [unittest args]

For GPT-2- and Qwen2-shaped random models, plain and with each ablation (no position encoding,
uniform attention, no MLP), it runs

    model_forward_dump --arch A --layers N --width N --heads N --kv-heads N --mlp-width N --vocab N
        --max-positions N [--rope-theta X] [ablation flags] --seed S --tokens "1,2,3;4,5,6"
        --weights-out W.safetensors --config-out config.json --out OUT.safetensors

loads W.safetensors (Hugging Face names) and config.json (Hugging Face config) into
tests/models/reference_models.py and requires, relative to the reference (max abs diff / max abs
value):

* embeddings [B,L,d], hidden [B,L,d] (after the final norm), logits [B,L,V]: <= 1e-5;
* jacobian_sq_norms [B,L] (||d hidden[:, L-1] / d e_j||_F^2) vs the float64 brute force: <= 1e-4.

The reference runs in float64 (the state is cast), so the differences measure the C++ side's own
rounding. Exits non-zero on any failure. Needs Debian's /usr/bin/python3 with python3-torch only.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models as rm  # noqa: E402

torch.set_num_threads(1)

FORWARD_TOL = 1e-5
JACOBIAN_TOL = 1e-4

DUMP_BINARY = None
KEEP_DIR = None

SHAPES = {
    "gpt2": dict(layers=2, width=64, heads=4, kv_heads=4, mlp_width=256, vocab=128, max_positions=32,
                 rope_theta=None),
    "qwen2": dict(layers=2, width=64, heads=4, kv_heads=2, mlp_width=128, vocab=128, max_positions=32,
                  rope_theta=10000.0),
}
ABLATIONS = {
    "plain": {},
    "no_position_encoding": {"no_position_encoding": True},
    "uniform_attention": {"uniform_attention": True},
    "no_mlp": {"no_mlp": True},
    "untied": {"untied": True},  # Qwen2 only: a separate lm_head.weight.
}
BATCH, LENGTH = 2, 12

# Extra tensors a Hugging Face checkpoint may legitimately carry that the math does not use.
ALLOWED_EXTRA_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")


def tokens_for(arch, ablation, vocab):
    rng = random.Random(f"{arch}/{ablation}")
    return [[rng.randrange(vocab) for _ in range(LENGTH)] for _ in range(BATCH)]


def rel_err(got, want):
    got, want = got.double(), want.double()
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / (scale if scale > 0 else 1.0)


def strip_prefix(name):
    for p in ("transformer.", "model."):
        if name.startswith(p):
            return name[len(p):]
    return name


class EquivalenceMixin:
    """The checks of one (arch, ablation) case; concrete TestCase classes are made below."""
    arch = None
    ablation = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = None
        if KEEP_DIR:
            cls.dir = os.path.join(KEEP_DIR, f"{cls.arch}-{cls.ablation}")
            os.makedirs(cls.dir, exist_ok=True)
        else:
            cls.tmp = tempfile.TemporaryDirectory(prefix=f"equiv-{cls.arch}-{cls.ablation}-")
            cls.dir = cls.tmp.name
        shape = SHAPES[cls.arch]
        cls.shape = shape
        cls.tokens = tokens_for(cls.arch, cls.ablation, shape["vocab"])
        cls.weights = os.path.join(cls.dir, "weights.safetensors")
        cls.config_path = os.path.join(cls.dir, "config.json")
        cls.out_path = os.path.join(cls.dir, "out.safetensors")
        cmd = [DUMP_BINARY, "--arch", cls.arch, "--layers", str(shape["layers"]),
               "--width", str(shape["width"]), "--heads", str(shape["heads"]),
               "--kv-heads", str(shape["kv_heads"]), "--mlp-width", str(shape["mlp_width"]),
               "--vocab", str(shape["vocab"]), "--max-positions", str(shape["max_positions"])]
        if shape["rope_theta"] is not None:
            cmd += ["--rope-theta", repr(shape["rope_theta"])]
        flags = ABLATIONS[cls.ablation]
        for key, flag in (("no_position_encoding", "--no-position-encoding"),
                          ("uniform_attention", "--uniform-attention"), ("no_mlp", "--no-mlp"),
                          ("untied", "--untied")):
            if flags.get(key):
                cmd.append(flag)
        # A large init spread (0.2, not 0.02) makes the layers strongly nonlinear, so that a wrong
        # GELU variant, rotary pairing or head sharing shows far above the tolerance.
        cmd += ["--initializer-range", "0.2", "--seed", "1234",
                "--tokens", ";".join(",".join(str(t) for t in seq) for seq in cls.tokens),
                "--weights-out", cls.weights, "--config-out", cls.config_path, "--out", cls.out_path]
        cls.cmd = cmd
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        cls.proc = proc
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}\nexited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                               f"stderr:\n{proc.stderr}")
        cls.state, cls.weights_meta = rm.load_safetensors(cls.weights)
        with open(cls.config_path) as f:
            cls.config = json.load(f)
        cls.out, _ = rm.load_safetensors(cls.out_path)
        cls.state64 = rm.cast_state(cls.state, torch.float64)
        cls.ids = torch.tensor(cls.tokens, dtype=torch.int64)
        # The reference reads tying from config.json; the rest are its ablation switches.
        cls.flags = {k: v for k, v in flags.items() if k != "untied"}
        cls.ref = rm.forward(cls.state64, cls.config, cls.ids, **cls.flags)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "tmp", None) is not None:
            cls.tmp.cleanup()

    def report(self, what, err, tol):
        if VERBOSE:
            print(f"    {self.arch}/{self.ablation} {what}: rel err {err:.3e} (tol {tol:.0e})",
                  file=sys.stderr)
        self.assertLessEqual(err, tol, f"{what}: relative error {err:.3e} > {tol:.0e}\n"
                                       f"command: {' '.join(self.cmd)}")

    def test_config_is_huggingface_config(self):
        cfg = self.config
        self.assertEqual(str(cfg.get("model_type")), self.arch, "config.json needs HF model_type")
        c = rm.normalize_config(cfg, self.state)
        s = self.shape
        for key in ("layers", "width", "heads", "kv_heads", "mlp_width", "vocab", "max_positions"):
            self.assertEqual(c[key], s[key], f"config.json: {key}")
        if self.arch == "qwen2":
            self.assertEqual(c["rope_theta"], s["rope_theta"])
            self.assertEqual(c["act"], "silu")
        else:
            self.assertIn(c["act"], ("gelu_new", "gelu_pytorch_tanh"))

    def test_weight_names_are_huggingface_names(self):
        c = rm.normalize_config(self.config, self.state)
        want = {strip_prefix(k) for k in rm.random_state(self.config, seed=0)}
        have = {strip_prefix(k) for k in self.state}
        if self.flags.get("no_mlp"):
            # A model built without its MLP sub-blocks need not carry their weights (or norms).
            want = {k for k in want if not (".mlp." in k or ".ln_2." in k or ".post_attention_layernorm." in k)}
        missing = sorted(want - have)
        extra = sorted(k for k in have - want
                       if k != "lm_head.weight" and not k.endswith(ALLOWED_EXTRA_SUFFIXES))
        self.assertEqual(missing, [], "weights missing from W.safetensors")
        self.assertEqual(extra, [], "unexpected tensors in W.safetensors")
        ref = rm.random_state(self.config, seed=0)
        for k, v in ref.items():
            if strip_prefix(k) not in have:
                continue
            got = self.state[k] if k in self.state else self.state[
                next(n for n in self.state if strip_prefix(n) == strip_prefix(k))]
            self.assertEqual(tuple(got.shape), tuple(v.shape), k)
        if self.arch == "qwen2" and not c["tie"]:
            self.assertIn("lm_head.weight", self.state)

    def test_output_tensors(self):
        d, V = self.shape["width"], self.shape["vocab"]
        want = {"embeddings": (BATCH, LENGTH, d), "hidden": (BATCH, LENGTH, d),
                "logits": (BATCH, LENGTH, V), "jacobian_sq_norms": (BATCH, LENGTH)}
        for k, shape in want.items():
            self.assertIn(k, self.out)
            self.assertEqual(tuple(self.out[k].shape), shape, k)
            self.assertEqual(self.out[k].dtype, torch.float32, k)
            self.assertTrue(torch.isfinite(self.out[k]).all(), k)

    def test_embeddings(self):
        want = rm.embed(self.state64, self.config, self.ids, **self.flags)
        self.report("embeddings", rel_err(self.out["embeddings"], want), FORWARD_TOL)

    def test_hidden(self):
        self.report("hidden", rel_err(self.out["hidden"], self.ref["hidden"]), FORWARD_TOL)

    def test_logits(self):
        self.report("logits", rel_err(self.out["logits"], self.ref["logits"]), FORWARD_TOL)

    def test_jacobian_sq_norms(self):
        want = rm.jacobian_sq_norms(self.state, self.config, self.ids, target=None,
                                    dtype=torch.float64, **self.flags)
        self.report("jacobian_sq_norms", rel_err(self.out["jacobian_sq_norms"], want), JACOBIAN_TOL)
        # Per position too, so that a tiny-but-wrong middle is not hidden by the end spike.
        per_pos = ((self.out["jacobian_sq_norms"].double() - want).abs() / want.abs()).max().item()
        self.report("jacobian_sq_norms (per position)", per_pos, 1e-3)

    def test_ablation_changes_reference(self):
        # Informational: the ablation must change the reference model, else the comparison above
        # would not test the C++ switch at all (except 'plain').
        if self.ablation in ("plain", "untied"):
            return  # 'untied' changes the logits only; checked by the logits comparison.
        if self.flags.get("no_mlp") and not any(".mlp." in k for k in self.state):
            return  # the model was built without MLPs: nothing to compare the ablation against
        plain = rm.forward(self.state64, self.config, self.ids)["hidden"]
        diff = rel_err(self.ref["hidden"], plain)
        if VERBOSE:
            print(f"    {self.arch}/{self.ablation}: ablation changes hidden by {diff:.3e}",
                  file=sys.stderr)
        self.assertGreater(diff, 1e-6, "the ablation does not change the model; test is void")


VERBOSE = False


def make_cases():
    cases = {}
    for arch in SHAPES:
        for abl in ABLATIONS:
            if abl == "untied" and arch != "qwen2":
                continue  # GPT-2's output projection is always the token embedding.
            name = f"Equivalence_{arch}_{abl}"
            cases[name] = type(name, (EquivalenceMixin, unittest.TestCase),
                               {"arch": arch, "ablation": abl})
    return cases


globals().update(make_cases())


def main():
    global DUMP_BINARY, KEEP_DIR, VERBOSE
    ap = argparse.ArgumentParser(
        description="Compare model_forward_dump with the Python reference models.",
        epilog="Remaining arguments go to unittest (e.g. -k qwen2, -v).")
    ap.add_argument("--dump-binary", required=True, help="path to model_forward_dump")
    ap.add_argument("--keep-dir", help="keep the generated files under this directory")
    ap.add_argument("--print-errors", action="store_true", help="print every relative error")
    args, rest = ap.parse_known_args()
    DUMP_BINARY = os.path.abspath(args.dump_binary)
    KEEP_DIR = os.path.abspath(args.keep_dir) if args.keep_dir else None
    VERBOSE = args.print_errors
    if not (os.path.isfile(DUMP_BINARY) and os.access(DUMP_BINARY, os.X_OK)):
        print(f"error: {DUMP_BINARY} is not an executable file", file=sys.stderr)
        return 2
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    result = prog.result
    ok = result.wasSuccessful() and result.testsRun > 0
    print(f"equivalence: {result.testsRun} run, {len(result.failures)} failures, "
          f"{len(result.errors)} errors, {len(result.skipped)} skipped -> {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
