#!/usr/bin/python3
"""Recall by depth through the real service: the behaviour ("lost in the middle" as retrieval)
beside the mechanism (the queried pair's Jacobian share), end to end.

    /usr/bin/python3 tests/e2e/recall_test.py --server-binary build/release/server/posbias-server \
        --cli-binary build/release/client/cli/posbias --train-binary build/release/server/posbias-train

1. posbias-train trains a tiny GPT-2 for a few dozen updates on filler text with half of its
   sequences replaced by recall probes (--recall-fraction 0.5): the trainer's recall mixing runs
   and its checkpoints (with the byte-level tokenizer) register.
2. Two checkpoints are built by hand on step0's names and shapes: the final layer norm's weight 0
   and its bias along the embedding of "x", so that (tied embeddings) the logits at every position
   are 10 for "x" and 0 for every other id. With the values' alphabet "x" this model answers every
   probe correctly: accuracy must be 1 at every depth, its interval [0.025^(1/n), 1]. With the
   alphabet "wxyz" it cannot retrieve anything: each depth's correct count must equal the number
   of its probes whose answer is "x" (read from the probes' token ids), chance 1/4 inside the
   pooled interval.
3. A comparison job, the trained checkpoint against its step0, on four depths: every model has
   its table, each share is a share, and `jobs result` prints the tables and draws the plots.
4. Refusals name what is wrong and what is allowed.
5. posbias-train --task recall trains a tiny Llama on token-id associative recall for a fixed
   number of updates; registered, it shows the task it learned, a recall job asks that task's
   probes by default and says so, and it answers far above chance; text probes can still be asked.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import reference_models as rm  # noqa: E402 (safetensors writing)
from posbias_server import Cli, ServerProcess, read_safetensors_header, start_watchdog  # noqa: E402

ARGS = None
LENGTH = 48
MQAR_LENGTH = 32
JOB_TIMEOUT_S = 300


def clopper_pearson_low_all_correct(n):
    """The 95 % Clopper-Pearson lower bound at k = n: (0.025)^(1/n) (Beta(n, 1)'s 2.5 % quantile)."""
    return 0.025 ** (1.0 / n)


def write_corpus(directory):
    rng = random.Random(7)
    os.makedirs(directory)
    for d in range(6):
        words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 6))) for _ in range(400)]
        with open(os.path.join(directory, "doc%d.txt" % d), "w") as f:
            f.write(" ".join(words) + ".\n")


class RecallByDepth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="posbias-recall-")
        cls.models = os.path.join(cls.root, "models")
        write_corpus(os.path.join(cls.root, "corpus"))
        subprocess.run([ARGS.train_binary, "--arch", "gpt2", "--layers", "2", "--width", "64", "--heads", "2",
                        "--mlp-width", "128", "--max-positions", "64", "--length", str(LENGTH), "--batch-size", "4",
                        "--steps", "30", "--lr", "3e-3", "--save-steps", "0,30", "--seed", "1", "--threads", "1",
                        "--recall-fraction", "0.5", "--recall-pairs", "2", "--quiet",
                        "--data", os.path.join(cls.root, "corpus"), "--out", os.path.join(cls.models, "run")],
                       check=True, timeout=300)
        # Token-id associative recall: 2 pairs in 32 tokens, 16 keys and 16 values (chance 1/16).
        subprocess.run([ARGS.train_binary, "--task", "recall", "--arch", "llama", "--layers", "2", "--width", "32",
                        "--heads", "2", "--rope-theta", "10000", "--length", str(MQAR_LENGTH), "--recall-pairs", "2",
                        "--key-ids", "128,144", "--value-ids", "192,208", "--steps", "400", "--batch-size", "32",
                        "--lr", "3e-3", "--warmup-steps", "20", "--probes-per-depth", "16", "--seed", "1",
                        "--threads", "1", "--quiet", "--out", os.path.join(cls.models, "mqar")],
                       check=True, timeout=300)
        cls.write_answers_x()
        cls.server = ServerProcess(ARGS.server_binary, ["--data-dir", os.path.join(cls.root, "data"),
                                                        "--model-root", cls.models, "--cpu-threads", "1"]).start()
        cls.cli = Cli(ARGS.cli_binary, cls.server, timeout=JOB_TIMEOUT_S)
        for name, folder in (("step0", "run/step0"), ("step30", "run/step30"), ("answers-x", "answers-x"),
                             ("mqar", "mqar/step400")):
            cls.cli.json("models", "register", name, "--checkpoint", folder)

    @classmethod
    def write_answers_x(cls):
        """step0's names and shapes; logits 10 for "x", 0 elsewhere, at every position."""
        source = os.path.join(cls.models, "run", "step0")
        target = os.path.join(cls.models, "answers-x")
        shutil.copytree(source, target)
        header, _, _ = read_safetensors_header(os.path.join(source, "model.safetensors"))
        generator = torch.Generator().manual_seed(3)
        tensors = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            tensors[name] = torch.randn(info["shape"], generator=generator) * 0.02
        embedding = next(name for name in tensors if name.endswith("wte.weight"))
        final_norm = next(name for name in tensors if name.endswith("ln_f.weight"))
        tensors[embedding][:, 0] = 0.0
        tensors[embedding][ord("x"), 0] = 1.0
        tensors[final_norm] = torch.zeros_like(tensors[final_norm])
        bias = final_norm.replace("weight", "bias")
        tensors[bias] = torch.zeros_like(tensors[bias])
        tensors[bias][0] = 10.0
        rm.save_safetensors(os.path.join(target, "model.safetensors"), tensors)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def recall_job(self, model, *flags):
        job = self.cli.json("jobs", "submit", "--model", model, "--length", str(LENGTH), *flags, "--wait",
                            timeout=JOB_TIMEOUT_S)
        self.assertEqual(job["state"], "succeeded", job)
        return job["id"], self.cli.json("jobs", "result", job["id"])

    def test_a_model_that_always_knows_the_answer_scores_one_at_every_depth(self):
        _, report = self.recall_job("answers-x", "--recall", "0,0.5,1", "--recall-probes", "8", "--recall-values", "x",
                                    "--recall-pairs", "2")
        recall = report["recall"]
        self.assertEqual(recall["chance"], 1.0)
        self.assertEqual([d["depth"] for d in recall["depths"]], [0, 0.5, 1])
        for depth in recall["depths"]:
            self.assertEqual((depth["probes"], depth["correct"], depth["accuracy"]), (8, 8, 1.0), depth)
            self.assertAlmostEqual(depth["accuracy_low"], clopper_pearson_low_all_correct(8), places=12)
            self.assertEqual(depth["accuracy_high"], 1.0)
            self.assertLess(depth["log_prob_mean"], 0.0)
            self.assertGreater(depth["log_prob_mean"], -2e-2)  # about log(e^10 / (e^10 + 255)) = -0.0116.

    def test_a_model_that_cannot_retrieve_scores_chance_and_exactly_its_lucky_probes(self):
        _, report = self.recall_job("answers-x", "--recall", "0,1", "--recall-probes", "64", "--recall-values", "wxyz",
                                    "--recall-seed", "11", "--recall-pairs", "2")
        recall = report["recall"]
        self.assertEqual(recall["chance"], 0.25)
        answers = [row[LENGTH] for row in report["tokens"]]
        self.assertEqual(len(answers), 128)
        correct = lucky = 0
        for d, depth in enumerate(recall["depths"]):
            expected = sum(1 for a in answers[d * 64:(d + 1) * 64] if a == ord("x"))
            self.assertEqual(depth["correct"], expected, depth)
            correct += depth["correct"]
            lucky += expected
        self.assertEqual(correct, lucky)
        self.assertTrue(set(answers) <= {ord(c) for c in "wxyz"})
        self.assertGreater(len(set(answers)), 1)
        # Chance inside the pooled interval (computed here from the two depths' counts).
        pooled = correct / 128
        self.assertLess(abs(pooled - 0.25), 0.15, pooled)

    def test_a_comparison_reports_each_models_recall_beside_its_pair_share(self):
        job_id, report = self.recall_job("step0", "--versus", "step30", "--recall", "0,0.33,0.67,1",
                                         "--recall-probes", "6", "--recall-pairs", "2", "--method", "hutchinson",
                                         "--probes", "4")
        self.assertEqual(report["measurement"]["samples"], 24)
        for model in report["comparison"]:
            recall = model["recall"]
            self.assertEqual(len(recall["depths"]), 4, model["model"])
            for depth in recall["depths"]:
                self.assertEqual(depth["probes"], 6)
                self.assertTrue(0.0 <= depth["accuracy_low"] <= depth["accuracy"] <= depth["accuracy_high"] <= 1.0)
                self.assertTrue(0.0 <= depth["pair_share_mean"] <= depth["pair_context_share_mean"] <= 1.0, depth)
                self.assertLessEqual(depth["log_prob_mean"], 0.0)
        self.assertEqual(report["recall"], report["comparison"][0]["recall"])
        printed = self.cli.run("jobs", "result", job_id, "--plot", os.path.join(self.root, "recall.svg"))
        self.assertEqual(printed.returncode, 0, printed.stderr)
        self.assertIn("recall of step30", printed.stdout)
        self.assertIn("Clopper-Pearson", printed.stdout)
        for suffix in ("recall", "recall-scatter"):
            with open(os.path.join(self.root, "recall-%s.svg" % suffix)) as f:
                self.assertIn("<svg", f.read())

    def test_a_model_trained_on_token_id_recall_is_asked_its_task_and_answers_far_above_chance(self):
        model = self.cli.json("models", "get", "mqar")
        self.assertEqual(model["trained_recall"],
                         "token ids: 2 pairs, keys 128:144, values 192:208, filler 32:127, L = 32")
        self.assertTrue(model["has_tokenizer"])
        job = self.cli.json("jobs", "submit", "--model", "mqar", "--length", str(MQAR_LENGTH), "--recall", "0,0.5,1",
                            "--recall-probes", "32", "--recall-seed", "3", "--wait", timeout=JOB_TIMEOUT_S)
        self.assertEqual(job["state"], "succeeded", job)
        report = self.cli.json("jobs", "result", job["id"])
        recall = report["recall"]
        self.assertEqual(recall["probes"],
                         "token ids: 2 pairs, keys 128:144, values 192:208, filler 32:127 (the task mqar was trained on)")
        self.assertAlmostEqual(recall["chance"], 1 / 16)
        for row in report["tokens"]:
            self.assertEqual(len(row), MQAR_LENGTH + 1)
            self.assertTrue(192 <= row[MQAR_LENGTH] < 208, row)
            self.assertIn(row[MQAR_LENGTH - 1], row[:MQAR_LENGTH - 2], "the queried key occurs in the context")
        correct = sum(d["correct"] for d in recall["depths"])
        self.assertGreater(correct / 96, 4 / 16, recall["depths"])
        printed = self.cli.run("jobs", "result", job["id"])
        self.assertIn("probes: token ids: 2 pairs", printed.stdout)
        # Text probes on the same model, asked for.
        text = self.cli.json("jobs", "submit", "--model", "mqar", "--length", str(LENGTH), "--recall", "0,1",
                             "--recall-probes", "2", "--recall-pairs", "2", "--recall-kind", "text", "--wait",
                             timeout=JOB_TIMEOUT_S)
        self.assertEqual(text["state"], "succeeded", text)
        self.assertTrue(self.cli.json("jobs", "result", text["id"])["recall"]["probes"].startswith("text: 2 key=value"))

    def test_refusals_name_what_is_wrong_and_what_is_allowed(self):
        cases = [
            (["--recall", "0,1", "--output", "loss"], "LOG_PROB with recall inputs"),
            (["--recall", "0,1", "--target", "5"], "0 (= L) with recall inputs"),
            (["--recall", "0,1.5"], "a fraction in [0, 1]"),
            (["--recall", "0,1", "--recall-pairs", "9"], "a longer context, or fewer pairs"),
            (["--recall", "0,1", "--recall-values", "a=b"], "other than \"=\""),
        ]
        for flags, message in cases:
            result = self.cli.run("jobs", "submit", "--model", "step0", "--length", str(LENGTH), *flags)
            self.assertNotEqual(result.returncode, 0, flags)
            self.assertIn("INVALID_ARGUMENT", result.stderr, flags)
            self.assertIn(message, result.stderr, flags)
        token_id_cases = [
            (["--recall-value-ids", "250,300"], "spec.jacobian_norm.input.recall.token_ids.value_ids"),
            (["--recall-value-ids", "130,140"], "disjoint from spec.jacobian_norm.input.recall.token_ids.key_ids"),
            (["--recall-pairs", "12"], "at most (L - 3) / 3 = 9"),
        ]
        for flags, message in token_id_cases:
            result = self.cli.run("jobs", "submit", "--model", "mqar", "--length", str(MQAR_LENGTH), "--recall", "0,1",
                                  *flags)
            self.assertNotEqual(result.returncode, 0, flags)
            self.assertIn("INVALID_ARGUMENT", result.stderr, flags)
            self.assertIn(message, result.stderr, flags)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--cli-binary", required=True)
    parser.add_argument("--train-binary", required=True)
    ARGS, rest = parser.parse_known_args()
    torch.set_num_threads(1)
    start_watchdog(900, "recall_test")
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() and program.result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
