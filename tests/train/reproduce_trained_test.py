#!/usr/bin/python3
"""The trained half's study script, bounded, and its between-seed statistics.

    /usr/bin/python3 tests/train/reproduce_trained_test.py --build-dir build/release --out-dir DIR

1. `AcrossSeeds`: the between-seed mean, standard error, t interval and the "holds" rule of
   scripts/lib/trained_tables.py on hand-worked values (closed forms).
2. `Smoke`: scripts/reproduce_trained.sh end to end at smoke size (two seeds, two cures, both
   families, 20 updates at L = 64, 2 samples and 2 probes per depth, 4 x the training length): it
   exits 0 and writes every table, every job's JSON, the plots, and the learned-position family's
   refusal beyond its positions; run again on the same folders it trains and measures nothing
   twice. Its numbers mean nothing at this size; the full study is the script's defaults
   (docs/reproduce/trained.md).
"""

import argparse
import math
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
import trained_tables as tt  # noqa: E402

ARGS = None


class AcrossSeeds(unittest.TestCase):
    def test_mean_and_standard_error_are_the_sample_ones(self):
        a = tt.Across([1.0, 2.0, 3.0])
        self.assertAlmostEqual(a.mean, 2.0)
        self.assertAlmostEqual(a.se, 1.0 / math.sqrt(3.0))  # sd = 1 (ddof 1), over sqrt(3).

    def test_the_interval_uses_student_t_with_seeds_minus_one_degrees(self):
        low, high = tt.Across([1.0, 2.0, 3.0]).interval()
        half = 4.302652729911275 / math.sqrt(3.0)  # t(0.975, 2) = 4.3027.
        self.assertAlmostEqual(low, 2.0 - half, places=9)
        self.assertAlmostEqual(high, 2.0 + half, places=9)

    def test_a_sign_holds_only_when_every_seed_has_it_and_the_interval_excludes_zero(self):
        self.assertEqual(tt.Across([1.0, 1.1, 0.9]).holds(), "yes, +")
        self.assertEqual(tt.Across([-1.0, -1.1, -0.9]).holds(), "yes, −")
        self.assertEqual(tt.Across([1.0, 2.0, -0.1]).holds(), "no")  # One seed disagrees.
        self.assertEqual(tt.Across([0.1, 3.0, 0.2]).holds(), "no")  # Same sign, interval reaches 0.
        self.assertEqual(tt.Across([5.0]).holds(), "no (1 seed)")

    def test_missing_values_are_left_out_not_counted_as_zero(self):
        a = tt.Across([1.0, None, 3.0, float("nan")])
        self.assertEqual(a.n, 2)
        self.assertAlmostEqual(a.mean, 2.0)

    def test_the_text_names_every_seed(self):
        self.assertEqual(tt.Across([1.0, 3.0]).text(1), "2.0 ± 1.0 (1.0, 3.0)")
        self.assertEqual(tt.Across([]).text(), "—")


class Smoke(unittest.TestCase):
    def test_the_study_runs_end_to_end_and_writes_its_tables(self):
        out = ARGS.out_dir
        models = os.path.join(out, "models")
        shutil.rmtree(out, ignore_errors=True)
        env = dict(os.environ, SEEDS="1 2", CURES="baseline oversample", FAMILIES="gpt2 llama", STEPS="20",
                   SAMPLES="2", PROBES="2", DEPTHS="0,0.5,1", LONG_FACTORS="4", LENGTH="64", SIGNAL="1", RECALL_PAIRS="4",
                   LONG_PROBES="2", MODELS=models)
        script = os.path.join(ROOT, "scripts", "reproduce_trained.sh")
        run = subprocess.run(["bash", script, ARGS.build_dir, out], env=env, capture_output=True, text=True, timeout=1200)
        self.assertEqual(run.returncode, 0, run.stdout[-4000:] + run.stderr[-4000:])
        self.assertNotIn("running  samples", run.stderr)  # The CLI's progress bars stay out of the log.
        self.assertIn("] 1. the Brown corpus", run.stderr)  # A progress line per stage.
        self.assertIn("tables and plots", run.stderr)
        for family in ("gpt2", "llama"):
            for seed in (1, 2):
                for kind in ("random", "text", "signal", "recall"):
                    self.assertTrue(os.path.exists(f"{out}/trained-{family}-s{seed}-{kind}.json"), (family, seed, kind))
                for cure in ("baseline", "oversample"):
                    self.assertTrue(os.path.exists(f"{out}/trained-{family}-{cure}-s{seed}-loss.json"))
            for plot in ("recall", "scatter", "cures"):
                self.assertGreater(os.path.getsize(f"{out}/trained-{family}-{plot}.svg"), 1000)
        self.assertTrue(os.path.exists(f"{out}/trained-llama-s1-recall-x4.json"))
        with open(f"{out}/trained-gpt2-s1-recall-x4.txt") as f:
            refusal = f.read()
        self.assertIn("sequence_length = 256", refusal)  # Learned positions: 4 L is beyond their 2 L = 128.
        with open(f"{out}/trained.md") as f:
            md = f.read()
        for heading in ("gpt2: held-out loss", "llama: recall by depth at the training length",
                        "llama: each cure against the baseline", "llama: recall by depth at 4 × the training length",
                        "gpt2 at 4 × the training length", "context: middle 80 %"):
            self.assertIn(heading, md)
        # Run again on the same folders: nothing is trained or measured twice, the tables are the same.
        again = subprocess.run(["bash", script, ARGS.build_dir, out], env=env, capture_output=True, text=True,
                               timeout=1200)
        self.assertEqual(again.returncode, 0, again.stderr[-4000:])
        self.assertEqual(again.stderr.count("kept from"), 8)  # 2 families x 2 seeds x 2 cures.
        self.assertNotIn("updates)", again.stderr)
        with open(f"{out}/trained.md") as f:
            self.assertEqual(f.read(), md)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--out-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
