#!/usr/bin/python3
"""The installed posbias Python package against a real posbias-server.

Usage (the Python of a venv where install_package.py installed the package):

    build/tests/python_package/venv/bin/python tests/python_package/client_test.py \
        --server-binary build/release/server/posbias-server --cli-binary build/release/client/cli/posbias \
        --package-dir client/python

One server on 127.0.0.1 with OS-chosen ports (read from its log), a fresh --data-dir and
--model-root and --cpu-threads 1, serves every test; it is stopped with SIGTERM at the end (exit
code 0 and "stopped cleanly" required). Every method of posbias.Client is called; numbers are
compared bit for bit with the C++ CLI's JSON for the same requests; errors are checked for their
class, code, reason, field, value and allowed range; a job is waited with both progress bars, and
a real SIGINT stops a waiting process but not its job. The token check uses a small in-process
gRPC server that only records request metadata (the real server has no token support yet).
A watchdog bounds the run.
"""

import argparse
import concurrent.futures
import hashlib
import io
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import numpy as np

ARGS = None       # Parsed command line (set in main()).
SERVER = None     # The shared ServerProcess (setUpModule).
ROOT = None       # Its temporary directory (data dir, model root, scratch files).
posbias = None    # The installed package (imported in main(), after the location check).

WATCHDOG_S = 170
CLI_TIMEOUT_S = 30
JOB_TIMEOUT_S = 60
VOCAB = 100
TINY = dict(num_layers=2, hidden_size=32, num_heads=2, mlp_width=64, vocab_size=VOCAB, max_positions=256)
# A model whose jobs take a few seconds on one core: long enough to be watched and interrupted.
SLOW = dict(num_layers=4, hidden_size=256, num_heads=4, mlp_width=512, vocab_size=VOCAB, max_positions=256)
SLOW_LENGTH = 24

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from posbias_server import ServerProcess, read_safetensors_header, start_watchdog  # noqa: E402


def cli_json(*args, server_address=None):
    """The CLI's --format json output for a request (AssertionError unless it exits 0)."""
    command = [ARGS.cli_binary, "--server", server_address or SERVER.address, "--format", "json",
               *[str(a) for a in args]]
    env = dict(os.environ)
    env.pop("POSBIAS_SERVER", None)
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=CLI_TIMEOUT_S, env=env)
    if result.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(command), result.returncode, result.stderr))
    return json.loads(result.stdout)


def bits(value):
    return struct.pack("<d", float(value))


def setUpModule():
    global SERVER, ROOT
    ROOT = tempfile.mkdtemp(prefix="posbias-python-package-")
    os.makedirs(os.path.join(ROOT, "models"))
    SERVER = ServerProcess(ARGS.server_binary, ["--data-dir", os.path.join(ROOT, "data"),
                                                "--model-root", os.path.join(ROOT, "models"),
                                                "--cpu-threads", "1"]).start()
    with posbias.Client(SERVER.address) as client:
        client.register_model("tiny", preset="gpt2", overrides=TINY, seed=1)
        client.register_model("slow", preset="gpt2", overrides=SLOW, seed=1)


def tearDownModule():
    try:
        code = SERVER.stop() if SERVER else 0
        if code != 0 or "stopped cleanly" not in SERVER.log:
            raise AssertionError("server exited with %s after SIGTERM; log:\n%s" % (code, SERVER.log))
    finally:
        shutil.rmtree(ROOT, ignore_errors=True)


class ClientTestCase(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.client = posbias.Client(SERVER.address, timeout=30)
        cls.addClassCleanup(cls.client.close)

    def assertBitIdentical(self, mine, theirs, what):
        """A numpy array against the CLI's JSON list (null for non-finite), bit for bit."""
        self.assertEqual(len(mine), len(theirs), what)
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if b is None:
                self.assertFalse(math.isfinite(a), "%s[%d]: CLI null, Python %r" % (what, i, a))
            else:
                self.assertEqual(bits(a), bits(b), "%s[%d]: Python %r, CLI %r" % (what, i, a, b))

    def assertError(self, call, cls, code, reason, field=None):
        with self.assertRaises(cls) as context:
            call()
        error = context.exception
        self.assertIsInstance(error, posbias.Error)
        self.assertEqual(error.code, code, repr(error))
        self.assertEqual(error.reason, reason, repr(error))
        if field is not None:
            self.assertEqual(error.field, field, repr(error))
            self.assertTrue(error.allowed, repr(error))
        self.assertIn(code.name, str(error))
        return error


# ---------------------------------------------------------------------------------------------
# DensityService: the same numbers as the CLI


class DensityTest(ClientTestCase):
    COLUMNS = ["x", "density", "log_density", "cdf", "ccdf"]

    def test_evaluate_continuum_at_points_is_bit_identical_to_the_cli(self):
        xs = [1e-300, 1e-9, 0.001, 0.1, 0.5, 0.999, 1.0]
        for depth, alpha in [(24, 0.5), (1000, 0.9), (2, 1e-300), (1, 0.0)]:
            with self.subTest(depth=depth, alpha=alpha):
                mine = self.client.evaluate_continuum(depth, alpha=alpha, x=xs)
                cli = cli_json("density", "--depth", depth, "--alpha", repr(alpha), "--x", ",".join(map(repr, xs)))
                for column in self.COLUMNS:
                    self.assertIsInstance(getattr(mine, column), np.ndarray)
                    self.assertBitIdentical(getattr(mine, column), cli[column], column)
                self.assertEqual((bits(mine.atom), bits(mine.floor), mine.depth),
                                 (bits(cli["atom"]), bits(cli["floor"]), cli["depth"]))

    def test_grids_and_schedules_are_bit_identical_to_the_cli(self):
        cases = [(dict(depth=12, alpha=0.3, grid=(1e-6, 1, 50)), ["-H", 12, "-a", 0.3, "--grid", "1e-6:1:50"]),
                 (dict(depth=12, alpha=0.3, grid={"start": 0.01, "stop": 1, "count": 20, "spacing": "linear"}),
                  ["-H", 12, "-a", 0.3, "--grid", "0.01:1:20:linear"]),
                 (dict(depth=None, alpha_schedule=np.array([0.1, 0.5, 0.9]), x=np.array([0.2, 0.7])),
                  ["-H", 3, "--alphas", "0.1,0.5,0.9", "--x", "0.2,0.7"])]
        for kwargs, flags in cases:
            with self.subTest(flags=flags):
                mine = self.client.evaluate_continuum(**kwargs)
                cli = cli_json("density", *flags)
                for column in self.COLUMNS:
                    self.assertBitIdentical(getattr(mine, column), cli[column], column)

    def test_only_the_requested_quantities_are_filled(self):
        result = self.client.evaluate_continuum(4, alpha=0.5, x=[0.5], quantities=["cdf", "ccdf"])
        self.assertEqual((result.density.size, result.log_density.size, result.cdf.size), (0, 0, 1))
        self.assertAlmostEqual(result.cdf[0] + result.ccdf[0], 1.0, delta=1e-15)

    def test_evaluate_discrete_and_its_summaries_are_bit_identical_to_the_cli(self):
        cases = [(dict(positions=[1, 7, 100, 1024]), ["--positions", "1,7,100,1024"]),
                 (dict(stride=range(1, 1025, 64)), ["--stride", "1:1024:64"]),
                 (dict(stride=(2, 1000, 111), profiles="incoherent"), ["--stride", "2:1000:111", "--profile", "incoherent"])]
        for kwargs, flags in cases:
            with self.subTest(flags=flags):
                mine = self.client.evaluate_discrete(24, 1024, alpha=0.5, **kwargs)
                cli = cli_json("discrete", "-H", 24, "-a", 0.5, "-L", 1024, *flags)
                self.assertEqual(mine.positions.tolist(), cli["position"])
                for name in ["coherent", "incoherent"]:
                    self.assertBitIdentical(getattr(mine, name), cli[name], name)
                    summary = getattr(mine, name + "_summary")
                    if name + "_summary" in cli:
                        self.assertEqual(summary.to_dict(), cli[name + "_summary"])
                    else:  # Not requested: the CLI prints none and the client gives None.
                        self.assertIsNone(summary)
        self.assertIsNone(self.client.evaluate_discrete(3, 10, alpha=0.5, profiles=["coherent"]).incoherent_summary)

    def test_summaries_only_of_a_long_profile_return_no_arrays(self):
        result = self.client.evaluate_discrete(24, 10_000_000, alpha=0.5, summaries_only=True, leading=0.05,
                                               trailing=0.2, quantile_levels=[0.5, 0.75])
        self.assertEqual((result.positions.size, result.coherent.size), (0, 0))
        self.assertEqual([q.level for q in result.coherent_summary.quantiles], [0.5, 0.75])
        summary = result.coherent_summary
        self.assertAlmostEqual(summary.leading_mass + summary.middle_mass + summary.trailing_mass, 1.0, delta=1e-12)

    def test_summarize_profile_of_a_theory_and_a_measured_profile_matches_the_cli(self):
        theory = self.client.summarize_profile(depth=24, alpha=0.5, length=4096, leading=0.05, trailing=0.05)
        self.assertEqual(theory.to_dict(), cli_json("summarize", "-H", 24, "-a", 0.5, "-L", 4096,
                                                    "--leading", 0.05, "--trailing", 0.05))
        continuum = self.client.summarize_profile(depth=24, alpha=0.5)
        self.assertEqual(continuum.to_dict(), cli_json("summarize", "-H", 24, "-a", 0.5))
        measured = np.linspace(1.0, 3.0, 50) ** 2
        path = os.path.join(ROOT, "measured.csv")
        with open(path, "w") as f:
            f.write("value\n" + "".join("%r\n" % v for v in measured))
        summary = self.client.summarize_profile(measured, quantile_levels=[0.25, 0.5, 0.9])
        self.assertEqual(summary.to_dict(), cli_json("summarize", "--input", path, "--quantiles", "0.25,0.5,0.9"))
        self.assertEqual(summary.length, 50)

    def test_fit_profile_recovers_alpha_and_matches_the_cli(self):
        row = self.client.evaluate_discrete(12, 128, alpha=0.3, profiles="coherent").coherent
        path = os.path.join(ROOT, "row.csv")
        with open(path, "w") as f:
            f.write("sq\n" + "".join("%r\n" % v for v in row ** 2))
        fit = self.client.fit_profile(row ** 2, depth=12, include_profiles=True)
        self.assertLess(abs(fit.coherent.alpha - 0.3), 1e-4)
        self.assertAlmostEqual(fit.coherent.lambda_, 12 * fit.coherent.alpha, delta=1e-12)
        self.assertEqual(fit.coherent.profile.shape, (128,))
        cli = cli_json("fit", "--input", path, "--depth", 12)
        for theirs in cli["fits"]:
            mine = fit.fit(theirs["model"])
            self.assertEqual((bits(mine.alpha), bits(mine.lambda_)), (bits(theirs["alpha"]), bits(theirs["lambda"])))
            self.assertEqual(bits(mine.metrics.rmse_log), bits(theirs["metrics"]["rmse_log"]))
        self.assertBitIdentical(fit.coherent.profile, cli["coherent"], "coherent profile")
        self.assertEqual(fit.measured_summary.to_dict(), cli["measured_summary"])
        ranged = self.client.fit_profile(row ** 2, depth=(8, 16), models="coherent")
        self.assertEqual([r.depth for r in ranged.coherent.ridge], list(range(8, 17)))
        self.assertEqual(ranged.coherent.depth, 12)
        self.assertIsNone(ranged.incoherent)


# ---------------------------------------------------------------------------------------------
# Errors


class ErrorTest(ClientTestCase):
    def test_an_invalid_depth_carries_code_reason_field_value_and_allowed(self):
        error = self.assertError(lambda: self.client.evaluate_continuum(0, alpha=0.5, x=[0.5]),
                                 posbias.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_DEPTH", "depth")
        self.assertEqual(error.value, "0")
        self.assertIn("100000", error.allowed)
        self.assertIsInstance(error, ValueError)
        self.assertIsNotNone(error.rpc_error)

    def test_each_service_raises_its_typed_errors_with_reasons(self):
        S = grpc.StatusCode
        cases = [
            ("point 1.5", lambda: self.client.evaluate_continuum(3, alpha=0.5, x=[0.5, 1.5]),
             posbias.InvalidArgumentError, S.INVALID_ARGUMENT, "INVALID_POINT", "point_list.x[1]"),
            ("schedule entry", lambda: self.client.evaluate_continuum(None, alpha_schedule=[0.1, 2.0], x=[0.5]),
             posbias.InvalidArgumentError, S.INVALID_ARGUMENT, "INVALID_ALPHA", "alpha_schedule.alpha[1]"),
            ("length above the limit", lambda: self.client.evaluate_discrete(3, 20_000_000, alpha=0.5),
             posbias.ResourceExhaustedError, S.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE", "length"),
            ("fit with nan", lambda: self.client.fit_profile([1, math.nan, 3]),
             posbias.InvalidArgumentError, S.INVALID_ARGUMENT, "INVALID_PROFILE", "measured.values[1]"),
            ("overlapping bands", lambda: self.client.summarize_profile([1, 2, 3], leading=0.7, trailing=0.7),
             posbias.InvalidArgumentError, S.INVALID_ARGUMENT, "INVALID_BANDS", None),
            ("unknown model", lambda: self.client.get_model("no-such-model"),
             posbias.NotFoundError, S.NOT_FOUND, "MODEL_NOT_FOUND", None),
            ("taken name", lambda: self.client.register_model("tiny", preset="gpt2", overrides=TINY, seed=2),
             posbias.AlreadyExistsError, S.ALREADY_EXISTS, "MODEL_ALREADY_EXISTS", None),
            ("builtin", lambda: self.client.delete_model("gpt2"),
             posbias.FailedPreconditionError, S.FAILED_PRECONDITION, "MODEL_BUILTIN", None),
            ("unknown job", lambda: self.client.get_job("j-000000000000"),
             posbias.NotFoundError, S.NOT_FOUND, "JOB_NOT_FOUND", None),
            ("job on an unknown model", lambda: self.client.submit_jacobian("nope", 8),
             posbias.NotFoundError, S.NOT_FOUND, "MODEL_NOT_FOUND", None),
            ("length beyond the model", lambda: self.client.submit_jacobian("tiny", 257, samples=1),
             posbias.InvalidArgumentError, S.INVALID_ARGUMENT, "INVALID_LENGTH", None),
            ("cuda on a cpu server", lambda: self.client.submit_jacobian("tiny", 8, samples=1, device="cuda"),
             posbias.FailedPreconditionError, S.FAILED_PRECONDITION, "DEVICE_UNAVAILABLE", None),
        ]
        for description, call, cls, code, reason, field in cases:
            with self.subTest(description):
                self.assertError(call, cls, code, reason, field)
        self.assertTrue(issubclass(posbias.NotFoundError, LookupError))
        self.assertIs(posbias.error_class(grpc.StatusCode.UNAVAILABLE), posbias.UnavailableError)

    def test_an_unreachable_server_is_unavailable_without_a_reason(self):
        with posbias.Client("127.0.0.1:1", timeout=5) as client:
            with self.assertRaises(posbias.UnavailableError) as context:
                client.list_presets()
        self.assertEqual((context.exception.reason, context.exception.field), ("", ""))
        self.assertIsInstance(context.exception, ConnectionError)

    def test_arguments_the_client_cannot_send_are_value_errors_before_any_call(self):
        with self.assertRaisesRegex(ValueError, "allowed exact, hutchinson"):
            self.client.submit_jacobian("tiny", 8, method="exactly")
        with self.assertRaisesRegex(ValueError, "not both"):
            self.client.evaluate_continuum(3, alpha=0.5, alpha_schedule=[0.5], x=[0.5])
        with self.assertRaisesRegex(ValueError, "no field 'layers'"):
            self.client.register_model("x", preset="gpt2", overrides={"layers": 2})
        with self.assertRaisesRegex(ValueError, "exactly one source"):
            self.client.register_model("x")


# ---------------------------------------------------------------------------------------------
# ModelService


class ModelTest(ClientTestCase):
    def test_list_presets_returns_dataclasses_with_resolved_configs(self):
        presets = {p.name: p for p in self.client.list_presets()}
        self.assertIn("gpt2-tiny", presets)
        self.assertTrue(presets["gpt2-tiny"].test_preset)
        self.assertEqual(presets["gpt2"].config.num_layers, 12)
        self.assertEqual(presets["gpt2"].config.family, "gpt2")
        self.assertEqual(presets["qwen2-0.5b"].config.num_kv_heads, 2)

    def test_register_model_with_overrides_ablations_labels_and_a_seed(self):
        model = self.client.register_model("ablated", preset="qwen2-tiny", overrides={"num_layers": 3}, seed=7,
                                           ablations=["no_mlp"], labels={"team": "theory"}, request_id="reg-1")
        self.addCleanup(self.client.delete_model, "ablated")
        self.assertEqual((model.name, model.family, model.state), ("ablated", "qwen2", "ready"))
        self.assertEqual((model.config.num_layers, model.init_seed, model.labels), (3, 7, {"team": "theory"}))
        self.assertTrue(model.config.ablations["no_mlp"])
        self.assertEqual(model.source_kind, "preset")
        again = self.client.register_model("ablated", preset="qwen2-tiny", request_id="reg-1")
        self.assertEqual(again.weights_sha256, model.weights_sha256)
        self.assertEqual(self.client.get_model("ablated").parameter_count, model.parameter_count)
        self.assertEqual([m.name for m in self.client.list_models(label_selector="team=theory")], ["ablated"])

    def test_list_models_follows_every_page_and_matches_the_cli(self):
        one_per_page = list(self.client.list_models(page_size=1))
        everything = list(self.client.list_models(page_size=1000))
        self.assertGreater(len(everything), 5)
        self.assertEqual([m.name for m in one_per_page], [m.name for m in everything])
        cli = cli_json("models", "list")
        self.assertEqual([m.name for m in everything], [m["name"] for m in cli])
        for mine, theirs in zip(everything, cli):
            self.assertEqual((mine.family, mine.state, mine.builtin, mine.weights_sha256),
                             (theirs["family"], theirs["state"], theirs["builtin"], theirs["weights_sha256"]))
        self.assertEqual([m.name for m in self.client.list_models(family="qwen2", state="ready")],
                         [m.name for m in everything if m.family == "qwen2" and m.state == "ready"])

    def test_export_writes_a_verified_file_and_an_upload_registers_the_same_weights(self):
        tiny = self.client.get_model("tiny")
        directory = os.path.join(ROOT, "export")
        os.makedirs(directory)
        exported = self.client.export_model("tiny", directory)
        self.assertEqual(exported.sha256, tiny.weights_sha256)
        with open(exported.path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), tiny.weights_sha256)
        self.assertEqual(os.path.getsize(exported.path), exported.total_bytes)
        header, _, _ = read_safetensors_header(exported.path)
        self.assertIn("transformer.wte.weight", header)  # As tests/e2e/jobs_test.py expects of exports.
        self.assertEqual(exported.config_path, os.path.join(directory, "config.json"))
        with open(exported.config_path) as f:
            self.assertEqual(json.load(f)["model_type"], "gpt2")
        bar = io.StringIO()
        uploaded = self.client.upload_model(exported.path, "uploaded", progress="plain", file=bar,
                                            chunk_bytes=4096, labels={"from": "upload"})
        self.addCleanup(self.client.delete_model, "uploaded")
        self.assertEqual((uploaded.state, uploaded.labels), ("ready", {"from": "upload"}))
        self.assertEqual((uploaded.weights_sha256, uploaded.parameter_count), (tiny.weights_sha256, tiny.parameter_count))
        self.assertIn("100.0 %", bar.getvalue())

    def test_an_upload_of_a_damaged_file_is_refused_with_its_reason(self):
        path = os.path.join(ROOT, "damaged.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 1 << 40) + b"{}")
        config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": VOCAB, "n_positions": 256}
        self.assertError(lambda: self.client.upload_model(path, "damaged", progress=False, config=config),
                         posbias.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_MODEL_FILE")
        # A refused upload leaves nothing behind: the name is free again (README: "Registration
        # waits for the load").
        self.assertError(lambda: self.client.get_model("damaged"), posbias.NotFoundError, grpc.StatusCode.NOT_FOUND,
                         "MODEL_NOT_FOUND")
        with self.assertRaisesRegex(ValueError, "config.json"):
            self.client.upload_model(os.path.join(ROOT, "measured.csv"), "no-config", progress=False)

    def test_delete_model_frees_the_name(self):
        self.client.register_model("short-lived", preset="gpt2", overrides=TINY, seed=3)
        self.assertEqual(self.client.delete_model("short-lived"), [])
        with self.assertRaises(posbias.NotFoundError):
            self.client.get_model("short-lived")


# ---------------------------------------------------------------------------------------------
# JobService


class JobTest(ClientTestCase):
    LENGTH, SAMPLES = 12, 3

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.job = cls.client.submit_jacobian("tiny", cls.LENGTH, samples=cls.SAMPLES, seed=3, request_id="py-1",
                                             labels={"suite": "python-package"})
        cls.watched = list(cls.client.watch(cls.job.id))
        cls.job.wait(progress=False, timeout=JOB_TIMEOUT_S)
        cls.result = cls.job.result()

    def test_a_submitted_job_is_queued_with_its_resolved_spec_and_a_retry_returns_it(self):
        again = self.client.submit_jacobian("tiny", self.LENGTH, samples=self.SAMPLES, seed=3, request_id="py-1",
                                            labels={"suite": "python-package"})
        self.assertEqual(again.id, self.job.id)
        self.assertEqual((self.job.model, self.job.sequence_length, self.job.samples, self.job.method),
                         ("tiny", self.LENGTH, self.SAMPLES, "exact"))
        self.assertEqual(self.job.labels, {"suite": "python-package"})

    def test_the_quota_names_the_caller_and_matches_the_cli(self):
        quota = self.client.quota()
        self.assertEqual((quota["principal"], quota["tenant"], quota["role"]), ("anonymous", "", "admin"),
                         "authentication off: every caller is the anonymous admin")
        self.assertEqual((quota["max_queued_jobs"], quota["max_running_jobs"]), (0, 0))
        cli = cli_json("jobs", "quota")
        self.assertEqual(set(quota), set(cli))
        moving = ("queued_jobs", "running_jobs")  # Other tests' jobs may start or end between the calls.
        self.assertEqual({k: v for k, v in quota.items() if k not in moving}, {k: v for k, v in cli.items() if k not in moving})

    def test_watch_ends_with_the_terminal_state_and_never_goes_backwards(self):
        self.assertEqual(self.watched[-1].state, "succeeded")
        fractions = [j.progress.fraction for j in self.watched]
        self.assertEqual(fractions, sorted(fractions))
        self.assertTrue(all(not j.done for j in self.watched[:-1]))
        self.assertEqual(self.job.state, "succeeded")
        self.assertIsNotNone(self.job.finish_time)

    def test_the_result_is_bit_identical_to_the_cli_json(self):
        result, cli = self.result, cli_json("jobs", "result", self.job.id)
        self.assertEqual(result.positions.tolist(), cli["positions"])
        self.assertEqual(result.positions.tolist(), list(range(1, self.LENGTH + 1)))
        for name in ["sq_norm_mean", "sq_norm_std", "sq_norm_stderr", "norm_mean", "norm_std", "norm_stderr"]:
            self.assertIsInstance(getattr(result, name), np.ndarray)
            self.assertBitIdentical(getattr(result, name), cli[name], name)
        self.assertAlmostEqual(float(result.profile.sum()), 1.0, delta=1e-12)
        self.assertEqual(result.report, cli)
        theirs = {f["model"]: f for f in cli["theory"]["fits"]}
        self.assertEqual({f.model for f in result.fits}, {"coherent", "incoherent"})
        for fit in result.fits:
            self.assertIsInstance(fit, posbias.TheoryFit)
            self.assertEqual(bits(fit.alpha), bits(theirs[fit.model]["alpha"]), fit.model)
            self.assertEqual(bits(fit.lambda_), bits(theirs[fit.model]["lambda"]), fit.model)
            self.assertEqual(bits(fit.lambda_sample_low), bits(theirs[fit.model]["lambda_sample_low"]), fit.model)
        self.assertBitIdentical(result.curve("coherent", "fitted").profile, theirs["coherent"]["profile"],
                                "coherent fitted curve")
        self.assertBitIdentical(result.branch_ratios.attention_mean, cli["branch_ratio"], "branch ratios")
        self.assertEqual(result.report["model"]["weights_sha256"], self.client.get_model("tiny").weights_sha256)

    def test_a_result_fetched_in_pages_of_five_equals_the_one_page_result(self):
        paged = self.client.get_job_result(self.job.id, page_size=5, include_token_ids=True)
        self.assertEqual(len(paged.pages), 3)
        for name in ["positions", "sq_norm_mean", "profile"]:
            np.testing.assert_array_equal(getattr(paged, name), getattr(self.result, name))
        for mine, whole in zip(paged.curves, self.result.curves):
            np.testing.assert_array_equal(mine.profile, whole.profile)
        cli = cli_json("jobs", "result", self.job.id)
        np.testing.assert_array_equal(paged.token_ids, np.array(cli["tokens"])[:, :self.LENGTH])
        strided = self.client.get_job_result(self.job.id, first_position=2, stride=3)
        self.assertEqual(strided.positions.tolist(), [2, 5, 8, 11])
        np.testing.assert_array_equal(strided.sq_norm_mean, self.result.sq_norm_mean[1::3])

    def test_given_tokens_and_raw_samples_come_back(self):
        tokens = [[(7 * s + j) % VOCAB for j in range(8)] for s in range(2)]
        job = self.client.submit_jacobian("tiny", 8, tokens=tokens, return_raw_samples=True).wait(progress=False)
        result = job.result(include_raw_samples=True, include_token_ids=True)
        np.testing.assert_array_equal(result.token_ids, np.array(tokens))
        self.assertEqual(result.raw_sq_norm.shape, (2, 1, 8))
        np.testing.assert_allclose(result.raw_sq_norm[:, 0, :].mean(axis=0), result.sq_norm_mean, rtol=1e-12)
        self.assertEqual(self.client.get_job(job.id, view="full").spec.jacobian_norm.input.given_tokens.sequence_count, 2)

    def test_the_probe_distribution_is_sent_recorded_and_orthogonal_by_default(self):
        width = TINY["hidden_size"]
        exact = self.client.submit_jacobian("tiny", 8, samples=1, seed=5).wait(progress=False).result()
        for asked, recorded in (("rademacher", "PROBE_DISTRIBUTION_RADEMACHER"),
                                (None, "PROBE_DISTRIBUTION_ORTHOGONAL")):
            job = self.client.submit_jacobian("tiny", 8, samples=1, seed=5, method="hutchinson", probes=width,
                                              probe_distribution=asked).wait(progress=False)
            spec = self.client.get_job(job.id, view="full").spec.jacobian_norm
            names = spec.DESCRIPTOR.fields_by_name["probe_distribution"].enum_type.values_by_number
            self.assertEqual(names[spec.probe_distribution].name, recorded)
            if asked is None:  # d orthogonal rows: the exact norms, up to float32 rounding.
                np.testing.assert_allclose(job.result().sq_norm_mean, exact.sq_norm_mean, rtol=1e-5)
        with self.assertRaisesRegex(ValueError, "probe_distribution"):
            self.client.submit_jacobian("tiny", 8, method="hutchinson", probe_distribution="sobol")

    def test_a_pathway_comparison_comes_back_as_arrays_joined_over_pages(self):
        job = self.client.submit_jacobian("tiny", 8, samples=2, seed=5, compare_pathways=True).wait(progress=False)
        whole = job.result()
        self.assertIsNone(self.result.pathways)  # A job without compare_pathways has none.
        pathways = whole.pathways
        self.assertIsInstance(pathways, posbias.PathwayComparison)
        cli = cli_json("jobs", "result", job.id)["pathways"]
        for name in posbias.PathwayComparison.ARRAYS:
            self.assertBitIdentical(getattr(pathways, name), cli[name], name)
        for name in posbias.PathwayComparison.TOTALS:
            self.assertEqual(bits(getattr(pathways, name)), bits(cli[name]), name)
        np.testing.assert_allclose(pathways.ratio_mean + pathways.score_share_mean + pathways.interference_share_mean,
                                   np.ones(8), atol=1e-9)
        paged = self.client.get_job_result(job.id, page_size=3)
        self.assertEqual(len(paged.pages), 3)
        for name in posbias.PathwayComparison.ARRAYS:
            np.testing.assert_array_equal(getattr(paged.pathways, name), getattr(pathways, name), name)

    def test_a_comparison_comes_back_as_arrays_joined_over_pages_and_plots(self):
        job = self.client.submit_jacobian("tiny", 8, samples=3, seed=5, versus=["init", "slow"], init_seed=1)
        whole = job.wait(progress=False).result()
        self.assertIsNone(self.result.comparison)  # A job without versus has none.
        comparison = whole.comparison
        self.assertIsInstance(comparison, posbias.ModelComparison)
        self.assertEqual(comparison.models, ["tiny", "init", "slow"])
        self.assertEqual(comparison.sq_norm_mean.shape, (3, 8))
        np.testing.assert_array_equal(comparison.sq_norm_mean[0], whole.sq_norm_mean)
        np.testing.assert_array_equal(comparison.sq_norm_mean[1], comparison.sq_norm_mean[0])  # init = tiny's seed.
        cli = cli_json("jobs", "result", job.id)["comparison"]
        for m, entry in enumerate(cli):
            self.assertBitIdentical(comparison.sq_norm_mean[m], entry["sq_norm_mean"], entry["model"])
            for band in posbias.ModelComparison.BANDS:
                self.assertEqual(bits(comparison.bands[band]["mean"][m]), bits(entry[band]["mean"]), band)
        self.assertTrue(np.isnan(comparison.log_ratios["middle"]["mean"][0]))
        summary = repr(comparison)  # print(result.comparison): a line a model, not the arrays.
        self.assertEqual(len(summary.splitlines()), 4, summary)
        self.assertIn("tiny", summary.splitlines()[1])
        self.assertIn("reference", summary.splitlines()[1])
        self.assertIn("log middle ratio", summary.splitlines()[3])
        self.assertEqual(bits(comparison.log_ratios["middle"]["mean"][2]), bits(cli[2]["middle_log_ratio"]["mean"]))
        # Over the context alone (positions 1..7): the same numbers as the stored report's.
        for m, entry in enumerate(cli):
            for band in posbias.ModelComparison.BANDS:
                self.assertEqual(bits(comparison.context_bands[band]["mean"][m]), bits(entry["context"][band]["mean"]))
        self.assertTrue(np.isnan(comparison.context_log_ratios["middle"]["mean"][0]))
        self.assertEqual(bits(comparison.context_log_ratios["middle"]["mean"][2]),
                         bits(cli[2]["context"]["middle_log_ratio"]["mean"]))
        paged = self.client.get_job_result(job.id, page_size=3)
        np.testing.assert_array_equal(paged.comparison.sq_norm_mean, comparison.sq_norm_mean)
        import matplotlib
        matplotlib.use("Agg")
        ax = comparison.plot(whole.positions)
        self.assertEqual(len(ax.get_lines()), 3)
        middle = comparison.plot_middle()
        np.testing.assert_array_equal(middle.get_lines()[0].get_ydata(), comparison.bands["middle"]["mean"])

    def test_a_recall_summary_becomes_arrays_by_depth(self):
        from posbias.v1 import job_service_pb2
        summary = job_service_pb2.RecallSummary(chance=0.25)
        for depth, correct in ((0.0, 3), (1.0, 1)):
            summary.depths.add(depth=depth, probes=4, correct=correct, accuracy=correct / 4, accuracy_low=0.1,
                               accuracy_high=0.9, pair_context_share_mean=0.2 + depth)
        sweep = posbias.RecallSweep.from_proto(summary)
        np.testing.assert_array_equal(sweep.depth, [0.0, 1.0])
        np.testing.assert_array_equal(sweep.correct, [3, 1])
        np.testing.assert_array_equal(sweep.accuracy, [0.75, 0.25])
        self.assertIsNone(sweep.share_accuracy)  # Unset in the message: no correlation, not r = 0.
        summary.share_accuracy.r, summary.share_accuracy.cells = -0.5, 4
        self.assertEqual(posbias.RecallSweep.from_proto(summary).share_accuracy[0], -0.5)
        self.assertIsNone(self.result.recall)  # A job without recall probes has none.

    def test_recall_probes_need_a_tokenizer_and_take_no_other_input(self):
        error = self.assertError(lambda: self.client.submit_jacobian("tiny", 64, recall_depths=[0, 1]),
                                 posbias.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION, "INVALID_ARGUMENT")
        self.assertIn("has no tokenizer", str(error))
        with self.assertRaisesRegex(ValueError, "recall"):
            self.client.submit_jacobian("tiny", 64, recall_depths=[0, 1], tokens=[[1] * 64])

    def test_token_id_recall_probes_need_no_tokenizer_and_say_what_was_asked(self):
        result = self.client.submit_jacobian("tiny", 32, recall_depths=[0, 1], recall_probes=2, recall_pairs=2,
                                             recall_key_ids=(10, 30), recall_value_ids=(30, 50),
                                             recall_filler_ids=(50, 100)).wait(progress=False).result()
        self.assertEqual(result.recall.asked, "token ids: 2 pairs, keys 10:30, values 30:50, filler 50:100")
        self.assertAlmostEqual(result.recall.chance, 1 / 20)
        np.testing.assert_array_equal(result.recall.probes, [2, 2])
        with self.assertRaisesRegex(ValueError, "recall_kind"):
            self.client.submit_jacobian("tiny", 32, recall_depths=[0], recall_kind="ids")
        with self.assertRaisesRegex(ValueError, "token_ids"):
            self.client.submit_jacobian("tiny", 32, recall_depths=[0], recall_kind="text", recall_key_ids=(1, 2))

    def test_list_jobs_follows_every_page_and_matches_the_cli(self):
        for seed in range(3):
            self.client.submit_jacobian("tiny", 4, samples=1, seed=seed).wait(progress=False)
        everything = [j.id for j in self.client.list_jobs(page_size=1000)]
        self.assertGreaterEqual(len(everything), 4)
        self.assertEqual([j.id for j in self.client.list_jobs(page_size=2)], everything)
        self.assertEqual([j["id"] for j in cli_json("jobs", "list")], everything)
        self.assertEqual([j.id for j in self.client.list_jobs(states=["succeeded"], model="tiny",
                                                               label_selector="suite=python-package")], [self.job.id])

    def test_wait_draws_a_tqdm_bar_and_a_plain_bar_to_the_end(self):
        job = self.client.submit_jacobian("slow", SLOW_LENGTH, samples=2, seed=5)
        out = io.StringIO()
        self.assertIs(job.wait(progress="tqdm", file=out, timeout=JOB_TIMEOUT_S), job)
        self.assertEqual(job.state, "succeeded")
        self.assertIn("job %s" % job.id, out.getvalue())
        self.assertIn("100.0%", out.getvalue())
        self.assertIn("succeeded  samples 2/2", out.getvalue())
        quick = self.client.submit_jacobian("tiny", 8, samples=1)
        plain = io.StringIO()
        quick.wait(progress="plain", file=plain, timeout=JOB_TIMEOUT_S)
        self.assertRegex(plain.getvalue(), r"job %s \[#+\] 100\.0 %%  succeeded  samples 1/1" % quick.id)

    def test_a_cancelled_job_has_no_result_and_delete_removes_it(self):
        job = self.client.submit_jacobian("slow", SLOW_LENGTH, samples=16, seed=6)
        job.cancel(reason="test")
        self.assertIn(job.state, ("cancelled", "cancelling"))
        self.assertEqual(job.wait(progress=False, timeout=JOB_TIMEOUT_S).state, "cancelled")
        self.assertError(job.result, posbias.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION,
                         "JOB_NOT_FINISHED")
        self.assertEqual(self.client.cancel_job(job.id).state, "cancelled")
        job.delete()
        self.assertError(lambda: self.client.get_job(job.id), posbias.NotFoundError, grpc.StatusCode.NOT_FOUND,
                         "JOB_NOT_FOUND")
        running = self.client.submit_jacobian("slow", SLOW_LENGTH, samples=16, seed=7)
        self.assertError(lambda: self.client.delete_job(running.id), posbias.FailedPreconditionError,
                         grpc.StatusCode.FAILED_PRECONDITION, "JOB_NOT_FINISHED")
        self.client.delete_job(running.id, force=True)

    def test_ctrl_c_stops_waiting_but_not_the_job(self):
        script = ("import sys, posbias\n"
                  "client = posbias.Client(sys.argv[1])\n"
                  "job = client.submit_jacobian('slow', %d, samples=6, seed=8)\n"
                  "print(job.id, flush=True)\n"
                  "job.wait(progress='plain')\n"
                  "print('wait returned', flush=True)\n" % SLOW_LENGTH)
        child = subprocess.Popen([sys.executable, "-c", script, SERVER.address], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            job_id = child.stdout.readline().strip()
            self.assertTrue(job_id.startswith("j-"), job_id)
            deadline = time.monotonic() + JOB_TIMEOUT_S
            while self.client.get_job(job_id).progress.samples_done < 1:
                self.assertLess(time.monotonic(), deadline, "the job did not start")
                time.sleep(0.05)
            child.send_signal(signal.SIGINT)
            stdout, stderr = child.communicate(timeout=20)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        self.assertNotEqual(child.returncode, 0, stderr)
        self.assertIn("KeyboardInterrupt", stderr)
        self.assertIn("stopped waiting for job %s" % job_id, stderr)
        self.assertNotIn("wait returned", stdout)
        job = self.client.get_job(job_id)
        self.assertIn(job.state, ("running", "succeeded"), job)
        done = job.progress.samples_done
        while job.state == "running" and job.progress.samples_done == done:
            time.sleep(0.05)
            job.refresh()
        self.assertTrue(job.state == "succeeded" or job.progress.samples_done > done, job)
        job.cancel()

    def test_plot_draws_the_measured_profile_and_the_fitted_curves(self):
        import matplotlib
        matplotlib.use("Agg")
        ax = self.job.plot()
        lines = ax.get_lines()
        self.assertEqual(len(lines), 3)
        np.testing.assert_array_equal(lines[0].get_ydata(), self.result.profile)
        self.assertEqual(ax.get_yscale(), "log")

    def test_health_is_serving(self):
        self.assertEqual(self.client.health(), "serving")
        self.assertEqual(self.client.health("posbias.v1.JobService"), "serving")
        with self.assertRaises(posbias.NotFoundError):  # grpc.health.v1: NOT_FOUND for an unknown service.
            self.client.health("posbias.v1.NoSuchService")


# ---------------------------------------------------------------------------------------------
# Credentials: what the client sends (the real server has no token check yet)


class MetadataEcho:
    """An in-process gRPC server that records each call's metadata and answers with empty
    messages: it checks what the client sends, not what posbias does."""

    def __init__(self):
        self.seen = []
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        echo = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                echo.seen.append((details.method, dict(details.invocation_metadata)))
                if details.method.endswith("/WatchJob"):
                    return grpc.unary_stream_rpc_method_handler(lambda request, context: iter([b""]),
                                                                request_deserializer=None, response_serializer=None)
                return grpc.unary_unary_rpc_method_handler(lambda request, context: b"",
                                                           request_deserializer=None, response_serializer=None)

        self.server.add_generic_rpc_handlers([Handler()])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self):
        self.server.stop(0)


class CredentialsTest(unittest.TestCase):
    def setUp(self):
        self.echo = MetadataEcho()
        self.addCleanup(self.echo.stop)

    def test_a_token_is_sent_as_bearer_authorization_on_unary_and_streaming_calls(self):
        with posbias.Client("127.0.0.1:%d" % self.echo.port, token="s3cret", timeout=10) as client:
            client.evaluate_continuum(3, alpha=0.5, x=[0.5])
            list(client.watch("j-1"))
        self.assertEqual([m for m, _ in self.echo.seen],
                         ["/posbias.v1.DensityService/EvaluateContinuum", "/posbias.v1.JobService/WatchJob"])
        for method, metadata in self.echo.seen:
            self.assertEqual(metadata.get("authorization"), "Bearer s3cret", method)

    def test_without_a_token_no_authorization_is_sent(self):
        with posbias.Client("127.0.0.1:%d" % self.echo.port, timeout=10) as client:
            client.list_presets()
        self.assertNotIn("authorization", self.echo.seen[0][1])

    def test_tls_options_are_checked_before_connecting(self):
        with self.assertRaisesRegex(ValueError, "cert_file and key_file"):
            posbias.Client("127.0.0.1:1", cert_file="client.pem")
        with self.assertRaisesRegex(ValueError, "tls_server_name needs tls"):
            posbias.Client("127.0.0.1:1", tls_server_name="posbias.example")
        with self.assertRaises(FileNotFoundError):
            posbias.Client("127.0.0.1:1", ca_file=os.path.join(ROOT, "no-such-ca.pem"))
        with posbias.Client("127.0.0.1:1", tls=True, tls_server_name="posbias.example") as client:
            self.assertTrue(client.tls)


# ---------------------------------------------------------------------------------------------
# The example


class QuickstartTest(unittest.TestCase):
    def test_the_quickstart_example_runs_end_to_end(self):
        example = os.path.join(ARGS.package_dir, "examples", "quickstart.py")
        image = os.path.join(ROOT, "quickstart.png")
        result = subprocess.run([sys.executable, example, "--server", SERVER.address, "--plot", image],
                                capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("fitted alpha 0.3000 (true 0.3)", result.stdout)
        self.assertRegex(result.stdout, r"coherent +alpha 0\.\d+")
        self.assertGreater(os.path.getsize(image), 1000)


def main():
    global ARGS, posbias
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--cli-binary", required=True)
    parser.add_argument("--package-dir", required=True, help="client/python (for the example)")
    ARGS, rest = parser.parse_known_args()
    for path in [ARGS.server_binary, ARGS.cli_binary]:
        if not os.access(path, os.X_OK):
            parser.error("%s is not an executable file" % path)
    ARGS.server_binary, ARGS.cli_binary = os.path.abspath(ARGS.server_binary), os.path.abspath(ARGS.cli_binary)
    ARGS.package_dir = os.path.abspath(ARGS.package_dir)
    import posbias as installed
    if os.path.realpath(installed.__file__).startswith(os.path.realpath(ARGS.package_dir) + os.sep):
        parser.error("posbias is imported from the source tree (%s), not from an installed package" % installed.__file__)
    posbias = installed
    start_watchdog(WATCHDOG_S, "client_test.py")
    try:
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        for server in list(ServerProcess.live):
            server.kill()
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
