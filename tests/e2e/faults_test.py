#!/usr/bin/python3
"""Fault tests, black-box: kill -9, a poison job, a full disk and a PostgreSQL restart.

Usage (Debian's Python with python3-grpcio and python3-protobuf; protoc and grpc_python_plugin from
/usr/bin; the PostgreSQL test needs the ctest fixture, tests/postgres/postgres_fixture.sh, or
POSBIAS_TEST_POSTGRES_URI_FILE pointing at the fixture's `uri` file; the full-disk test needs root
for `mount -t tmpfs`):

    /usr/bin/python3 tests/e2e/faults_test.py --server-binary build/release/server/posbias-server \
        --proto-dir proto [TestClass ...]

What each test proves:
- KillDuringRegistryWritesTest: the server is killed with SIGKILL in a loop while clients register
  tiny presets, and separately while uploads stream. After every restart on the same data dir,
  models.json parses, every registration acknowledged OK is listed READY, no model is LOADING, no
  temporary file (models.json.tmp.*, uploads/.staging-*, uploads/.export-*, uploads/.hash-*) is
  left once the restarted server is up, and every call the kill interrupted succeeds (READY) when
  the client retries it with the same request_id.
- KillDuringCheckpointsTest: a job of many small samples (a checkpoint after every sample) is
  killed several times while it runs; it resumes each time and ends SUCCEEDED with every sample and
  the result of an uninterrupted run of the same seeded job.
- PoisonJobTest: measurements run inside posbias-server (server/runners/, no subprocess), so a
  measurement that crashes takes the process down with it; the test makes that happen by killing
  the server whenever the poison job is RUNNING. With --max-lost-attempts N the poison job ends
  FAILED / ATTEMPTS_EXHAUSTED after N lost attempts, and a job submitted alongside (never running
  at a kill) ends SUCCEEDED on its first attempt.
- FullDiskTest: the data dir is a 48 MiB tmpfs (--min-free-disk-mib 2 where the server has the
  flag). With less free space than a checkpoint's size an upload of it is refused; once filler
  files have taken all the space, registrations and submissions are refused too: RESOURCE_EXHAUSTED
  with a posbias-error-reason trailer (INSUFFICIENT_STORAGE once common.proto defines it). The server
  stays up; after the fillers are deleted every job and model accepted before is there, every
  accepted job ends SUCCEEDED, nothing temporary is left, also after a restart. Where mounting is
  not allowed the test is skipped (exit code SKIP_EXIT_CODE when nothing else ran).
- PoisonJobOnPostgresTest: the same on the shared store, where lost attempts are expired leases
  reaped by the replicas: an API replica and two worker replicas; the worker holding the poison job
  is killed once per attempt and started again; the job ends FAILED / ATTEMPTS_EXHAUSTED after N
  attempts while the other worker goes on finishing other jobs, all of which end SUCCEEDED.
- PostgresRestartTest: two replicas share the fixture's PostgreSQL; while clients submit and poll,
  PostgreSQL is stopped for a few seconds and started again. Calls in the gap fail with
  UNAVAILABLE (nothing else), no replica crashes, and every job whose SubmitJob returned OK ends
  SUCCEEDED.
"""

import argparse
import glob
import hashlib
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from posbias_server import GRPC_PYTHON_PLUGIN, PROTOC, ServerProcess, generate_stubs  # noqa: E402

ARGS = None
PB = None         # Generated stubs (main()).
GRPC = None       # The grpc module (main()).
STUB_DIR = None

MOUNTS = []       # tmpfs mount points still mounted (unmounted by the watchdog too).

SKIP_EXIT_CODE = 77   # Every selected test was skipped (no tmpfs mount allowed, no PostgreSQL).
WATCHDOG_S = 380
RPC_TIMEOUT_S = 30
JOB_TIMEOUT_S = 120
POLL_S = 0.05
RESULT_REL_TOL = 1e-9

# Temporary files the server may leave while it writes; none may survive a start-up.
TEMPORARY_PATTERNS = ["models.json.tmp.*", "uploads/.staging-*", "uploads/.export-*", "uploads/.hash-*",
                      "uploads/*.tmp.*"]


def overrides(**fields):
    return PB.model.ModelArchitectureOverrides(**fields)


# A model whose samples take about 0.1 s each on one core: many checkpoints per second.
SMALL_STEPS = dict(num_layers=2, hidden_size=128, num_heads=4, mlp_width=256, vocab_size=256, max_positions=64)
# A model whose jobs take a few seconds (about 0.4 s per sample of L = 24).
SLOW = dict(num_layers=4, hidden_size=256, num_heads=4, mlp_width=512, vocab_size=256, max_positions=64)
# The checkpoint uploaded in the kill loop: about 15 MB of float32.
UPLOADED = dict(num_layers=4, hidden_size=256, num_heads=4, mlp_width=1024, vocab_size=2048, max_positions=64)


def code_name(error):
    return error.code().name if hasattr(error, "code") and error.code() is not None else str(error)


def reason_of(error):
    try:
        return dict(error.trailing_metadata() or ()).get("posbias-error-reason")
    except Exception:  # noqa: BLE001 (a locally made error has no trailers)
        return None


def leftover_temporaries(data_dir):
    found = []
    for pattern in TEMPORARY_PATTERNS:
        found += glob.glob(os.path.join(data_dir, pattern))
    return sorted(os.path.relpath(path, data_dir) for path in found)


class Client:
    """gRPC stubs on one server."""

    def __init__(self, server):
        self.channel = GRPC.insecure_channel(server.address)
        self.models = PB.model_grpc.ModelServiceStub(self.channel)
        self.jobs = PB.job_grpc.JobServiceStub(self.channel)
        self.health = PB.health_grpc.HealthStub(self.channel)

    def close(self):
        self.channel.close()

    def register(self, name, fields, seed=1, timeout=RPC_TIMEOUT_S):
        return self.models.RegisterModel(PB.model.RegisterModelRequest(
            name=name, preset=PB.model.PresetSource(preset="gpt2", overrides=overrides(**fields), init_seed=seed)),
            timeout=timeout)

    def register_tiny(self, name, seed, request_id="", timeout=RPC_TIMEOUT_S):
        return self.models.RegisterModel(PB.model.RegisterModelRequest(
            name=name, preset=PB.model.PresetSource(preset="gpt2-tiny", init_seed=seed), request_id=request_id),
            timeout=timeout)

    def export(self, name):
        header, chunks = None, []
        for message in self.models.ExportModel(PB.model.ExportModelRequest(name=name), timeout=120):
            if message.WhichOneof("part") == "header":
                header = message.header
            else:
                chunks.append(message.chunk)
        return header, b"".join(chunks)

    def upload(self, name, data, config_json, sha256=None, total_bytes=None, chunk=64 * 1024, request_id="",
               timeout=120):
        def messages():
            yield PB.model.UploadModelRequest(metadata=PB.model.UploadModelMetadata(
                name=name, config_json=config_json, request_id=request_id,
                total_bytes=len(data) if total_bytes is None else total_bytes,
                sha256=hashlib.sha256(data).hexdigest() if sha256 is None else sha256))
            for start in range(0, len(data), chunk):
                yield PB.model.UploadModelRequest(chunk=data[start:start + chunk])
        return self.models.UploadModel(messages(), timeout=timeout)

    def list_models(self):
        models, token = [], ""
        while True:
            page = self.models.ListModels(PB.model.ListModelsRequest(page_size=100, page_token=token),
                                          timeout=RPC_TIMEOUT_S)
            models += list(page.models)
            token = page.next_page_token
            if not token:
                return models

    def submit(self, model, length, samples, seed, priority=0, request_id="", timeout=RPC_TIMEOUT_S):
        spec = PB.job.JobSpec(priority=priority, jacobian_norm=PB.job.JacobianNormSpec(
            model=model, sequence_length=length, samples=samples, method=PB.job.JACOBIAN_METHOD_EXACT,
            input=PB.job.JacobianInput(random_tokens=PB.job.RandomTokensInput(seed=seed))))
        return self.jobs.SubmitJob(PB.job.SubmitJobRequest(spec=spec, request_id=request_id), timeout=timeout)

    def get(self, job_id, timeout=RPC_TIMEOUT_S):
        return self.jobs.GetJob(PB.job.GetJobRequest(id=job_id), timeout=timeout)

    def result(self, job_id):
        response = self.jobs.GetJobResult(PB.job.GetJobResultRequest(id=job_id), timeout=RPC_TIMEOUT_S)
        return json.loads(response.report_json)

    def serving(self):
        response = self.health.Check(PB.health.HealthCheckRequest(service=""), timeout=10)
        return response.status == PB.health.HealthCheckResponse.SERVING


def state_name(job):
    return PB.job.JobState.Name(job.state)


TERMINAL = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")


class FaultTestCase(unittest.TestCase):
    """A temporary root with a data dir; servers started on it are stopped (or killed) at the end."""

    maxDiff = None

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="posbias-faults-")
        self.addCleanup(shutil.rmtree, self.root, True)
        self.data_dir = os.path.join(self.root, "data")
        self.servers = []
        self.clients = []

    def tearDown(self):
        for client in self.clients:
            client.close()
        failures = []
        for server in self.servers:
            if server.returncode is None:
                code = server.stop()
                if code != 0:
                    failures.append("server exited with %s after SIGTERM; log:\n%s" % (code, server.log[-4000:]))
        if failures:
            self.fail("\n".join(failures))

    def start_server(self, *extra, data_dir=None):
        server = ServerProcess(ARGS.server_binary, ["--data-dir", data_dir or self.data_dir, "--cpu-threads", "1",
                                                    *extra]).start()
        self.servers.append(server)
        return server

    def wait_log(self, server, text, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in server.log:
                return True
            time.sleep(0.05)
        return False

    def client(self, server):
        client = Client(server)
        self.clients.append(client)
        return client

    def stop_cleanly(self, server):
        code = server.stop()
        self.assertEqual(code, 0, "server exited with %s after SIGTERM; log:\n%s" % (code, server.log[-4000:]))

    def wait_job(self, client, job_id, predicate, what, timeout=JOB_TIMEOUT_S, server=None):
        deadline = time.monotonic() + timeout
        job = None
        while time.monotonic() < deadline:
            try:
                job = client.get(job_id)
            except GRPC.RpcError as error:
                if error.code() != GRPC.StatusCode.UNAVAILABLE:
                    raise
                time.sleep(0.2)
                continue
            if predicate(job):
                return job
            time.sleep(POLL_S)
        self.fail("job %s: not %s within %d s; last seen %s%s" % (job_id, what, timeout, job,
                                                                 "\nserver log:\n" + server.log[-3000:] if server else ""))

    def wait_finished(self, client, job_id, timeout=JOB_TIMEOUT_S, server=None):
        return self.wait_job(client, job_id, lambda j: state_name(j) in TERMINAL, "finished", timeout, server)

    def assertSameResult(self, resumed, reference):
        self.assertEqual(resumed["tokens"], reference["tokens"])
        self.assertEqual(len(resumed["sq_norm_mean"]), len(reference["sq_norm_mean"]))
        for key in ("sq_norm_mean", "sq_norm_stderr"):
            for j, (mine, theirs) in enumerate(zip(resumed[key], reference[key])):
                self.assertLessEqual(abs(mine - theirs), RESULT_REL_TOL * abs(theirs),
                                     "%s[%d]: resumed %r, uninterrupted %r" % (key, j, mine, theirs))

    def assertRegistryIntact(self, client, acknowledged, context):
        """models.json parses, every acknowledged model is READY, nothing is LOADING, no temporaries."""
        index_path = os.path.join(self.data_dir, "models.json")
        if acknowledged:
            self.assertTrue(os.path.isfile(index_path), "%s: no models.json" % context)
        if os.path.isfile(index_path):
            with open(index_path) as file:
                try:
                    json.load(file)
                except ValueError as error:
                    self.fail("%s: models.json does not parse: %s" % (context, error))
        listed = {model.name: model for model in client.list_models()}
        for name, sha256 in sorted(acknowledged.items()):
            self.assertIn(name, listed, "%s: acknowledged model %s is gone" % (context, name))
            model = listed[name]
            self.assertEqual(PB.model.ModelState.Name(model.state), "MODEL_STATE_READY",
                             "%s: acknowledged model %s: %s" % (context, name, model))
            if sha256:
                self.assertEqual(model.weights_sha256, sha256, "%s: %s" % (context, name))
        # Reported as subtests: the test goes on to check what was kept and what a retry does.
        with self.subTest(check="no model LOADING", context=context):
            loading = [name for name, model in listed.items() if model.state == PB.model.MODEL_STATE_LOADING]
            self.assertEqual(loading, [], "%s: README: 'a restart never finds one LOADING'" % context)
        with self.subTest(check="no temporary files", context=context):
            self.assertEqual(leftover_temporaries(self.data_dir), [],
                             "%s: temporary files left after the restarted server started" % context)


# ---------------------------------------------------------------------------------------------
# kill -9 during registry writes


class KillDuringRegistryWritesTest(FaultTestCase):
    ROUNDS = 4

    def kill_loop(self, work, clients_per_round, context, min_s=0.4, max_s=1.2, setup=None):
        """Per round: clients call work(client, round, index, acknowledged) in a loop until the server
        is killed after a random delay; then a restart on the same data dir is checked."""
        rng = random.Random(11)
        acknowledged = {}  # name -> expected sha256 ('' when not checked)
        lock = threading.Lock()
        server = self.start_server()
        if setup:
            setup(self.client(server))
        for round_ in range(self.ROUNDS):
            stop = threading.Event()
            errors, interrupted = [], []

            def loop(index, round_=round_, stop=stop, errors=errors, interrupted=interrupted, server=server):
                client = Client(server)
                try:
                    i = 0
                    while not stop.is_set():
                        try:
                            name, sha256 = work(client, round_, index, i)
                            with lock:
                                acknowledged[name] = sha256
                        except GRPC.RpcError as error:
                            if stop.is_set() or error.code() == GRPC.StatusCode.UNAVAILABLE:
                                with lock:
                                    interrupted.append((round_, index, i))
                            else:
                                errors.append("%s: %s" % (code_name(error), error.details()))
                            time.sleep(0.01)
                        i += 1
                finally:
                    client.close()

            threads = [threading.Thread(target=loop, args=(n,), daemon=True) for n in range(clients_per_round)]
            for thread in threads:
                thread.start()
            time.sleep(rng.uniform(min_s, max_s))
            self.assertEqual(server.kill(), -9)
            stop.set()
            for thread in threads:
                thread.join(60)
            self.assertEqual(errors, [], "%s round %d: calls failed before the kill" % (context, round_))
            server = self.start_server()
            client = self.client(server)
            self.assertRegistryIntact(client, acknowledged, "%s, after kill %d of %d" % (context, round_ + 1, self.ROUNDS))
            # A client retries what the kill interrupted, with the same request id: it must succeed
            # (the same model if the first call had registered it), not meet a stale reservation.
            for call in interrupted:
                with self.subTest(retry_after_kill=call):
                    try:
                        name, sha256 = work(client, *call)
                        acknowledged[name] = sha256
                    except GRPC.RpcError as error:
                        self.fail("%s: retrying %s after the restart: %s [%s] %s"
                                  % (context, call, code_name(error), reason_of(error), error.details()))
        self.assertGreater(len(acknowledged), 0, "%s: no call was acknowledged before the kills" % context)
        self.stop_cleanly(server)
        return acknowledged

    def test_killing_the_server_while_clients_register_presets_loses_no_acknowledged_model(self):
        def register(client, round_, index, i):
            name = "r%d-c%d-%d" % (round_, index, i)
            model = client.register_tiny(name, seed=1000 * index + i, request_id=name)
            self.assertEqual(PB.model.ModelState.Name(model.state), "MODEL_STATE_READY",
                             "RegisterModel returned OK with %s" % model)
            return name, model.weights_sha256
        acknowledged = self.kill_loop(register, 4, "registrations")
        print("registrations: %d acknowledged over %d kills" % (len(acknowledged), self.ROUNDS), file=sys.stderr)

    def test_killing_the_server_while_uploads_stream_loses_no_acknowledged_upload_and_leaves_no_staging_file(self):
        payload = {}

        def setup(client):
            client.register("source", UPLOADED, seed=5)
            header, data = client.export("source")
            self.assertEqual(hashlib.sha256(data).hexdigest(), header.sha256)
            payload.update(data=data, config_json=header.config_json, sha256=header.sha256)

        def upload(client, round_, index, i):
            name = "u%d-c%d-%d" % (round_, index, i)
            model = client.upload(name, payload["data"], payload["config_json"], chunk=32 * 1024, request_id=name)
            self.assertEqual(PB.model.ModelState.Name(model.state), "MODEL_STATE_READY",
                             "UploadModel returned OK with %s" % model)
            self.assertEqual(model.weights_sha256, payload["sha256"])
            return name, payload["sha256"]
        acknowledged = self.kill_loop(upload, 2, "uploads", min_s=0.6, max_s=1.6, setup=setup)
        print("uploads: %d acknowledged over %d kills" % (len(acknowledged), self.ROUNDS), file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# kill -9 during checkpoint writes


class KillDuringCheckpointsTest(FaultTestCase):
    KILLS = 3
    LENGTH, SAMPLES, SEED = 16, 40, 7

    def test_a_job_killed_repeatedly_while_checkpointing_resumes_and_ends_with_the_uninterrupted_result(self):
        flags = ["--max-lost-attempts", str(self.KILLS + 2)]  # Each kill is a lost attempt (default cap 3).
        server = self.start_server(*flags)
        client = self.client(server)
        client.register("steps", SMALL_STEPS)
        job = client.submit("steps", self.LENGTH, self.SAMPLES, self.SEED)
        done_before = 0
        for kill in range(self.KILLS):
            # Wait until this attempt has checkpointed new samples, then kill at a random moment.
            seen = self.wait_job(client, job.id, lambda j: state_name(j) == "JOB_STATE_RUNNING"
                                 and j.progress.samples_done >= done_before + 2
                                 and j.progress.samples_done < self.SAMPLES - 2,
                                 "running with new checkpoints (kill %d)" % (kill + 1))
            time.sleep(random.Random(kill).uniform(0, 0.15))
            self.assertEqual(server.kill(), -9)
            done_before = seen.progress.samples_done
            server = self.start_server(*flags)
            client = self.client(server)
            again = client.get(job.id)
            self.assertTrue(self.wait_log(server, "re-queued 1 jobs interrupted by the previous run"),
                            "kill %d: seen %s, after the restart %s\nlog:\n%s" % (kill + 1, seen, again, server.log))
            self.assertIn(state_name(again), ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING"), again)
            self.assertGreaterEqual(again.progress.samples_done, done_before, "a checkpoint was lost: %s" % again)
        final = self.wait_finished(client, job.id)
        self.assertEqual(state_name(final), "JOB_STATE_SUCCEEDED", final)
        self.assertEqual(final.attempt, self.KILLS + 1, final)
        self.assertEqual((final.progress.samples_done, final.progress.samples_total), (self.SAMPLES, self.SAMPLES))
        resumed = client.result(job.id)
        self.assertGreaterEqual(resumed["job"]["resumed_samples"], done_before, "the checkpoints must be reused")
        self.assertEqual(len(resumed["tokens"]), self.SAMPLES)
        # The same seeded job, uninterrupted.
        reference_job = client.submit("steps", self.LENGTH, self.SAMPLES, self.SEED)
        reference_final = self.wait_finished(client, reference_job.id)
        self.assertEqual((state_name(reference_final), reference_final.attempt), ("JOB_STATE_SUCCEEDED", 1))
        self.assertSameResult(resumed, client.result(reference_job.id))
        self.assertEqual(leftover_temporaries(self.data_dir), [])
        self.stop_cleanly(server)


# ---------------------------------------------------------------------------------------------
# A poison job


class PoisonJobTest(FaultTestCase):
    MAX_LOST = 2

    def test_a_job_whose_attempts_keep_crashing_the_worker_fails_with_attempts_exhausted_and_the_next_job_succeeds(self):
        flags = ["--max-lost-attempts", str(self.MAX_LOST)]
        server = self.start_server(*flags)
        client = self.client(server)
        client.register("slow", SLOW)
        poison = client.submit("slow", 24, 8, 3)
        good = client.submit("slow", 8, 2, 4)  # Queued behind the poison job (one CPU worker).
        for lost in range(1, self.MAX_LOST + 1):
            self.wait_job(client, poison.id, lambda j: state_name(j) == "JOB_STATE_RUNNING", "running (%d)" % lost)
            self.assertEqual(state_name(client.get(good.id)), "JOB_STATE_QUEUED", "the other job must not run yet")
            self.assertEqual(server.kill(), -9)  # The measurement "crashed" the process.
            server = self.start_server(*flags)
            client = self.client(server)
            after = client.get(poison.id)
            if lost < self.MAX_LOST:
                self.assertIn(state_name(after), ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING"),
                              "lost %d of %d attempts: %s" % (lost, self.MAX_LOST, after))
        final = self.wait_finished(client, poison.id, timeout=30)
        self.assertEqual(state_name(final), "JOB_STATE_FAILED", final)
        self.assertEqual(PB.common.ErrorReason.Name(final.error.reason), "ATTEMPTS_EXHAUSTED", final)
        self.assertEqual(final.error.code, GRPC.StatusCode.ABORTED.value[0], final)
        other = self.wait_finished(client, good.id)
        self.assertEqual((state_name(other), other.attempt), ("JOB_STATE_SUCCEEDED", 1), other)
        self.assertTrue(client.serving())
        self.stop_cleanly(server)


# ---------------------------------------------------------------------------------------------
# A full disk


class FullDiskTest(FaultTestCase):
    TMPFS_MB = 48

    def mount_tmpfs(self):
        self.mount_point = os.path.join(self.root, "tmpfs")
        os.makedirs(self.mount_point)
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % self.TMPFS_MB, "tmpfs", self.mount_point],
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            self.skipTest("cannot mount a tmpfs for the data dir (%s): %s"
                          % ("not root" if os.geteuid() != 0 else "exit code %d" % result.returncode,
                             result.stderr.strip()))
        MOUNTS.append(self.mount_point)
        self.addCleanup(self.unmount)
        self.data_dir = os.path.join(self.mount_point, "data")

    def unmount(self):
        for server in self.servers:  # A server holding files there keeps the mount busy.
            if server.returncode is None:
                server.kill()
        unmount(self.mount_point)

    def free_bytes(self):
        stats = os.statvfs(self.mount_point)
        return stats.f_bavail * stats.f_frsize

    def fill(self, path, leave=0):
        """Writes `path` until at most `leave` bytes are free (or the filesystem refuses); returns its size."""
        block = b"\xa5" * (1 << 20)
        written = 0
        with open(path, "wb", buffering=0) as file:
            for size in (1 << 20, 1 << 12, 1):
                while self.free_bytes() - size >= leave:
                    try:
                        written += file.write(block[:size])
                    except OSError:
                        break
            os.fsync(file.fileno())
        return written

    def assertRefusedForSpace(self, error, what):
        """RESOURCE_EXHAUSTED with a reason (a subTest: the test goes on to check what was kept)."""
        with self.subTest(refused=what):
            self.assertEqual(error.code(), GRPC.StatusCode.RESOURCE_EXHAUSTED,
                             "%s: %s [%s] %s" % (what, code_name(error), reason_of(error), error.details()))
            self.assertTrue(reason_of(error), "%s: no posbias-error-reason trailer (%s)" % (what, error.details()))
            if "INSUFFICIENT_STORAGE" in PB.common.ErrorReason.keys():  # The documented reason, once defined.
                self.assertEqual(reason_of(error), "INSUFFICIENT_STORAGE", "%s: %s" % (what, error.details()))

    def test_a_full_data_dir_refuses_writes_clearly_keeps_serving_and_loses_nothing_accepted(self):
        self.mount_tmpfs()
        extra = []
        if "--min-free-disk-mib" in subprocess.run([ARGS.server_binary, "--help"], capture_output=True, text=True,
                                                   timeout=30).stdout:
            extra = ["--min-free-disk-mib", "2"]  # The default (256 MiB) is more than this tmpfs.
        server = self.start_server(*extra)
        client = self.client(server)
        client.register("slow", SLOW)
        accepted_models = {"slow": ""}
        source_header, source_data = client.export("slow")
        accepted = [client.submit("slow", 24, 8, seed) for seed in range(3)]  # Running and queued.
        self.wait_job(client, accepted[0].id, lambda j: j.progress.samples_done >= 1, "running")

        fillers = [os.path.join(self.mount_point, "filler-%d" % n) for n in range(2)]
        outcomes = []
        try:
            # Nearly full: an upload (a real checkpoint) bigger than the space left.
            leave = len(source_data) // 2
            filled = self.fill(fillers[0], leave=leave)
            print("full disk: filler of %.1f MiB, %.1f MiB free, upload of %.1f MiB"
                  % (filled / 2**20, self.free_bytes() / 2**20, len(source_data) / 2**20), file=sys.stderr)
            with self.assertRaises(GRPC.RpcError) as context:
                client.upload("too-big", source_data, source_header.config_json)
            self.assertRefusedForSpace(context.exception, "UploadModel bigger than the free space")
            outcomes.append(("UploadModel", code_name(context.exception), reason_of(context.exception)))
            with self.assertRaises(GRPC.RpcError):
                client.models.GetModel(PB.model.GetModelRequest(name="too-big"), timeout=RPC_TIMEOUT_S)
            with self.subTest(check="a refused upload leaves no staging file"):
                self.assertEqual(leftover_temporaries(self.data_dir), [])
            # Full.
            self.fill(fillers[1])
            print("full disk: %d bytes free" % self.free_bytes(), file=sys.stderr)
            # Registrations: each is acknowledged (then it must survive) or refused for space.
            for i in range(5):
                try:
                    client.register_tiny("full-%d" % i, seed=i)
                    accepted_models["full-%d" % i] = ""
                except GRPC.RpcError as error:
                    self.assertRefusedForSpace(error, "RegisterModel on a full disk")
                    outcomes.append(("RegisterModel", code_name(error), reason_of(error)))
            # Submissions until the store cannot write.
            refused = None
            for i in range(200):
                try:
                    accepted.append(client.submit("slow", 8, 1, 100 + i))
                except GRPC.RpcError as error:
                    refused = error
                    break
            self.assertIsNotNone(refused, "200 submissions were accepted on a full disk")
            self.assertRefusedForSpace(refused, "SubmitJob on a full disk")
            outcomes.append(("SubmitJob", code_name(refused), reason_of(refused)))
            self.assertTrue(client.serving(), "the server must keep serving on a full disk")
            self.assertIsNone(server.process.poll(), "the server died on a full disk:\n" + server.log[-4000:])
            time.sleep(2)  # The running job meets the full disk at its checkpoints.
        finally:
            print("full disk: refusals %s" % outcomes, file=sys.stderr)
            for filler in fillers:
                if os.path.exists(filler):
                    os.remove(filler)
        self.assertIsNone(server.process.poll(), "the server died on a full disk:\n" + server.log[-4000:])
        # Space is back: everything accepted is there and finishes.
        deadline = time.monotonic() + 60
        for job in accepted:
            with self.subTest(accepted_job=job.id):
                final = self.wait_finished(client, job.id, timeout=max(5, deadline - time.monotonic()), server=server)
                self.assertEqual(state_name(final), "JOB_STATE_SUCCEEDED", "accepted before or while the disk was "
                                 "full: %s\nlog:\n%s" % (final, server.log[-3000:]))
        self.assertRegistryIntact(client, accepted_models, "after the disk was freed")
        self.stop_cleanly(server)
        # And after a restart too.
        server = self.start_server(*extra)
        client = self.client(server)
        self.assertRegistryIntact(client, accepted_models, "restart after the full disk")
        for job in accepted:
            final = self.wait_finished(client, job.id, timeout=60)
            self.assertEqual(state_name(final), "JOB_STATE_SUCCEEDED", "after a restart: %s" % final)
        self.stop_cleanly(server)


# ---------------------------------------------------------------------------------------------
# PostgreSQL restarted under load


def postgres_uri_file():
    return os.environ.get("POSBIAS_TEST_POSTGRES_URI_FILE", "")


class Postgres:
    """The fixture's server (tests/postgres/postgres_fixture.sh): its data dir, stopped and started
    with pg_ctl as its owner, on the options it was started with (postmaster.opts)."""

    def __init__(self, uri_file):
        directory = os.path.abspath(os.path.dirname(uri_file))
        home = directory
        if not os.path.isfile(os.path.join(directory, "data", "PG_VERSION")):
            home = "/var/tmp/posbias-postgres-" + hashlib.sha256(directory.encode()).hexdigest()[:16]
        self.data = os.path.join(home, "data")
        self.log = os.path.join(home, "server.log")
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: [int(x) for x in
                                                                                  p.split("/")[3].split(".")
                                                                                  if x.isdigit()])
        self.pg_ctl = bins[-1] if bins else "pg_ctl"
        with open(os.path.join(self.data, "postmaster.opts")) as file:
            words = shlex.split(file.read())
        options, skip = [], False
        for word in words[1:]:
            if skip:
                skip = False
            elif word == "-D":
                skip = True
            else:
                options.append(word)
        self.options = " ".join(shlex.quote(word) for word in options)

    def _pg_ctl(self, *args):
        command = [self.pg_ctl, "-D", self.data, *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    def running(self):
        return self._pg_ctl("status").returncode == 0

    def stop(self):
        result = self._pg_ctl("-m", "fast", "-w", "stop")
        if result.returncode != 0:
            raise AssertionError("pg_ctl stop failed: %s%s" % (result.stdout, result.stderr))

    def start(self):
        result = self._pg_ctl("-l", self.log, "-w", "-t", "30", "-o", self.options, "start")
        if result.returncode != 0:
            raise AssertionError("pg_ctl start failed: %s%s" % (result.stdout, result.stderr))


def psql(uri, sql):
    subprocess.run(["psql", uri, "-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True,
                   timeout=60)


class PostgresTestCase(FaultTestCase):
    """A fresh schema on the fixture's PostgreSQL (self.store: the store URI of the replicas)."""

    def setUp(self):
        super().setUp()
        uri_file = postgres_uri_file()
        if not uri_file or not os.path.isfile(uri_file):
            self.skipTest("no PostgreSQL fixture: POSBIAS_TEST_POSTGRES_URI_FILE is not set (run through ctest)")
        with open(uri_file) as file:
            self.base = base = file.read().strip()
        self.postgres = postgres = Postgres(uri_file)
        self.addCleanup(lambda: postgres.running() or postgres.start())  # Others share this server.
        self.schema = schema = "faults_%s_%d" % (type(self).__name__.lower()[:30], os.getpid())
        psql(base, "DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s" % (schema, schema))
        self.addCleanup(lambda: postgres.running() and psql(base, "DROP SCHEMA IF EXISTS %s CASCADE" % schema))
        self.store = "%s%soptions=-csearch_path%%3D%s" % (base, "&" if "?" in base else "?", schema)

    def query(self, sql):
        result = subprocess.run(["psql", self.store, "-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True,
                                text=True, timeout=30)
        if result.returncode != 0:
            raise AssertionError("psql: %s" % result.stderr)
        return result.stdout.strip()


class PostgresRestartTest(PostgresTestCase):
    GAP_S = 4
    LEASE_S = 4

    def test_restarting_postgresql_under_load_gives_unavailable_in_the_gap_and_loses_no_accepted_job(self):
        postgres, store = self.postgres, self.store
        replicas = [self.start_server("--job-store", store, "--lease-seconds", str(self.LEASE_S)) for _ in range(2)]

        accepted, failures, lock = [], [], threading.Lock()
        stop = threading.Event()

        def submitter(index):
            client = Client(replicas[index % 2])
            try:
                i = 0
                while not stop.is_set():
                    try:
                        job = client.submit("gpt2-tiny", 8, 2, 1000 * index + i, timeout=10)
                        with lock:
                            accepted.append(job.id)
                    except GRPC.RpcError as error:
                        with lock:
                            failures.append(("SubmitJob", code_name(error), reason_of(error), error.details()))
                        time.sleep(0.1)
                    i += 1
                    time.sleep(0.15)
            finally:
                client.close()

        def poller(index):
            client = Client(replicas[index % 2])
            try:
                while not stop.is_set():
                    with lock:
                        ids = list(accepted[-5:])
                    for job_id in ids:
                        try:
                            client.get(job_id, timeout=10)
                        except GRPC.RpcError as error:
                            with lock:
                                failures.append(("GetJob", code_name(error), reason_of(error), error.details()))
                    time.sleep(0.1)
            finally:
                client.close()

        threads = [threading.Thread(target=submitter, args=(n,), daemon=True) for n in range(2)]
        threads += [threading.Thread(target=poller, args=(n,), daemon=True) for n in range(2)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(2)
            # A longer job that is running (and checkpointing) while PostgreSQL is away.
            setup = self.client(replicas[0])
            setup.register("slow", SLOW)
            slow = setup.submit("slow", 24, 8, 5)
            with lock:
                accepted.append(slow.id)
            self.wait_job(setup, slow.id, lambda j: j.progress.samples_done >= 1, "running")
            before_gap = len(accepted)
            postgres.stop()
            time.sleep(self.GAP_S)
            postgres.start()
            time.sleep(3)
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
            if not postgres.running():
                postgres.start()
        codes = sorted({(what, code, reason) for what, code, reason, _ in failures})
        print("postgres restart: %d jobs accepted (%d before the gap), failures %s"
              % (len(accepted), before_gap, codes), file=sys.stderr)
        self.assertGreater(before_gap, 0)
        self.assertGreater(len(failures), 0, "no call failed while PostgreSQL was down")
        unexpected = [f for f in failures if f[1] != "UNAVAILABLE"]
        self.assertEqual(unexpected, [], "calls failed with other codes than UNAVAILABLE while PostgreSQL was down")
        self.assertGreater(len(accepted), before_gap, "nothing was accepted after PostgreSQL came back")
        for server in replicas:
            self.assertIsNone(server.process.poll(), "a replica died:\n" + server.log[-4000:])
        client = self.client(replicas[0])
        deadline = time.monotonic() + 90
        for job_id in accepted:
            with self.subTest(accepted_job=job_id):
                final = self.wait_finished(client, job_id, timeout=max(5, deadline - time.monotonic()),
                                           server=replicas[0])
                self.assertEqual(state_name(final), "JOB_STATE_SUCCEEDED", final)
        slow_final = client.get(slow.id)
        print("postgres restart: the job running through the gap ended %s on attempt %d"
              % (state_name(slow_final), slow_final.attempt), file=sys.stderr)
        for server in replicas:
            self.stop_cleanly(server)


class PoisonJobOnPostgresTest(PostgresTestCase):
    """The poison job on the shared store: its attempts are lost by lease expiry (the reaper), and
    another worker replica keeps running other jobs meanwhile."""
    MAX_LOST = 2
    LEASE_S = 2

    def test_a_poison_job_fails_with_attempts_exhausted_after_its_leases_expire_while_other_workers_go_on(self):
        common = ["--job-store", self.store, "--lease-seconds", str(self.LEASE_S), "--max-lost-attempts",
                  str(self.MAX_LOST)]
        api = self.start_server(*common, "--role", "api")
        client = self.client(api)
        client.register("slow", SLOW)
        workers = {name: self.start_server(*common, "--role", "worker", "--worker-name", name) for name in ("wa", "wb")}
        poison = client.submit("slow", 24, 16, 3, priority=10)  # Claimed first.
        good = []
        kills, killed_attempts = 0, set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state, attempt, worker = (self.query("SELECT state || ' ' || attempt || ' ' || worker FROM jobs "
                                                 "WHERE id = '%s'" % poison.id) + " ").split(" ", 2)
            worker = worker.strip()
            if state in ("succeeded", "failed", "cancelled"):
                break
            if len(good) < 6:
                good.append(client.submit("slow", 8, 2, 100 + len(good)))
            if state == "running" and worker and attempt not in killed_attempts:
                name = worker.split("/")[0]
                victim = workers.get(name)
                if victim is not None and victim.returncode is None:
                    killed_attempts.add(attempt)
                    # The measurement "crashed" its worker process; it comes back under the same name.
                    self.assertEqual(victim.kill(), -9)
                    kills += 1
                    workers[name] = self.start_server(*common, "--role", "worker", "--worker-name", name)
            time.sleep(0.1)
        final = client.get(poison.id)
        self.assertEqual(state_name(final), "JOB_STATE_FAILED", final)
        self.assertEqual(PB.common.ErrorReason.Name(final.error.reason), "ATTEMPTS_EXHAUSTED", final)
        self.assertEqual(kills, self.MAX_LOST, "one kill per lost attempt")
        finished_meanwhile = [job.id for job in good if state_name(client.get(job.id)) == "JOB_STATE_SUCCEEDED"]
        self.assertGreater(len(finished_meanwhile), 0, "no other job finished while the poison job was being retried")
        for job in good:
            other = self.wait_finished(client, job.id, timeout=90, server=api)
            self.assertEqual(state_name(other), "JOB_STATE_SUCCEEDED", other)
        for server in [api, *workers.values()]:
            self.assertIsNone(server.process.poll(), server.log[-3000:])
            self.stop_cleanly(server)


# ---------------------------------------------------------------------------------------------


def unmount(mount_point):
    result = subprocess.run(["umount", mount_point], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        subprocess.run(["umount", "-l", mount_point], capture_output=True, timeout=30)
    if mount_point in MOUNTS:
        MOUNTS.remove(mount_point)


def start_watchdog(seconds):
    """Kills every live server, unmounts the test's tmpfs and exits (code 3) if the run is still
    going after `seconds`: a hung test must not hang CI or leave a mount behind."""
    def expire():
        sys.stderr.write("faults_test.py: watchdog: still running after %d s; killing servers\n" % seconds)
        for server in list(ServerProcess.live):
            server.kill()
        for mount_point in list(MOUNTS):
            unmount(mount_point)
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def main():
    global ARGS, PB, GRPC, STUB_DIR
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--proto-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    for path in [ARGS.server_binary, PROTOC, GRPC_PYTHON_PLUGIN]:
        if not os.access(path, os.X_OK):
            parser.error("%s is not an executable file" % path)
    ARGS.server_binary = os.path.abspath(ARGS.server_binary)
    import grpc
    GRPC = grpc
    STUB_DIR = tempfile.mkdtemp(prefix="posbias-faults-stubs-")
    try:
        PB = generate_stubs(STUB_DIR, os.path.abspath(ARGS.proto_dir))
        start_watchdog(WATCHDOG_S)
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        for server in list(ServerProcess.live):
            server.kill()
        for mount_point in list(MOUNTS):
            unmount(mount_point)
        shutil.rmtree(STUB_DIR, ignore_errors=True)
    result = program.result
    if result.wasSuccessful() and result.testsRun > 0 and len(result.skipped) == result.testsRun:
        sys.exit(SKIP_EXIT_CODE)
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)


if __name__ == "__main__":
    main()
