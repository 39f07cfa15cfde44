#!/usr/bin/python3
"""Who may do what, through real servers: TLS and mTLS, bearer tokens with roles, tenants that
cannot see each other, quotas, reloading the tokens file, and the secure default.

Usage:
    /usr/bin/python3 tests/e2e/security_test.py --server-binary build/release/server/posbias-server \
        --cli-binary build/release/client/cli/posbias --proto-dir proto

Certificates are made with openssl at test time: a CA, a server certificate for 127.0.0.1 and
localhost, client certificates (one valid, one expired, one from another CA). Tokens are random;
the tokens file holds their SHA-256 only.
"""

import argparse
import hashlib
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
from posbias_server import ServerProcess, generate_stubs, secure_channel, start_watchdog  # noqa: E402

ARGS = None
pb = None
WORK = None
RPC_TIMEOUT_S = 20
WATCHDOG_S = 400

# The role each RPC needs, read from the proto's (posbias.v1.policy) options (api_methods(), once
# the stubs exist): test_every_rpc_against_every_role checks the server against them, and
# test_the_policies_keep_the_access_rules checks the options against the access rules, written
# here independently of them, so a new RPC needs no line here and a wrong option still fails.
REQUIRED_ROLE = {}
# Each method's kind of call, from its descriptor: unary_unary, unary_stream or stream_unary.
CALL_KIND = {}
# Reads that hand out a model's weights: they need the role that may write them.
WEIGHT_READS = {"/posbias.v1.ModelService/ExportModel"}
ROLES = ["reader", "submitter", "operator", "admin"]


def api_methods():
    """(path, policy, kind) of every posbias.v1 RPC, from the generated descriptors."""
    from google.protobuf import descriptor_pb2
    methods = []
    for module in (pb.density, pb.model, pb.job):
        for service in module.DESCRIPTOR.services_by_name.values():
            proto = descriptor_pb2.ServiceDescriptorProto()
            service.CopyToProto(proto)
            for method, described in zip(service.methods, proto.method):
                kind = "%s_%s" % ("stream" if described.client_streaming else "unary",
                                  "stream" if described.server_streaming else "unary")
                methods.append(("/%s/%s" % (service.full_name, method.name),
                                method.GetOptions().Extensions[pb.options.policy], kind))
    return methods


def run(command, cwd):
    subprocess.run(command, cwd=cwd, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=60)


def make_certificates(directory):
    """CA, server (127.0.0.1, localhost), client-alice, an expired client and one of another CA."""
    key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
    for ca in ("ca", "other-ca"):
        run("openssl req -x509 %s -keyout %s.key -out %s.pem -days 2 -subj /CN=%s" % (key, ca, ca, ca), directory)

    def issue(name, subject, ca, extensions="", dates="-days 2"):
        run("openssl req -new %s -keyout %s.key -out %s.csr -subj /CN=%s" % (key, name, name, subject), directory)
        if extensions:
            with open(os.path.join(directory, name + ".ext"), "w") as f:
                f.write(extensions)
        run("openssl x509 -req -in %s.csr -CA %s.pem -CAkey %s.key -CAcreateserial -out %s.pem %s %s"
            % (name, ca, ca, name, dates, "-extfile %s.ext" % name if extensions else ""), directory)

    issue("server", "localhost", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    issue("renewed", "localhost", "other-ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    issue("alice", "client-alice", "ca")
    issue("stranger", "client-alice", "other-ca")
    # The certificate table: CN "client-reader" with SANs of each type; the SANs of "forger" equal
    # another principal's SAN while its CN is a reader's.
    issue("sans", "client-sans", "ca", "subjectAltName=DNS:dns.lab-a.example,URI:spiffe://lab-a/uri,"
          "email:mail@lab-a.example\n")
    issue("forger", "client-reader", "ca", "subjectAltName=URI:spiffe://lab-a/admin\n")
    issue("reader", "client-reader", "ca")
    # Expired: valid for one second a second ago is not possible with x509 -days; `openssl ca`
    # takes explicit dates.
    with open(os.path.join(directory, "ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca=d\n[d]\ndatabase=index.txt\nnew_certs_dir=.\nserial=serial\n"
                "default_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n")
    open(os.path.join(directory, "index.txt"), "w").close()
    with open(os.path.join(directory, "serial"), "w") as f:
        f.write("1000\n")
    run("openssl req -new %s -keyout expired.key -out expired.csr -subj /CN=client-alice" % key, directory)
    run("openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr -out expired.pem "
        "-startdate 20200101000000Z -enddate 20200102000000Z -notext", directory)


class Principals:
    """A tokens file with one principal per (tenant, role) and its tokens."""

    def __init__(self, path):
        self.path = path
        self.tokens = {}
        self.entries = []

    def add(self, name, tenant, role, **quota):
        token = secrets.token_urlsafe(24)
        self.tokens[name] = token
        entry = {"name": name, "tenant": tenant, "roles": [role],
                 "token_sha256": hashlib.sha256(token.encode()).hexdigest()}
        entry.update(quota)
        self.entries.append(entry)
        return token

    def add_certificate(self, name, tenant, role, subject):
        self.entries.append({"name": name, "tenant": tenant, "roles": [role], "cert_subject": subject})

    def add_san(self, name, tenant, role, san_type, value):
        self.entries.append({"name": name, "tenant": tenant, "roles": [role],
                             "cert_san": {"type": san_type, "value": value}})

    def write(self):
        temporary = self.path + ".new"
        with open(temporary, "w") as f:
            json.dump({"principals": self.entries}, f)
        os.replace(temporary, self.path)  # As an operator's editor or a Secret update would.


def metadata(token):
    return (("authorization", "Bearer " + token),)


class Stubs:
    def __init__(self, channel):
        self.density = pb.density_grpc.DensityServiceStub(channel)
        self.models = pb.model_grpc.ModelServiceStub(channel)
        self.jobs = pb.job_grpc.JobServiceStub(channel)
        self.health = pb.health_grpc.HealthStub(channel)


def reason_of(error):
    for key, value in error.trailing_metadata() or ():
        if key == "posbias-error-reason":
            return value
    return None


def tiny_job(request_id=None, samples=1, length=8):
    spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(model="gpt2-tiny", sequence_length=length,
                                                                samples=samples))
    return pb.job.SubmitJobRequest(spec=spec, request_id=request_id or "")


class SecureServer(unittest.TestCase):
    """One TLS server with tokens for two tenants; the tests share it."""

    @classmethod
    def setUpClass(cls):
        cls.principals = Principals(os.path.join(WORK, "tokens.json"))
        cls.tokens = {}
        for role in ROLES:
            cls.tokens[("a", role)] = cls.principals.add("a-" + role, "lab-a", role)
            cls.tokens[("b", role)] = cls.principals.add("b-" + role, "lab-b", role)
        cls.tokens["quota"] = cls.principals.add("quota", "lab-q", "submitter", max_queued_jobs=1)
        cls.principals.write()
        cls.server = ServerProcess(ARGS.server_binary, [
            "--tls-cert-file", os.path.join(WORK, "server.pem"), "--tls-key-file", os.path.join(WORK, "server.key"),
            "--auth-tokens-file", cls.principals.path, "--cpu-threads", "1"]).start()
        cls.channel = secure_channel(cls.server.address, ca_file=os.path.join(WORK, "ca.pem"))
        cls.stubs = Stubs(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        code = cls.server.stop()
        if code != 0:
            raise AssertionError("server exited with %s; log:\n%s" % (code, cls.server.log))

    def token(self, tenant, role):
        return self.tokens[(tenant, role)]

    def call_code(self, method, token):
        """The status code of calling `method` with an empty request and `token`."""
        kind = CALL_KIND[method]
        identity = lambda b: b  # noqa: E731
        callable_ = getattr(self.channel, kind)(method, request_serializer=identity, response_deserializer=identity)
        try:
            if kind == "unary_stream":
                for _ in callable_(b"", timeout=RPC_TIMEOUT_S, metadata=metadata(token)):
                    pass
            elif kind == "stream_unary":
                callable_(iter([]), timeout=RPC_TIMEOUT_S, metadata=metadata(token))
            else:
                callable_(b"", timeout=RPC_TIMEOUT_S, metadata=metadata(token))
            return grpc.StatusCode.OK, None
        except grpc.RpcError as error:
            return error.code(), reason_of(error)

    def test_the_policies_keep_the_access_rules(self):
        """Reads need a reader, changes a submitter, changes to models and reads of weights an
        operator; every change is audited; nothing needs more than an operator (admins are for
        other tenants' resources, not for methods)."""
        self.assertGreater(len(REQUIRED_ROLE), 0)
        for path, policy, _ in api_methods():
            with self.subTest(method=path):
                role = REQUIRED_ROLE[path]
                if path in WEIGHT_READS or (policy.mutating and path.startswith("/posbias.v1.ModelService/")):
                    expected = "operator"
                elif policy.mutating:
                    expected = "submitter"
                else:
                    expected = "reader"
                self.assertEqual(role, expected)
                if policy.mutating:
                    self.assertTrue(policy.audited, "a method that changes state is audited")
                if CALL_KIND[path] != "unary_unary":
                    self.assertFalse(policy.answer_when_busy, "answer_when_busy is for unary calls")

    def test_every_rpc_against_every_role(self):
        for method, needed in sorted(REQUIRED_ROLE.items()):
            for role in ROLES:
                with self.subTest(method=method, role=role):
                    code, reason = self.call_code(method, self.token("a", role))
                    if ROLES.index(role) >= ROLES.index(needed):
                        self.assertNotIn(code, (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED))
                    else:
                        self.assertEqual((code, reason), (grpc.StatusCode.PERMISSION_DENIED, "ROLE_REQUIRED"))

    def test_a_missing_or_unknown_token_is_unauthenticated_and_health_stays_open(self):
        for method in REQUIRED_ROLE:
            for token in ("", "not-a-token-of-this-server"):
                with self.subTest(method=method, token=token):
                    code, reason = self.call_code(method, token) if token else self.call_without_token(method)
                    self.assertEqual((code, reason), (grpc.StatusCode.UNAUTHENTICATED, "AUTHENTICATION_REQUIRED"))
        answer = self.stubs.health.Check(pb.health.HealthCheckRequest(service=""), timeout=RPC_TIMEOUT_S)
        self.assertEqual(answer.status, pb.health.HealthCheckResponse.SERVING)

    def call_without_token(self, method):
        identity = lambda b: b  # noqa: E731
        try:
            kind = CALL_KIND[method]  # From the descriptor: no list of streaming methods here.
            if kind == "unary_stream":
                for _ in self.channel.unary_stream(method, request_serializer=identity, response_deserializer=identity)(
                        b"", timeout=RPC_TIMEOUT_S):
                    pass
            elif kind == "stream_unary":
                self.channel.stream_unary(method, request_serializer=identity, response_deserializer=identity)(
                    iter([]), timeout=RPC_TIMEOUT_S)
            else:
                self.channel.unary_unary(method, request_serializer=identity, response_deserializer=identity)(
                    b"", timeout=RPC_TIMEOUT_S)
            return grpc.StatusCode.OK, None
        except grpc.RpcError as error:
            return error.code(), reason_of(error)

    def test_plaintext_is_refused_on_the_tls_port(self):
        with grpc.insecure_channel(self.server.address) as plain:
            with self.assertRaises(grpc.RpcError) as refused:
                pb.health_grpc.HealthStub(plain).Check(pb.health.HealthCheckRequest(), timeout=5)
            self.assertEqual(refused.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_tenant_b_cannot_see_watch_cancel_delete_or_read_tenant_a_jobs(self):
        a = metadata(self.token("a", "submitter"))
        job = self.stubs.jobs.SubmitJob(tiny_job(), timeout=RPC_TIMEOUT_S, metadata=a)
        self.assertTrue(self.wait_finished(job.id, a))
        b = metadata(self.token("b", "submitter"))
        calls = {
            "GetJob": lambda: self.stubs.jobs.GetJob(pb.job.GetJobRequest(id=job.id), timeout=RPC_TIMEOUT_S, metadata=b),
            "GetJobResult": lambda: self.stubs.jobs.GetJobResult(pb.job.GetJobResultRequest(id=job.id),
                                                                 timeout=RPC_TIMEOUT_S, metadata=b),
            "CancelJob": lambda: self.stubs.jobs.CancelJob(pb.job.CancelJobRequest(id=job.id), timeout=RPC_TIMEOUT_S,
                                                           metadata=b),
            "DeleteJob": lambda: self.stubs.jobs.DeleteJob(pb.job.DeleteJobRequest(id=job.id, force=True),
                                                           timeout=RPC_TIMEOUT_S, metadata=b),
            "WatchJob": lambda: list(self.stubs.jobs.WatchJob(pb.job.WatchJobRequest(id=job.id), timeout=RPC_TIMEOUT_S,
                                                              metadata=b)),
        }
        missing = "j-000000000000"
        for name, call in calls.items():
            with self.subTest(call=name):
                with self.assertRaises(grpc.RpcError) as hidden:
                    call()
                self.assertEqual((hidden.exception.code(), reason_of(hidden.exception)),
                                 (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND"))
                # Word for word what a job that does not exist gets: no existence leak.
                with self.assertRaises(grpc.RpcError) as absent:
                    self.stubs.jobs.GetJob(pb.job.GetJobRequest(id=missing), timeout=RPC_TIMEOUT_S, metadata=b)
                self.assertEqual(hidden.exception.details().replace(job.id, missing), absent.exception.details())
        listed = self.stubs.jobs.ListJobs(pb.job.ListJobsRequest(page_size=1000), timeout=RPC_TIMEOUT_S, metadata=b)
        self.assertNotIn(job.id, [j.id for j in listed.jobs])
        mine = self.stubs.jobs.ListJobs(pb.job.ListJobsRequest(page_size=1000), timeout=RPC_TIMEOUT_S, metadata=a)
        self.assertIn(job.id, [j.id for j in mine.jobs])
        admin = self.stubs.jobs.GetJob(pb.job.GetJobRequest(id=job.id), timeout=RPC_TIMEOUT_S,
                                       metadata=metadata(self.token("b", "admin")))
        self.assertEqual(admin.id, job.id, "an admin sees every tenant")
        # Still there: nothing of B's reached it.
        self.assertEqual(self.stubs.jobs.GetJob(pb.job.GetJobRequest(id=job.id), timeout=RPC_TIMEOUT_S,
                                                metadata=a).state, pb.job.JOB_STATE_SUCCEEDED)

    def wait_finished(self, job_id, md, seconds=120):
        deadline = time.time() + seconds
        while time.time() < deadline:
            job = self.stubs.jobs.GetJob(pb.job.GetJobRequest(id=job_id), timeout=RPC_TIMEOUT_S, metadata=md)
            if job.state in (pb.job.JOB_STATE_SUCCEEDED, pb.job.JOB_STATE_FAILED, pb.job.JOB_STATE_CANCELLED):
                return job.state == pb.job.JOB_STATE_SUCCEEDED
            time.sleep(0.1)
        return False

    def test_an_open_watch_ends_not_found_when_its_job_stops_being_the_callers(self):
        # Tenants of jobs do not change through the API; the store's row is changed behind the
        # server's back to see that the poller checks the tenant at every look, not only at opening.
        a = metadata(self.token("a", "reader"))
        job = self.stubs.jobs.SubmitJob(tiny_job(samples=400, length=64), timeout=RPC_TIMEOUT_S,
                                        metadata=metadata(self.token("a", "submitter")))
        stream = self.stubs.jobs.WatchJob(pb.job.WatchJobRequest(id=job.id), timeout=60, metadata=a)
        self.assertEqual(next(stream).job.id, job.id)
        database = sqlite3.connect(os.path.join(self.server.data_dir.name, "jobs.sqlite"), timeout=30)
        try:
            with database:
                database.execute("UPDATE jobs SET tenant = 'lab-b' WHERE id = ?", (job.id,))
            with self.assertRaises(grpc.RpcError) as ended:
                for _ in stream:
                    pass
            self.assertEqual((ended.exception.code(), reason_of(ended.exception)),
                             (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND"))
        finally:
            with database:
                database.execute("UPDATE jobs SET tenant = 'lab-a' WHERE id = ?", (job.id,))
            database.close()
            self.stubs.jobs.CancelJob(pb.job.CancelJobRequest(id=job.id), timeout=RPC_TIMEOUT_S,
                                      metadata=metadata(self.token("a", "submitter")))

    def test_the_same_request_id_in_two_tenants_makes_two_jobs(self):
        first = self.stubs.jobs.SubmitJob(tiny_job("shared-id"), timeout=RPC_TIMEOUT_S,
                                          metadata=metadata(self.token("a", "submitter")))
        second = self.stubs.jobs.SubmitJob(tiny_job("shared-id"), timeout=RPC_TIMEOUT_S,
                                           metadata=metadata(self.token("b", "submitter")))
        self.assertNotEqual(first.id, second.id)
        self.assertEqual((first.request_id, second.request_id), ("shared-id", "shared-id"))
        again = self.stubs.jobs.SubmitJob(tiny_job("shared-id"), timeout=RPC_TIMEOUT_S,
                                          metadata=metadata(self.token("a", "submitter")))
        self.assertEqual(again.id, first.id, "a retry within the tenant returns its job")

    def test_a_tenant_model_is_invisible_to_the_other_tenant_and_public_models_to_none(self):
        register = pb.model.RegisterModelRequest(
            name="lab-a-tiny", preset=pb.model.PresetSource(preset="gpt2-tiny", init_seed=3))
        a = metadata(self.token("a", "operator"))
        b = metadata(self.token("b", "operator"))
        self.stubs.models.RegisterModel(register, timeout=60, metadata=a)
        self.assertEqual(self.stubs.models.GetModel(pb.model.GetModelRequest(name="lab-a-tiny"), timeout=RPC_TIMEOUT_S,
                                                    metadata=a).name, "lab-a-tiny")
        for call in (lambda: self.stubs.models.GetModel(pb.model.GetModelRequest(name="lab-a-tiny"),
                                                        timeout=RPC_TIMEOUT_S, metadata=b),
                     lambda: self.stubs.models.DeleteModel(pb.model.DeleteModelRequest(name="lab-a-tiny"),
                                                           timeout=RPC_TIMEOUT_S, metadata=b),
                     lambda: list(self.stubs.models.ExportModel(pb.model.ExportModelRequest(name="lab-a-tiny"),
                                                                timeout=RPC_TIMEOUT_S, metadata=b))):
            with self.assertRaises(grpc.RpcError) as hidden:
                call()
            self.assertEqual((hidden.exception.code(), reason_of(hidden.exception)),
                             (grpc.StatusCode.NOT_FOUND, "MODEL_NOT_FOUND"))
        names_b = [m.name for m in self.stubs.models.ListModels(pb.model.ListModelsRequest(page_size=1000),
                                                                timeout=RPC_TIMEOUT_S, metadata=b).models]
        self.assertNotIn("lab-a-tiny", names_b)
        self.assertIn("gpt2-tiny", names_b, "built-in presets are public")
        spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(model="lab-a-tiny", sequence_length=8, samples=1))
        with self.assertRaises(grpc.RpcError) as refused:
            self.stubs.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S,
                                      metadata=metadata(self.token("b", "submitter")))
        self.assertEqual(reason_of(refused.exception), "MODEL_NOT_FOUND")

    def register(self, tenant, name, seed, role="operator"):
        request = pb.model.RegisterModelRequest(name=name, preset=pb.model.PresetSource(preset="gpt2-tiny", init_seed=seed),
                                                wait=True)
        return self.stubs.models.RegisterModel(request, timeout=60, metadata=metadata(self.token(tenant, role)))

    def get_model(self, tenant, name, role="reader"):
        return self.stubs.models.GetModel(pb.model.GetModelRequest(name=name), timeout=RPC_TIMEOUT_S,
                                          metadata=metadata(self.token(tenant, role)))

    def measured_uid_and_hash(self, tenant, model):
        md = metadata(self.token(tenant, "submitter"))
        spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(model=model, sequence_length=8, samples=1))
        job = self.stubs.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S, metadata=md)
        self.assertTrue(self.wait_finished(job.id, md), job)
        page = self.stubs.jobs.GetJobResult(pb.job.GetJobResultRequest(id=job.id), timeout=RPC_TIMEOUT_S, metadata=md)
        report = json.loads(page.report_json)["model"]
        return report["uid"], report["weights_sha256"]

    def test_two_tenants_may_use_one_model_name_and_each_job_measures_its_own_tenants_model(self):
        a, b = self.register("a", "same-name", 3), self.register("b", "same-name", 4)
        self.assertEqual((a.tenant, b.tenant), ("lab-a", "lab-b"))
        self.assertNotEqual(a.uid, b.uid)
        self.assertNotEqual(a.weights_sha256, b.weights_sha256)
        self.assertEqual(self.get_model("a", "same-name").uid, a.uid)
        self.assertEqual(self.get_model("b", "same-name").uid, b.uid)
        # The other tenant's path reads word for word like a path that names nothing.
        with self.assertRaises(grpc.RpcError) as hidden:
            self.get_model("a", "lab-b/same-name")
        with self.assertRaises(grpc.RpcError) as absent:
            self.get_model("a", "lab-b/no-such-name")
        self.assertEqual((hidden.exception.code(), reason_of(hidden.exception)), (grpc.StatusCode.NOT_FOUND, "MODEL_NOT_FOUND"))
        self.assertEqual(hidden.exception.details().replace("same-name", "no-such-name"), absent.exception.details())
        # An admin sees both namespaces and names each by its path.
        self.assertEqual(self.get_model("a", "lab-b/same-name", role="admin").uid, b.uid)
        listed = self.stubs.models.ListModels(pb.model.ListModelsRequest(page_size=1000), timeout=RPC_TIMEOUT_S,
                                              metadata=metadata(self.token("a", "admin")))
        self.assertEqual(sorted((m.tenant, m.uid) for m in listed.models if m.name == "same-name"),
                         [("lab-a", a.uid), ("lab-b", b.uid)])
        mine = self.stubs.models.ListModels(pb.model.ListModelsRequest(page_size=1000), timeout=RPC_TIMEOUT_S,
                                            metadata=metadata(self.token("a", "reader")))
        self.assertEqual([m.uid for m in mine.models if m.name == "same-name"], [a.uid])
        # Each tenant's job measures its own model, and says so in its provenance.
        self.assertEqual(self.measured_uid_and_hash("a", "same-name"), (a.uid, a.weights_sha256))
        self.assertEqual(self.measured_uid_and_hash("b", "same-name"), (b.uid, b.weights_sha256))

    def test_a_tenant_cannot_take_a_public_name_nor_an_admin_a_tenants_name(self):
        for tenant, role, name in (("a", "operator", "gpt2-tiny"), ("b", "admin", "lab-a-owned")):
            if name == "lab-a-owned":
                self.register("a", name, 5)
            with self.subTest(name=name):
                with self.assertRaises(grpc.RpcError) as taken:
                    self.register(tenant, name, 6, role=role)
                self.assertEqual((taken.exception.code(), reason_of(taken.exception)),
                                 (grpc.StatusCode.ALREADY_EXISTS, "MODEL_ALREADY_EXISTS"))

    def test_force_deleting_a_model_cancels_its_jobs_and_another_tenants_model_of_the_name_never_runs_them(self):
        first = self.register("a", "moving-m", 7)
        a = metadata(self.token("a", "submitter"))
        spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(model="moving-m", sequence_length=64, samples=400))
        jobs = [self.stubs.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S, metadata=a)
                for _ in range(2)]  # One runs, one waits (one worker).
        self.assertEqual(self.get_model("a", "moving-m").active_job_count, 2)
        deleted = self.stubs.models.DeleteModel(pb.model.DeleteModelRequest(name="moving-m", force=True),
                                                timeout=RPC_TIMEOUT_S, metadata=metadata(self.token("a", "operator")))
        self.assertEqual(sorted(deleted.cancelled_job_ids), sorted(j.id for j in jobs))
        second = self.register("b", "moving-m", 8)
        self.assertNotEqual(second.uid, first.uid)
        for job in jobs:
            self.assertFalse(self.wait_finished(job.id, a), "cancelled, never succeeded")
            self.assertEqual(self.stubs.jobs.GetJob(pb.job.GetJobRequest(id=job.id), timeout=RPC_TIMEOUT_S,
                                                    metadata=a).state, pb.job.JOB_STATE_CANCELLED)
        # A's name is free again in A's namespace; B's model of the name stays B's.
        again = self.register("a", "moving-m", 9)
        self.assertNotIn(again.uid, (first.uid, second.uid))
        self.assertEqual(self.get_model("b", "moving-m").uid, second.uid)

    def test_a_principal_over_its_queued_jobs_quota_is_refused(self):
        quota = metadata(self.tokens["quota"])
        submitted, refused = [], None
        for _ in range(4):  # One runs, one waits queued (the quota), the next is refused.
            try:
                submitted.append(self.stubs.jobs.SubmitJob(tiny_job(samples=400, length=64), timeout=RPC_TIMEOUT_S,
                                                           metadata=quota))
            except grpc.RpcError as error:
                refused = error
                break
        self.assertIsNotNone(refused, "the quota of one queued job was never reached")
        self.assertEqual((refused.code(), reason_of(refused)), (grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED"))
        standing = self.stubs.jobs.GetQuota(pb.job.GetQuotaRequest(), timeout=RPC_TIMEOUT_S, metadata=quota)
        self.assertEqual((standing.principal, standing.tenant, standing.role, standing.max_queued_jobs),
                         ("quota", "lab-q", pb.options.ACCESS_ROLE_SUBMITTER, 1))
        self.assertLessEqual(standing.queued_jobs, 1)
        self.assertLessEqual(standing.queued_jobs + standing.running_jobs, len(submitted))
        for job in submitted:
            self.stubs.jobs.CancelJob(pb.job.CancelJobRequest(id=job.id), timeout=RPC_TIMEOUT_S, metadata=quota)
        self.assertEqual(self.stubs.jobs.GetQuota(pb.job.GetQuotaRequest(), timeout=RPC_TIMEOUT_S,
                                                  metadata=quota).queued_jobs, 0, "a cancelled queued job is not counted")

    def test_a_token_removed_from_the_file_stops_working_without_a_restart(self):
        revocable = self.principals.add("revocable", "lab-a", "reader")
        self.principals.write()
        self.wait_for_code(revocable, grpc.StatusCode.OK)
        self.principals.entries = [e for e in self.principals.entries if e["name"] != "revocable"]
        self.principals.write()
        self.wait_for_code(revocable, grpc.StatusCode.UNAUTHENTICATED)
        # SIGHUP reloads at once too: a token added and signalled works without waiting for the poll.
        added = self.principals.add("signalled", "lab-a", "reader")
        self.principals.write()
        self.server.process.send_signal(signal.SIGHUP)
        self.wait_for_code(added, grpc.StatusCode.OK)
        self.assertIn("tokens file", self.server.log)

    def wait_for_code(self, token, code, seconds=15):
        deadline = time.time() + seconds
        last = None
        while time.time() < deadline:
            try:
                self.stubs.models.ListPresets(pb.model.ListPresetsRequest(), timeout=RPC_TIMEOUT_S, metadata=metadata(token))
                last = grpc.StatusCode.OK
            except grpc.RpcError as error:
                last = error.code()
            if last == code:
                return
            time.sleep(0.2)
        self.fail("still %s after %d s, expected %s" % (last, seconds, code))

    def test_mutating_calls_leave_one_audit_line_without_the_token(self):
        token = self.token("a", "submitter")
        job = self.stubs.jobs.SubmitJob(tiny_job(), timeout=RPC_TIMEOUT_S, metadata=metadata(token))
        deadline = time.time() + 5
        while time.time() < deadline and job.id not in self.server.log:
            time.sleep(0.05)
        lines = [line for line in self.server.log.splitlines() if "audit " in line and job.id in line]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("principal=a-submitter tenant=lab-a method=/posbias.v1.JobService/SubmitJob", lines[0])
        self.assertIn("outcome=OK", lines[0])
        self.assertNotIn(token, self.server.log)

    def test_a_client_string_cannot_forge_an_audit_line(self):
        token = self.token("a", "submitter")
        forged = "nope\n[info] audit principal=admin tenant=- method=/posbias.v1.ModelService/DeleteModel " \
                 "resource=m outcome=OK"
        with self.assertRaises(grpc.RpcError):
            self.stubs.jobs.CancelJob(pb.job.CancelJobRequest(id=forged), timeout=RPC_TIMEOUT_S, metadata=metadata(token))
        deadline = time.time() + 5
        while time.time() < deadline and "resource=\"nope" not in self.server.log:
            time.sleep(0.05)
        lines = [line for line in self.server.log.splitlines() if "resource=\"nope" in line]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn('resource="nope\\x0a[info] audit', lines[0])
        self.assertIn("outcome=NOT_FOUND", lines[0])
        # The forged text lives only inside the quoted resource of the one real line.
        self.assertFalse([line for line in self.server.log.splitlines()
                          if "audit principal=admin" in line.split('resource="')[0]])

    def test_an_export_is_audited(self):
        token = self.token("a", "operator")
        name = "audited-export"
        self.stubs.models.RegisterModel(pb.model.RegisterModelRequest(
            name=name, preset=pb.model.PresetSource(preset="gpt2-tiny"), wait=True),
            timeout=RPC_TIMEOUT_S, metadata=metadata(token))
        for _ in self.stubs.models.ExportModel(pb.model.ExportModelRequest(name=name), timeout=RPC_TIMEOUT_S,
                                               metadata=metadata(token)):
            pass
        deadline = time.time() + 5
        pattern = 'method=/posbias.v1.ModelService/ExportModel resource="%s" outcome=OK' % name
        while time.time() < deadline and pattern not in self.server.log:
            time.sleep(0.05)
        self.assertIn(pattern, self.server.log)

    def test_the_cli_and_the_python_package_speak_tls_with_a_token(self):
        ca = os.path.join(WORK, "ca.pem")
        result = subprocess.run([ARGS.cli_binary, "--server", self.server.address, "--tls", "--ca-file", ca, "--token",
                                 self.token("a", "reader"), "--format", "json", "density", "--depth", "4", "--x", "0.5"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        refused = subprocess.run([ARGS.cli_binary, "--server", self.server.address, "--tls", "--ca-file", ca,
                                  "density", "--depth", "4", "--x", "0.5"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("UNAUTHENTICATED", refused.stderr)
        # The Python package from its source tree, in a process of its own (this one has the
        # generated test stubs under the same package name); its own tests install it.
        script = ("import sys, posbias\n"
                  "address, token, ca = sys.argv[1:4]\n"
                  "with posbias.Client(address, token=token, ca_file=ca) as client:\n"
                  "    assert len(client.list_presets()) > 0\n"
                  "with posbias.Client(address, ca_file=ca) as client:\n"
                  "    try:\n"
                  "        client.list_presets()\n"
                  "        sys.exit('a call without a token was answered')\n"
                  "    except posbias.Error as error:\n"
                  "        assert error.reason == 'AUTHENTICATION_REQUIRED', error.reason\n")
        package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python")
        python = subprocess.run([sys.executable, "-c", script, self.server.address, self.token("a", "reader"), ca],
                                capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=package))
        self.assertEqual(python.returncode, 0, python.stderr)


class MutualTls(unittest.TestCase):
    """mTLS: a principal named by its certificate; certificates the CA did not sign, expired ones
    and none at all are refused."""

    @classmethod
    def setUpClass(cls):
        cls.principals = Principals(os.path.join(WORK, "mtls-tokens.json"))
        cls.principals.add_certificate("alice", "lab-a", "reader", "client-alice")
        cls.principals.add_certificate("reader", "lab-a", "reader", "client-reader")
        cls.principals.add_san("admin-by-uri", "lab-a", "admin", "uri", "spiffe://lab-a/admin")
        cls.principals.write()
        cls.server = ServerProcess(ARGS.server_binary, [
            "--tls-cert-file", os.path.join(WORK, "server.pem"), "--tls-key-file", os.path.join(WORK, "server.key"),
            "--tls-client-ca-file", os.path.join(WORK, "ca.pem"), "--auth-tokens-file", cls.principals.path]).start()

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            raise AssertionError("server exited with %s; log:\n%s" % (code, cls.server.log))

    def presets(self, name):
        files = {} if name is None else {"cert_file": os.path.join(WORK, name + ".pem"),
                                         "key_file": os.path.join(WORK, name + ".key")}
        with secure_channel(self.server.address, ca_file=os.path.join(WORK, "ca.pem"), **files) as channel:
            return pb.model_grpc.ModelServiceStub(channel).ListPresets(pb.model.ListPresetsRequest(), timeout=10)

    def test_a_client_certificate_a_principal_names_is_admitted(self):
        self.assertGreater(len(self.presets("alice").presets), 0)

    def whoami(self, name, tokens_path):
        """(code, audit principal) of an audited call (CancelJob of a missing job) with certificate `name`."""
        files = {"cert_file": os.path.join(WORK, name + ".pem"), "key_file": os.path.join(WORK, name + ".key")}
        marker = "j-" + secrets.token_hex(12)
        with secure_channel(self.server.address, ca_file=os.path.join(WORK, "ca.pem"), **files) as channel:
            try:
                pb.job_grpc.JobServiceStub(channel).CancelJob(pb.job.CancelJobRequest(id=marker), timeout=10)
                code = grpc.StatusCode.OK
            except grpc.RpcError as error:
                code = error.code()
        deadline = time.time() + 5
        while time.time() < deadline and code == grpc.StatusCode.NOT_FOUND and marker not in self.server.log:
            time.sleep(0.05)
        for line in self.server.log.splitlines():
            if marker in line and "audit " in line:
                return code, line.split("principal=")[1].split(" ")[0]
        return code, None

    def test_a_certificate_matches_its_cn_or_a_san_of_the_named_type_and_never_two_principals(self):
        # CN only: cert_subject "client-reader" admits the reader's certificate as the reader (a
        # reader may not cancel: PERMISSION_DENIED, no audit line).
        self.assertEqual(self.whoami("reader", None)[0], grpc.StatusCode.PERMISSION_DENIED)
        # The forger's CN is the reader's and its URI SAN the admin's: two principals, refused.
        code, who = self.whoami("forger", None)
        self.assertEqual((code, who), (grpc.StatusCode.UNAUTHENTICATED, None))
        deadline = time.time() + 5  # The log reaches the test through a pipe, after the answer.
        while time.time() < deadline and "matches 2 principals" not in self.server.log:
            time.sleep(0.05)
        self.assertIn("matches 2 principals", self.server.log)
        # A SAN principal of another type does not match: "sans" has DNS, URI and email SANs but
        # none the tokens file names, and its CN names no principal.
        self.assertEqual(self.whoami("sans", None)[0], grpc.StatusCode.UNAUTHENTICATED)

    def test_each_san_type_admits_the_principal_that_names_it(self):
        for san_type, value in (("dns", "dns.lab-a.example"), ("uri", "spiffe://lab-a/uri"),
                                ("email", "mail@lab-a.example")):
            with self.subTest(san_type=san_type):
                principals = Principals(os.path.join(WORK, "san-%s.json" % san_type))
                principals.add_san("by-" + san_type, "lab-a", "submitter", san_type, value)
                # The same value under another type names nothing.
                other = {"dns": "uri", "uri": "email", "email": "dns"}[san_type]
                principals.add_san("wrong-type", "lab-b", "admin", other, value)
                principals.write()
                server = ServerProcess(ARGS.server_binary, [
                    "--tls-cert-file", os.path.join(WORK, "server.pem"), "--tls-key-file",
                    os.path.join(WORK, "server.key"), "--tls-client-ca-file", os.path.join(WORK, "ca.pem"),
                    "--auth-tokens-file", principals.path]).start()
                try:
                    saved, self.server = self.server, server
                    code, who = self.whoami("sans", None)
                finally:
                    self.server = saved
                    server.stop()
                self.assertEqual((code, who), (grpc.StatusCode.NOT_FOUND, "by-" + san_type))

    def test_no_certificate_another_cas_or_an_expired_one_is_refused(self):
        for name in (None, "stranger", "expired"):
            with self.subTest(certificate=name):
                with self.assertRaises(grpc.RpcError) as refused:
                    self.presets(name)
                self.assertEqual(refused.exception.code(), grpc.StatusCode.UNAVAILABLE)


class CertificateReload(unittest.TestCase):
    """A server certificate replaced on disk is served to new connections without a restart."""

    def test_a_renewed_server_certificate_takes_effect_without_a_restart(self):
        import shutil
        live = os.path.join(WORK, "live")
        os.makedirs(live, exist_ok=True)
        for suffix in ("pem", "key"):
            shutil.copy(os.path.join(WORK, "server." + suffix), os.path.join(live, "server." + suffix))
        server = ServerProcess(ARGS.server_binary, ["--tls-cert-file", os.path.join(live, "server.pem"),
                                                    "--tls-key-file", os.path.join(live, "server.key")]).start()
        try:
            self.assertTrue(self.answers(server, "ca.pem"))
            self.assertFalse(self.answers(server, "other-ca.pem"))
            # The renewal: a certificate of the other CA, key first then certificate, each replaced whole.
            for suffix in ("key", "pem"):
                staged = os.path.join(live, "next." + suffix)
                shutil.copy(os.path.join(WORK, "renewed." + suffix), staged)
                os.replace(staged, os.path.join(live, "server." + suffix))
            deadline = time.time() + 15
            while time.time() < deadline and not self.answers(server, "other-ca.pem"):
                time.sleep(0.3)
            self.assertTrue(self.answers(server, "other-ca.pem"), "the renewed certificate is not served")
            self.assertFalse(self.answers(server, "ca.pem"), "the old certificate is still served")
        finally:
            self.assertEqual(server.stop(), 0)

    @staticmethod
    def answers(server, ca):
        with secure_channel(server.address, ca_file=os.path.join(WORK, ca)) as channel:
            try:
                pb.health_grpc.HealthStub(channel).Check(pb.health.HealthCheckRequest(), timeout=5)
                return True
            except grpc.RpcError:
                return False


class SecureDefault(unittest.TestCase):
    def test_listening_off_loopback_without_authentication_is_refused_unless_allowed(self):
        with tempfile.TemporaryDirectory() as data:
            result = subprocess.run([ARGS.server_binary, "--listen", "0.0.0.0:0", "--metrics-listen", "127.0.0.1:0",
                                     "--data-dir", data], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("without authentication", result.stderr)
        allowed = ServerProcess(ARGS.server_binary, ["--allow-unauthenticated"])
        allowed.args[allowed.args.index("--listen") + 1] = "0.0.0.0:0"
        allowed.start()
        self.assertEqual(allowed.stop(), 0)

    @classmethod
    def setUpClass(cls):
        cls.principals = Principals(os.path.join(WORK, "default-tokens.json"))
        cls.reader_token = cls.principals.add("default-reader", "lab-a", "reader")
        cls.principals.write()

    def test_bearer_tokens_off_loopback_need_tls_unless_a_mesh_is_declared(self):
        with tempfile.TemporaryDirectory() as data:
            result = subprocess.run([ARGS.server_binary, "--listen", "0.0.0.0:0", "--metrics-listen", "127.0.0.1:0",
                                     "--data-dir", data, "--auth-tokens-file", self.principals.path],
                                    capture_output=True, text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("bearer tokens in plaintext", result.stderr)
        allowed = ServerProcess(ARGS.server_binary, ["--auth-tokens-file", self.principals.path, "--allow-plaintext-tokens"])
        allowed.args[allowed.args.index("--listen") + 1] = "0.0.0.0:0"
        allowed.start()
        self.assertEqual(allowed.stop(), 0)

    def test_deleting_the_tokens_file_revokes_every_token(self):
        path = os.path.join(WORK, "revocable-tokens.json")
        with open(self.principals.path) as source, open(path, "w") as copy:
            copy.write(source.read())
        server = ServerProcess(ARGS.server_binary, [
            "--tls-cert-file", os.path.join(WORK, "server.pem"), "--tls-key-file", os.path.join(WORK, "server.key"),
            "--auth-tokens-file", path, "--cpu-threads", "1"]).start()
        channel = secure_channel(server.address, ca_file=os.path.join(WORK, "ca.pem"))
        try:
            stubs = Stubs(channel)
            token = self.reader_token
            stubs.models.ListPresets(pb.model.ListPresetsRequest(), timeout=RPC_TIMEOUT_S, metadata=metadata(token))
            os.remove(path)
            deadline = time.time() + 15
            code = None
            while time.time() < deadline:
                try:
                    stubs.models.ListPresets(pb.model.ListPresetsRequest(), timeout=RPC_TIMEOUT_S, metadata=metadata(token))
                except grpc.RpcError as error:
                    code = error.code()
                    break
                time.sleep(0.2)
            self.assertEqual(code, grpc.StatusCode.UNAUTHENTICATED)
            self.assertIn("every principal is revoked", server.log)
        finally:
            channel.close()
            server.stop()


def main():
    global ARGS, pb, WORK
    parser = argparse.ArgumentParser()
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--cli-binary", required=True)
    parser.add_argument("--proto-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    start_watchdog(WATCHDOG_S, "security_test.py")
    with tempfile.TemporaryDirectory(prefix="posbias-security-") as work:
        WORK = work
        make_certificates(work)
        stub_dir = os.path.join(work, "stubs")
        os.mkdir(stub_dir)
        pb = generate_stubs(stub_dir, ARGS.proto_dir)
        for path, policy, kind in api_methods():
            REQUIRED_ROLE[path] = pb.options.AccessRole.Name(policy.role).replace("ACCESS_ROLE_", "").lower()
            CALL_KIND[path] = kind
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        for server in list(ServerProcess.live):
            server.kill()
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
