#!/usr/bin/python3
"""bench/baseline_real_shapes.py measures what posbias-measure measures.

The real-shapes benchmark (bench/run_real_shapes.sh) times the two side by side and reports their
largest relative difference; this test holds the baseline to posbias on small models of the same
rows (GPT-2, Qwen2, Qwen3 with its q/k norms and head_dim, Llama 3.2 with its llama3 rope scaling):
exact norms, and Hutchinson with the same probes (the baseline draws posbias' seeded stream), in
float32, both within float32 rounding.

    /usr/bin/python3 tests/jacobian/real_shapes_baseline_test.py BUILD_DIR/server/posbias-measure
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BASELINE = os.path.join(ROOT, "bench", "baseline_real_shapes.py")
MEASURE = None

# The benchmark's presets, made small; every override keeps the family's own settings.
SMALL = "--layers 2 --width 64 --heads 4 --kv-heads 2 --mlp-width 96 --vocab 97 --max-positions 64"
MODELS = {
    "gpt2": "--preset gpt2 --layers 2 --width 64 --heads 4 --vocab 97 --max-positions 64",
    "qwen2": "--preset qwen2-0.5b " + SMALL,
    "qwen3": "--preset qwen3-0.6b " + SMALL + " --head-dim 32",
    "llama3.2": "--preset llama3.2-1b " + SMALL + " --head-dim 16",
}


class BaselineMatchesPosbias(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def both(self, name, length, method_flags):
        base = os.path.join(self.tmp.name, name)
        flags = MODELS[name].split() + ["--length", str(length), "--samples", "1", "--threads", "1", "--seed", "3",
                                        "--input-seed", "7"] + method_flags
        cpp = json.loads(subprocess.run([MEASURE] + flags + ["--export-weights", base + ".safetensors",
                                                             "--export-config", base + ".json"],
                                        check=True, capture_output=True, text=True).stdout)
        with open(base + ".tokens.json", "w") as f:
            json.dump(cpp["tokens"], f)
        method = method_flags[method_flags.index("--method") + 1]
        probes = method_flags[method_flags.index("--probes") + 1] if "--probes" in method_flags else "8"
        py = json.loads(subprocess.run(
            [sys.executable, BASELINE, "--weights", base + ".safetensors", "--config", base + ".json",
             "--tokens", base + ".tokens.json", "--length", str(length), "--method", method, "--probes", probes,
             "--input-seed", "7", "--threads", "1", "--chunk", "16"],
            check=True, capture_output=True, text=True).stdout)
        return cpp, py

    def assertSameProfile(self, cpp, py):
        a, b = cpp["sq_norm_mean"], py["sq_norm"]
        self.assertEqual(len(a), len(b))
        for j, (x, y) in enumerate(zip(a, b)):
            self.assertAlmostEqual(x / y, 1.0, delta=2e-3, msg=f"position {j + 1}: posbias {x}, baseline {y}")

    def test_exact_norms_agree_for_every_benchmarked_family(self):
        for name in MODELS:
            with self.subTest(model=name):
                cpp, py = self.both(name, 12, ["--method", "exact"])
                self.assertEqual(py["rows"], 64)
                self.assertSameProfile(cpp, py)

    def test_hutchinson_draws_the_same_probes_as_posbias(self):
        for name in ("gpt2", "qwen3"):
            with self.subTest(model=name):
                cpp, py = self.both(name, 16, ["--method", "hutchinson", "--probes", "4"])
                self.assertSameProfile(cpp, py)
                # Different probes would differ by far more than rounding (a check that can fail).
                other, _ = self.both(name, 16, ["--method", "hutchinson", "--probes", "5"])
                self.assertGreater(max(abs(x / y - 1) for x, y in zip(other["sq_norm_mean"], py["sq_norm"])), 1e-2)

    def test_the_baseline_says_how_it_ran(self):
        _, py = self.both("gpt2", 8, ["--method", "exact"])
        self.assertIn(py["how"]["attention"], ("sdpa", "sdpa-private", "eager"))
        self.assertIn(py["how"]["vjp"], ("vmap", "loop"))
        self.assertTrue(py["how"]["checkpoint"])


if __name__ == "__main__":
    MEASURE = sys.argv.pop(1)
    unittest.main()
