#!/usr/bin/python3
"""A non-C++ client of posbias-server: Python stubs generated from the .proto files at test time.

Usage (Debian's Python with python3-grpcio and python3-protobuf; protoc and grpc_python_plugin from
/usr/bin):

    /usr/bin/python3 tests/python/python_client_test.py --server-binary build/dev/server/posbias-server \
        --cli-binary build/dev/client/cli/posbias --proto-dir proto --golden-dir tests/density/golden

The stubs are generated into a temporary directory at start. The script starts its own servers on
127.0.0.1 with OS-chosen ports (read back from the server's log) and always stops them with SIGTERM,
checking exit code 0. Answers are checked against the golden tables and against the C++ CLI's JSON
output for the same requests (bit for bit).
"""

import argparse
import csv
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import grpc

ARGS = None       # Parsed command line (set in main()).
MAIN = None       # The shared server (set in setUpModule()).
STUB_DIR = None   # Temporary directory with the generated stubs.
pb = None         # Namespace of the generated modules (set in setUpModule()).

SUBPROCESS_TIMEOUT_S = 20
RPC_TIMEOUT_S = 10
WATCHDOG_S = 120
REL_TOL = 1e-12
LOG_ABS_TOL = 1e-10
SMALLEST_NORMAL = 2.2250738585072014e-308
POSBIAS_SERVICES = ["posbias.v1.DensityService", "posbias.v1.ModelService", "posbias.v1.JobService"]

# ---------------------------------------------------------------------------------------------
# Server processes


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from posbias_server import (GRPC_PYTHON_PLUGIN, PROTOC, ServerProcess, generate_stubs,  # noqa: E402
                            start_watchdog)


def start_server(test_case_class, extra_args=()):
    """Starts a server for a test class; stopped (and required to exit 0) when the class finishes."""
    server = ServerProcess(ARGS.server_binary, extra_args).start()
    channel = grpc.insecure_channel(server.address)

    def stop():
        channel.close()
        code = server.stop()
        if code != 0:
            raise AssertionError("server %s exited with %s after SIGTERM; log:\n%s" % (extra_args, code, server.log))

    test_case_class.addClassCleanup(stop)
    return server, channel


# ---------------------------------------------------------------------------------------------
# Stub generation


def setUpModule():
    global MAIN, STUB_DIR, pb
    STUB_DIR = tempfile.mkdtemp(prefix="posbias-python-stubs-")
    pb = generate_stubs(STUB_DIR, ARGS.proto_dir, reflection=True)
    MAIN = ServerProcess(ARGS.server_binary).start()


def tearDownModule():
    try:
        code = MAIN.stop() if MAIN else 0
        if code != 0 or "stopped cleanly" not in MAIN.log:
            raise AssertionError("shared server exited with %s after SIGTERM; log:\n%s" % (code, MAIN.log))
    finally:
        shutil.rmtree(STUB_DIR, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Helpers


def read_golden(name):
    with open(os.path.join(ARGS.golden_dir, name), newline="") as f:
        lines = [line for line in f if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


def grouped(rows, *keys):
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    return groups


def run_cli_json(*args, server=None):
    command = [ARGS.cli_binary, "--server", server or MAIN.address, "--format", "json", *[str(a) for a in args]]
    env = dict(os.environ)
    env.pop("POSBIAS_SERVER", None)
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT_S, env=env)
    if result.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(command), result.returncode, result.stderr))
    return json.loads(result.stdout)


def bits(value):
    return struct.pack("<d", value)


def summary_dict(summary):
    """A ProfileSummary the way the CLI prints it (client/cli/density_commands.cc SummaryJson)."""
    return {
        "length": summary.length, "total": summary.total, "first_weight": summary.first_weight,
        "last_weight": summary.last_weight, "floor_value": summary.floor_value,
        "floor_position": summary.floor_position, "floor_x": summary.floor_x,
        "leading_mass": summary.leading_mass, "middle_mass": summary.middle_mass,
        "trailing_mass": summary.trailing_mass, "last_token_jump": summary.last_token_jump,
        "quantiles": [{"level": q.level, "position": q.position, "x": q.x} for q in summary.quantiles],
    }


def metadata_of(error):
    return {key: value for key, value in (error.trailing_metadata() or ())}


class ClientTestCase(unittest.TestCase):
    maxDiff = None
    channel = None

    @classmethod
    def setUpClass(cls):
        cls.channel = grpc.insecure_channel(MAIN.address)
        cls.addClassCleanup(cls.channel.close)

    @property
    def density(self):
        return pb.density_grpc.DensityServiceStub(self.channel)

    def model(self, depth, alpha):
        return pb.common.RoutingModel(depth=depth, alpha=alpha)

    def assertClose(self, actual, golden_text, what, rel=REL_TOL):
        """A double against a golden decimal string: relative 1e-12 where the golden value is a normal double."""
        expected = float(golden_text)
        if math.isinf(expected):
            if golden_text.strip() in ("inf", "-inf"):
                self.assertEqual(actual, expected, what)
            return  # Beyond double range: not representable (its logarithm is checked instead).
        if expected == 0.0 or abs(expected) < SMALLEST_NORMAL:
            self.assertLessEqual(abs(actual - expected), SMALLEST_NORMAL,
                                 "%s: golden %s, got %r" % (what, golden_text, actual))
            return
        self.assertLessEqual(abs(actual - expected), rel * abs(expected),
                             "%s: golden %s, got %r (relative error %.3g)"
                             % (what, golden_text, actual, abs(actual - expected) / abs(expected)))

    def assertBitIdentical(self, python_values, cli_values, what):
        """Python doubles against the CLI's JSON (null for a non-finite value), bit for bit."""
        self.assertEqual(len(python_values), len(cli_values), what)
        for i, (mine, theirs) in enumerate(zip(python_values, cli_values)):
            if theirs is None:
                self.assertFalse(math.isfinite(mine), "%s[%d]: CLI null, Python %r" % (what, i, mine))
            else:
                self.assertEqual(bits(float(mine)), bits(float(theirs)),
                                 "%s[%d]: Python %r, CLI %r" % (what, i, mine, theirs))

    def assertRpcError(self, call, code, reason, field=None):
        with self.assertRaises(grpc.RpcError) as context:
            call()
        error = context.exception
        self.assertEqual(error.code(), code, error.details())
        metadata = metadata_of(error)
        self.assertEqual(metadata.get("posbias-error-reason"), reason, metadata)
        self.assertIn("posbias-error-bin", metadata)
        detail = pb.common.ErrorDetail.FromString(metadata["posbias-error-bin"])
        self.assertEqual(pb.common.ErrorReason.Name(detail.reason), reason)
        if field is not None:
            self.assertEqual(detail.field, field)
            self.assertIn(field, error.details())
            self.assertTrue(detail.allowed, "ErrorDetail.allowed is empty")
        return error, detail


# ---------------------------------------------------------------------------------------------
# Health and reflection


class HealthAndReflectionTest(ClientTestCase):
    def check(self, service):
        stub = pb.health_grpc.HealthStub(self.channel)
        return stub.Check(pb.health.HealthCheckRequest(service=service), timeout=RPC_TIMEOUT_S)

    def test_overall_health_is_serving(self):
        self.assertEqual(self.check("").status, pb.health.HealthCheckResponse.SERVING)

    def test_density_service_health_is_serving(self):
        self.assertEqual(self.check("posbias.v1.DensityService").status, pb.health.HealthCheckResponse.SERVING)

    def test_model_and_job_services_report_serving(self):
        for service in ["posbias.v1.ModelService", "posbias.v1.JobService"]:
            with self.subTest(service):
                self.assertEqual(self.check(service).status, pb.health.HealthCheckResponse.SERVING)

    def test_health_of_an_unknown_service_is_not_found(self):
        with self.assertRaises(grpc.RpcError) as context:
            self.check("posbias.v1.NoSuchService")
        self.assertEqual(context.exception.code(), grpc.StatusCode.NOT_FOUND)

    def reflect(self, *requests):
        stub = pb.reflection_grpc.ServerReflectionStub(self.channel)
        return list(stub.ServerReflectionInfo(iter(requests), timeout=RPC_TIMEOUT_S))

    def test_reflection_lists_the_three_posbias_services_and_health(self):
        [response] = self.reflect(pb.reflection.ServerReflectionRequest(list_services=""))
        names = [service.name for service in response.list_services_response.service]
        for name in POSBIAS_SERVICES + ["grpc.health.v1.Health"]:
            self.assertIn(name, names)

    def test_reflection_serves_the_density_service_descriptor(self):
        from google.protobuf import descriptor_pb2
        [response] = self.reflect(pb.reflection.ServerReflectionRequest(file_containing_symbol="posbias.v1.DensityService"))
        self.assertEqual(response.WhichOneof("message_response"), "file_descriptor_response")
        files = [descriptor_pb2.FileDescriptorProto.FromString(raw)
                 for raw in response.file_descriptor_response.file_descriptor_proto]
        by_name = {f.name: f for f in files}
        self.assertIn("posbias/v1/density_service.proto", by_name)
        [service] = by_name["posbias/v1/density_service.proto"].service
        self.assertEqual(service.name, "DensityService")
        self.assertEqual(sorted(m.name for m in service.method),
                         ["EvaluateContinuum", "EvaluateDiscrete", "FitProfile", "SummarizeProfile"])


# ---------------------------------------------------------------------------------------------
# EvaluateContinuum


class EvaluateContinuumTest(ClientTestCase):
    def evaluate(self, depth, alpha, xs, **kwargs):
        request = pb.density.EvaluateContinuumRequest(model=self.model(depth, alpha),
                                                      point_list=pb.density.PointList(x=xs), **kwargs)
        return self.density.EvaluateContinuum(request, timeout=RPC_TIMEOUT_S)

    def test_every_golden_row_matches_to_1e_12_relative(self):
        groups = grouped(read_golden("continuum.csv"), "H", "alpha")
        self.assertGreaterEqual(len(groups), 50)
        for (h, alpha), rows in groups.items():
            with self.subTest(H=h, alpha=alpha):
                response = self.evaluate(int(h), float(alpha), [float(r["x"]) for r in rows])
                self.assertEqual(response.depth, int(h))
                self.assertEqual(list(response.x), [float(r["x"]) for r in rows])
                self.assertClose(response.atom, rows[0]["atom"], "atom")
                for i, row in enumerate(rows):
                    what = "H=%s alpha=%s x=%s" % (h, alpha, row["x"])
                    for column in ["density", "cdf", "ccdf"]:
                        self.assertClose(getattr(response, column)[i], row[column], "%s %s" % (what, column))
                    if row["log_density"] == "-inf":
                        self.assertEqual(response.log_density[i], -math.inf, what)
                    else:
                        self.assertLessEqual(abs(response.log_density[i] - float(row["log_density"])), LOG_ABS_TOL,
                                             "%s log_density: golden %s, got %r" % (what, row["log_density"],
                                                                                    response.log_density[i]))
                    if row["x"] == "1.0":
                        self.assertClose(response.floor, row["density"], "%s floor" % what)

    def test_values_are_bit_identical_to_the_cli_json(self):
        groups = grouped(read_golden("continuum.csv"), "H", "alpha")
        for h, alpha in [("24", "0.5"), ("12", "0.1"), ("1000", "0.9"), ("96", "1e-06"), ("2", "1e-300"), ("1", "0.0")]:
            with self.subTest(H=h, alpha=alpha):
                xs = [r["x"] for r in groups[(h, alpha)]]
                response = self.evaluate(int(h), float(alpha), [float(x) for x in xs])
                cli = run_cli_json("density", "--depth", h, "--alpha", alpha, "--x", ",".join(xs))
                for column in ["x", "density", "log_density", "cdf", "ccdf"]:
                    self.assertBitIdentical(getattr(response, column), cli[column], column)
                self.assertEqual(bits(response.atom), bits(cli["atom"]))
                self.assertEqual(bits(response.floor), bits(cli["floor"]))
                self.assertEqual(response.depth, cli["depth"])

    def test_golden_rows_at_h24_alpha_half_and_h12_alpha_point_one(self):
        rows = read_golden("continuum.csv")
        for h, alpha, x in [(24, 0.5, "0.5"), (24, 0.5, "0.1"), (12, 0.1, "0.001"), (12, 0.1, "0.9")]:
            [row] = [r for r in rows if int(r["H"]) == h and float(r["alpha"]) == alpha and r["x"] == x]
            response = self.evaluate(h, alpha, [float(x)])
            for column in ["density", "cdf", "ccdf"]:
                self.assertClose(getattr(response, column)[0], row[column], "H=%s alpha=%s x=%s %s" % (h, alpha, x, column))

    def grid(self, spacing, count=50, start=1e-6, stop=1.0):
        request = pb.density.EvaluateContinuumRequest(
            model=self.model(12, 0.3), grid=pb.density.Grid(start=start, stop=stop, count=count, spacing=spacing))
        return self.density.EvaluateContinuum(request, timeout=RPC_TIMEOUT_S)

    def test_log_grid_request_gives_count_points_bit_identical_to_the_cli(self):
        response = self.grid(pb.density.LOG)
        self.assertEqual(len(response.x), 50)
        self.assertAlmostEqual(response.x[0], 1e-6, delta=1e-18)
        self.assertEqual(response.x[-1], 1.0)
        ratios = [b / a for a, b in zip(response.x, response.x[1:])]
        for ratio in ratios:
            self.assertAlmostEqual(ratio, ratios[0], delta=1e-9)
        cli = run_cli_json("density", "--depth", 12, "--alpha", 0.3, "--grid", "1e-6:1:50")
        for column in ["x", "density", "log_density", "cdf", "ccdf"]:
            self.assertBitIdentical(getattr(response, column), cli[column], column)

    def test_unspecified_grid_spacing_is_log(self):
        self.assertEqual(list(self.grid(pb.density.GRID_SPACING_UNSPECIFIED).x), list(self.grid(pb.density.LOG).x))

    def test_linear_grid_request_is_evenly_spaced_and_bit_identical_to_the_cli(self):
        response = self.grid(pb.density.LINEAR, count=10, start=0.1)
        for i, x in enumerate(response.x):
            self.assertAlmostEqual(x, 0.1 + 0.1 * i, delta=1e-15)
        cli = run_cli_json("density", "--depth", 12, "--alpha", 0.3, "--grid", "0.1:1:10:linear")
        for column in ["x", "density", "cdf"]:
            self.assertBitIdentical(getattr(response, column), cli[column], column)

    def test_single_point_grid_is_its_start(self):
        self.assertEqual(list(self.grid(pb.density.LOG, count=1, start=0.25, stop=0.75).x), [0.25])

    def test_requested_quantities_only_fill_those_arrays(self):
        full = self.evaluate(24, 0.5, [0.1, 0.5])
        only = self.evaluate(24, 0.5, [0.1, 0.5], quantities=[pb.density.DENSITY, pb.density.CCDF])
        self.assertEqual(list(only.density), list(full.density))
        self.assertEqual(list(only.ccdf), list(full.ccdf))
        self.assertEqual(list(only.log_density), [])
        self.assertEqual(list(only.cdf), [])
        self.assertEqual(only.atom, full.atom)

    def test_duplicate_and_unordered_points_keep_request_order(self):
        response = self.evaluate(24, 0.5, [0.5, 0.1, 0.5])
        self.assertEqual(list(response.x), [0.5, 0.1, 0.5])
        self.assertEqual(response.density[0], response.density[2])

    def test_constant_alpha_schedule_agrees_with_constant_alpha(self):
        xs = [1e-10, 0.001, 0.1, 0.5, 0.9, 1.0]
        constant = self.evaluate(12, 0.3, xs)
        schedule = self.density.EvaluateContinuum(pb.density.EvaluateContinuumRequest(
            model=pb.common.RoutingModel(alpha_schedule=pb.common.AlphaSchedule(alpha=[0.3] * 12)),
            point_list=pb.density.PointList(x=xs)), timeout=RPC_TIMEOUT_S)
        self.assertEqual(schedule.depth, 12)
        for column in ["density", "cdf", "ccdf"]:
            for a, b in zip(getattr(constant, column), getattr(schedule, column)):
                self.assertLessEqual(abs(a - b), 3e-12 * abs(a), column)
        self.assertLessEqual(abs(constant.atom - schedule.atom), 3e-12 * constant.atom)


# ---------------------------------------------------------------------------------------------
# EvaluateDiscrete


class EvaluateDiscreteTest(ClientTestCase):
    def evaluate(self, depth, alpha, length, **kwargs):
        request = pb.density.EvaluateDiscreteRequest(model=self.model(depth, alpha), length=length, **kwargs)
        return self.density.EvaluateDiscrete(request, timeout=RPC_TIMEOUT_S)

    def test_every_golden_profile_matches_to_1e_12_relative(self):
        groups = grouped(read_golden("discrete.csv"), "H", "alpha", "L")
        self.assertGreaterEqual(len(groups), 100)
        for (h, alpha, length), rows in groups.items():
            with self.subTest(H=h, alpha=alpha, L=length):
                rows = sorted(rows, key=lambda r: int(r["j"]))
                response = self.evaluate(int(h), float(alpha), int(length))
                self.assertEqual(list(response.position), [int(r["j"]) for r in rows])
                self.assertEqual((response.depth, response.length), (int(h), int(length)))
                for i, row in enumerate(rows):
                    what = "H=%s alpha=%s L=%s j=%s" % (h, alpha, length, row["j"])
                    self.assertClose(response.coherent[i], row["coherent"], what + " coherent")
                    self.assertClose(response.incoherent[i], row["incoherent"], what + " incoherent")

    def test_values_and_summaries_are_bit_identical_to_the_cli_json(self):
        for h, alpha, length in [(7, 0.25, 16), (24, 0.9, 33), (12, 0.3, 128)]:
            with self.subTest(H=h, alpha=alpha, L=length):
                response = self.evaluate(h, alpha, length)
                cli = run_cli_json("discrete", "--depth", h, "--alpha", repr(alpha), "--length", length)
                self.assertEqual(list(response.position), cli["position"])
                self.assertBitIdentical(response.coherent, cli["coherent"], "coherent")
                self.assertBitIdentical(response.incoherent, cli["incoherent"], "incoherent")
                self.assertEqual(summary_dict(response.coherent_summary), cli["coherent_summary"])
                self.assertEqual(summary_dict(response.incoherent_summary), cli["incoherent_summary"])

    def test_stride_and_position_list_select_those_positions(self):
        full = self.evaluate(7, 0.25, 16)
        stride = self.evaluate(7, 0.25, 16, stride=pb.density.PositionStride(start=1, stop=16, step=5))
        self.assertEqual(list(stride.position), [1, 6, 11, 16])
        self.assertEqual(list(stride.coherent), [full.coherent[j - 1] for j in [1, 6, 11, 16]])
        listed = self.evaluate(7, 0.25, 16, positions=pb.density.PositionList(position=[3, 1, 3]))
        self.assertEqual(list(listed.position), [3, 1, 3])
        self.assertEqual(list(listed.incoherent), [full.incoherent[j - 1] for j in [3, 1, 3]])

    def test_summaries_only_returns_summaries_without_positions(self):
        full = self.evaluate(7, 0.25, 16)
        response = self.evaluate(7, 0.25, 16, summaries_only=True)
        self.assertEqual(list(response.position), [])
        self.assertEqual(list(response.coherent), [])
        self.assertEqual(list(response.incoherent), [])
        self.assertEqual(response.coherent_summary, full.coherent_summary)
        self.assertEqual(response.incoherent_summary, full.incoherent_summary)

    def test_only_the_requested_profile_is_computed(self):
        response = self.evaluate(7, 0.25, 16, profiles=[pb.common.INCOHERENT])
        self.assertEqual(list(response.coherent), [])
        self.assertEqual(len(response.incoherent), 16)
        self.assertFalse(response.HasField("coherent_summary"))


# ---------------------------------------------------------------------------------------------
# SummarizeProfile and FitProfile


class SummarizeAndFitTest(ClientTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        stub = pb.density_grpc.DensityServiceStub(cls.channel)
        response = stub.EvaluateDiscrete(pb.density.EvaluateDiscreteRequest(
            model=pb.common.RoutingModel(depth=12, alpha=0.3), length=128, profiles=[pb.common.COHERENT]),
            timeout=RPC_TIMEOUT_S)
        cls.coherent = list(response.coherent)
        cls.measured = [v * v for v in cls.coherent]
        cls.tmp = tempfile.TemporaryDirectory(prefix="posbias-python-client-")
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.csv_path = os.path.join(cls.tmp.name, "measured.csv")
        with open(cls.csv_path, "w") as f:
            f.write("position,sq_norm\n" + "".join("%d,%r\n" % (j, v) for j, v in enumerate(cls.measured, 1)))

    def summarize(self, **kwargs):
        return self.density.SummarizeProfile(pb.density.SummarizeProfileRequest(**kwargs), timeout=RPC_TIMEOUT_S).summary

    def test_summary_of_a_theory_profile_is_bit_identical_to_the_cli(self):
        summary = self.summarize(theory=pb.density.TheoryProfile(model=self.model(12, 0.3), length=128))
        self.assertEqual(summary.length, 128)
        self.assertAlmostEqual(summary.first_weight, self.coherent[0], delta=1e-15)
        self.assertEqual(summary_dict(summary), run_cli_json("summarize", "--depth", 12, "--alpha", 0.3, "--length", 128))

    def test_summary_of_the_continuum_has_the_atom_as_last_weight(self):
        summary = self.summarize(theory=pb.density.TheoryProfile(model=self.model(12, 0.3), length=0))
        self.assertEqual(summary.length, 0)
        self.assertAlmostEqual(summary.last_weight, 0.7 ** 12, delta=1e-15)
        self.assertEqual(summary_dict(summary), run_cli_json("summarize", "--depth", 12, "--alpha", 0.3))

    def test_summary_of_a_measured_profile_is_normalized_and_matches_the_cli(self):
        summary = self.summarize(measured=pb.density.MeasuredProfile(values=self.measured))
        total = math.fsum(self.measured)
        self.assertAlmostEqual(summary.total, total, delta=1e-14)
        self.assertAlmostEqual(summary.first_weight, self.measured[0] / total, delta=1e-14)
        self.assertAlmostEqual(summary.leading_mass + summary.middle_mass + summary.trailing_mass, 1.0, delta=1e-12)
        self.assertEqual(summary_dict(summary), run_cli_json("summarize", "--input", self.csv_path))

    def test_band_positions_and_quantile_levels_are_honoured(self):
        summary = self.summarize(measured=pb.density.MeasuredProfile(values=[1, 1, 1, 1]),
                                 options=pb.density.SummaryOptions(
                                     band_positions=pb.density.BandPositions(leading_end=1, trailing_start=4),
                                     quantile_levels=[0.5, 1.0]))
        self.assertAlmostEqual(summary.leading_mass, 0.25, delta=1e-15)
        self.assertAlmostEqual(summary.middle_mass, 0.5, delta=1e-15)
        self.assertAlmostEqual(summary.trailing_mass, 0.25, delta=1e-15)
        self.assertEqual([(q.level, q.position) for q in summary.quantiles], [(0.5, 2), (1.0, 4)])

    def fit(self, **kwargs):
        request = pb.density.FitProfileRequest(measured=pb.density.MeasuredProfile(values=self.measured), **kwargs)
        return self.density.FitProfile(request, timeout=RPC_TIMEOUT_S)

    def test_fit_at_fixed_depth_twelve_recovers_alpha_and_matches_the_cli(self):
        response = self.fit(depth=pb.density.DepthChoice(fixed=12), include_profiles=True)
        fits = {pb.common.ProfileModel.Name(f.model): f for f in response.fits}
        self.assertEqual(set(fits), {"COHERENT", "INCOHERENT"})
        coherent = fits["COHERENT"]
        self.assertEqual(coherent.depth, 12)
        self.assertLess(abs(coherent.alpha - 0.3), 1e-4)
        self.assertLess(coherent.metrics.rmse_log, 1e-6)
        self.assertEqual(len(coherent.profile), 128)
        self.assertAlmostEqual(math.fsum(coherent.profile), 1.0, delta=1e-12)
        self.assertEqual([r.depth for r in coherent.ridge], [12])
        self.assertEqual(response.measured_summary.length, 128)
        cli = run_cli_json("fit", "--input", self.csv_path, "--depth", 12)
        cli_fits = {f["model"]: f for f in cli["fits"]}
        for name, fit in fits.items():
            self.assertEqual(bits(fit.alpha), bits(cli_fits[name.lower()]["alpha"]), name)
            self.assertEqual(bits(fit.metrics.rmse_log), bits(cli_fits[name.lower()]["metrics"]["rmse_log"]), name)
        self.assertBitIdentical(coherent.profile, cli["coherent"], "coherent profile")
        self.assertEqual(summary_dict(response.measured_summary), cli["measured_summary"])

    def test_fit_over_a_depth_range_recovers_depth_and_alpha(self):
        response = self.fit(depth=pb.density.DepthChoice(range=pb.density.DepthRange(min=8, max=16)),
                            models=[pb.common.COHERENT])
        [fit] = response.fits
        self.assertEqual(fit.depth, 12)
        self.assertLess(abs(fit.alpha - 0.3), 1e-4)
        self.assertEqual([r.depth for r in fit.ridge], list(range(8, 17)))
        self.assertLessEqual(fit.lambda_low, getattr(fit, "lambda"))
        self.assertLessEqual(getattr(fit, "lambda"), fit.lambda_high)
        self.assertEqual(list(fit.profile), [])  # include_profiles not set.

    def test_fit_of_norms_recovers_alpha_too(self):
        request = pb.density.FitProfileRequest(measured=pb.density.MeasuredProfile(values=self.coherent),
                                               quantity=pb.common.NORM, models=[pb.common.COHERENT],
                                               depth=pb.density.DepthChoice(fixed=12))
        [fit] = self.density.FitProfile(request, timeout=RPC_TIMEOUT_S).fits
        self.assertLess(abs(fit.alpha - 0.3), 1e-4)


# ---------------------------------------------------------------------------------------------
# Errors


class ErrorTest(ClientTestCase):
    def continuum(self, model, **kwargs):
        return lambda: self.density.EvaluateContinuum(
            pb.density.EvaluateContinuumRequest(model=model, **kwargs), timeout=RPC_TIMEOUT_S)

    def test_depth_zero_is_invalid_argument_with_reason_and_error_detail(self):
        error, detail = self.assertRpcError(
            self.continuum(self.model(0, 0.5), point_list=pb.density.PointList(x=[0.5])),
            grpc.StatusCode.INVALID_ARGUMENT, "INVALID_DEPTH", "depth")
        self.assertEqual(detail.reason, pb.common.INVALID_DEPTH)
        self.assertEqual(detail.value, "0")
        self.assertIn("100000", detail.allowed)

    def test_each_malformed_request_names_its_reason_and_field(self):
        P = pb.density.PointList
        cases = [
            ("depth 100001", self.continuum(self.model(100001, 0.5), point_list=P(x=[0.5])), "INVALID_DEPTH", "depth"),
            ("alpha 1.5", self.continuum(self.model(3, 1.5), point_list=P(x=[0.5])), "INVALID_ALPHA", "alpha"),
            ("alpha nan", self.continuum(self.model(3, math.nan), point_list=P(x=[0.5])), "INVALID_ALPHA", "alpha"),
            ("schedule entry 2", self.continuum(pb.common.RoutingModel(
                alpha_schedule=pb.common.AlphaSchedule(alpha=[0.1, 2.0])), point_list=P(x=[0.5])),
             "INVALID_ALPHA", "alpha_schedule.alpha[1]"),
            ("x 0", self.continuum(self.model(3, 0.5), point_list=P(x=[0.0])), "INVALID_POINT", "point_list.x[0]"),
            ("x 1.5", self.continuum(self.model(3, 0.5), point_list=P(x=[0.5, 1.5])), "INVALID_POINT", "point_list.x[1]"),
            ("x nan", self.continuum(self.model(3, 0.5), point_list=P(x=[math.nan])), "INVALID_POINT", "point_list.x[0]"),
            ("no points", self.continuum(self.model(3, 0.5), point_list=P(x=[])), "EMPTY_REQUEST", None),
            ("grid stop < start", self.continuum(self.model(3, 0.5), grid=pb.density.Grid(start=0.5, stop=0.1, count=3)),
             "INVALID_POINT", "grid.stop"),
            # A number the enum does not define: refused once for every request, before the handler.
            ("unknown quantity", self.continuum(self.model(3, 0.5), point_list=P(x=[0.5]), quantities=[7]),
             "INVALID_ENUM_VALUE", "quantities[0]"),
        ]
        for description, call, reason, field in cases:
            with self.subTest(description):
                self.assertRpcError(call, grpc.StatusCode.INVALID_ARGUMENT, reason, field)

    def test_discrete_and_fit_errors_name_their_reason_and_field(self):
        D = pb.density.EvaluateDiscreteRequest
        F = pb.density.FitProfileRequest
        M = pb.density.MeasuredProfile
        cases = [
            ("length 0", lambda: self.density.EvaluateDiscrete(D(model=self.model(3, 0.5), length=0), timeout=RPC_TIMEOUT_S),
             grpc.StatusCode.INVALID_ARGUMENT, "INVALID_LENGTH", "length"),
            ("position 17 of 16", lambda: self.density.EvaluateDiscrete(
                D(model=self.model(3, 0.5), length=16, positions=pb.density.PositionList(position=[1, 17])),
                timeout=RPC_TIMEOUT_S), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_POSITION", "positions.position[1]"),
            ("length above the default limit", lambda: self.density.EvaluateDiscrete(
                D(model=self.model(3, 0.5), length=20000000), timeout=RPC_TIMEOUT_S),
             grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE", "length"),
            ("work above the default limit", lambda: self.density.EvaluateDiscrete(
                D(model=self.model(1000, 0.5), length=5000000, summaries_only=True), timeout=RPC_TIMEOUT_S),
             grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE", None),
            ("fit with nan", lambda: self.density.FitProfile(F(measured=M(values=[1, math.nan, 3])), timeout=RPC_TIMEOUT_S),
             grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PROFILE", "measured.values[1]"),
            ("fit with two values", lambda: self.density.FitProfile(F(measured=M(values=[1, 2])), timeout=RPC_TIMEOUT_S),
             grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PROFILE", "measured.values"),
            ("fit of all zeros", lambda: self.density.FitProfile(F(measured=M(values=[0, 0, 0])), timeout=RPC_TIMEOUT_S),
             grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PROFILE", "measured.values"),
            ("fit depth 5000", lambda: self.density.FitProfile(
                F(measured=M(values=[1, 2, 3]), depth=pb.density.DepthChoice(fixed=5000)), timeout=RPC_TIMEOUT_S),
             grpc.StatusCode.INVALID_ARGUMENT, "INVALID_DEPTH", "depth.fixed"),
            ("fit of 70000 values", lambda: self.density.FitProfile(F(measured=M(values=[1.0] * 70000)), timeout=RPC_TIMEOUT_S),
             grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE", "measured.values"),
            ("overlapping bands", lambda: self.density.SummarizeProfile(pb.density.SummarizeProfileRequest(
                measured=M(values=[1, 2, 3]), options=pb.density.SummaryOptions(
                    band_fractions=pb.density.BandFractions(leading=0.7, trailing=0.7)))), grpc.StatusCode.INVALID_ARGUMENT,
             "INVALID_BANDS", None),
            ("summarize without a source", lambda: self.density.SummarizeProfile(
                pb.density.SummarizeProfileRequest(), timeout=RPC_TIMEOUT_S), grpc.StatusCode.INVALID_ARGUMENT,
             "EMPTY_REQUEST", None),
        ]
        for description, call, code, reason, field in cases:
            with self.subTest(description):
                self.assertRpcError(call, code, reason, field)

    def test_summary_of_an_empty_measured_profile_is_an_empty_request(self):
        self.assertRpcError(lambda: self.density.SummarizeProfile(pb.density.SummarizeProfileRequest(
            measured=pb.density.MeasuredProfile(values=[])), timeout=RPC_TIMEOUT_S),
            grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_REQUEST", "measured.values")


class PointLimitTest(ClientTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server, cls.channel = start_server(cls, ["--max-points", "100"])

    def test_more_points_than_the_configured_limit_are_resource_exhausted(self):
        request = pb.density.EvaluateContinuumRequest(model=self.model(3, 0.5),
                                                      point_list=pb.density.PointList(x=[0.5] * 101))
        _, detail = self.assertRpcError(lambda: self.density.EvaluateContinuum(request, timeout=RPC_TIMEOUT_S),
                                        grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE")
        self.assertIn("100", detail.allowed)

    def test_a_grid_above_the_configured_limit_is_resource_exhausted(self):
        request = pb.density.EvaluateContinuumRequest(model=self.model(3, 0.5),
                                                      grid=pb.density.Grid(start=0.01, stop=1, count=101))
        self.assertRpcError(lambda: self.density.EvaluateContinuum(request, timeout=RPC_TIMEOUT_S),
                            grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE")

    def test_exactly_the_configured_limit_is_accepted(self):
        request = pb.density.EvaluateContinuumRequest(model=self.model(3, 0.5),
                                                      point_list=pb.density.PointList(x=[0.5] * 100))
        self.assertEqual(len(self.density.EvaluateContinuum(request, timeout=RPC_TIMEOUT_S).density), 100)


# ---------------------------------------------------------------------------------------------
# Services that come later


class ModelAndJobServicesTest(ClientTestCase):
    def test_list_models_includes_the_built_in_presets_and_a_new_server_has_no_jobs(self):
        models = pb.model_grpc.ModelServiceStub(self.channel).ListModels(
            pb.model.ListModelsRequest(page_size=1000), timeout=RPC_TIMEOUT_S)
        names = {m.name: m for m in models.models}
        self.assertIn("qwen2-0.5b", names)
        self.assertTrue(names["qwen2-0.5b"].builtin)
        jobs = pb.job_grpc.JobServiceStub(self.channel).ListJobs(pb.job.ListJobsRequest(), timeout=RPC_TIMEOUT_S)
        self.assertEqual(len(jobs.jobs), 0)

    def test_a_submit_without_a_spec_is_an_empty_request(self):
        self.assertRpcError(lambda: pb.job_grpc.JobServiceStub(self.channel).SubmitJob(
            pb.job.SubmitJobRequest(), timeout=RPC_TIMEOUT_S), grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_REQUEST",
            "spec.jacobian_norm")


# ---------------------------------------------------------------------------------------------


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--cli-binary", required=True)
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--golden-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    for path in [ARGS.server_binary, ARGS.cli_binary, PROTOC, GRPC_PYTHON_PLUGIN]:
        if not os.access(path, os.X_OK):
            parser.error("%s is not an executable file" % path)
    for name in ["posbias/v1/density_service.proto", "grpc/health/v1/health.proto"]:
        if not os.path.isfile(os.path.join(ARGS.proto_dir, name)):
            parser.error("%s has no %s" % (ARGS.proto_dir, name))
    for name in ["continuum.csv", "discrete.csv"]:
        if not os.path.isfile(os.path.join(ARGS.golden_dir, name)):
            parser.error("%s has no %s" % (ARGS.golden_dir, name))
    ARGS.server_binary = os.path.abspath(ARGS.server_binary)
    ARGS.cli_binary = os.path.abspath(ARGS.cli_binary)
    ARGS.proto_dir = os.path.abspath(ARGS.proto_dir)
    start_watchdog(WATCHDOG_S, "python_client_test.py")
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
