#!/usr/bin/python3
"""Black-box end-to-end tests of posbias-measure, the LibTorch Jacobian-norm tool.

Usage (Debian's Python only; it needs nothing outside the standard library):

    /usr/bin/python3 tests/e2e/measure_test.py --measure-binary build/dev/server/posbias-measure

Every run uses a tiny model (2 layers, width 32, vocabulary 100, L <= 32) with --threads 1, so the
whole script takes a few tens of seconds on two cores. Every subprocess runs under a timeout and a
watchdog bounds the whole run. Reports of identical command lines are computed once and shared.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import unittest
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from posbias_server import read_safetensors_header  # noqa: E402

ARGS = None  # Parsed command line (set in main()).

SUBPROCESS_TIMEOUT_S = 30
WATCHDOG_S = 150

VOCAB = 100
LENGTH = 16
SAMPLES = 2
WIDTH = 32
LAYERS = 2

GPT2 = ("--arch", "gpt2", "--layers", str(LAYERS), "--width", str(WIDTH), "--heads", "2",
        "--mlp-width", "64", "--vocab", str(VOCAB), "--threads", "1")
QWEN2 = ("--arch", "qwen2", "--layers", str(LAYERS), "--width", str(WIDTH), "--heads", "4",
         "--kv-heads", "2", "--mlp-width", "64", "--vocab", str(VOCAB), "--threads", "1")
RUN = ("--length", str(LENGTH), "--samples", str(SAMPLES), "--format", "json")

STABLE_FLAGS = ["--arch", "--layers", "--width", "--heads", "--kv-heads", "--mlp-width", "--vocab",
                "--no-position-encoding", "--seed", "--length", "--samples", "--method", "--probes",
                "--device", "--dtype", "--tokens", "--weights", "--export-weights", "--format", "--pathway",
                "--compare-pathways"]

METRICS = ["spearman", "rmse_log", "ks", "wasserstein1"]

# ---------------------------------------------------------------------------------------------
# Running the tool


def run_tool(args):
    """Runs posbias-measure with `args` under a timeout; returns the CompletedProcess."""
    return subprocess.run([ARGS.measure_binary, *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=SUBPROCESS_TIMEOUT_S)


_REPORTS = {}


def measure(*args):
    """The parsed JSON report of a successful run; runs of equal arguments are computed once."""
    key = tuple(args)
    if key not in _REPORTS:
        result = run_tool(args)
        if result.returncode != 0:
            raise AssertionError("posbias-measure %s exited %d:\n%s" % (" ".join(args), result.returncode, result.stderr))
        try:
            _REPORTS[key] = json.loads(result.stdout)
        except ValueError as error:
            raise AssertionError("posbias-measure %s printed no JSON (%s):\n%s" % (" ".join(args), error, result.stdout[:2000]))
    return json.loads(json.dumps(_REPORTS[key]))  # A private copy.


def write_json(directory, name, value):
    path = os.path.join(directory, name)
    with open(path, "w") as out:
        json.dump(value, out)
    return path


def given_tokens(samples, length, offset=0):
    """Deterministic token id lists, all below VOCAB."""
    return [[(7 * s + 13 * j + offset) % VOCAB for j in range(length)] for s in range(samples)]


def without_timing(report):
    """The report less what the machine decides: the seconds, the rate achieved over them, and the
    measured resident memory."""
    report["measurement"].pop("seconds", None)
    report.get("memory", {}).pop("measured_peak_bytes", None)
    (report.get("work") or {}).pop("achieved_gflops_per_second", None)
    return report


def is_positive_finite(value):
    return isinstance(value, float) and math.isfinite(value) and value > 0


def coherent_row(alpha, layers, length):
    """v = e_L^T ((1 - a) I + a M)^H for the Cesaro matrix M[i][j] = 1/i (j <= i), exactly."""
    v = [Fraction(0)] * length
    v[-1] = Fraction(1)
    for _ in range(layers):
        # (v M)_j = sum over i >= j of v_i / i (1-based i).
        tail, vm = Fraction(0), [Fraction(0)] * length
        for i in range(length - 1, -1, -1):
            tail += v[i] / (i + 1)
            vm[i] = tail
        v = [(1 - alpha) * v[j] + alpha * vm[j] for j in range(length)]
    return v


# ---------------------------------------------------------------------------------------------
# Tests


class HelpTest(unittest.TestCase):

    def test_help_exits_zero_and_lists_every_stable_flag(self):
        result = run_tool(["--help"])
        self.assertEqual(result.returncode, 0, result.stderr)
        words = set(result.stdout.replace(",", " ").split())
        for flag in STABLE_FLAGS:
            self.assertTrue(any(w == flag or w.startswith(flag + ":") or w.startswith(flag + "=") for w in words),
                            "%s is not in the help:\n%s" % (flag, result.stdout))


class ReportChecks:
    """The report of one tiny exact run of ARCH_ARGS, checked field by field."""

    ARCH_ARGS = ()
    FAMILY = ""

    def report(self):
        return measure(*self.ARCH_ARGS, *RUN, "--seed", "5")

    def test_tokens_hold_one_list_of_length_plus_one_ids_per_sample_all_below_the_vocabulary(self):
        # L ids are measured; the drawn (L + 1)-th is the next token, so a run can be replayed.
        tokens = self.report()["tokens"]
        self.assertEqual(len(tokens), SAMPLES)
        for ids in tokens:
            self.assertEqual(len(ids), LENGTH + 1)
            for i in ids:
                self.assertIsInstance(i, int)
                self.assertTrue(0 <= i < VOCAB, ids)

    def test_sq_norm_mean_and_stderr_hold_one_positive_finite_value_per_position(self):
        report = self.report()
        for key in ["sq_norm_mean", "sq_norm_stderr"]:
            self.assertEqual(len(report[key]), LENGTH, key)
            for value in report[key]:
                self.assertTrue(is_positive_finite(value), "%s: %r" % (key, report[key]))

    def test_positions_count_from_one_to_the_length(self):
        self.assertEqual(self.report()["positions"], list(range(1, LENGTH + 1)))

    def test_model_describes_the_family_shape_init_recipe_and_parameter_count(self):
        model = self.report()["model"]
        self.assertEqual(model["family"], self.FAMILY)
        self.assertEqual((model["layers"], model["width"], model["vocab"]), (LAYERS, WIDTH, VOCAB))
        self.assertIsInstance(model["init_recipe"], str)
        self.assertIn("seed 5", model["init_recipe"])
        self.assertIsInstance(model["parameters"], int)
        self.assertGreater(model["parameters"], VOCAB * WIDTH)

    def test_measurement_reports_exact_float32_cpu_seconds_and_width_times_samples_vjps(self):
        m = self.report()["measurement"]
        self.assertEqual(m["method"], "exact")
        self.assertEqual(m["dtype"], "float32")
        self.assertEqual(m["device"], "cpu")
        self.assertEqual((m["length"], m["samples"], m["target"]), (LENGTH, SAMPLES, LENGTH))
        self.assertTrue(isinstance(m["seconds"], float) and m["seconds"] >= 0 and math.isfinite(m["seconds"]))
        self.assertEqual(m["vjp_count"], WIDTH * SAMPLES)

    def test_theory_fits_coherent_and_incoherent_models_with_alpha_in_the_unit_interval(self):
        theory = self.report()["theory"]
        self.assertEqual(theory["depth"], LAYERS)
        fits = {fit["model"]: fit for fit in theory["fits"]}
        self.assertEqual(set(fits), {"coherent", "incoherent"})
        for name, fit in fits.items():
            self.assertTrue(0.0 <= fit["alpha"] <= 1.0, (name, fit["alpha"]))
            for metric in METRICS:
                self.assertIn(metric, fit["metrics"], name)
                self.assertTrue(math.isfinite(fit["metrics"][metric]), (name, metric))

    def test_branch_ratio_has_one_value_per_layer_strictly_between_zero_and_one(self):
        ratios = self.report()["branch_ratio"]
        self.assertEqual(len(ratios), LAYERS)
        for r in ratios:
            self.assertTrue(0.0 < r < 1.0, ratios)

    def test_theory_compares_with_the_measured_alpha_schedule_when_branch_ratios_exist(self):
        report = self.report()
        self.assertTrue(report["branch_ratio"])
        schedule = report["theory"]["measured_alpha_schedule"]
        self.assertEqual(schedule["alpha"], report["branch_ratio"])
        for name in ["coherent", "incoherent"]:
            for metric in METRICS:
                self.assertTrue(math.isfinite(schedule[name][metric]), (name, metric))


class Gpt2ReportTest(ReportChecks, unittest.TestCase):
    ARCH_ARGS = GPT2
    FAMILY = "gpt2"


class Qwen2ReportTest(ReportChecks, unittest.TestCase):
    ARCH_ARGS = QWEN2
    FAMILY = "qwen2"


class SeedTest(unittest.TestCase):

    def test_the_same_seed_reproduces_every_number_except_the_timing(self):
        for arch in [GPT2, QWEN2]:
            with self.subTest(arch=arch[1]):
                first = without_timing(measure(*arch, *RUN, "--seed", "11"))
                second = run_tool([*arch, *RUN, "--seed", "11"])
                self.assertEqual(second.returncode, 0, second.stderr)
                self.assertEqual(first, without_timing(json.loads(second.stdout)))

    def test_another_seed_changes_the_tokens_and_the_norms(self):
        for arch in [GPT2, QWEN2]:
            with self.subTest(arch=arch[1]):
                a = measure(*arch, *RUN, "--seed", "11")
                b = measure(*arch, *RUN, "--seed", "12")
                self.assertNotEqual(a["tokens"], b["tokens"])
                self.assertNotEqual(a["sq_norm_mean"], b["sq_norm_mean"])
                self.assertNotEqual(a["model"]["init_recipe"], b["model"]["init_recipe"])


class HutchinsonTest(unittest.TestCase):
    PROBES = 256

    def reports(self):
        exact = measure(*QWEN2, *RUN, "--seed", "3")
        hutchinson = measure(*QWEN2, *RUN, "--seed", "3", "--method", "hutchinson", "--probes", str(self.PROBES),
                             "--probe-distribution", "gaussian")
        return exact, hutchinson

    def test_orthogonal_probes_of_all_d_rows_give_the_exact_norms_and_say_so(self):
        exact = measure(*QWEN2, *RUN, "--seed", "3")
        width = exact["model"]["width"]
        orthogonal = measure(*QWEN2, *RUN, "--seed", "3", "--method", "hutchinson", "--probes", str(width))
        self.assertEqual(orthogonal["measurement"]["probe_distribution"], "orthogonal")  # The default.
        for e, o in zip(exact["sq_norm_mean"], orthogonal["sq_norm_mean"]):
            self.assertAlmostEqual(o / e, 1.0, delta=1e-5)  # float32 rounding.
        self.assertNotIn("probe_distribution", exact["measurement"])

    def test_hutchinson_with_256_probes_agrees_with_exact_within_four_estimator_stderrs(self):
        exact, hutchinson = self.reports()
        self.assertEqual(exact["tokens"], hutchinson["tokens"], "the same seed must draw the same inputs")
        stderr = hutchinson["sq_norm_estimator_stderr"]
        self.assertEqual(len(stderr), LENGTH)
        agree = [abs(e - h) <= 4 * s for e, h, s in zip(exact["sq_norm_mean"], hutchinson["sq_norm_mean"], stderr)]
        self.assertGreaterEqual(sum(agree), math.ceil(0.9 * LENGTH),
                                "exact %r\nhutchinson %r\nestimator stderr %r" % (exact["sq_norm_mean"], hutchinson["sq_norm_mean"], stderr))

    def test_hutchinson_reports_its_method_and_counts_probes_times_samples_vjps(self):
        m = self.reports()[1]["measurement"]
        self.assertEqual((m["method"], m["probes"]), ("hutchinson", self.PROBES))
        self.assertEqual(m["vjp_count"], self.PROBES * SAMPLES)

    def test_hutchinson_reports_a_positive_finite_estimator_stderr_per_position(self):
        for value in self.reports()[1]["sq_norm_estimator_stderr"]:
            self.assertTrue(is_positive_finite(value), value)


class TokensFileTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="measure_test_")
        cls.tokens = given_tokens(3, LENGTH)
        cls.path = write_json(cls.tmp.name, "tokens.json", cls.tokens)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_given_tokens_are_used_verbatim_and_set_the_sample_count(self):
        for arch in [GPT2, QWEN2]:
            with self.subTest(arch=arch[1]):
                report = measure(*arch, "--length", str(LENGTH), "--tokens", self.path)
                self.assertEqual(report["tokens"], self.tokens)
                m = report["measurement"]
                self.assertEqual(m["samples"], len(self.tokens))
                self.assertEqual(m["input"], "given_tokens")
                self.assertEqual(m["vjp_count"], WIDTH * len(self.tokens))

    def test_given_tokens_make_the_norms_independent_of_the_input_seed(self):
        a = measure(*GPT2, "--length", str(LENGTH), "--tokens", self.path, "--seed", "1", "--input-seed", "1")
        b = measure(*GPT2, "--length", str(LENGTH), "--tokens", self.path, "--seed", "1", "--input-seed", "2")
        self.assertEqual(a["sq_norm_mean"], b["sq_norm_mean"])


class WeightsTest(unittest.TestCase):
    """--export-weights writes a Hugging Face safetensors file that --weights reads back."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="measure_test_")
        cls.tokens = write_json(cls.tmp.name, "tokens.json", given_tokens(2, LENGTH, offset=3))
        cls.runs = {}
        for name, arch in [("gpt2", GPT2), ("qwen2", QWEN2)]:
            weights = os.path.join(cls.tmp.name, name + ".safetensors")
            base = (*arch, "--length", str(LENGTH), "--tokens", cls.tokens)
            exported = measure(*base, "--seed", "21", "--export-weights", weights)
            reloaded = measure(*base, "--seed", "22", "--weights", weights)
            fresh = measure(*base, "--seed", "22")
            cls.runs[name] = (weights, exported, reloaded, fresh)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_reloaded_weights_reproduce_the_norms_of_the_exporting_run_despite_another_seed(self):
        for name, (_, exported, reloaded, fresh) in self.runs.items():
            with self.subTest(arch=name):
                self.assertEqual(exported["tokens"], reloaded["tokens"])
                self.assertEqual(exported["sq_norm_mean"], reloaded["sq_norm_mean"])
                self.assertEqual(exported["branch_ratio"], reloaded["branch_ratio"])
                # Not vacuous: without --weights the other seed gives another model.
                self.assertNotEqual(exported["sq_norm_mean"], fresh["sq_norm_mean"])

    def check_header(self, path, expected_shapes, parameters):
        header, size, length = read_safetensors_header(path)
        self.assertLessEqual(8 + length, size)
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        for name, shape in expected_shapes.items():
            self.assertIn(name, tensors, sorted(tensors))
            self.assertEqual(tensors[name]["shape"], shape, name)
        end, count = 0, 0
        for name, info in sorted(tensors.items(), key=lambda item: item[1]["data_offsets"][0]):
            begin, stop = info["data_offsets"]
            self.assertEqual(begin, end, "%s does not follow the previous tensor" % name)
            self.assertEqual(info["dtype"], "F32", name)
            elements = math.prod(info["shape"])
            self.assertEqual(stop - begin, 4 * elements, name)
            end, count = stop, count + elements
        self.assertEqual(8 + length + end, size, "the data must fill the file")
        self.assertEqual(count, parameters, "tensor elements must add up to the reported parameter count")

    def test_gpt2_export_is_a_safetensors_file_with_hugging_face_names_and_shapes(self):
        path, exported = self.runs["gpt2"][0], self.runs["gpt2"][1]
        self.check_header(path, {
            "transformer.wte.weight": [VOCAB, WIDTH],
            "transformer.h.0.attn.c_attn.weight": [WIDTH, 3 * WIDTH],  # Conv1D: [in, out].
            "transformer.h.0.attn.c_attn.bias": [3 * WIDTH],
            "transformer.h.1.mlp.c_fc.weight": [WIDTH, 64],
            "transformer.ln_f.weight": [WIDTH],
        }, exported["model"]["parameters"])

    def test_qwen2_export_is_a_safetensors_file_with_hugging_face_names_and_shapes(self):
        path, exported = self.runs["qwen2"][0], self.runs["qwen2"][1]
        head_dim = WIDTH // 4
        self.check_header(path, {
            "model.embed_tokens.weight": [VOCAB, WIDTH],
            "model.layers.0.self_attn.q_proj.weight": [WIDTH, WIDTH],
            "model.layers.0.self_attn.q_proj.bias": [WIDTH],
            "model.layers.0.self_attn.k_proj.weight": [2 * head_dim, WIDTH],
            "model.layers.1.mlp.down_proj.weight": [WIDTH, 64],
            "model.norm.weight": [WIDTH],
        }, exported["model"]["parameters"])


class OptionTest(unittest.TestCase):

    def test_output_layers_adds_one_entry_per_layer(self):
        report = measure(*GPT2, *RUN, "--output", "layers")
        layers = report["layers"]
        self.assertEqual([entry["layer"] for entry in layers], list(range(1, LAYERS + 1)))
        for entry in layers:
            self.assertEqual(len(entry["sq_norm_mean"]), LENGTH)
            self.assertEqual(len(entry["sq_norm_stderr"]), LENGTH)
            self.assertTrue(all(is_positive_finite(v) for v in entry["sq_norm_mean"]), entry)
        self.assertEqual(report["measurement"]["output"], "layer_sweep")
        self.assertEqual(report["measurement"]["vjp_count"], WIDTH * SAMPLES * LAYERS)

    def test_the_models_own_reverse_pass_and_autograd_give_the_same_norms(self):
        for arch in (GPT2, QWEN2):
            own = measure(*arch, *RUN, "--reverse-pass", "model")
            autograd = measure(*arch, *RUN, "--reverse-pass", "autograd")
            self.assertEqual(own["measurement"]["reverse_pass"], "model")
            self.assertEqual(autograd["measurement"]["reverse_pass"], "autograd")
            self.assertEqual(measure(*arch, *RUN)["measurement"]["reverse_pass"], "model")  # The default.
            for a, b in zip(own["sq_norm_mean"], autograd["sq_norm_mean"]):
                self.assertLessEqual(abs(a - b), 1e-5 * abs(b), (own["sq_norm_mean"], autograd["sq_norm_mean"]))

    def test_the_models_own_reverse_pass_is_refused_for_a_model_without_one(self):
        result = run_tool(["--arch", "cesaro", "--width", "4", "--layers", "2", "--input", "gaussian",
                           "--reverse-pass", "model", *RUN])
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("reverse_pass", result.stderr)
        self.assertIn("autograd", result.stderr)

    def test_the_default_output_has_no_layers_list(self):
        self.assertNotIn("layers", measure(*GPT2, *RUN))

    def test_output_logprob_measures_a_scalar_with_one_vjp_per_sample(self):
        report = measure(*GPT2, *RUN, "--output", "logprob")
        self.assertEqual(report["measurement"]["output"], "log_prob")
        self.assertEqual(report["measurement"]["vjp_count"], SAMPLES)
        self.assertEqual(len(report["sq_norm_mean"]), LENGTH)
        self.assertTrue(all(is_positive_finite(v) for v in report["sq_norm_mean"]), report["sq_norm_mean"])

    def test_output_loss_measures_the_training_signal_with_one_vjp_per_sample_and_no_row_fit(self):
        report = measure(*QWEN2, *RUN, "--output", "loss")
        self.assertEqual(report["measurement"]["output"], "loss_gradient")
        self.assertEqual(report["measurement"]["reverse_pass"], "model")  # Its cotangents enter every position.
        self.assertEqual(report["measurement"]["vjp_count"], SAMPLES)
        self.assertTrue(all(is_positive_finite(v) for v in report["sq_norm_mean"]), report["sq_norm_mean"])
        self.assertNotIn("fits", report["theory"])
        self.assertIn("sum_{t>=j} (N^H)_{t,j}^2", report["theory"]["note"])

    def test_logprob_at_an_earlier_target_scores_the_token_right_after_the_target(self):
        # Output position t = 4 only sees positions 1..4, so the sequence after it matters only
        # through the label: the token at position t + 1 (index 4). The id at index L must not matter.
        with tempfile.TemporaryDirectory(prefix="measure_test_") as tmp:
            base = given_tokens(1, 9)[0]
            after_target = list(base)
            after_target[4] = (after_target[4] + 37) % VOCAB
            after_end = list(base)
            after_end[8] = (after_end[8] + 37) % VOCAB
            args = (*GPT2, "--length", "8", "--target", "4", "--output", "logprob")
            norms = {}
            for name, ids in [("base", base), ("after_target", after_target), ("after_end", after_end)]:
                path = write_json(tmp, name + ".json", [ids])
                norms[name] = measure(*args, "--tokens", path)["sq_norm_mean"][:4]
        self.assertEqual(norms["base"], norms["after_end"], "the id after position L changed the result")
        self.assertNotEqual(norms["base"], norms["after_target"], "the id at position t + 1 did not change the result")

    def test_gaussian_input_reports_an_empty_token_list(self):
        report = measure(*GPT2, *RUN, "--input", "gaussian")
        self.assertEqual(report["tokens"], [])
        self.assertEqual(report["measurement"]["input"], "gaussian_embeddings")
        self.assertTrue(all(is_positive_finite(v) for v in report["sq_norm_mean"]))

    def test_no_position_encoding_reports_a_token_embedding_only(self):
        plain = measure(*GPT2, *RUN)
        ablated = measure(*GPT2, *RUN, "--no-position-encoding")
        self.assertEqual(plain["measurement"]["embedding"], "token + learned position embedding")
        self.assertEqual(ablated["measurement"]["embedding"], "token embedding")
        self.assertTrue(ablated["model"]["no_position_encoding"])
        self.assertNotEqual(plain["sq_norm_mean"], ablated["sq_norm_mean"])

    def test_bfloat16_runs_reports_bfloat16_and_stays_near_float32(self):
        full = measure(*GPT2, *RUN)
        half = measure(*GPT2, *RUN, "--dtype", "bfloat16")
        self.assertEqual(half["measurement"]["dtype"], "bfloat16")
        self.assertEqual(half["tokens"], full["tokens"])
        for a, b in zip(full["sq_norm_mean"], half["sq_norm_mean"]):
            self.assertTrue(is_positive_finite(b), half["sq_norm_mean"])
            self.assertLess(abs(a - b), 0.2 * a, (full["sq_norm_mean"], half["sq_norm_mean"]))

    def test_cesaro_norms_equal_width_times_the_squared_coherent_discrete_row(self):
        width, layers, length, alpha = 4, 4, 32, Fraction(3, 10)
        report = measure("--arch", "cesaro", "--alpha", "0.3", "--layers", str(layers), "--width", str(width),
                         "--input", "gaussian", "--dtype", "float64", "--length", str(length),
                         "--samples", "2", "--threads", "1", "--format", "json")
        self.assertEqual(report["measurement"]["dtype"], "float64")
        self.assertEqual(report["measurement"]["vjp_count"], width * 2)
        v = coherent_row(alpha, layers, length)
        measured = report["sq_norm_mean"]
        self.assertEqual(len(measured), length)
        for j, (m, vj) in enumerate(zip(measured, v), start=1):
            expected = float(vj * vj)
            self.assertLessEqual(abs(m / width - expected), 1e-9 * expected, "position %d: %r vs %r" % (j, m / width, expected))


class PathwayTest(unittest.TestCase):
    """--pathway value-only (attention probabilities detached) and --compare-pathways."""

    def test_the_default_pathway_is_full_and_reports_no_comparison(self):
        report = measure(*GPT2, *RUN)
        self.assertEqual(report["measurement"]["pathway"], "full")
        self.assertNotIn("pathways", report)

    def test_value_only_reports_its_pathway_and_the_same_norms_on_both_reverse_passes(self):
        for arch in (GPT2, QWEN2):
            own = measure(*arch, *RUN, "--pathway", "value-only", "--reverse-pass", "model")
            autograd = measure(*arch, *RUN, "--pathway", "value-only", "--reverse-pass", "autograd")
            self.assertEqual(own["measurement"]["pathway"], "value_only")
            for a, b in zip(own["sq_norm_mean"], autograd["sq_norm_mean"]):
                self.assertLessEqual(abs(a - b), 1e-5 * abs(b), (own["sq_norm_mean"], autograd["sq_norm_mean"]))
            full = measure(*arch, *RUN)
            self.assertNotEqual(own["sq_norm_mean"], full["sq_norm_mean"])

    def test_compare_pathways_reports_the_full_profile_the_value_profile_and_their_ratio(self):
        for arch in (GPT2, QWEN2):
            both = measure(*arch, *RUN, "--compare-pathways")
            full = measure(*arch, *RUN)
            value = measure(*arch, *RUN, "--pathway", "value-only")
            self.assertEqual(both["measurement"]["pathway"], "full")
            self.assertEqual(both["measurement"]["vjp_count"], 2 * full["measurement"]["vjp_count"])
            pathways = both["pathways"]
            for key in ("value_sq_norm_mean", "value_sq_norm_std", "value_sq_norm_stderr", "ratio_mean",
                        "ratio_std", "ratio_stderr"):
                self.assertEqual(len(pathways[key]), LENGTH, key)
            for a, b in zip(both["sq_norm_mean"], full["sq_norm_mean"]):
                self.assertLessEqual(abs(a - b), 1e-6 * abs(b))
            for a, b in zip(pathways["value_sq_norm_mean"], value["sq_norm_mean"]):
                self.assertLessEqual(abs(a - b), 1e-6 * abs(b))
            self.assertTrue(all(is_positive_finite(r) for r in pathways["ratio_mean"]), pathways["ratio_mean"])
            self.assertGreater(pathways["total_ratio_mean"], 0.5)
            self.assertLess(pathways["total_ratio_mean"], 1.5)

    def test_uniform_attention_makes_every_ratio_exactly_one(self):
        report = measure(*QWEN2, *RUN, "--uniform-attention", "--compare-pathways")
        self.assertEqual(report["pathways"]["ratio_mean"], [1.0] * LENGTH)
        self.assertEqual(report["pathways"]["total_ratio_mean"], 1.0)

    def test_an_unknown_pathway_is_rejected_naming_the_flag(self):
        result = run_tool([*GPT2, *RUN, "--pathway", "scores"])
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--pathway", result.stderr)

    def test_comparing_from_the_value_pathway_is_rejected_naming_pathway(self):
        result = run_tool([*GPT2, *RUN, "--pathway", "value-only", "--compare-pathways"])
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("pathway", result.stderr)


class ErrorTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="measure_test_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_fails(self, args, *needles):
        result = run_tool(args)
        self.assertNotEqual(result.returncode, 0, "expected a failure of %s" % " ".join(args))
        self.assertGreater(result.returncode, 0, "killed by a signal: %s" % result.stderr)
        self.assertEqual(result.stdout.strip(), "", "a failed run must print no report")
        for needle in needles:
            self.assertIn(needle, result.stderr)
        for crash in ["terminate called", "Traceback", "Segmentation"]:
            self.assertNotIn(crash, result.stderr)
        return result

    def test_a_length_beyond_the_maximum_positions_is_rejected_naming_length(self):
        self.assert_fails([*GPT2, "--max-positions", "16", "--length", "32"], "length", "32")

    def test_heads_that_do_not_divide_the_width_are_rejected_naming_heads(self):
        self.assert_fails(["--arch", "gpt2", "--layers", "2", "--width", "32", "--heads", "5", "--vocab", "100",
                           "--length", "8", "--threads", "1"], "heads", "5")

    def test_an_unknown_method_is_rejected_naming_it(self):
        self.assert_fails([*GPT2, *RUN, "--method", "foo"], "--method", "foo")

    def test_an_unknown_dtype_is_rejected_naming_it(self):
        self.assert_fails([*GPT2, *RUN, "--dtype", "int8"], "dtype", "int8")

    def test_a_token_id_at_or_above_the_vocabulary_is_rejected_naming_its_index(self):
        ids = given_tokens(1, LENGTH)
        ids[0][5] = VOCAB
        path = write_json(self.tmp.name, "bad_tokens.json", ids)
        self.assert_fails([*GPT2, "--length", str(LENGTH), "--tokens", path], "tokens[0][5]")

    def test_weights_of_a_missing_file_are_rejected_naming_the_file(self):
        path = os.path.join(self.tmp.name, "missing.safetensors")
        self.assert_fails([*GPT2, *RUN, "--weights", path], path)

    def test_weights_of_a_file_that_is_not_safetensors_are_rejected_naming_the_file(self):
        for name, content in [("short.safetensors", b"hello\n"),
                              ("text.safetensors", b"this is a text file, not a safetensors checkpoint\n")]:
            with self.subTest(file=name):
                path = os.path.join(self.tmp.name, name)
                with open(path, "wb") as out:
                    out.write(content)
                self.assert_fails([*GPT2, *RUN, "--weights", path], path)

    def test_weights_of_another_shape_are_rejected_naming_the_tensor(self):
        path = os.path.join(self.tmp.name, "wide.safetensors")
        wide = ["--arch", "gpt2", "--layers", "2", "--width", "64", "--heads", "2", "--mlp-width", "64",
                "--vocab", "100", "--threads", "1", "--length", "4", "--export-weights", path]
        exported = run_tool(wide)
        self.assertEqual(exported.returncode, 0, exported.stderr)
        result = self.assert_fails([*GPT2, *RUN, "--weights", path], "transformer.")
        self.assertRegex(result.stderr, r"transformer\.[a-z0-9_.]+\.(weight|bias)")

    def test_a_cuda_device_without_a_gpu_fails_naming_cuda(self):
        result = run_tool([*GPT2, *RUN, "--device", "cuda:0"])
        if result.returncode == 0:
            self.skipTest("a CUDA device is available here")
        self.assertEqual(result.stdout.strip(), "")
        self.assertIn("CUDA", result.stderr)
        self.assertIn("cuda:0", result.stderr)


# ---------------------------------------------------------------------------------------------


def start_watchdog():
    def expire():
        sys.stderr.write("measure_test.py: watchdog: still running after %d s; giving up\n" % WATCHDOG_S)
        sys.stderr.flush()
        os._exit(3)

    timer = threading.Timer(WATCHDOG_S, expire)
    timer.daemon = True
    timer.start()


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure-binary", required=True)
    ARGS, rest = parser.parse_known_args()
    if not os.access(ARGS.measure_binary, os.X_OK):
        parser.error("%s is not an executable file" % ARGS.measure_binary)
    ARGS.measure_binary = os.path.abspath(ARGS.measure_binary)
    start_watchdog()
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
