#!/usr/bin/python3
"""Scale-out on PostgreSQL, black-box: several real posbias-server processes share one job store.

Usage (through ctest, which starts PostgreSQL: tests/postgres/postgres_fixture.sh):

    POSBIAS_TEST_POSTGRES_URI=postgresql://posbias@127.0.0.1:PORT/posbias_test \
        /usr/bin/python3 tests/e2e/replicas_test.py --server-binary build/dev/server/posbias-server \
        --cli-binary build/dev/client/cli/posbias

Each test gets a fresh PostgreSQL schema (search_path in the store's URI) and one data directory
that its replicas share (registered models), as pods share a volume. The replicas are driven
through the real CLI. Checked: jobs submitted on one replica run on others; no job completes twice
(the servers' own posbias_jobs_finished_total counters); an API-only replica runs nothing and a
worker-only replica serves only health; a replica killed with kill -9 while it holds a lease loses
the job to another, which finishes it from the checkpoint with the uninterrupted result; request ids
are idempotent across replicas; roles other than `both` refuse the embedded SQLite store.
"""

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from posbias_server import Cli, ServerProcess, metric_samples, start_watchdog  # noqa: E402

ARGS = None
JOB_TIMEOUT_S = 240
SLOW_MODEL = ["--arch", "gpt2", "--layers", "4", "--width", "256", "--heads", "4", "--mlp-width", "512",
              "--vocab", "512", "--max-positions", "64", "--seed", "1"]
SLOW_JOB = ["--length", "24", "--samples", "8", "--method", "exact", "--seed", "3"]
QUICK_JOB = ["--length", "8", "--samples", "2", "--method", "exact", "--seed", "5"]
RESULT_REL_TOL = 1e-9


def postgres_uri():
    uri = os.environ.get("POSBIAS_TEST_POSTGRES_URI", "")
    if not uri and os.environ.get("POSBIAS_TEST_POSTGRES_URI_FILE"):
        with open(os.environ["POSBIAS_TEST_POSTGRES_URI_FILE"]) as file:
            uri = file.read().strip()
    return uri


def psql(uri, sql):
    subprocess.run(["psql", uri, "-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True,
                   timeout=60)


def finished_total(server, outcome):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port, timeout=10) as response:
        samples = metric_samples(response.read().decode())
    return sum(value for name, labels, value in samples
               if name == "posbias_jobs_finished_total" and labels.get("outcome") == outcome)


class ReplicaTestCase(unittest.TestCase):
    LEASE_SECONDS = 30

    def setUp(self):
        base = postgres_uri()
        self.assertTrue(base, "no PostgreSQL for the tests: run through ctest or set POSBIAS_TEST_POSTGRES_URI")
        self.schema = "e2e_%s_%d" % (self.id().split(".")[-1][:40].lower(), os.getpid())
        psql(base, "DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s" % (self.schema, self.schema))
        self.addCleanup(psql, base, "DROP SCHEMA IF EXISTS %s CASCADE" % self.schema)
        self.store = "%s%soptions=-csearch_path%%3D%s" % (base, "&" if "?" in base else "?", self.schema)
        self.data_dir = tempfile.mkdtemp(prefix="posbias-replicas-")
        self.addCleanup(shutil.rmtree, self.data_dir, True)
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            if server.returncode is None:
                code = server.stop()
                if code != 0:
                    self.fail("a replica exited with %s after SIGTERM; log:\n%s" % (code, server.log))

    def replica(self, role="both", *extra):
        server = ServerProcess(ARGS.server_binary, ["--data-dir", self.data_dir, "--job-store", self.store,
                                                    "--role", role, "--lease-seconds", str(self.LEASE_SECONDS),
                                                    "--cpu-threads", "1", *extra]).start()
        self.servers.append(server)
        return server

    def cli(self, server):
        return Cli(ARGS.cli_binary, server)

    def wait_for(self, server, job_id, predicate, what, timeout=JOB_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        job = None
        while time.monotonic() < deadline:
            job = self.cli(server).json("jobs", "get", job_id)
            if predicate(job):
                return job
            time.sleep(0.1)
        self.fail("job %s: not %s within %d s; last seen %s" % (job_id, what, timeout, job))

    def wait_succeeded(self, server, job_id):
        job = self.wait_for(server, job_id, lambda j: j["state"] in ("succeeded", "failed", "cancelled"), "finished")
        self.assertEqual(job["state"], "succeeded", job)
        return job


class SharedQueueTest(ReplicaTestCase):
    def test_jobs_submitted_on_one_replica_run_on_both_and_none_completes_twice(self):
        first, second = self.replica(), self.replica()
        self.cli(first).json("models", "register", "slow-gpt2", *SLOW_MODEL, timeout=60)
        jobs = [self.cli(first if i % 2 == 0 else second).json("jobs", "submit", "--model", "slow-gpt2", *QUICK_JOB)
                for i in range(6)]
        finals = [self.wait_succeeded(second, job["id"]) for job in jobs]
        for final in finals:
            self.assertEqual(final["attempt"], 1, final)
        self.assertEqual(finished_total(first, "succeeded") + finished_total(second, "succeeded"), len(jobs))
        # Both replicas see the same queue.
        listed = {job["id"] for job in self.cli(first).json("jobs", "list")}
        self.assertEqual(listed, {job["id"] for job in jobs})

    def test_the_same_request_id_on_two_replicas_is_one_job(self):
        first, second = self.replica(), self.replica()
        a = self.cli(first).json("jobs", "submit", "--model", "gpt2-tiny", *QUICK_JOB, "--request-id", "retry-7")
        b = self.cli(second).json("jobs", "submit", "--model", "gpt2-tiny", *QUICK_JOB, "--request-id", "retry-7")
        self.assertEqual(a["id"], b["id"])
        self.wait_succeeded(first, a["id"])
        self.assertEqual(len(self.cli(second).json("jobs", "list")), 1)


class ReRegistrationTest(ReplicaTestCase):
    LONG_JOB = ["--length", "64", "--samples", "400", "--method", "exact", "--seed", "7"]

    def test_a_model_deleted_and_registered_again_on_one_replica_is_the_new_one_on_the_other(self):
        first, second = self.replica(), self.replica()
        old = self.cli(first).json("models", "register", "m", "--preset", "gpt2-tiny", "--seed", "3", timeout=60)
        self.assertEqual(self.cli(second).json("models", "get", "m")["uid"], old["uid"])
        # A long job bound to the old registration, then a force-delete through the other replica.
        job = self.cli(second).json("jobs", "submit", "--model", "m", *self.LONG_JOB)
        deleted = self.cli(first).run("models", "rm", "m", "--force")
        self.assertEqual(deleted.returncode, 0, deleted.stderr)
        self.assertIn("cancelled job %s" % job["id"], deleted.stderr)
        new = self.cli(first).json("models", "register", "m", "--preset", "gpt2-tiny", "--seed", "4", timeout=60)
        self.assertNotEqual(new["uid"], old["uid"])
        self.assertNotEqual(new["weights_sha256"], old["weights_sha256"])
        # The other replica replaced its entry: the new uid, and the new weights when exported.
        seen = self.cli(second).json("models", "get", "m")
        self.assertEqual((seen["uid"], seen["seed"], seen["weights_sha256"]), (new["uid"], 4, new["weights_sha256"]))
        exported = os.path.join(self.data_dir, "exported.safetensors")
        result = self.cli(second).run("models", "export", "m", exported)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(exported, "rb") as file:
            self.assertEqual(hashlib.sha256(file.read()).hexdigest(), new["weights_sha256"])
        # The old job never ran on the new model; a new job measures the new one and says so.
        final = self.wait_for(second, job["id"], lambda j: j["state"] in ("succeeded", "failed", "cancelled"), "finished")
        self.assertEqual(final["state"], "cancelled", final)
        fresh = self.cli(second).json("jobs", "submit", "--model", "m", *QUICK_JOB)
        self.wait_succeeded(first, fresh["id"])
        report = self.cli(first).json("jobs", "result", fresh["id"])
        self.assertEqual((report["model"]["uid"], report["model"]["weights_sha256"]), (new["uid"], new["weights_sha256"]))


class PartsTest(ReplicaTestCase):
    def test_a_job_split_into_parts_runs_on_both_replicas_and_merges_to_the_unsplit_result(self):
        first, second = self.replica("both", "--part-samples", "2"), self.replica("both", "--part-samples", "2")
        self.cli(first).json("models", "register", "slow-gpt2", *SLOW_MODEL, timeout=60)
        job = self.cli(first).json("jobs", "submit", "--model", "slow-gpt2", *SLOW_JOB)
        final = self.wait_succeeded(second, job["id"])
        self.assertEqual(final["progress"], 1)
        merged = self.cli(second).json("jobs", "result", job["id"])
        self.assertEqual(merged["job"]["parts"], 4)
        self.assertEqual(len(self.cli(first).json("jobs", "list")), 1, "parts are not listed")
        # 4 parts and 1 merge ran; both replicas took parts.
        done = (finished_total(first, "succeeded"), finished_total(second, "succeeded"))
        self.assertEqual(sum(done), 5, done)
        self.assertGreater(min(done), 0, "both replicas should have run parts: %s" % (done,))
        # The same measurement unsplit, on a replica that does not split.
        whole = self.replica("both")
        reference_job = self.cli(whole).json("jobs", "submit", "--model", "slow-gpt2", *SLOW_JOB)
        self.wait_succeeded(whole, reference_job["id"])
        reference = self.cli(whole).json("jobs", "result", reference_job["id"])
        self.assertEqual(merged["tokens"], reference["tokens"])
        for key in ("sq_norm_mean", "sq_norm_stderr"):
            for j, (mine, theirs) in enumerate(zip(merged[key], reference[key])):
                self.assertLessEqual(abs(mine - theirs), RESULT_REL_TOL * abs(theirs), "%s[%d]" % (key, j))


    def test_a_comparison_job_split_into_parts_merges_every_models_samples_in_order(self):
        split = self.replica("both", "--part-samples", "3")
        tiny = [flag if flag not in ("4", "256", "512") else {"4": "2", "256": "32", "512": "64"}[flag]
                for flag in SLOW_MODEL]
        self.cli(split).json("models", "register", "tiny-gpt2", *tiny, timeout=60)
        self.cli(split).json("models", "register", "tiny-gpt2-b", *tiny[:-1], "7", timeout=60)
        flags = ["--model", "tiny-gpt2", "--versus", "init,tiny-gpt2-b", "--init-seed", "1", *SLOW_JOB]
        job = self.cli(split).json("jobs", "submit", *flags)
        self.wait_succeeded(split, job["id"])
        merged = self.cli(split).json("jobs", "result", job["id"])
        # 24 units of work (8 samples of 3 models) in parts of 3: parts [6, 9) and [15, 18) hold
        # samples of two models each.
        self.assertEqual(merged["job"]["parts"], 8)
        split.stop()  # The same job unsplit, on a replica that does not split (the data directory is shared).
        whole = self.replica("both")
        reference_job = self.cli(whole).json("jobs", "submit", *flags)
        self.wait_succeeded(whole, reference_job["id"])
        reference = self.cli(whole).json("jobs", "result", reference_job["id"])
        self.assertEqual([m["model"] for m in merged["comparison"]], ["tiny-gpt2", "init", "tiny-gpt2-b"])
        for mine, theirs in zip(merged["comparison"], reference["comparison"]):
            for j, (a, b) in enumerate(zip(mine["sq_norm_mean"], theirs["sq_norm_mean"])):
                self.assertLessEqual(abs(a - b), RESULT_REL_TOL * abs(b), "%s sq_norm_mean[%d]" % (mine["model"], j))
            self.assertAlmostEqual(mine["middle"]["mean"], theirs["middle"]["mean"], places=12)
        self.assertAlmostEqual(merged["comparison"][2]["middle_log_ratio"]["mean"],
                               reference["comparison"][2]["middle_log_ratio"]["mean"], places=12)

    def test_one_sample_of_three_models_runs_as_three_parts_on_both_replicas(self):
        # Units of work are (model, sample) pairs: with parts of one unit, the first model's sample,
        # init's and the other model's are three parts; parts holding only init's or the other
        # model's sample draw the first model's token ids without measuring it.
        first, second = self.replica("both", "--part-samples", "1"), self.replica("both", "--part-samples", "1")
        tiny = [flag if flag not in ("4", "256", "512") else {"4": "2", "256": "32", "512": "64"}[flag]
                for flag in SLOW_MODEL]
        self.cli(first).json("models", "register", "one-gpt2", *tiny, timeout=60)
        self.cli(first).json("models", "register", "one-gpt2-b", *tiny[:-1], "7", timeout=60)
        flags = ["--model", "one-gpt2", "--versus", "init,one-gpt2-b", "--init-seed", "1",
                 "--length", "24", "--samples", "1", "--method", "exact", "--seed", "3"]
        job = self.cli(first).json("jobs", "submit", *flags)
        final = self.wait_succeeded(second, job["id"])
        self.assertEqual((final["samples_done"], final["samples_total"]), (3, 3), final)
        merged = self.cli(second).json("jobs", "result", job["id"])
        self.assertEqual(merged["job"]["parts"], 3)
        first.stop()
        second.stop()
        whole = self.replica("both")
        reference_job = self.cli(whole).json("jobs", "submit", *flags)
        self.wait_succeeded(whole, reference_job["id"])
        reference = self.cli(whole).json("jobs", "result", reference_job["id"])
        self.assertEqual(merged["tokens"], reference["tokens"])
        for mine, theirs in zip(merged["comparison"], reference["comparison"]):
            for j, (a, b) in enumerate(zip(mine["sq_norm_mean"], theirs["sq_norm_mean"])):
                self.assertLessEqual(abs(a - b), RESULT_REL_TOL * abs(b), "%s sq_norm_mean[%d]" % (mine["model"], j))


class RolesTest(ReplicaTestCase):
    def test_an_api_replica_queues_and_a_worker_replica_runs(self):
        api = self.replica("api")
        job = self.cli(api).json("jobs", "submit", "--model", "gpt2-tiny", *QUICK_JOB)
        time.sleep(1.5)
        self.assertEqual(self.cli(api).json("jobs", "get", job["id"])["state"], "queued", "the API tier runs no jobs")
        worker = self.replica("worker")
        self.wait_succeeded(api, job["id"])
        self.assertEqual((finished_total(api, "succeeded"), finished_total(worker, "succeeded")), (0, 1))
        self.assertGreater(len(self.cli(api).json("jobs", "result", job["id"])["sq_norm_mean"]), 0)
        # The worker serves health for its probes, not the API.
        self.assertEqual(self.cli(worker).run("health").returncode, 0)
        refused = self.cli(worker).run("jobs", "list")
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("UNIMPLEMENTED", refused.stderr)

    def test_roles_other_than_both_refuse_the_embedded_store(self):
        for role in ("api", "worker"):
            with self.subTest(role=role):
                process = subprocess.run([ARGS.server_binary, "--role", role, "--data-dir", self.data_dir,
                                          "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
                                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
                self.assertNotEqual(process.returncode, 0)
                self.assertIn("needs a shared job store", process.stderr)


class LeaseTakeoverTest(ReplicaTestCase):
    LEASE_SECONDS = 2

    def test_a_replica_killed_while_holding_a_lease_loses_the_job_to_another_with_the_same_result(self):
        doomed = self.replica()
        self.cli(doomed).json("models", "register", "slow-gpt2", *SLOW_MODEL, timeout=60)
        job = self.cli(doomed).json("jobs", "submit", "--model", "slow-gpt2", *SLOW_JOB)
        self.wait_for(doomed, job["id"], lambda j: j["state"] == "running" and j["samples_done"] >= 1,
                      "running with a sample done")
        survivor = self.replica()
        self.assertEqual(doomed.kill(), -signal.SIGKILL)
        final = self.wait_succeeded(survivor, job["id"])
        self.assertEqual(final["attempt"], 2, final)
        self.assertIn("re-queued 1 jobs whose worker lost its lease", survivor.log)
        resumed = self.cli(survivor).json("jobs", "result", job["id"])
        self.assertGreaterEqual(resumed["job"]["resumed_samples"], 1, "the checkpointed samples must be reused")
        # The same measurement, uninterrupted, on the survivor.
        reference_job = self.cli(survivor).json("jobs", "submit", "--model", "slow-gpt2", *SLOW_JOB)
        self.wait_succeeded(survivor, reference_job["id"])
        reference = self.cli(survivor).json("jobs", "result", reference_job["id"])
        self.assertEqual(resumed["tokens"], reference["tokens"])
        for j, (mine, theirs) in enumerate(zip(resumed["sq_norm_mean"], reference["sq_norm_mean"])):
            self.assertLessEqual(abs(mine - theirs), RESULT_REL_TOL * abs(theirs), "sq_norm_mean[%d]" % j)
        self.assertEqual(finished_total(survivor, "succeeded"), 2)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--cli-binary", required=True)
    ARGS, rest = parser.parse_known_args()
    start_watchdog(900, "replicas_test.py")
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)


if __name__ == "__main__":
    main()
