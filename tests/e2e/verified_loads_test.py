#!/usr/bin/python3
"""What the service loads is checked, what it parses is bounded, and shutdown ends: each attack of
a hostile two-tenant review reproduced through real servers.

- A public model registered from lab-a's folder, its file replaced by lab-a (same shapes, other
  values), the server restarted: jobs on it fail with MODEL_CHANGED naming both digests, the model
  is FAILED and nothing exports the new file under the old digest.
- An upload and a folder registration of the same bytes share one digest; export -> upload keeps it.
- A gemma2 config.json with 1e9 layers, and safetensors headers of 100k and 300k entries, sent with
  UploadModel: refused promptly with what was wrong, the server answering throughout.
- SIGTERM with heavy density calls in flight: the process exits within --drain-seconds + 5 s.

Usage:
    /usr/bin/python3 tests/e2e/verified_loads_test.py --server-binary build/release/server/posbias-server \
        --proto-dir proto
"""

import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
from posbias_server import ServerProcess, generate_stubs, start_watchdog  # noqa: E402
from shared_service_test import principals  # noqa: E402
from tenant_wall_test import reason_of  # noqa: E402

ARGS = None
pb = None
WORK = None
RPC_TIMEOUT_S = 60
WATCHDOG_S = 560


class Service:
    """One server over a model root with lab-a/ and lab-b/, restartable on the same data directory."""

    def __init__(self, name, extra=()):
        self.work = tempfile.mkdtemp(prefix=name + "-", dir=WORK)
        self.root = os.path.join(self.work, "models")
        self.data = os.path.join(self.work, "data")
        for tenant in ("lab-a", "lab-b"):
            os.makedirs(os.path.join(self.root, tenant))
        os.makedirs(self.data)
        self.tokens = principals(os.path.join(self.work, "tokens.json"))
        self.args = ["--model-root", self.root, "--data-dir", self.data, "--auth-tokens-file", self.tokens.path,
                     "--cpu-threads", "1", *extra]
        self.server = None
        self.start()

    def start(self):
        self.server = ServerProcess(ARGS.server_binary, self.args).start()
        self.channel = grpc.insecure_channel(self.server.address)
        self.models = pb.model_grpc.ModelServiceStub(self.channel)
        self.jobs = pb.job_grpc.JobServiceStub(self.channel)
        self.density = pb.density_grpc.DensityServiceStub(self.channel)

    def stop(self):
        self.channel.close()
        return self.server.stop()

    def md(self, who):
        return self.tokens.md(who)

    def export(self, name, who):
        header, chunks = None, []
        for message in self.models.ExportModel(pb.model.ExportModelRequest(name=name), timeout=RPC_TIMEOUT_S,
                                               metadata=self.md(who)):
            if message.WhichOneof("part") == "header":
                header = message.header
            else:
                chunks.append(message.chunk)
        return header, b"".join(chunks)

    def upload(self, name, data, config_json, who, timeout=RPC_TIMEOUT_S):
        def messages():
            yield pb.model.UploadModelRequest(metadata=pb.model.UploadModelMetadata(
                name=name, config_json=config_json, total_bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
            for start in range(0, len(data), 1 << 20):
                yield pb.model.UploadModelRequest(chunk=data[start:start + (1 << 20)])
        return self.models.UploadModel(messages(), timeout=timeout, metadata=self.md(who))

    def write_checkpoint(self, relative, data, config_json):
        """A checkpoint folder under the model root: model.safetensors and config.json."""
        folder = os.path.join(self.root, relative)
        os.makedirs(folder, exist_ok=True)
        write(os.path.join(folder, "model.safetensors"), data)
        write(os.path.join(folder, "config.json"), config_json, "w")

    def seeded_checkpoint(self, seed):
        """The weights and config.json of gpt2-tiny at `seed`, as ExportModel writes them."""
        name = "seed-%d" % seed
        self.models.RegisterModel(pb.model.RegisterModelRequest(
            name=name, preset=pb.model.PresetSource(preset="gpt2-tiny", init_seed=seed), wait=True),
            timeout=RPC_TIMEOUT_S, metadata=self.md("admin"))
        header, data = self.export(name, "admin")
        return data, header.config_json

    def wait_for_end(self, job_id, who, timeout_s=120):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.jobs.GetJob(pb.job.GetJobRequest(id=job_id), timeout=RPC_TIMEOUT_S, metadata=self.md(who))
            if job.state in (pb.job.JOB_STATE_SUCCEEDED, pb.job.JOB_STATE_FAILED, pb.job.JOB_STATE_CANCELLED):
                return job
            time.sleep(0.2)
        raise AssertionError("job %s did not end within %s s" % (job_id, timeout_s))

    def submit(self, model, who):
        spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(model=model, sequence_length=8, samples=1))
        return self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S, metadata=self.md(who))


def write(path, data, mode="wb"):
    with open(path, mode) as out:
        out.write(data)


def safetensors_of_scalars(count):
    """A valid safetensors file listing `count` one-byte tensors t0, t1, ..."""
    header = json.dumps({"t%d" % i: {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]}
                         for i in range(count)}, separators=(",", ":")).encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    return struct.pack("<Q", len(header)) + header + b"\0" * count


class VerifiedLoads(unittest.TestCase):
    def setUp(self):
        self.service = Service("verified-loads")

    def tearDown(self):
        code = self.service.stop()
        self.assertEqual(code, 0, self.service.server.log)

    def test_a_checkpoint_replaced_on_disk_fails_its_jobs_and_is_marked_changed(self):
        s = self.service
        registered_bytes, config = s.seeded_checkpoint(1)
        other_bytes, _ = s.seeded_checkpoint(2)
        s.write_checkpoint("lab-a/ckpt", registered_bytes, config)
        public = s.models.RegisterModel(pb.model.RegisterModelRequest(
            name="pub", checkpoint=pb.model.CheckpointSource(path="lab-a/ckpt"), wait=True),
            timeout=RPC_TIMEOUT_S, metadata=s.md("admin"))
        self.assertEqual(public.weights_sha256, hashlib.sha256(registered_bytes).hexdigest())
        first = s.wait_for_end(s.submit("pub", "b-submitter").id, "b-reader")
        self.assertEqual(first.state, pb.job.JOB_STATE_SUCCEEDED, first.error)
        # lab-a changes what every tenant measures: same shapes, other values. The server restarts.
        s.write_checkpoint("lab-a/ckpt", other_bytes, config)
        s.stop()
        s.start()
        job = s.wait_for_end(s.submit("pub", "b-submitter").id, "b-reader")
        self.assertEqual(job.state, pb.job.JOB_STATE_FAILED)
        self.assertEqual(pb.common.ErrorReason.Name(job.error.reason), "MODEL_CHANGED", job.error)
        self.assertIn("registered SHA-256 %s, read now %s" % (public.weights_sha256,
                                                               hashlib.sha256(other_bytes).hexdigest()),
                      job.error.message)
        model = s.models.GetModel(pb.model.GetModelRequest(name="pub"), timeout=RPC_TIMEOUT_S, metadata=s.md("b-reader"))
        self.assertEqual(model.state, pb.model.MODEL_STATE_FAILED)
        self.assertEqual(pb.common.ErrorReason.Name(model.error.reason), "MODEL_CHANGED", model.error)
        with self.assertRaises(grpc.RpcError) as refused:
            s.export("pub", "admin")
        self.assertEqual((refused.exception.code(), reason_of(refused.exception)),
                         (grpc.StatusCode.FAILED_PRECONDITION, "MODEL_NOT_READY"))

    def test_an_upload_and_a_folder_of_the_same_bytes_share_a_digest_that_export_and_upload_keep(self):
        s = self.service
        data, config = s.seeded_checkpoint(3)
        s.write_checkpoint("lab-a/mine", data, config)
        from_folder = s.models.RegisterModel(pb.model.RegisterModelRequest(
            name="folder", checkpoint=pb.model.CheckpointSource(path="mine"), wait=True),
            timeout=RPC_TIMEOUT_S, metadata=s.md("a-operator"))
        uploaded = s.upload("uploaded", data, config, "a-operator")
        self.assertEqual(uploaded.weights_sha256, from_folder.weights_sha256)
        header, exported = s.export("uploaded", "a-operator")
        self.assertEqual(header.sha256, uploaded.weights_sha256)
        self.assertEqual(hashlib.sha256(exported).hexdigest(), uploaded.weights_sha256)
        again = s.upload("again", exported, header.config_json, "a-operator")
        self.assertEqual(again.weights_sha256, uploaded.weights_sha256)


class BoundedParsing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service("bounded-parsing")
        cls.config = json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 4, "vocab_size": 64,
                                 "n_positions": 64})

    @classmethod
    def tearDownClass(cls):
        code = cls.service.stop()
        if code != 0:
            raise AssertionError("server exited with %s; log:\n%s" % (code, cls.service.server.log))

    def refusal(self, call):
        with self.assertRaises(grpc.RpcError) as refused:
            call()
        return refused.exception

    def assert_still_answers(self):
        s = self.service
        listed = s.models.ListModels(pb.model.ListModelsRequest(), timeout=10, metadata=s.md("b-reader"))
        self.assertGreater(len(listed.models), 0)

    def test_a_gemma2_config_of_a_billion_layers_is_refused_before_anything_is_allocated(self):
        s = self.service
        for layers in (1000000000, 4294967298):
            config = json.dumps({"model_type": "gemma2", "num_hidden_layers": layers, "hidden_size": 32,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
                                 "head_dim": 8, "vocab_size": 64})
            started = time.monotonic()
            error = self.refusal(lambda: s.upload("bomb", b"\0" * 64, config, "a-operator", timeout=20))
            self.assertEqual((error.code(), reason_of(error)), (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_DEPTH"))
            self.assertIn("layers = %d is invalid: allowed 1..1024" % layers, error.details())
            self.assertLess(time.monotonic() - started, 20)
        self.assert_still_answers()

    def test_a_header_beyond_the_tensor_limit_is_refused_and_one_within_it_parses_promptly(self):
        s = self.service
        error = self.refusal(lambda: s.upload("wide", safetensors_of_scalars(300000), self.config, "a-operator"))
        self.assertEqual((error.code(), reason_of(error)), (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_MODEL_FILE"))
        self.assertIn("more than 262145 entries", error.details())
        # 100k entries took minutes to parse before; now the header parses and the tensors are
        # what is wrong (none of gpt2's).
        error = self.refusal(lambda: s.upload("many", safetensors_of_scalars(100000), self.config, "a-operator"))
        self.assertEqual((error.code(), reason_of(error)), (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_MODEL_FILE"))
        self.assertIn("tensor", error.details())
        self.assert_still_answers()


class ShutdownEnds(unittest.TestCase):
    def test_sigterm_with_heavy_density_calls_in_flight_ends_within_the_drain_and_its_bound(self):
        service = Service("shutdown", ["--drain-seconds", "1", "--rpc-threads", "2"])
        request = pb.density.EvaluateDiscreteRequest(model=pb.common.RoutingModel(depth=400, alpha=0.5),
                                                     length=10000000, summaries_only=True)
        errors = []

        def heavy():
            try:
                service.density.EvaluateDiscrete(request, timeout=120, metadata=service.md("b-reader"))
            except grpc.RpcError as error:
                errors.append(error.code())

        callers = [threading.Thread(target=heavy, daemon=True) for _ in range(32)]
        for caller in callers:
            caller.start()
        time.sleep(2)  # Two run, the rest wait for a thread.
        started = time.monotonic()
        code = service.server.stop(timeout=30)
        elapsed = time.monotonic() - started
        self.assertLess(elapsed, 1 + 5 + 3, "SIGTERM took %.1f s; log:\n%s" % (elapsed, service.server.log))
        self.assertIn(code, (0, 1), service.server.log)
        service.channel.close()


def main():
    global ARGS, pb, WORK
    parser = argparse.ArgumentParser()
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--proto-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    start_watchdog(WATCHDOG_S, "verified_loads_test.py")
    with tempfile.TemporaryDirectory(prefix="posbias-verified-loads-") as work:
        WORK = os.path.realpath(work)
        stub_dir = os.path.join(work, "stubs")
        os.mkdir(stub_dir)
        pb = generate_stubs(stub_dir, ARGS.proto_dir)
        import tenant_wall_test
        tenant_wall_test.pb = pb
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        for server in list(ServerProcess.live):
            server.kill()
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
