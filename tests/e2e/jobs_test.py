#!/usr/bin/python3
"""Black-box end-to-end tests of the model registry and the Jacobian-norm job queue.

Usage (Debian's Python with python3-grpcio and python3-protobuf; protoc and grpc_python_plugin from
/usr/bin):

    /usr/bin/python3 tests/e2e/jobs_test.py --server-binary build/dev/server/posbias-server \
        --cli-binary build/dev/client/cli/posbias --proto-dir proto

Every test class starts its own posbias-server on 127.0.0.1 with OS-chosen ports (read back from the
server's log), a fresh temporary --data-dir and --model-root and --cpu-threads 1, and stops it with
SIGTERM at the end (exit code 0 and "stopped cleanly" required, also when a test fails). The
`posbias models ...` and `posbias jobs ...` commands are driven through the real CLI; one class uses
Python stubs generated with protoc at test time. Every subprocess runs under a timeout and a
watchdog bounds the whole run. Models are tiny (width 32) except SLOW_MODEL, whose jobs take a few
seconds so that they can be watched, cancelled and interrupted while they run.
"""

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import xml.etree.ElementTree as ElementTree

ARGS = None      # Parsed command line (set in main()).
STUB_DIR = None  # Temporary directory with the generated Python stubs (GrpcClientTest).

SUBPROCESS_TIMEOUT_S = 30
JOB_TIMEOUT_S = 90
RPC_TIMEOUT_S = 30
POLL_S = 0.05
WATCHDOG_S = 420
RESULT_REL_TOL = 1e-9

VOCAB = 100
MAX_POSITIONS = 256
# Tiny models: a job of L <= 24 and S <= 4 takes milliseconds.
TINY_GPT2 = ["--arch", "gpt2", "--layers", "2", "--width", "32", "--heads", "2", "--mlp-width", "64",
             "--vocab", str(VOCAB), "--max-positions", str(MAX_POSITIONS), "--seed", "1"]
TINY_QWEN2 = ["--arch", "qwen2", "--layers", "2", "--width", "32", "--heads", "4", "--kv-heads", "2",
              "--mlp-width", "64", "--vocab", str(VOCAB), "--max-positions", str(MAX_POSITIONS), "--seed", "1"]
# A model whose SLOW_JOB takes about 3-4 s on one core (about 0.4 s per sample), long enough to be
# seen RUNNING, cancelled, deleted or interrupted, short enough to finish a few times per run.
SLOW_MODEL = ["--arch", "gpt2", "--layers", "4", "--width", "256", "--heads", "4", "--mlp-width", "512",
              "--vocab", str(VOCAB), "--max-positions", str(MAX_POSITIONS), "--seed", "1"]
SLOW_LENGTH, SLOW_SAMPLES = 24, 8
SLOW_JOB = ["--length", str(SLOW_LENGTH), "--samples", str(SLOW_SAMPLES), "--method", "exact", "--seed", "3"]
TERMINAL = ("succeeded", "failed", "cancelled")

# ---------------------------------------------------------------------------------------------
# Server processes


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from posbias_server import (GRPC_PYTHON_PLUGIN, PROTOC, ServerProcess, generate_stubs,  # noqa: E402
                            metric_samples, read_safetensors_header, sample_value,
                            start_watchdog)


class ServerFixture:
    """A temporary --data-dir and --model-root and the server currently running on them."""

    def __init__(self, extra_args=()):
        self.root = tempfile.mkdtemp(prefix="posbias-jobs-test-")
        self.data_dir = os.path.join(self.root, "data")
        self.model_root = os.path.join(self.root, "models")
        os.makedirs(self.model_root)
        self.extra_args = list(extra_args)
        self.server = None

    def start(self):
        self.server = ServerProcess(ARGS.server_binary, ["--data-dir", self.data_dir, "--model-root", self.model_root,
                                                         "--cpu-threads", "1", *self.extra_args]).start()
        return self.server

    def stop(self):
        """SIGTERM; raises unless the server exits 0 and logs that it stopped cleanly."""
        server = self.server
        code = server.stop()
        if code != 0 or "stopped cleanly" not in server.log:
            raise AssertionError("server %s exited with %s after SIGTERM; log:\n%s" % (self.extra_args, code, server.log))

    def restart(self):
        """A new server on the same directories (the old one must have exited)."""
        assert self.server.returncode is not None, "restart() needs the previous server stopped"
        return self.start()

    def close(self):
        try:
            if self.server is not None and self.server.returncode is None:
                self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Helpers


def run_cli(server, *args, timeout=SUBPROCESS_TIMEOUT_S):
    """Runs the CLI against `server` (a ServerProcess). Returns CompletedProcess (text)."""
    command = [ARGS.cli_binary, "--server", server.address, *[str(a) for a in args]]
    env = dict(os.environ)
    env.pop("POSBIAS_SERVER", None)
    return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, env=env)


def describe(result):
    return "command: %s\nexit code %s\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(result.args), result.returncode, result.stdout, result.stderr)


def cli_json(server, *args, timeout=SUBPROCESS_TIMEOUT_S):
    """Runs the CLI with --format json; raises AssertionError unless it exits 0 with one JSON document."""
    result = run_cli(server, *args, "--format", "json", timeout=timeout)
    if result.returncode != 0:
        raise AssertionError("expected exit code 0\n" + describe(result))
    try:
        return json.loads(result.stdout)
    except ValueError as error:
        raise AssertionError("stdout is not one JSON document (%s)\n%s" % (error, describe(result)))


def get_job(server, job_id):
    return cli_json(server, "jobs", "get", job_id)


def wait_for_job(server, job_id, predicate, what, timeout=JOB_TIMEOUT_S):
    """Polls `jobs get` until predicate(job) holds; returns that job (AssertionError on timeout)."""
    deadline = time.monotonic() + timeout
    job = None
    while time.monotonic() < deadline:
        job = get_job(server, job_id)
        if predicate(job):
            return job
        if job["state"] in TERMINAL:
            raise AssertionError("job %s ended %s while waiting until %s: %s" % (job_id, job["state"], what, job))
        time.sleep(POLL_S)
    raise AssertionError("job %s: not %s within %d s; last seen: %s" % (job_id, what, timeout, job))


def wait_until_running_with_a_sample(server, job_id):
    return wait_for_job(server, job_id, lambda j: j["state"] == "running" and j["samples_done"] >= 1,
                        "running with at least one sample done")


def watch_job(server, job_id, timeout=JOB_TIMEOUT_S):
    """`posbias jobs watch ID`: follows the job until it ends; returns the last state the CLI printed."""
    return cli_json(server, "jobs", "watch", job_id, timeout=timeout)


def register_model(server, name, flags):
    return cli_json(server, "models", "register", name, *flags, timeout=60)


def is_positive_finite(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def scrape_metrics(server):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port, timeout=10) as response:
        return response.read().decode()


class ServerTestCase(unittest.TestCase):
    """A test class with its own server (fresh --data-dir and --model-root)."""

    maxDiff = None
    SERVER_ARGS = ()
    fixture = None

    @classmethod
    def setUpClass(cls):
        cls.fixture = ServerFixture(cls.SERVER_ARGS)
        cls.addClassCleanup(cls.fixture.close)
        cls.fixture.start()

    @property
    def server(self):
        return self.fixture.server

    def cli(self, *args, timeout=SUBPROCESS_TIMEOUT_S):
        return run_cli(self.server, *args, timeout=timeout)

    def cli_json(self, *args, timeout=SUBPROCESS_TIMEOUT_S):
        return cli_json(self.server, *args, timeout=timeout)

    def assertExit(self, result, code):
        self.assertEqual(result.returncode, code, "expected exit code %s\n%s" % (code, describe(result)))

    def assertCliError(self, result, code, reason=None):
        """Exit code 1 and "error: CODE [REASON] message" on stderr."""
        self.assertExit(result, 1)
        pattern = r"^error: %s%s " % (re.escape(code), r" \[%s\]" % re.escape(reason) if reason else r"( \[\w+\])?")
        self.assertRegex(result.stderr, re.compile(pattern, re.MULTILINE), describe(result))

    def submit(self, *flags):
        return self.cli_json("jobs", "submit", *flags)

    def cancel_and_wait(self, job_id):
        """Cleanup: cancels a job (if it still exists) and waits until it is terminal."""
        result = self.cli("jobs", "cancel", job_id)
        if result.returncode != 0:
            return  # Deleted by the test.
        wait_for_job(self.server, job_id, lambda j: j["state"] in TERMINAL, "terminal")

    def start_slow_job(self, *flags):
        """Submits SLOW_JOB on the slow model; it is cancelled (and awaited) when the test ends."""
        job = self.submit("--model", "slow-gpt2", *SLOW_JOB, *flags)
        self.addCleanup(self.cancel_and_wait, job["id"])
        return job


# ---------------------------------------------------------------------------------------------
# Models


class ModelRegistryTest(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.gpt2 = register_model(cls.fixture.server, "tiny-gpt2", TINY_GPT2)
        cls.qwen2 = register_model(cls.fixture.server, "tiny-qwen2", TINY_QWEN2)

    def export(self, name, path):
        result = self.cli("models", "export", name, path)
        self.assertExit(result, 0)
        self.assertTrue(os.path.isfile(path), describe(result))
        return path

    def test_registering_a_tiny_gpt2_preset_returns_a_ready_model_with_its_shape_and_parameters(self):
        model = self.gpt2
        self.assertEqual(model["name"], "tiny-gpt2")
        self.assertEqual(model["state"], "ready")
        self.assertEqual(model["family"], "gpt2")
        self.assertFalse(model["builtin"])
        self.assertEqual((model["layers"], model["width"], model["heads"], model["mlp_width"], model["vocab"],
                          model["max_positions"], model["seed"]), (2, 32, 2, 64, VOCAB, MAX_POSITIONS, 1))
        self.assertGreater(model["parameters"], 0)
        self.assertIsNone(model["error"])

    def test_registering_a_tiny_qwen2_preset_with_grouped_kv_heads_returns_a_ready_model(self):
        model = self.qwen2
        self.assertEqual(model["name"], "tiny-qwen2")
        self.assertEqual(model["state"], "ready")
        self.assertEqual(model["family"], "qwen2")
        self.assertEqual((model["layers"], model["width"], model["heads"], model["kv_heads"]), (2, 32, 4, 2))
        self.assertGreater(model["parameters"], 0)

    def test_models_list_shows_the_registered_models_and_the_builtin_presets(self):
        models = {m["name"]: m for m in self.cli_json("models", "list")}
        for name in ["tiny-gpt2", "tiny-qwen2"]:
            self.assertIn(name, models)
            self.assertFalse(models[name]["builtin"], name)
            self.assertEqual(models[name]["state"], "ready", name)
        for name in ["gpt2-tiny", "qwen2-tiny"]:
            self.assertIn(name, models, sorted(models))
            self.assertTrue(models[name]["builtin"], name)
        table = self.cli("models", "list")
        self.assertExit(table, 0)
        self.assertIn("tiny-gpt2", table.stdout)

    def test_models_get_returns_the_registered_model(self):
        model = self.cli_json("models", "get", "tiny-qwen2")
        self.assertEqual(model["name"], "tiny-qwen2")
        self.assertEqual(model["parameters"], self.qwen2["parameters"])
        self.assertEqual(model["state"], "ready")

    def test_models_get_of_an_unknown_name_fails_with_model_not_found(self):
        self.assertCliError(self.cli("models", "get", "no-such-model"), "NOT_FOUND", "MODEL_NOT_FOUND")

    def test_registering_a_taken_name_fails_with_already_exists(self):
        result = self.cli("models", "register", "tiny-gpt2", *TINY_GPT2)
        self.assertCliError(result, "ALREADY_EXISTS", "MODEL_ALREADY_EXISTS")

    def test_registering_again_with_the_same_request_id_returns_the_same_model(self):
        first = self.cli_json("models", "register", "retried", *TINY_GPT2, "--request-id", "register-retried-1")
        # A retry with the same key returns the first model even though the request differs.
        again = self.cli_json("models", "register", "retried", *TINY_QWEN2, "--request-id", "register-retried-1")
        self.assertEqual(again["name"], "retried")
        self.assertEqual(again["family"], "gpt2")
        self.assertEqual(again["parameters"], first["parameters"])
        other_key = self.cli("models", "register", "retried", *TINY_GPT2, "--request-id", "register-retried-2")
        self.assertCliError(other_key, "ALREADY_EXISTS", "MODEL_ALREADY_EXISTS")

    def test_export_writes_a_safetensors_file_with_hugging_face_names_and_f32_tensors(self):
        path = self.export("tiny-gpt2", os.path.join(self.fixture.root, "exported.safetensors"))
        header, size, length = read_safetensors_header(path)
        self.assertLessEqual(8 + length, size)
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        for name, shape in {"transformer.wte.weight": [VOCAB, 32], "transformer.wpe.weight": [MAX_POSITIONS, 32],
                            "transformer.h.0.attn.c_attn.weight": [32, 96],
                            "transformer.h.1.mlp.c_fc.weight": [32, 64], "transformer.ln_f.weight": [32]}.items():
            self.assertIn(name, tensors, sorted(tensors))
            self.assertEqual(tensors[name]["shape"], shape, name)
        end, count = 0, 0
        for name, info in sorted(tensors.items(), key=lambda item: item[1]["data_offsets"][0]):
            begin, stop = info["data_offsets"]
            self.assertEqual(begin, end, "%s does not follow the previous tensor" % name)
            self.assertEqual(info["dtype"], "F32", name)
            self.assertEqual(stop - begin, 4 * math.prod(info["shape"]), name)
            end, count = stop, count + math.prod(info["shape"])
        self.assertEqual(8 + length + end, size, "the tensor data must fill the file")
        self.assertEqual(count, self.gpt2["parameters"], "tensor elements must add up to the parameter count")

    def test_a_qwen2_export_uses_the_hugging_face_qwen2_names(self):
        path = self.export("tiny-qwen2", os.path.join(self.fixture.root, "qwen2.safetensors"))
        tensors = read_safetensors_header(path)[0]
        for name, shape in {"model.embed_tokens.weight": [VOCAB, 32],
                            "model.layers.0.self_attn.k_proj.weight": [16, 32],
                            "model.layers.1.mlp.down_proj.weight": [32, 64], "model.norm.weight": [32]}.items():
            self.assertIn(name, tensors, sorted(tensors))
            self.assertEqual(tensors[name]["shape"], shape, name)

    def test_a_ready_model_reports_the_sha256_of_the_weights_its_export_streams(self):
        # model_service.proto: weights_sha256 is "the digest of the byte stream ExportModel sends
        # with default options ... Empty until READY".
        registered = self.cli_json("models", "register", "digested", *TINY_GPT2)
        path = self.export("digested", os.path.join(self.fixture.root, "digested.safetensors"))
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(self.cli_json("models", "get", "digested")["weights_sha256"], digest)
        self.assertEqual(registered["weights_sha256"], digest, "the digest must be known once the model is READY")

    def test_deleting_a_builtin_preset_fails_with_model_builtin(self):
        self.assertCliError(self.cli("models", "rm", "gpt2-tiny"), "FAILED_PRECONDITION", "MODEL_BUILTIN")
        self.assertTrue(self.cli_json("models", "get", "gpt2-tiny")["builtin"])

    def test_models_rm_deletes_a_registered_model_and_frees_its_name(self):
        self.cli_json("models", "register", "short-lived", *TINY_GPT2)
        result = self.cli("models", "rm", "short-lived")
        self.assertExit(result, 0)
        self.assertCliError(self.cli("models", "get", "short-lived"), "NOT_FOUND", "MODEL_NOT_FOUND")
        self.assertCliError(self.cli("models", "rm", "short-lived"), "NOT_FOUND", "MODEL_NOT_FOUND")
        self.assertEqual(self.cli_json("models", "register", "short-lived", *TINY_QWEN2)["family"], "qwen2")

    def test_a_name_with_capitals_or_underscores_is_rejected_as_invalid_argument(self):
        for name in ["Bad_Name", "bad.name", "x" * 64]:
            with self.subTest(name=name):
                result = self.cli("models", "register", name, *TINY_GPT2)
                self.assertCliError(result, "INVALID_ARGUMENT", "INVALID_ARGUMENT")
        names = [m["name"] for m in self.cli_json("models", "list")]
        self.assertNotIn("Bad_Name", names)

    def test_a_checkpoint_outside_the_model_root_is_refused_with_path_not_allowed(self):
        outside = os.path.join(self.fixture.root, "outside")
        os.makedirs(outside, exist_ok=True)
        self.export("tiny-gpt2", os.path.join(outside, "model.safetensors"))
        for path in ["../outside", "../outside/model.safetensors", outside, os.path.join(outside, "model.safetensors")]:
            with self.subTest(path=path):
                result = self.cli("models", "register", "escaped", "--checkpoint", path)
                self.assertCliError(result, "INVALID_ARGUMENT", "PATH_NOT_ALLOWED")
        # Refused requests leave nothing behind.
        self.assertCliError(self.cli("models", "get", "escaped"), "NOT_FOUND", "MODEL_NOT_FOUND")

    def test_a_missing_checkpoint_outside_the_model_root_is_refused_with_path_not_allowed_too(self):
        # model_service.proto: ".." components that leave the root are refused with PATH_NOT_ALLOWED.
        # Answering PATH_NOT_FOUND here would tell a client which files exist outside the root.
        result = self.cli("models", "register", "escaped", "--checkpoint", "../x")
        self.assertCliError(result, "INVALID_ARGUMENT", "PATH_NOT_ALLOWED")

    def test_a_missing_checkpoint_under_the_model_root_fails_with_path_not_found(self):
        result = self.cli("models", "register", "missing", "--checkpoint", "no/such/dir")
        self.assertCliError(result, "NOT_FOUND", "PATH_NOT_FOUND")
        self.assertCliError(self.cli("models", "get", "missing"), "NOT_FOUND", "MODEL_NOT_FOUND")

    def test_a_checkpoint_directory_registers_and_measures_like_the_model_it_was_exported_from(self):
        directory = os.path.join(self.fixture.model_root, "ckpt")
        os.makedirs(directory, exist_ok=True)
        self.export("tiny-gpt2", os.path.join(directory, "model.safetensors"))
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 32, "n_layer": 2,
                  "n_head": 2, "n_inner": 64, "vocab_size": VOCAB, "n_positions": MAX_POSITIONS,
                  "n_ctx": MAX_POSITIONS, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
                  "initializer_range": 0.02, "tie_word_embeddings": True, "torch_dtype": "float32"}
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config, f)
        model = self.cli_json("models", "register", "from-ckpt", "--checkpoint", "ckpt", timeout=60)
        self.assertEqual(model["state"], "ready")
        self.assertEqual(model["family"], "gpt2")
        self.assertEqual(model["parameters"], self.gpt2["parameters"])
        self.assertEqual((model["layers"], model["width"], model["vocab"]), (2, 32, VOCAB))
        flags = ["--length", "12", "--samples", "2", "--method", "exact", "--seed", "3", "--wait"]
        loaded = self.cli_json("jobs", "submit", "--model", "from-ckpt", *flags, timeout=JOB_TIMEOUT_S)
        original = self.cli_json("jobs", "submit", "--model", "tiny-gpt2", *flags, timeout=JOB_TIMEOUT_S)
        self.assertEqual((loaded["state"], original["state"]), ("succeeded", "succeeded"))
        loaded_result = self.cli_json("jobs", "result", loaded["id"])
        original_result = self.cli_json("jobs", "result", original["id"])
        self.assertEqual(loaded_result["tokens"], original_result["tokens"])
        self.assertEqual(loaded_result["sq_norm_mean"], original_result["sq_norm_mean"])

    def test_a_checkpoint_with_non_finite_weights_fails_its_job_and_the_server_goes_on(self):
        # A poison job: NaN weights make every norm NaN. It must fail with its reason (never a
        # NaN in a checkpoint, never a worker crash), and the next job must run.
        directory = os.path.join(self.fixture.model_root, "poisoned")
        os.makedirs(directory, exist_ok=True)
        path = self.export("tiny-gpt2", os.path.join(directory, "model.safetensors"))
        header, _, length = read_safetensors_header(path)
        begin, end = header["transformer.ln_f.weight"]["data_offsets"]
        with open(path, "r+b") as f:
            f.seek(8 + length + begin)
            f.write(struct.pack("<f", float("nan")) * ((end - begin) // 4))
        config = {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2, "n_inner": 64,
                  "vocab_size": VOCAB, "n_positions": MAX_POSITIONS, "layer_norm_epsilon": 1e-5,
                  "tie_word_embeddings": True}
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config, f)
        self.assertEqual(self.cli_json("models", "register", "poisoned", "--checkpoint", "poisoned")["state"], "ready")
        flags = ["--length", "8", "--samples", "2", "--wait"]
        result = self.cli("jobs", "submit", "--model", "poisoned", *flags, "--format", "json", timeout=JOB_TIMEOUT_S)
        job = json.loads(result.stdout)
        self.assertEqual(job["state"], "failed", describe(result))
        self.assertEqual(job["error"]["reason"], "MEASUREMENT_NOT_FINITE")
        self.assertIn("non-finite", job["error"]["message"])
        healthy = self.cli_json("jobs", "submit", "--model", "tiny-gpt2", *flags, timeout=JOB_TIMEOUT_S)
        self.assertEqual(healthy["state"], "succeeded")


# ---------------------------------------------------------------------------------------------
# Jobs


class JobsTest(ServerTestCase):
    LENGTH, SAMPLES = 16, 3

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        server = cls.fixture.server
        register_model(server, "tiny-gpt2", TINY_GPT2)
        register_model(server, "tiny-qwen2", TINY_QWEN2)
        register_model(server, "slow-gpt2", SLOW_MODEL)
        cls.job = cli_json(server, "jobs", "submit", "--model", "tiny-gpt2", "--length", cls.LENGTH,
                           "--samples", cls.SAMPLES, "--method", "exact", "--seed", "3", "--wait",
                           timeout=JOB_TIMEOUT_S)
        cls.result = cli_json(server, "jobs", "result", cls.job["id"])

    def test_submit_with_wait_prints_the_succeeded_job_with_progress_one(self):
        job = self.job
        self.assertRegex(job["id"], r"^[a-z0-9-]{1,64}$")
        self.assertEqual(job["state"], "succeeded")
        self.assertEqual(job["progress"], 1)
        self.assertEqual((job["model"], job["length"], job["samples"], job["method"]),
                         ("tiny-gpt2", self.LENGTH, self.SAMPLES, "exact"))
        self.assertEqual((job["samples_done"], job["samples_total"]), (self.SAMPLES, self.SAMPLES))
        self.assertEqual(job["attempt"], 1)
        self.assertIn("cpu", job["device"])

    def test_jobs_get_shows_the_state_and_a_progress_within_the_unit_interval(self):
        job = self.cli_json("jobs", "get", self.job["id"])
        self.assertEqual(job["id"], self.job["id"])
        self.assertEqual(job["state"], "succeeded")
        self.assertTrue(0 <= job["progress"] <= 1, job)
        table = self.cli("jobs", "get", self.job["id"])
        self.assertExit(table, 0)
        self.assertIn("state: succeeded", table.stdout)

    def test_a_finished_job_has_no_time_estimate(self):
        # job_service.proto JobProgress.estimated_seconds_remaining: "Unset ... in terminal states."
        self.assertNotIn("eta_seconds", self.cli_json("jobs", "get", self.job["id"]))

    def test_the_progress_of_a_running_job_grows_within_the_unit_interval(self):
        job = self.start_slow_job()
        self.assertEqual(job["state"], "queued")
        self.assertEqual(job["samples_total"], SLOW_SAMPLES)
        seen = []
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline:
            current = self.cli_json("jobs", "get", job["id"])
            seen.append(current)
            if current["state"] in TERMINAL or (current["state"] == "running" and current["samples_done"] >= 2):
                break
            time.sleep(POLL_S)
        self.assertEqual(seen[-1]["state"], "running", seen[-1])
        for current in seen:
            self.assertTrue(0 <= current["progress"] <= 1, current)
            self.assertTrue(0 <= current["samples_done"] <= SLOW_SAMPLES, current)
        running = [c for c in seen if c["state"] == "running"]
        self.assertEqual([c["progress"] for c in running], sorted(c["progress"] for c in running))
        self.assertGreater(running[-1]["progress"], 0)
        self.assertLess(running[-1]["progress"], 1)
        estimates = [c["eta_seconds"] for c in running if "eta_seconds" in c]
        self.assertTrue(estimates, "no time estimate while running: %s" % running)
        self.assertTrue(all(e >= 0 for e in estimates), estimates)

    def test_jobs_result_json_has_tokens_means_stderrs_and_theory_fits(self):
        result, length = self.result, self.LENGTH
        self.assertEqual(len(result["tokens"]), self.SAMPLES)
        for ids in result["tokens"]:
            self.assertGreaterEqual(len(ids), length)
            self.assertTrue(all(isinstance(i, int) and 0 <= i < VOCAB for i in ids), ids)
        self.assertEqual(result["positions"], list(range(1, length + 1)))
        self.assertEqual(len(result["sq_norm_mean"]), length)
        self.assertTrue(all(is_positive_finite(v) for v in result["sq_norm_mean"]), result["sq_norm_mean"])
        self.assertEqual(len(result["sq_norm_stderr"]), length)
        self.assertTrue(all(math.isfinite(v) and v >= 0 for v in result["sq_norm_stderr"]), result["sq_norm_stderr"])
        fits = result["theory"]["fits"]
        self.assertEqual(sorted(fit["model"] for fit in fits), ["coherent", "incoherent"])
        for fit in fits:
            self.assertTrue(0 <= fit["alpha"] <= 1, fit)
        measurement = result["measurement"]
        self.assertEqual((measurement["length"], measurement["samples"], measurement["seed"], measurement["method"]),
                         (length, self.SAMPLES, 3, "exact"))
        self.assertEqual(result["job"]["id"], self.job["id"])

    def test_jobs_result_as_a_table_lists_every_position(self):
        table = self.cli("jobs", "result", self.job["id"])
        self.assertExit(table, 0)
        self.assertIn("sq_norm_mean", table.stdout)
        self.assertGreaterEqual(len(table.stdout.strip().splitlines()), self.LENGTH + 1)

    def test_jobs_result_with_plot_writes_an_svg_file(self):
        path = os.path.join(self.fixture.root, "profile.svg")
        result = self.cli("jobs", "result", self.job["id"], "--plot", path)
        self.assertExit(result, 0)
        with open(path) as f:
            text = f.read()
        root = ElementTree.fromstring(text)
        self.assertTrue(root.tag.endswith("svg"), root.tag)
        self.assertIn(self.job["id"], text)

    def test_jobs_list_includes_the_job_and_filters_by_state_and_model(self):
        ids = [j["id"] for j in self.cli_json("jobs", "list")]
        self.assertIn(self.job["id"], ids)
        listed = {j["id"]: j for j in self.cli_json("jobs", "list", "--state", "succeeded", "--model", "tiny-gpt2")}
        self.assertIn(self.job["id"], listed)
        self.assertTrue(all(j["state"] == "succeeded" and j["model"] == "tiny-gpt2" for j in listed.values()))
        self.assertNotIn(self.job["id"], [j["id"] for j in self.cli_json("jobs", "list", "--state", "queued")])
        self.assertNotIn(self.job["id"], [j["id"] for j in self.cli_json("jobs", "list", "--model", "tiny-qwen2")])
        csv_output = self.cli("jobs", "list", "--format", "csv")
        self.assertExit(csv_output, 0)
        self.assertEqual(csv_output.stdout.splitlines()[0], "id,state,progress,model,length,samples,method")

    def test_a_job_on_a_qwen2_model_succeeds(self):
        job = self.submit("--model", "tiny-qwen2", "--length", "12", "--samples", "2", "--seed", "3", "--wait")
        self.assertEqual(job["state"], "succeeded")
        self.assertEqual(len(self.cli_json("jobs", "result", job["id"])["sq_norm_mean"]), 12)

    def test_a_hutchinson_job_records_its_probes_and_reports_an_estimator_stderr(self):
        job = self.submit("--model", "tiny-gpt2", "--length", "12", "--samples", "2", "--method", "hutchinson",
                          "--probes", "8", "--seed", "3", "--wait")
        self.assertEqual((job["state"], job["method"], job["probes"]), ("succeeded", "hutchinson", 8))
        result = self.cli_json("jobs", "result", job["id"])
        self.assertEqual((result["measurement"]["method"], result["measurement"]["probes"]), ("hutchinson", 8))
        self.assertEqual(len(result["sq_norm_mean"]), 12)
        self.assertTrue(all(is_positive_finite(v) for v in result["sq_norm_mean"]))
        self.assertEqual(len(result["sq_norm_estimator_stderr"]), 12)

    def test_submit_compares_the_pathways_and_keeps_raw_samples_when_asked(self):
        length = 8
        job = self.submit("--model", "tiny-gpt2", "--length", str(length), "--samples", "2", "--seed", "3",
                          "--compare-pathways", "--raw", "--wait")
        self.assertEqual((job["state"], job.get("compare_pathways"), job.get("raw_samples")), ("succeeded", True, True), job)
        pathways = self.cli_json("jobs", "result", job["id"])["pathways"]
        for key in ("ratio_mean", "score_share_mean", "interference_share_mean", "cosine_mean"):
            self.assertEqual(len(pathways[key]), length, key)
        for ratio, score, interference in zip(pathways["ratio_mean"], pathways["score_share_mean"],
                                              pathways["interference_share_mean"]):
            self.assertAlmostEqual(ratio + score + interference, 1.0, places=6)
            self.assertGreaterEqual(score, 0)
        value_only = self.submit("--model", "tiny-gpt2", "--length", str(length), "--samples", "1", "--seed", "3",
                                 "--pathway", "value-only", "--wait")
        self.assertEqual((value_only["state"], value_only.get("pathway")), ("succeeded", "value_only"), value_only)
        self.assertNotIn("compare_pathways", value_only)
        refused = self.cli("jobs", "submit", "--model", "tiny-gpt2", "--length", "8", "--pathway", "score")
        self.assertExit(refused, 2)  # A usage error, naming the flag.
        self.assertIn("--pathway", refused.stderr)

    def test_a_loss_gradient_job_measures_the_training_signal_and_refuses_a_target(self):
        job = self.submit("--model", "tiny-qwen2", "--length", "10", "--samples", "2", "--seed", "3",
                          "--output", "loss", "--wait")
        self.assertEqual((job["state"], job["output"]), ("succeeded", "loss_gradient"), job)
        result = self.cli_json("jobs", "result", job["id"])
        self.assertEqual(result["measurement"]["output"], "loss_gradient")
        self.assertEqual(len(result["sq_norm_mean"]), 10)
        self.assertTrue(all(is_positive_finite(v) for v in result["sq_norm_mean"]))
        self.assertIn("N^H", result["theory"]["note"])
        refused = self.cli("jobs", "submit", "--model", "tiny-qwen2", "--length", "10", "--samples", "1",
                           "--output", "loss", "--target", "4")
        self.assertCliError(refused, "INVALID_ARGUMENT", "INVALID_POSITION")
        self.assertIn("target_position", refused.stderr)

    def test_a_comparison_job_measures_every_model_on_the_reference_samples_and_pairs_them(self):
        self.cli_json("models", "register", "tiny-gpt2-seed5", *TINY_GPT2[:-1], "5")
        flags = ["--length", "12", "--samples", "3", "--seed", "3", "--wait"]
        # init with the reference's own seed is the reference again: a paired ratio of exactly 0.
        job = self.submit("--model", "tiny-gpt2", "--versus", "init,tiny-gpt2-seed5", "--init-seed", "1", *flags)
        self.assertEqual(job["state"], "succeeded", job)
        # Progress counts (model, sample) units: 3 samples of 3 models.
        self.assertEqual((job["samples_done"], job["samples_total"]), (9, 9), job)
        result = self.cli_json("jobs", "result", job["id"])
        compared = result["comparison"]
        self.assertEqual([m["model"] for m in compared], ["tiny-gpt2", "init", "tiny-gpt2-seed5"])
        self.assertNotIn("middle_log_ratio", compared[0])
        self.assertEqual(compared[1]["sq_norm_mean"], compared[0]["sq_norm_mean"])
        self.assertEqual(compared[1]["middle_log_ratio"]["mean"], 0.0)
        self.assertEqual((compared[1]["middle_log_ratio"]["low"], compared[1]["middle_log_ratio"]["high"]), (0.0, 0.0))
        self.assertEqual(compared[1]["uid"], "")
        # The other model saw the reference's samples: its profile is its own job's on the same seed.
        alone = self.cli_json("jobs", "result", self.submit("--model", "tiny-gpt2-seed5", *flags)["id"])
        self.assertEqual(compared[2]["sq_norm_mean"], alone["sq_norm_mean"])
        shares = [compared[2][band]["mean"] for band in ("leading", "middle", "trailing")]
        self.assertAlmostEqual(sum(shares), 1.0, places=12)
        ratio = compared[2]["middle_log_ratio"]
        self.assertEqual(ratio["samples"], 3)
        self.assertLessEqual(ratio["low"], ratio["mean"])
        self.assertGreaterEqual(ratio["high"], ratio["mean"])
        # The same statistics over the context alone (positions 1..11, the target's own left out).
        context = compared[2]["context"]
        self.assertAlmostEqual(sum(context[band]["mean"] for band in ("leading", "middle", "trailing")), 1.0, places=12)
        self.assertNotAlmostEqual(context["middle"]["mean"], compared[2]["middle"]["mean"], places=6)
        self.assertEqual(context["middle_log_ratio"]["samples"], 3)
        self.assertEqual(compared[1]["context"]["middle_log_ratio"]["mean"], 0.0)
        self.assertNotIn("middle_log_ratio", compared[0]["context"])
        table = self.cli("jobs", "result", job["id"], "--format", "table")
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("tiny-gpt2-seed5", table.stdout)
        self.assertIn("(reference)", table.stdout)
        self.assertIn("the context alone, positions 1..T-1", table.stdout)

    def test_a_comparison_job_refuses_models_that_cannot_share_the_inputs(self):
        self.cli_json("models", "register", "tiny-gpt2-vocab50", *[v if v != str(VOCAB) else "50" for v in TINY_GPT2])
        refused = self.cli("jobs", "submit", "--model", "tiny-gpt2", "--versus", "tiny-gpt2-vocab50", "--length", "8")
        self.assertCliError(refused, "INVALID_ARGUMENT", "INVALID_ARGUMENT")
        self.assertIn("versus[0]", refused.stderr)
        self.assertIn("tiny-gpt2", refused.stderr)
        self.assertIn("vocabulary of at least 100", refused.stderr)
        beyond = self.cli("jobs", "submit", "--model", "tiny-gpt2", "--versus", "init,no-such-model", "--length", "8")
        self.assertCliError(beyond, "NOT_FOUND", "MODEL_NOT_FOUND")
        self.assertIn("versus[1]", beyond.stderr)

    def test_the_same_request_id_submitted_twice_returns_the_same_job(self):
        flags = ["--model", "tiny-gpt2", "--length", "8", "--samples", "1", "--seed", "4", "--request-id", "submit-once"]
        first = self.submit(*flags)
        second = self.submit(*flags)
        self.assertEqual(second["id"], first["id"])
        self.assertEqual(second["request_id"], "submit-once")
        matching = [j for j in self.cli_json("jobs", "list") if j["request_id"] == "submit-once"]
        self.assertEqual(len(matching), 1, matching)
        self.assertEqual(watch_job(self.server, first["id"])["state"], "succeeded")

    def test_cancelling_a_queued_job_ends_it_cancelled_at_once(self):
        running = self.start_slow_job()
        queued = self.start_slow_job("--priority", "-10")
        wait_for_job(self.server, running["id"], lambda j: j["state"] == "running", "running")
        self.assertEqual(self.cli_json("jobs", "get", queued["id"])["state"], "queued")
        cancelled = self.cli_json("jobs", "cancel", queued["id"])
        self.assertEqual(cancelled["state"], "cancelled")
        self.assertEqual(cancelled["samples_done"], 0)
        # Cancelling is idempotent.
        self.assertEqual(self.cli_json("jobs", "cancel", queued["id"])["state"], "cancelled")
        self.assertEqual(watch_job(self.server, queued["id"])["state"], "cancelled")
        self.assertCliError(self.cli("jobs", "result", queued["id"]), "FAILED_PRECONDITION", "JOB_NOT_FINISHED")
        self.assertIn(self.cli_json("jobs", "get", running["id"])["state"], ("running", "succeeded"))

    def test_cancelling_a_running_job_ends_it_cancelled_at_its_next_chunk(self):
        job = self.start_slow_job()
        wait_for_job(self.server, job["id"], lambda j: j["state"] == "running", "running")
        answer = self.cli_json("jobs", "cancel", job["id"])
        self.assertIn(answer["state"], ("cancelling", "cancelled"))
        final = watch_job(self.server, job["id"])
        self.assertEqual(final["state"], "cancelled", final)
        self.assertLess(final["samples_done"], SLOW_SAMPLES)
        self.assertCliError(self.cli("jobs", "result", job["id"]), "FAILED_PRECONDITION", "JOB_NOT_FINISHED")

    def test_jobs_rm_deletes_a_finished_job(self):
        job = self.submit("--model", "tiny-gpt2", "--length", "8", "--samples", "1", "--seed", "5", "--wait")
        self.assertEqual(job["state"], "succeeded")
        self.assertExit(self.cli("jobs", "rm", job["id"]), 0)
        self.assertCliError(self.cli("jobs", "get", job["id"]), "NOT_FOUND", "JOB_NOT_FOUND")
        self.assertCliError(self.cli("jobs", "result", job["id"]), "NOT_FOUND", "JOB_NOT_FOUND")
        self.assertNotIn(job["id"], [j["id"] for j in self.cli_json("jobs", "list")])

    def test_jobs_rm_of_a_running_job_fails_with_job_not_finished_unless_forced(self):
        job = self.start_slow_job()
        wait_for_job(self.server, job["id"], lambda j: j["state"] == "running", "running")
        self.assertCliError(self.cli("jobs", "rm", job["id"]), "FAILED_PRECONDITION", "JOB_NOT_FINISHED")
        self.assertIn(self.cli_json("jobs", "get", job["id"])["state"], ("running", "succeeded"))
        self.assertExit(self.cli("jobs", "rm", job["id"], "--force"), 0)
        self.assertCliError(self.cli("jobs", "get", job["id"]), "NOT_FOUND", "JOB_NOT_FOUND")

    def test_the_result_of_an_unfinished_job_fails_with_job_not_finished(self):
        job = self.start_slow_job()
        self.assertCliError(self.cli("jobs", "result", job["id"]), "FAILED_PRECONDITION", "JOB_NOT_FINISHED")
        wait_for_job(self.server, job["id"], lambda j: j["state"] == "running", "running")
        self.assertCliError(self.cli("jobs", "result", job["id"]), "FAILED_PRECONDITION", "JOB_NOT_FINISHED")

    def test_an_unknown_job_id_fails_with_job_not_found(self):
        for command in [["get"], ["result"], ["cancel"], ["rm"], ["rm", "--force"], ["watch"]]:
            with self.subTest(command=command[0]):
                result = self.cli("jobs", command[0], "j-000000000000", *command[1:])
                self.assertCliError(result, "NOT_FOUND", "JOB_NOT_FOUND")

    def test_submitting_on_an_unknown_model_fails_with_model_not_found(self):
        result = self.cli("jobs", "submit", "--model", "no-such-model", "--length", "8")
        self.assertCliError(result, "NOT_FOUND", "MODEL_NOT_FOUND")

    def test_a_length_of_zero_or_beyond_the_models_max_positions_fails_with_invalid_length(self):
        for length in [0, MAX_POSITIONS + 1]:
            with self.subTest(length=length):
                result = self.cli("jobs", "submit", "--model", "tiny-gpt2", "--length", length, "--samples", "1")
                self.assertCliError(result, "INVALID_ARGUMENT", "INVALID_LENGTH")

    def test_float16_on_a_cpu_only_server_fails_with_invalid_argument(self):
        result = self.cli("jobs", "submit", "--model", "tiny-gpt2", "--length", "8", "--samples", "1",
                          "--dtype", "float16")
        self.assertCliError(result, "INVALID_ARGUMENT", "INVALID_ARGUMENT")
        self.assertIn("dtype", result.stderr)

    def test_requesting_cuda_on_a_cpu_only_server_fails_with_device_unavailable(self):
        result = self.cli("jobs", "submit", "--model", "tiny-gpt2", "--length", "8", "--samples", "1",
                          "--device", "cuda")
        self.assertCliError(result, "FAILED_PRECONDITION", "DEVICE_UNAVAILABLE")

    def test_refused_submissions_leave_no_job_behind(self):
        before = len(self.cli_json("jobs", "list"))
        self.cli("jobs", "submit", "--model", "no-such-model", "--length", "8")
        self.cli("jobs", "submit", "--model", "tiny-gpt2", "--length", "0")
        self.assertEqual(len(self.cli_json("jobs", "list")), before)

    def test_malformed_flags_exit_with_usage_code_two(self):
        for args in [["jobs", "submit", "--model", "tiny-gpt2", "--length", "8", "--method", "bogus"],
                     ["jobs", "submit", "--length", "8"],
                     ["jobs", "list", "--state", "bogus"],
                     ["jobs", "get"],
                     ["models", "register"]]:
            with self.subTest(args=args):
                self.assertExit(self.cli(*args), 2)


class QueueLimitTest(ServerTestCase):
    SERVER_ARGS = ("--max-queued", "1")

    def test_a_full_queue_refuses_submissions_with_queue_full(self):
        register_model(self.server, "slow-gpt2", SLOW_MODEL)
        # The first job is running before the others come, so exactly one queue slot is left:
        # the second submission takes it and the third finds the queue full.
        running = self.start_slow_job()
        wait_for_job(self.server, running["id"], lambda j: j["state"] == "running", "running")
        second = self.cli("jobs", "submit", "--model", "slow-gpt2", *SLOW_JOB, "--format", "json")
        third = self.cli("jobs", "submit", "--model", "slow-gpt2", *SLOW_JOB, "--format", "json")
        for result in (second, third):
            if result.returncode == 0:
                self.addCleanup(self.cancel_and_wait, json.loads(result.stdout)["id"])
        self.assertExit(second, 0)
        queued_id = json.loads(second.stdout)["id"]
        self.assertCliError(third, "RESOURCE_EXHAUSTED", "QUEUE_FULL")
        # Cancelling the queued job makes room again.
        queued = [j["id"] for j in self.cli_json("jobs", "list", "--state", "queued")]
        self.assertEqual(queued, [queued_id])
        self.assertEqual(self.cli_json("jobs", "cancel", queued_id)["state"], "cancelled")
        again = self.submit("--model", "slow-gpt2", *SLOW_JOB)
        self.addCleanup(self.cancel_and_wait, again["id"])
        self.assertEqual(again["state"], "queued")


# ---------------------------------------------------------------------------------------------
# Durability


class DurabilityTest(ServerTestCase):
    reference = None  # Result of an uninterrupted SLOW_JOB (computed once).

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        register_model(cls.fixture.server, "slow-gpt2", SLOW_MODEL)

    def uninterrupted_result(self):
        if DurabilityTest.reference is None:
            job = self.submit("--model", "slow-gpt2", *SLOW_JOB)
            final = watch_job(self.server, job["id"])
            self.assertEqual((final["state"], final["attempt"]), ("succeeded", 1), final)
            DurabilityTest.reference = self.cli_json("jobs", "result", job["id"])
        return DurabilityTest.reference

    def assertSameResult(self, resumed, reference):
        self.assertEqual(resumed["tokens"], reference["tokens"])
        self.assertEqual(len(resumed["sq_norm_mean"]), SLOW_LENGTH)
        for j, (mine, theirs) in enumerate(zip(resumed["sq_norm_mean"], reference["sq_norm_mean"])):
            self.assertLessEqual(abs(mine - theirs), RESULT_REL_TOL * abs(theirs),
                                 "sq_norm_mean[%d]: resumed %r, uninterrupted %r" % (j, mine, theirs))

    def finish_after_restart(self, job_id):
        final = watch_job(self.server, job_id)
        self.assertEqual(final["state"], "succeeded", final)
        self.assertGreaterEqual(final["attempt"], 2, final)
        self.assertEqual(final["progress"], 1)
        result = self.cli_json("jobs", "result", job_id)
        self.assertGreaterEqual(result["job"]["attempt"], 2)
        self.assertGreaterEqual(result["job"]["resumed_samples"], 1, "the checkpointed samples must be reused")
        return result

    def test_a_job_interrupted_by_kill_9_completes_after_a_restart_with_the_uninterrupted_result(self):
        job = self.submit("--model", "slow-gpt2", *SLOW_JOB)
        wait_until_running_with_a_sample(self.server, job["id"])
        self.assertEqual(self.server.kill(), -signal.SIGKILL)
        self.fixture.restart()
        self.assertIn("re-queued 1 jobs interrupted by the previous run", self.server.log)
        self.assertIn(get_job(self.server, job["id"])["state"], ("queued", "running", "succeeded"))
        resumed = self.finish_after_restart(job["id"])
        self.assertSameResult(resumed, self.uninterrupted_result())

    def test_a_job_running_at_sigterm_is_requeued_and_completes_after_a_restart(self):
        job = self.submit("--model", "slow-gpt2", *SLOW_JOB)
        wait_until_running_with_a_sample(self.server, job["id"])
        watcher = subprocess.Popen([ARGS.cli_binary, "--server", self.server.address, "jobs", "watch", job["id"]],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.3)  # Let the watch stream open.
            self.fixture.stop()  # SIGTERM: exit 0 and "stopped cleanly", or AssertionError.
            _, watch_err = watcher.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait(5)
        self.assertEqual(watcher.returncode, 1, watch_err)
        self.assertRegex(watch_err, r"error: UNAVAILABLE \[SHUTTING_DOWN\]")
        self.fixture.restart()
        resumed = self.finish_after_restart(job["id"])
        self.assertSameResult(resumed, self.uninterrupted_result())

    def test_registered_models_and_finished_jobs_survive_a_restart(self):
        job = self.submit("--model", "slow-gpt2", "--length", "4", "--samples", "1", "--seed", "9", "--wait")
        self.assertEqual(job["state"], "succeeded")
        before = self.cli_json("jobs", "result", job["id"])
        self.fixture.stop()
        self.fixture.restart()
        self.assertEqual(self.cli_json("models", "get", "slow-gpt2")["state"], "ready")
        after_job = self.cli_json("jobs", "get", job["id"])
        self.assertEqual((after_job["state"], after_job["attempt"]), ("succeeded", 1))
        self.assertEqual(self.cli_json("jobs", "result", job["id"]), before)


# ---------------------------------------------------------------------------------------------
# A Python gRPC client


ALLOWED_TRANSITIONS = {"JOB_STATE_QUEUED": {"JOB_STATE_RUNNING", "JOB_STATE_CANCELLED"},
                       "JOB_STATE_RUNNING": {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLING",
                                             "JOB_STATE_QUEUED"},
                       "JOB_STATE_CANCELLING": {"JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}}


def reachable(transitions):
    """Per state, every state reachable from it in one or more transitions: what a watcher, which
    looks at the job every 100 ms, may see next (a state entered and left between two looks is
    skipped, job_service.proto WatchJob); terminal states reach nothing."""
    closure = {}
    for start in transitions:
        seen, todo = set(), list(transitions[start])
        while todo:
            state = todo.pop()
            if state not in seen:
                seen.add(state)
                todo.extend(transitions.get(state, ()))
        closure[start] = seen
    return closure


WATCHED_TRANSITIONS = reachable(ALLOWED_TRANSITIONS)


class GrpcClientTest(ServerTestCase):
    pb = None
    LENGTH, SAMPLES = 12, 3

    @classmethod
    def setUpClass(cls):
        global STUB_DIR
        import grpc
        cls.grpc = grpc
        if GrpcClientTest.pb is None:
            STUB_DIR = tempfile.mkdtemp(prefix="posbias-jobs-stubs-")
            GrpcClientTest.pb = generate_stubs(STUB_DIR, ARGS.proto_dir)
        super().setUpClass()
        cls.channel = grpc.insecure_channel(cls.fixture.server.address)
        cls.addClassCleanup(cls.channel.close)
        pb = cls.pb
        cls.models = pb.model_grpc.ModelServiceStub(cls.channel)
        cls.jobs = pb.job_grpc.JobServiceStub(cls.channel)
        overrides = pb.model.ModelArchitectureOverrides(num_layers=2, hidden_size=32, num_heads=2, mlp_width=64,
                                                        vocab_size=VOCAB, max_positions=MAX_POSITIONS)
        cls.model = cls.models.RegisterModel(pb.model.RegisterModelRequest(
            name="py-gpt2", preset=pb.model.PresetSource(preset="gpt2", overrides=overrides, init_seed=1)),
            timeout=RPC_TIMEOUT_S)
        spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(
            model="py-gpt2", sequence_length=cls.LENGTH, samples=cls.SAMPLES,
            method=pb.job.JACOBIAN_METHOD_EXACT,
            input=pb.job.JacobianInput(random_tokens=pb.job.RandomTokensInput(seed=3))))
        cls.submitted = cls.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec, request_id="py-1"), timeout=RPC_TIMEOUT_S)
        cls.watched = [m.job for m in cls.jobs.WatchJob(pb.job.WatchJobRequest(id=cls.submitted.id),
                                                        timeout=JOB_TIMEOUT_S)]

    def state_name(self, job):
        return self.pb.job.JobState.Name(job.state)

    def upload(self, name, data, sha256, config_json, chunk=1000):
        pb = self.pb
        def messages():
            yield pb.model.UploadModelRequest(metadata=pb.model.UploadModelMetadata(
                name=name, config_json=config_json, total_bytes=len(data), sha256=sha256))
            for start in range(0, len(data), chunk):
                yield pb.model.UploadModelRequest(chunk=data[start:start + chunk])
        return self.models.UploadModel(messages(), timeout=RPC_TIMEOUT_S)

    def exported(self):
        data = b"".join(m.chunk for m in self.models.ExportModel(self.pb.model.ExportModelRequest(name="py-gpt2"),
                                                                  timeout=RPC_TIMEOUT_S) if m.WhichOneof("part") == "chunk")
        header = next(iter(self.models.ExportModel(self.pb.model.ExportModelRequest(name="py-gpt2"),
                                                   timeout=RPC_TIMEOUT_S))).header
        return data, header

    def test_an_uploaded_checkpoint_with_the_right_digest_registers_the_same_weights(self):
        import hashlib
        data, header = self.exported()
        self.assertEqual(hashlib.sha256(data).hexdigest(), header.sha256)
        model = self.upload("py-uploaded", data, hashlib.sha256(data).hexdigest(), header.config_json)
        self.assertEqual(model.state, self.pb.model.MODEL_STATE_READY)
        self.assertEqual(model.weights_sha256, header.sha256)
        self.assertEqual(model.parameter_count, self.model.parameter_count)

    def test_an_upload_whose_bytes_do_not_match_the_digest_is_refused(self):
        data, header = self.exported()
        with self.assertRaises(self.grpc.RpcError) as context:
            self.upload("py-corrupt", data[:-1] + b"\x00", "0" * 64, header.config_json)
        self.assertEqual(context.exception.code(), self.grpc.StatusCode.INVALID_ARGUMENT)
        metadata = dict(context.exception.trailing_metadata())
        self.assertEqual(metadata.get("posbias-error-reason"), "CHECKSUM_MISMATCH")
        with self.assertRaises(self.grpc.RpcError):  # Nothing was registered.
            self.models.GetModel(self.pb.model.GetModelRequest(name="py-corrupt"), timeout=RPC_TIMEOUT_S)

    def test_register_model_returns_a_ready_gpt2_model(self):
        pb = self.pb
        self.assertEqual(self.model.name, "py-gpt2")
        self.assertEqual(self.model.state, pb.model.MODEL_STATE_READY)
        self.assertEqual(self.model.family, pb.model.MODEL_FAMILY_GPT2)
        self.assertEqual((self.model.config.num_layers, self.model.config.hidden_size), (2, 32))
        self.assertGreater(self.model.parameter_count, 0)
        self.assertEqual(self.models.GetModel(pb.model.GetModelRequest(name="py-gpt2"), timeout=RPC_TIMEOUT_S).name,
                         "py-gpt2")

    def test_submit_job_returns_a_queued_job_with_its_resolved_spec(self):
        job = self.submitted
        self.assertEqual(self.state_name(job), "JOB_STATE_QUEUED")
        self.assertEqual(job.spec.jacobian_norm.samples, self.SAMPLES)
        self.assertEqual(job.spec.jacobian_norm.input.random_tokens.seed, 3)
        self.assertEqual(job.request_id, "py-1")

    def test_a_submitted_job_is_on_its_first_attempt(self):
        # job_service.proto Job.attempt: "1 at submission, incremented each time the job is re-queued".
        self.assertEqual(self.submitted.attempt, 1)

    def test_watch_job_follows_the_job_to_a_terminal_state_without_going_backwards(self):
        self.assertGreaterEqual(len(self.watched), 1)
        self.assertEqual(self.watched[-1].id, self.submitted.id)
        self.assertEqual(self.state_name(self.watched[-1]), "JOB_STATE_SUCCEEDED")
        self.assertEqual(self.watched[-1].progress.fraction, 1)
        previous = None
        for job in self.watched:
            state = self.state_name(job)
            self.assertTrue(0 <= job.progress.fraction <= 1, job)
            if previous is not None:
                before = self.state_name(previous)
                if state != before:
                    self.assertIn(state, WATCHED_TRANSITIONS.get(before, set()), "%s -> %s" % (before, state))
                if job.attempt == previous.attempt and state == before:
                    self.assertGreaterEqual(job.progress.fraction, previous.progress.fraction)
                self.assertGreaterEqual(job.attempt, previous.attempt)
            previous = job
        for job in self.watched[:-1]:
            self.assertNotIn(self.state_name(job), ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"))

    def test_get_job_result_carries_a_report_json_and_the_per_position_profile(self):
        pb = self.pb
        response = self.jobs.GetJobResult(pb.job.GetJobResultRequest(id=self.submitted.id), timeout=RPC_TIMEOUT_S)
        self.assertEqual(response.id, self.submitted.id)
        report = json.loads(response.report_json)
        self.assertEqual(len(report["sq_norm_mean"]), self.LENGTH)
        self.assertEqual(len(report["tokens"]), self.SAMPLES)
        result = response.jacobian_norm
        self.assertEqual((result.sequence_length, result.samples, result.num_layers), (self.LENGTH, self.SAMPLES, 2))
        self.assertEqual(list(result.positions), list(range(1, self.LENGTH + 1)))
        self.assertEqual(list(result.profile.stats.sq_norm_mean), report["sq_norm_mean"])
        self.assertAlmostEqual(sum(result.profile.stats.profile), 1.0, places=12)
        cli_report = self.cli_json("jobs", "result", self.submitted.id)
        self.assertEqual(cli_report["sq_norm_mean"], report["sq_norm_mean"])

    def test_a_retried_submission_with_the_same_request_id_returns_the_same_job(self):
        pb = self.pb
        again = self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=self.submitted.spec, request_id="py-1"),
                                    timeout=RPC_TIMEOUT_S)
        self.assertEqual(again.id, self.submitted.id)
        self.assertEqual(self.state_name(again), "JOB_STATE_SUCCEEDED")

    def test_errors_carry_the_posbias_error_reason_in_trailing_metadata(self):
        pb, grpc = self.pb, self.grpc
        cases = [(lambda: self.jobs.GetJob(pb.job.GetJobRequest(id="j-000000000000"), timeout=RPC_TIMEOUT_S),
                  grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND"),
                 (lambda: self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=pb.job.JobSpec(
                     jacobian_norm=pb.job.JacobianNormSpec(model="nope", sequence_length=4))), timeout=RPC_TIMEOUT_S),
                  grpc.StatusCode.NOT_FOUND, "MODEL_NOT_FOUND"),
                 (lambda: self.models.GetModel(pb.model.GetModelRequest(name="nope"), timeout=RPC_TIMEOUT_S),
                  grpc.StatusCode.NOT_FOUND, "MODEL_NOT_FOUND")]
        for call, code, reason in cases:
            with self.subTest(reason=reason):
                with self.assertRaises(grpc.RpcError) as context:
                    call()
                self.assertEqual(context.exception.code(), code, context.exception.details())
                metadata = dict(context.exception.trailing_metadata() or ())
                self.assertEqual(metadata.get("posbias-error-reason"), reason, metadata)

    def test_a_queued_job_reports_its_queue_position(self):
        # job_service.proto Job.queue_position: "QUEUED only: number of queued jobs that will run
        # before this one ... 0 means next".
        pb = self.pb
        overrides = pb.model.ModelArchitectureOverrides(num_layers=4, hidden_size=256, num_heads=4, mlp_width=512,
                                                        vocab_size=VOCAB, max_positions=MAX_POSITIONS)
        self.models.RegisterModel(pb.model.RegisterModelRequest(
            name="py-slow", preset=pb.model.PresetSource(preset="gpt2", overrides=overrides, init_seed=1),
            request_id="py-slow"), timeout=RPC_TIMEOUT_S)
        ids = []
        for priority in [0, -10]:
            spec = pb.job.JobSpec(priority=priority, jacobian_norm=pb.job.JacobianNormSpec(
                model="py-slow", sequence_length=SLOW_LENGTH, samples=SLOW_SAMPLES))
            ids.append(self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S).id)
            self.addCleanup(self.cancel_and_wait, ids[-1])
        running, queued = ids
        wait_for_job(self.server, running, lambda j: j["state"] == "running", "running")
        job = self.jobs.GetJob(pb.job.GetJobRequest(id=queued), timeout=RPC_TIMEOUT_S)
        self.assertEqual(self.state_name(job), "JOB_STATE_QUEUED")
        self.assertTrue(job.HasField("queue_position"), job)
        self.assertEqual(job.queue_position, 0)

    def test_health_reports_the_job_and_model_services_serving(self):
        pb = self.pb
        health = pb.health_grpc.HealthStub(self.channel)
        for service in ["posbias.v1.JobService", "posbias.v1.ModelService", ""]:
            with self.subTest(service=service):
                response = health.Check(pb.health.HealthCheckRequest(service=service), timeout=RPC_TIMEOUT_S)
                self.assertEqual(response.status, pb.health.HealthCheckResponse.SERVING)


# ---------------------------------------------------------------------------------------------
# Metrics


class JobMetricsTest(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        server = cls.fixture.server
        register_model(server, "tiny-gpt2", TINY_GPT2)
        flags = ["--model", "tiny-gpt2", "--length", "8", "--samples", "2", "--seed", "3", "--request-id", "metrics-1"]
        cls.job = cli_json(server, "jobs", "submit", *flags, "--wait", timeout=JOB_TIMEOUT_S)
        cls.retry = cli_json(server, "jobs", "submit", *flags)  # Idempotent retry: not a new job.
        cls.text = scrape_metrics(server)
        cls.samples = metric_samples(cls.text)

    def test_the_job_ran_and_its_retry_returned_it(self):
        self.assertEqual(self.job["state"], "succeeded")
        self.assertEqual(self.retry["id"], self.job["id"])

    def test_submitted_jobs_are_counted_once_despite_the_retry(self):
        self.assertEqual(sample_value(self.samples, "posbias_jobs_submitted_total"), 1, self.text)

    def test_finished_jobs_are_counted_by_outcome(self):
        self.assertEqual(sample_value(self.samples, "posbias_jobs_finished_total", outcome="succeeded"), 1, self.text)

    def test_the_jobs_gauge_counts_the_store_by_state(self):
        self.assertEqual(sample_value(self.samples, "posbias_jobs", state="succeeded"), 1, self.text)
        for state in ["queued", "running", "cancelling", "failed", "cancelled"]:
            self.assertEqual(sample_value(self.samples, "posbias_jobs", state=state), 0, state)

    def test_run_time_and_queue_wait_histograms_observed_the_job(self):
        for family in ["posbias_job_run_seconds", "posbias_job_queue_wait_seconds"]:
            with self.subTest(family=family):
                self.assertIn(family + "_bucket", self.text)
                self.assertEqual(sample_value(self.samples, family + "_bucket", le="+Inf"), 1, self.text)
                self.assertEqual(sample_value(self.samples, family + "_count"), 1)
                self.assertGreaterEqual(sample_value(self.samples, family + "_sum"), 0)

    def test_the_vjp_rate_of_the_last_exact_job_is_exported(self):
        # metrics: posbias_jacobian_vjps_per_second, "Vector-Jacobian products per second of the last
        # finished job attempt". The exact job did width * samples = 64 VJPs.
        self.assertGreater(sample_value(self.samples, "posbias_jacobian_vjps_per_second"), 0)

    def test_building_a_registered_model_is_timed(self):
        self.assertGreaterEqual(sample_value(self.samples, "posbias_model_load_seconds_count"), 1)

    def test_job_rpcs_are_counted_per_method(self):
        self.assertGreaterEqual(sample_value(self.samples, "posbias_rpc_requests_total",
                                             method="/posbias.v1.JobService/SubmitJob", code="OK"), 2)


# ---------------------------------------------------------------------------------------------


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--cli-binary", required=True)
    parser.add_argument("--proto-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    for path in [ARGS.server_binary, ARGS.cli_binary, PROTOC, GRPC_PYTHON_PLUGIN]:
        if not os.access(path, os.X_OK):
            parser.error("%s is not an executable file" % path)
    for name in ["posbias/v1/job_service.proto", "grpc/health/v1/health.proto"]:
        if not os.path.isfile(os.path.join(ARGS.proto_dir, name)):
            parser.error("%s has no %s" % (ARGS.proto_dir, name))
    ARGS.server_binary = os.path.abspath(ARGS.server_binary)
    ARGS.cli_binary = os.path.abspath(ARGS.cli_binary)
    ARGS.proto_dir = os.path.abspath(ARGS.proto_dir)
    start_watchdog(WATCHDOG_S, "jobs_test.py")
    try:
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        for server in list(ServerProcess.live):
            server.kill()
        if STUB_DIR:
            shutil.rmtree(STUB_DIR, ignore_errors=True)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
